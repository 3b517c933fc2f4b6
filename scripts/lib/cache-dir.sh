# Sourced by scripts/install-control-plane.sh and scripts/install-cluster.sh: their cache of built
# parts outside the checkout, ${KBP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-bpf-proxy}, one
# directory a part, keyed by its version or inputs, that appears only once its build finished. A
# part that is there is never rebuilt. Go's own module and build caches stay where Go keeps them.
cache_root=${KBP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-bpf-proxy}

# have_all DIR NAME...: whether DIR holds every NAME.
have_all() {
  local dir=$1
  shift
  local b
  for b in "$@"; do [[ -e $dir/$b ]] || return 1; done
}

# in_build_dir WHAT DEST COMMAND...: runs COMMAND... in a fresh directory under the cache, then
# moves the out/ it made to DEST. The directory goes on exit too, when the build failed.
building=
trap '[[ -z $building ]] || rm -rf "$building"' EXIT
in_build_dir() {
  local what=$1 dest=$2
  shift 2
  local started=$SECONDS
  mkdir -p "$cache_root"
  building=$(mktemp -d "$cache_root/.$(basename "$dest")-build.XXXXXX")
  mkdir "$building/out"
  (cd "$building" && "$@")
  rm -rf "$dest"
  mv "$building/out" "$dest"
  rm -rf "$building"
  building=
  echo "$(basename "$0" .sh): built $what in $((SECONDS - started)) s: $dest"
}
