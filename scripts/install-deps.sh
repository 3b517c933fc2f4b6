#!/usr/bin/env bash
# The one installer of kube-bpf-proxy's build, run and test needs on a fresh Debian 12 machine,
# in named parts, so that each README command installs only what it uses:
#
#   bash scripts/install-deps.sh [PART...]     (no PART: every part but cluster)
#
#   npm            the pinned npm dependencies (`npm ci`): all the unit tier needs
#   run            npm, plus the Debian packages that build the BPF objects (clang, libbpf) and
#                  that the agent calls in its modes (ip, tc, iptables, nft, ipset, conntrack,
#                  nfacct): what `scripts/demo.sh` needs
#   test-tools     the Debian packages only the tests and the bench use (clang-format, wrk, socat,
#                  nc, ethtool, rsvg-convert for the plots, openssl for the lab API server, bpftool
#                  for the checks of what the lab attached where)
#   image          what building and running the agent image needs (scripts/install-image-tools.sh)
#   helm           the pinned helm, built from the Go module proxy (scripts/install-helm.sh)
#   cni            the CNI reference plugins of the real-node lab, built from the Go module proxy
#   control-plane  etcd, kube-apiserver, kube-controller-manager and kube-proxy, built from the Go
#                  module proxy and cached outside the checkout (scripts/install-control-plane.sh;
#                  about 20 minutes cold on 2 busy cores, nothing when cached)
#   cluster        what a real cluster and the upstream e2e tests need: kubelet, kube-scheduler,
#                  kubectl, containerd 1.6 (Debian) and 2.4, CoreDNS, e2e.test, the pause, agnhost
#                  and CoreDNS images (scripts/install-cluster.sh; not among the default parts;
#                  about 16 minutes cold on 2 busy cores after the control plane, nothing when cached)
#
# Idempotent: a part whose pieces are there does nothing. KBP_SKIP_CONTROL_PLANE=1 skips the
# control plane, KBP_SKIP_HELM=1 helm; a machine without Go skips the Go-built parts and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/debs.sh

command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin

install_npm() {
  if [[ ! -d node_modules ]] || [[ package-lock.json -nt node_modules/.package-lock.json ]]; then
    npm ci --no-audit --no-fund
  fi
}

install_run() {
  install_debs "building and running the agent" clang llvm libbpf-dev libbpf1 linux-libc-dev iproute2 \
    iptables nftables ipset conntrack nfacct
  install_npm
}

install_test_tools() {
  install_debs "the tests and the bench" clang-format ethtool wrk socat netcat-openbsd librsvg2-bin \
    fonts-dejavu-core openssl bpftool
}

# The CNI reference plugins that wire the pods of the real-node e2e lab (test/e2e/real-node.test.ts)
# as a cluster's CNI does, and those a real cluster's nodes chain (loopback for the pod's lo,
# portmap for hostPort), into .tools/cni/bin; skipped when that version is there.
install_cni() {
  local cni_version=v1.9.0 cni_bin=$PWD/.tools/cni/bin plugin bin
  if ! command -v go >/dev/null; then
    echo "no go on PATH: not installing the CNI plugins (the real-node e2e test needs them)"
    return 0
  fi
  for plugin in main/bridge main/ptp ipam/host-local main/loopback meta/portmap; do
    bin=$cni_bin/${plugin#*/}
    if ! { [[ -x $bin ]] && go version -m "$bin" | grep -qE "^\s+mod\s+github.com/containernetworking/plugins\s+$cni_version\s"; }; then
      GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN=$cni_bin go install -trimpath -ldflags "-s -w" \
        "github.com/containernetworking/plugins/plugins/$plugin@$cni_version"
    fi
  done
}

install_control_plane() {
  if [[ ${KBP_SKIP_CONTROL_PLANE:-} == 1 ]]; then
    echo "KBP_SKIP_CONTROL_PLANE=1: not building the Kubernetes control plane"
  elif ! command -v go >/dev/null; then
    echo "no go on PATH: not building the Kubernetes control plane (the real-control-plane e2e tier needs it)"
  else
    bash scripts/install-control-plane.sh
  fi
}

install_cluster() {
  if ! command -v go >/dev/null; then
    echo "no go on PATH: not building the cluster's parts (scripts/conformance.sh needs them)"
  else
    bash scripts/install-cluster.sh
  fi
}

install_part() {
  case $1 in
  npm) install_npm ;;
  run) install_run ;;
  test-tools) install_test_tools ;;
  image) bash scripts/install-image-tools.sh ;;
  helm) bash scripts/install-helm.sh ;;
  cni) install_cni ;;
  control-plane) install_control_plane ;;
  cluster) install_cluster ;;
  *)
    echo "install-deps.sh: unknown part '$1' (npm, run, test-tools, image, helm, cni, control-plane, cluster)" >&2
    return 2
    ;;
  esac
}

(($#)) || set -- run test-tools image helm cni control-plane
for part in "$@"; do install_part "$part"; done
