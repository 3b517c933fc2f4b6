#!/usr/bin/env bash
# Builds what a real Kubernetes cluster on this machine and the upstream e2e tests need, from the Go
# module proxy and Debian's packages, and caches it outside the checkout (CI starts from a clean
# clone), each piece in a directory keyed by its version or inputs that appears only once complete:
#
#   KBP_NODE_BIN        <cache>/k8s-node-<k8s>: kubelet, kube-scheduler, kubectl
#   KBP_CONTAINERD_BIN  <cache>/containerd-<containerd>: containerd, containerd-shim-runc-v2, ctr
#   KBP_CNI_BIN         .tools/cni/bin: bridge, host-local, loopback, portmap (scripts/install-deps.sh)
#   KBP_COREDNS_BIN     <cache>/coredns-<coredns>: coredns
#   KBP_CLUSTER_IMAGES  <cache>/cluster-images-<hash of the inputs>: pause.tar, agnhost.tar,
#                       coredns.tar (OCI archives for `ctr -n k8s.io images import`)
#   KBP_E2E_BIN         <cache>/e2e-<k8s>: e2e.test, agnhost
#
# <cache> is ${KBP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-bpf-proxy}. Debian's containerd
# (1.6) and runc are installed too: one node runs them, the other the containerd built here.
#
#   bash scripts/install-cluster.sh            builds what is missing, then prints the lines above
#   bash scripts/install-cluster.sh --locate   builds nothing, prints them, exits 1 if one is missing
#
# The pieces build in the order a cluster harness can use them, each moved into place when done.
# Measured on 2 busy cores (docs/conformance.md has each piece, and what each image holds): with an
# empty Go build cache (after the control plane's), 16 minutes; with our cache empty but Go's warm,
# about 2 minutes (mostly the images' mmdebstrap); cached 0.3 s, --locate 0.1 s.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source scripts/lib/k8s-wrapper.sh
source scripts/lib/cache-dir.sh
source scripts/lib/debs.sh
SUITE=bookworm
source scripts/lib/debian-sources.sh
locate_only=0
[[ ${1:-} == --locate ]] && locate_only=1

k8s_version=v1.37.2
containerd_version=v2.4.2
coredns_version=v1.15.0
node_dir=$cache_root/k8s-node-$k8s_version
containerd_dir=$cache_root/containerd-$containerd_version
cni_dir=$root/.tools/cni/bin
coredns_dir=$cache_root/coredns-$coredns_version
e2e_dir=$cache_root/e2e-$k8s_version
node_bins=(kubelet kube-scheduler kubectl)
containerd_bins=(containerd containerd-shim-runc-v2 ctr)
cni_bins=(bridge host-local loopback portmap)
image_archives=(pause.tar agnhost.tar coredns.tar)
e2e_bins=(e2e.test agnhost)

# Two shared cores: stay behind interactive work.
nice_cmd=(nice -n 10)

build_node() {
  local pkgs=() b
  for b in "${node_bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  k8s_wrapper_module "$k8s_version" "${pkgs[@]}"
  GOFLAGS=-mod=mod CGO_ENABLED=0 "${nice_cmd[@]}" go build -trimpath -ldflags "$(k8s_version_ldflags "$k8s_version")" \
    -o out/ "${pkgs[@]}"
}

# containerd's own module builds with `go install`; without cgo and without the snapshotters that
# need it (btrfs, devmapper, zfs), as containerd's static release builds do.
build_containerd() {
  local pkgs=() b
  for b in "${containerd_bins[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$b@$containerd_version"); done
  GOBIN=$PWD/out CGO_ENABLED=0 GOFLAGS=-tags=no_btrfs,no_devmapper,no_zfs "${nice_cmd[@]}" go install -trimpath \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" "${pkgs[@]}"
}

build_coredns() {
  GOBIN=$PWD/out CGO_ENABLED=0 "${nice_cmd[@]}" go install -trimpath -ldflags "-s -w" \
    "github.com/coredns/coredns@$coredns_version"
}

# e2e.test is the test binary of k8s.io/kubernetes/test/e2e; agnhost is in the same module.
build_e2e() {
  k8s_wrapper_module "$k8s_version" -t k8s.io/kubernetes/test/e2e k8s.io/kubernetes/test/images/agnhost
  build_agnhost out/agnhost
  GOFLAGS=-mod=mod CGO_ENABLED=0 "${nice_cmd[@]}" go test -c -trimpath -ldflags "$(k8s_version_ldflags "$k8s_version")" \
    -o out/e2e.test k8s.io/kubernetes/test/e2e
}

# --- The images
# The images the cluster's pods run, built without a registry: what a node's containerd imports
# under the names the kubelet (pause), kubeadm (CoreDNS) and the e2e image manifest (agnhost) of
# Kubernetes $k8s_version ask for. The key hashes this section, the pause source, the archive writer
# and the apt sources (scripts/lib/debian-sources.sh: KBP_DEBIAN_SNAPSHOT pins the packages); from a
# moving mirror the packages are those of the day of the build (test images, not shipped).
IMAGES_EPOCH=1764547200
# test/utils/image/manifest.go (Pause, Agnhost) and cmd/kubeadm/app/constants/constants.go
# (CoreDNSImageName, CoreDNSVersion; cmd/kubeadm/app/images/images.go adds the coredns/ path) at
# v1.37.2. The CoreDNS image holds coredns $coredns_version under kubeadm's tag.
pause_image=registry.k8s.io/pause:3.10.2
agnhost_image=registry.k8s.io/e2e-test-images/agnhost:2.66.1
coredns_image=registry.k8s.io/coredns/coredns:v1.14.6
# Upstream's agnhost image is alpine with bind-tools, curl, netcat-openbsd, iproute2, bash and socat
# (test/images/agnhost/Dockerfile at v1.37.2): the same tools from Debian, GNU wget (busybox's
# `wget -T` crashes), and busybox for the rest of the applets the specs' shell commands use.
AGNHOST_PACKAGES=(bash curl netcat-openbsd iproute2 socat wget bind9-dnsutils busybox-static)

images_key() {
  {
    printf '%s\n' "$k8s_version $coredns_version" "${sources[@]}"
    sed -n '/^# --- The images/,/^# --- end of the images/p' scripts/install-cluster.sh
    cat scripts/images/pause.c scripts/oci-archive.mjs
  } | sha256sum | cut -c1-16
}

# image_archive OUT NAME LAYER=DESCRIPTION... [-- OCI-ARCHIVE-ARGS...]: one OCI archive.
image_archive() {
  local out=$1 name=$2 layers=()
  shift 2
  while (($#)) && [[ $1 != -- ]]; do layers+=(--layer "$1") && shift; done
  [[ ${1:-} != -- ]] || shift
  node "$root/scripts/oci-archive.mjs" --out "$out" --tag "$name" --created "$IMAGES_EPOCH" \
    --created-by scripts/install-cluster.sh "${layers[@]}" "$@" >/dev/null
}

build_pause_image() {
  mkdir -p pause
  clang -static -Os -s -o pause/pause "$root/scripts/images/pause.c"
  image_archive out/pause.tar "$pause_image" "pause=the pause process (scripts/images/pause.c)" -- --entrypoint /pause
}

build_coredns_image() {
  mkdir -p coredns
  cp "$coredns_dir/coredns" coredns/
  image_archive out/coredns.tar "$coredns_image" "coredns=CoreDNS $coredns_version" -- --entrypoint /coredns
}

# Debian minbase with the packages, /bin/sh bash (busybox's sh would run its own nc applet, which
# has no -v), busybox's applets linked only where Debian has no such command.
agnhost_base() {
  local applets='for a in $("$1/usr/bin/busybox" --list); do
    [ -e "$1/usr/bin/$a" ] || [ -e "$1/usr/sbin/$a" ] || ln -s /usr/bin/busybox "$1/usr/local/bin/$a"; done'
  SOURCE_DATE_EPOCH=$IMAGES_EPOCH "${nice_cmd[@]}" mmdebstrap --quiet --variant=minbase \
    --include="usr-is-merged,$(IFS=, && echo "${AGNHOST_PACKAGES[*]}")" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' "${aptopts[@]}" \
    --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"' \
    --customize-hook='ln -sf bash "$1/usr/bin/sh"' --customize-hook="$applets" \
    "$SUITE" base-full.tar "${sources[@]}" >mmdebstrap.log 2>&1 || { cat mmdebstrap.log >&2 && return 1; }
  mmtarfilter --path-exclude='/dev/*' <base-full.tar >base.tar
  rm base-full.tar
}

# build_agnhost OUT, in a wrapper module that has it: agnhost, saying the version of its VERSION file,
# which must be the image manifest's tag (upstream's image build sets main.Version the same way).
build_agnhost() {
  local version
  version=$(cat "$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/VERSION")
  if [[ $version != "${agnhost_image##*:}" ]]; then
    echo "install-cluster: agnhost of $k8s_version is $version, not ${agnhost_image##*:}" >&2
    return 1
  fi
  GOFLAGS=-mod=mod CGO_ENABLED=0 "${nice_cmd[@]}" go build -trimpath \
    -ldflags "$(k8s_version_ldflags "$k8s_version") -X main.Version=$version" -o "$1" k8s.io/kubernetes/test/images/agnhost
}

build_agnhost_image() {
  mkdir -p agnhost-module agnhost
  (
    cd agnhost-module
    k8s_wrapper_module "$k8s_version" k8s.io/kubernetes/test/images/agnhost
    build_agnhost ../agnhost/agnhost
  )
  agnhost_base
  image_archive out/agnhost.tar "$agnhost_image" "base.tar=Debian $SUITE (${AGNHOST_PACKAGES[*]})" \
    "agnhost=agnhost from k8s.io/kubernetes/test/images/agnhost $k8s_version" -- \
    --entrypoint /agnhost --cmd pause --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
}

build_images() {
  build_pause_image
  build_coredns_image
  build_agnhost_image
}
# --- end of the images

locate() {
  local missing=0
  echo "KBP_NODE_BIN=$node_dir"
  have_all "$node_dir" "${node_bins[@]}" || missing=1
  echo "KBP_CONTAINERD_BIN=$containerd_dir"
  have_all "$containerd_dir" "${containerd_bins[@]}" || missing=1
  echo "KBP_CNI_BIN=$cni_dir"
  have_all "$cni_dir" "${cni_bins[@]}" || missing=1
  echo "KBP_COREDNS_BIN=$coredns_dir"
  have_all "$coredns_dir" coredns || missing=1
  echo "KBP_CLUSTER_IMAGES=$images_dir"
  have_all "$images_dir" "${image_archives[@]}" || missing=1
  echo "KBP_E2E_BIN=$e2e_dir"
  have_all "$e2e_dir" "${e2e_bins[@]}" || missing=1
  return $missing
}

# The whole run is one function called from the last line, so that bash has read all of this file
# before it runs any of it (an edit to the script while a long build runs changes nothing).
main() {
  images_dir=$cache_root/cluster-images-$(images_key)
  if ((locate_only)); then
    locate
    return
  fi
  command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
  if ! command -v go >/dev/null; then
    echo "install-cluster: no go on PATH; cannot build the cluster's parts" >&2
    return 1
  fi
  have_all "$node_dir" "${node_bins[@]}" || in_build_dir "${node_bins[*]} $k8s_version" "$node_dir" build_node
  # Debian's containerd and runc run a node; clang, libc6-dev and mmdebstrap build the images.
  install_debs "the real cluster" containerd runc clang libc6-dev mmdebstrap
  have_all "$containerd_dir" "${containerd_bins[@]}" || in_build_dir "${containerd_bins[*]} $containerd_version" "$containerd_dir" build_containerd
  local started=$SECONDS
  bash scripts/install-deps.sh cni
  echo "install-cluster: CNI plugins ready in $((SECONDS - started)) s: $cni_dir"
  have_all "$coredns_dir" coredns || in_build_dir "coredns $coredns_version" "$coredns_dir" build_coredns
  if ! have_all "$images_dir" "${image_archives[@]}"; then
    in_build_dir "the images" "$images_dir" build_images
    # A bounded cache: the three newest image sets (other checkouts may want an older one).
    ls -dt "$cache_root"/cluster-images-* | tail -n +4 | xargs -r rm -rf
  fi
  have_all "$e2e_dir" "${e2e_bins[@]}" || in_build_dir "e2e.test and agnhost $k8s_version" "$e2e_dir" build_e2e
  locate
}

main "$@"; exit
