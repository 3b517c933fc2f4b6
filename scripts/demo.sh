#!/usr/bin/env bash
# The README's first command: installs what is needed, builds, and runs the main job: the demo of
# the bpf data plane on a two-node cluster of network namespaces made from examples/ (no cluster
# needed; root, for namespaces and BPF). Installs only what the demo uses (scripts/install-deps.sh's
# `run` part: clang, libbpf, the agent's host tools and `npm ci`); no control plane, helm, CNI
# plugins or image tools. Extra arguments go to `kube-bpf-proxy demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh run
npm run --silent build
node dist/src/cli/main.js demo "$@"
