#!/usr/bin/env bash
# The upstream Kubernetes Service e2e tests against a real two-node cluster on this machine
# (docs/conformance.md): brings the cluster up, installs the Service proxy of --mode, runs
# `e2e.test --provider=skeleton`, writes the junit report, takes the cluster down.
#
#   bash scripts/conformance.sh [--mode bpf|iptables|nftables|kube-proxy-iptables|kube-proxy-nftables]
#                               [--focus REGEX] [--report-dir DIR] [--dual-stack | --ip-family ipv4|dual]
#
# The specs are `[sig-network] Services` and `[sig-network] Networking Granular Checks: Services`
# without [Serial], [Disruptive] and [Feature:...] (a spec that needs a cloud load balancer skips
# itself, saying why); --focus narrows them to the ones that also match REGEX (e.g. '\[Conformance\]').
# --dual-stack (--ip-family dual) brings up a dual-stack cluster (IPv4 and IPv6 pods, Services and
# nodes) and runs the [Feature:IPv6DualStack] specs but SCTP's instead. The bpf, iptables and nftables
# modes are kube-bpf-proxy from its chart, with the image scripts/build-image.sh builds (KBP_IMAGE,
# when set, is that archive); the kube-proxy-* modes are the real kube-proxy v1.37.2.
# Builds what is missing first (the cluster's parts, the control plane, helm, the image: all cached
# outside the checkout). Needs root. Ends with "N passed, N failed, N skipped". It holds
# /tmp/kbp-cluster.lock while the cluster is up: do not wrap it in that lock yourself.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=bpf
args=()
while (($#)); do
  case $1 in
  --mode) mode=$2 && args+=("$1" "$2") && shift 2 ;;
  --focus | --report-dir | --ip-family) args+=("$1" "$2") && shift 2 ;;
  --dual-stack) args+=(--ip-family dual) && shift ;;
  *) echo "conformance.sh: unknown argument $1" >&2 && exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "conformance.sh: run as root (network namespaces, kubelets)" >&2 && exit 1; }

# KBP_SKIP_BUILD=1 (scripts/test.sh's full run, which has built all of it): no install, no build.
if [[ ${KBP_SKIP_BUILD:-} != 1 ]]; then
  bash scripts/install-deps.sh run helm cni control-plane cluster >/dev/null
  npm run --silent build
fi
if [[ $mode != kube-proxy-* ]]; then
  if [[ -z ${KBP_IMAGE:-} ]]; then
    bash scripts/install-deps.sh image >/dev/null
    KBP_IMAGE=$(bash scripts/build-image.sh --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/kube-bpf-proxy" | tail -1)
  fi
  args+=(--agent-image "$KBP_IMAGE")
fi
# One real cluster at a time on this machine: its names and addresses are fixed.
exec flock /tmp/kbp-cluster.lock node dist/src/lab/real-cluster/main.js "${args[@]}"
