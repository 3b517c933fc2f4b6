#!/usr/bin/env bash
# The README's first command: installs what is needed, builds, and runs the main job on the
# bundled examples/ (no cluster needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
npm run --silent build
node dist/src/cli/main.js render --manifests examples/manifests --config examples/config.yaml --node-env examples/node-env.json "$@"
