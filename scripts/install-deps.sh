#!/usr/bin/env bash
# Installs what kube-bpf-proxy needs to build, run and test on a fresh Debian 12 machine:
# the Debian packages, then the pinned npm dependencies. Idempotent; used by the README and
# by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/lib/debs.sh
build_and_test_debs=(clang llvm libbpf-dev libbpf1 linux-libc-dev clang-format iproute2 iptables nftables ipset conntrack
  ethtool wrk socat netcat-openbsd nfacct librsvg2-bin fonts-dejavu-core openssl)
install_debs "building and testing" "${build_and_test_debs[@]}"

# The agent image's build and pod-test tools (mmdebstrap, podman, runc, ...).
bash scripts/install-image-tools.sh

if [[ ! -d node_modules ]] || [[ package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --no-audit --no-fund
fi
bash scripts/install-helm.sh

# The CNI reference plugins that wire the pods of the real-node e2e lab (test/e2e/real-node.test.ts)
# as a cluster's CNI does. Built from the Go module proxy into .tools/cni/bin; skipped when that
# version is there, or when there is no Go (e.g. a build-only machine).
cni_version=v1.9.0
cni_bin=$PWD/.tools/cni/bin
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
if ! command -v go >/dev/null; then
  echo "no go on PATH: not installing the CNI plugins (the real-node e2e test needs them)"
else
  for plugin in main/bridge main/ptp ipam/host-local; do
    bin=$cni_bin/${plugin#*/}
    if ! { [[ -x $bin ]] && go version -m "$bin" | grep -qE "^\s+mod\s+github.com/containernetworking/plugins\s+$cni_version\s"; }; then
      GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN=$cni_bin go install -trimpath -ldflags "-s -w" \
        "github.com/containernetworking/plugins/plugins/$plugin@$cni_version"
    fi
  done
fi

# The real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-proxy) of
# the real-control-plane e2e tier, built from the Go module proxy and cached outside the checkout
# (scripts/install-control-plane.sh): about 20 minutes cold on 2 busy cores, nothing when cached.
# KBP_SKIP_CONTROL_PLANE=1 skips it; so does a machine without Go (the Dockerfile's build stage).
if [[ ${KBP_SKIP_CONTROL_PLANE:-} == 1 ]]; then
  echo "KBP_SKIP_CONTROL_PLANE=1: not building the Kubernetes control plane"
elif ! command -v go >/dev/null; then
  echo "no go on PATH: not building the Kubernetes control plane (the real-control-plane e2e tier needs it)"
else
  bash scripts/install-control-plane.sh
fi
