#!/usr/bin/env bash
# The soak (issue 30): steady traffic from every kind of client and churn from every source at once
# for M minutes on the real-node lab's two nodes, watched by a real control plane, then the checks:
# no failed request to a backend that stayed ready, none to a pod later than its termination grace,
# every change in the kernel within its bound, the BPF maps back to what the final state needs, no
# pinned object, link, netns, fd or timer leaked, RSS and event-loop lag flat. Writes report.md,
# report.json and plots to the report directory (a temporary one by default) and ends with
# "N passed, N failed". The driver is bench/soak/main.ts.
#
#   bash scripts/soak.sh --minutes M [--mode bpf|iptables|nftables] [--report-dir DIR]
#
# Runs shorter than 4 minutes fail by design (docs/soak.md): not every disruption comes, and
# nothing is past the agents' warm-up to judge RSS and event-loop lag by. Needs root. Installs
# the parts it uses (scripts/install-deps.sh) and builds. It does not take the lab lock itself:
# on a machine shared with other lab runs, wrap it in `flock /tmp/kbp-lab.lock`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
  echo "scripts/soak.sh needs root (network namespaces, BPF, the lab's control plane)" >&2
  exit 1
fi
bash scripts/install-deps.sh run test-tools helm cni control-plane
npm run --silent build
exec node dist/bench/soak/main.js "$@"
