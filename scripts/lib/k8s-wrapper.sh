# Sourced by scripts/install-control-plane.sh and scripts/install-cluster.sh: builds Kubernetes
# binaries from the Go module proxy.
#
# kubernetes' go.mod replaces its staging modules with ./staging/src/..., so `go install` refuses it:
# a small wrapper module requires k8s.io/kubernetes and maps every one of those replace lines to the
# published k8s.io/<name> v0.<minor>.<patch> instead (see docs/real-control-plane.md).

# k8s_wrapper_module VERSION [-t] PACKAGE...: makes the current (empty) directory that wrapper module
# for k8s.io/kubernetes@VERSION, with the requirements of PACKAGEs (import paths inside
# k8s.io/kubernetes; -t: and of their tests) resolved.
k8s_wrapper_module() {
  local version=$1 get_flags=()
  shift
  [[ ${1:-} != -t ]] || { get_flags+=(-t) && shift; }
  local minor_patch=${version#v1.}
  local staging_version=v0.$minor_patch
  go mod init kube-bpf-proxy.local/k8s-wrapper >/dev/null 2>&1
  # kubernetes' own replace block names the staging modules: read it from its go.mod.
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')
  local edits=(-require="k8s.io/kubernetes@$version") mod
  while read -r mod; do
    edits+=(-replace="$mod=$mod@$staging_version")
  done < <(sed -n '/^replace (/,/^)/p' "$gomod" | awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}')
  if ((${#edits[@]} < 10)); then
    echo "k8s-wrapper: found no staging replace lines in $gomod" >&2
    return 1
  fi
  go mod edit "${edits[@]}"
  local pkgs=() p
  for p in "$@"; do pkgs+=("$p@$version"); done
  GOFLAGS=-mod=mod go get "${get_flags[@]}" "${pkgs[@]}" >go-get.log 2>&1 || { cat go-get.log >&2 && return 1; }
}

# k8s_version_ldflags VERSION: the -X flags that make the binaries report VERSION (without them
# they say v0.0.0 and version skew checks complain), plus -s -w.
k8s_version_ldflags() {
  local version=$1
  local minor_patch=${version#v1.}
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor_patch%%.*}"
  echo "$ldflags -X k8s.io/component-base/version.gitTreeState=clean"
}
