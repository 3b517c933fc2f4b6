#!/usr/bin/env bash
# Builds the pinned helm into .tools/bin from the Go module proxy, for the chart tests
# (test/unit/chart.test.ts). Skips when that version is already there. Takes a few minutes the
# first time. KBP_SKIP_HELM=1 skips it altogether (a machine that only builds: no Go, no chart tests).
set -euo pipefail
cd "$(dirname "$0")/.."

helm_version=v3.22.0
bin_dir=$PWD/.tools/bin
helm_bin=$bin_dir/helm

# The Go toolchain's usual home, for shells whose PATH lacks it.
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin

if [[ ${KBP_SKIP_HELM:-} == 1 ]]; then
  echo "KBP_SKIP_HELM=1: not installing helm"
  exit 0
fi
if [[ -x $helm_bin ]] && go version -m "$helm_bin" 2>/dev/null | grep -qE "^\s+mod\s+helm.sh/helm/v3\s+$helm_version\s"; then
  exit 0
fi
if ! command -v go >/dev/null; then
  echo "install-helm.sh: the chart tests need helm $helm_version, built with Go (>= the go line of helm's go.mod); go is not on PATH" >&2
  exit 1
fi

export GOFLAGS=-mod=mod CGO_ENABLED=0
# helm's Makefile stamps its version and the Kubernetes version it reports to charts
# (.Capabilities.KubeVersion, checked against Chart.yaml's kubeVersion) with ldflags; a plain
# `go install` would report Kubernetes 1.20 and fail every chart that asks for more.
module_dir=$(go mod download -json "helm.sh/helm/v3@$helm_version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
client_go=$(sed -n 's/^\s*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$module_dir/go.mod")
[[ -n $client_go ]] || {
  echo "install-helm.sh: cannot read the k8s.io/client-go version from $module_dir/go.mod" >&2
  exit 1
}
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_go"
done

echo "building helm $helm_version into $bin_dir (a few minutes the first time)"
mkdir -p "$bin_dir"
GOBIN=$bin_dir go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$helm_version"
"$helm_bin" version --short
