#!/usr/bin/env bash
# Builds the real Kubernetes control plane the real-control-plane e2e tier runs against, from the
# Go module proxy, and caches the binaries outside the checkout (CI starts from a clean clone):
#
#   <cache>/k8s-<version>/{kube-apiserver,kube-controller-manager,kube-proxy}
#   <cache>/etcd-<version>/etcd
#
# <cache> is ${KBP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-bpf-proxy}. A directory is keyed
# by version and only appears once its build finished, so a binary that is there is never rebuilt
# (scripts/lib/cache-dir.sh). Go's own module and build caches stay where Go keeps them.
#
# kubernetes' go.mod replaces its staging modules, so `go install` refuses it: the binaries build in
# a wrapper module (scripts/lib/k8s-wrapper.sh, shared with scripts/install-cluster.sh).
#
# Prints the two directories on its last two lines as KBP_K8S_BIN=... and KBP_ETCD_BIN=....
# With --locate it builds nothing: it prints them, and exits 1 when a binary is missing (the test
# helper src/lab/control-plane.ts finds the binaries this way).
set -euo pipefail
source "$(dirname "$0")/lib/k8s-wrapper.sh"
source "$(dirname "$0")/lib/cache-dir.sh"
locate_only=0
[[ ${1:-} == --locate ]] && locate_only=1

k8s_version=${KBP_K8S_VERSION:-v1.37.2}
etcd_version=${KBP_ETCD_VERSION:-v3.6.16}
k8s_dir=$cache_root/k8s-$k8s_version
etcd_dir=$cache_root/etcd-$etcd_version
k8s_bins=(kube-apiserver kube-controller-manager kube-proxy)

# Two shared cores: stay behind interactive work.
nice_cmd=(nice -n 10)

build_etcd() {
  go mod init kube-bpf-proxy.local/etcd-wrapper >/dev/null 2>&1
  GOFLAGS=-mod=mod go get -tool "go.etcd.io/etcd/server/v3@$etcd_version" >/dev/null 2>&1
  GOFLAGS=-mod=mod CGO_ENABLED=0 "${nice_cmd[@]}" go build -trimpath -ldflags "-s -w" -o out/etcd go.etcd.io/etcd/server/v3
}

build_k8s() {
  local pkgs=() b
  for b in "${k8s_bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  k8s_wrapper_module "$k8s_version" "${pkgs[@]}"
  GOFLAGS=-mod=mod CGO_ENABLED=0 "${nice_cmd[@]}" go build -trimpath -ldflags "$(k8s_version_ldflags "$k8s_version")" -o out/ "${pkgs[@]}"
}

if ((locate_only)); then
  echo "KBP_K8S_BIN=$k8s_dir"
  echo "KBP_ETCD_BIN=$etcd_dir"
  have_all "$etcd_dir" etcd && have_all "$k8s_dir" "${k8s_bins[@]}"
  exit
fi
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
if ! command -v go >/dev/null; then
  echo "install-control-plane: no go on PATH; cannot build the control plane" >&2
  exit 1
fi
have_all "$etcd_dir" etcd || in_build_dir "etcd $etcd_version" "$etcd_dir" build_etcd
have_all "$k8s_dir" "${k8s_bins[@]}" || in_build_dir "${k8s_bins[*]} $k8s_version" "$k8s_dir" build_k8s
echo "KBP_K8S_BIN=$k8s_dir"
echo "KBP_ETCD_BIN=$etcd_dir"
