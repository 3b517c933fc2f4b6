#!/usr/bin/env bash
# Installs what building and running the agent image needs, from Debian 12's packages (called by
# scripts/install-deps.sh; idempotent): mmdebstrap builds the image's root filesystem
# (scripts/build-image.sh; the OCI archive itself is written by scripts/oci-archive.mjs, so no
# buildah or umoci), podman with runc, conmon and catatonit (its pause process) runs the chart's
# pods in the e2e tests, openssl makes the lab API server's certificates, curl reads the Debian
# mirror's InRelease files for the image's cache key.
set -euo pipefail

debs=(mmdebstrap podman runc conmon catatonit openssl curl)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  echo "installing Debian packages for the image: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null
fi
