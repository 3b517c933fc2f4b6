#!/usr/bin/env bash
# Installs what building and running the agent image needs, from Debian 12's packages (called by
# scripts/install-deps.sh; idempotent): mmdebstrap builds the image's root filesystem
# (scripts/build-image.sh; the OCI archive itself is written by scripts/oci-archive.mjs, so no
# buildah or umoci), podman with runc, conmon and catatonit (its pause process) runs the chart's
# pods in the e2e tests, openssl makes the lab API server's certificates, curl reads the Debian
# mirror's InRelease files for the image's cache key.
set -euo pipefail

source "$(dirname "$0")/lib/debs.sh"
install_debs "the image" mmdebstrap podman runc conmon catatonit openssl curl
