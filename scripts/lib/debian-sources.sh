# Sourced by the scripts that build images with mmdebstrap (scripts/build-image.sh,
# scripts/install-cluster.sh): sets mirror, security, sources (the three apt lines of $SUITE) and
# aptopts from KBP_DEBIAN_MIRROR, KBP_DEBIAN_SECURITY_MIRROR (default deb.debian.org), or
# KBP_DEBIAN_SNAPSHOT=YYYYMMDDTHHMMSSZ for snapshot.debian.org (pins the package set exactly).
if [[ -n ${KBP_DEBIAN_SNAPSHOT:-} ]]; then
  mirror=http://snapshot.debian.org/archive/debian/$KBP_DEBIAN_SNAPSHOT
  security=http://snapshot.debian.org/archive/debian-security/$KBP_DEBIAN_SNAPSHOT
else
  mirror=${KBP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  security=${KBP_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
fi
aptopts=()
[[ -z ${KBP_DEBIAN_SNAPSHOT:-} ]] || aptopts+=(--aptopt='Acquire::Check-Valid-Until "false"')
sources=("deb $mirror $SUITE main" "deb $mirror $SUITE-updates main" "deb $security $SUITE-security main")
