#!/usr/bin/env bash
# Installs what kube-bpf-proxy needs to build, run and test on a fresh Debian 12 machine:
# the Debian packages, then the pinned npm dependencies. Idempotent; used by the README,
# by .ci/run and by the Dockerfile.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=(clang llvm libbpf-dev libbpf1 linux-libc-dev clang-format iproute2 iptables nftables ipset conntrack
  ethtool wrk socat netcat-openbsd nfacct librsvg2-bin fonts-dejavu-core)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  echo "installing Debian packages: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ! -d node_modules ]] || [[ package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --no-audit --no-fund
fi
bash scripts/install-helm.sh
