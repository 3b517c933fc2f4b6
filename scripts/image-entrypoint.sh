#!/bin/sh
# The agent image's /usr/local/bin/kube-bpf-proxy (scripts/build-image.sh installs it): starts Node
# with the V8 heap sized to the container's memory limit.
#
# Node 20 sizes V8's heap limit to the cgroup's memory limit (process.constrainedMemory), so under
# a limit of L the old generation alone may grow to about L. The Node binary's text, the native
# heap, koffi and the young generation (measured: ~55 MiB, and up to 3 semi-spaces) come on top,
# so the kernel OOM-kills the pod before V8 collects harder. The old generation is therefore capped
# at L minus a reserve for those, and the semi-space (each of the young generation's halves) kept
# at 8 MiB (V8 grows it to 16 on a large heap): a smaller young generation on top of the limit,
# for a few more scavenges in a large first sync.
#
# The limit is KBP_MEMORY_LIMIT (bytes) when set: the Helm chart passes its resources.limits.memory
# there through the downward API, which holds where the container's view of cgroup files does not
# (a cgroup v1 node without cgroup namespaces shows the host's root). Else the cgroup's own files.
# Without a limit (memory.max "max", or cgroup v1's huge default), only the semi-space is set.
# A flag already given in NODE_OPTIONS wins. For tests and for running a checkout:
# KBP_CGROUP_ROOT (default /sys/fs/cgroup), KBP_NODE and KBP_MAIN name other files.
set -eu

cgroup_root=${KBP_CGROUP_ROOT:-/sys/fs/cgroup}
node=${KBP_NODE:-/usr/local/bin/node}
main=${KBP_MAIN:-/opt/kube-bpf-proxy/dist/src/cli/main.js}
semi_space_mib=8
# Native memory, the binary's text and the young generation (2 semi-spaces plus the new large
# object space), measured in the agent at 10,000 x 10 (docs/bpf-control-plane.md).
reserve_mib=$((64 + 3 * semi_space_mib))
min_old_space_mib=64

# The container's memory limit in bytes, from cgroup v2 or v1 (the container's own memory cgroup
# mounted at /sys/fs/cgroup/memory, or KBP_CGROUP_ROOT inside the v1 memory hierarchy); nothing
# when there is none.
memory_limit() {
  case ${KBP_MEMORY_LIMIT:-} in
  '') ;;
  *[!0-9]*) echo "KBP_MEMORY_LIMIT is not a number of bytes: $KBP_MEMORY_LIMIT" >&2 && exit 1 ;;
  *) echo "$KBP_MEMORY_LIMIT" && return 0 ;;
  esac
  for file in "$cgroup_root/memory.max" "$cgroup_root/memory/memory.limit_in_bytes" \
    "$cgroup_root/memory.limit_in_bytes"; do
    [ -r "$file" ] || continue
    read -r value <"$file"
    case $value in
    '' | max | *[!0-9]*) return 0 ;;
    esac
    # cgroup v1 reports "no limit" as a page-rounded 2^63 - 1.
    [ ${#value} -lt 19 ] && echo "$value"
    return 0
  done
}

flags=""
case ${NODE_OPTIONS:-} in
*--max-semi-space-size*) ;;
*) flags="--max-semi-space-size=$semi_space_mib" ;;
esac
limit=$(memory_limit)
case ${NODE_OPTIONS:-} in
*--max-old-space-size*) limit="" ;;
esac
if [ -n "$limit" ]; then
  old_space_mib=$((limit / 1048576 - reserve_mib))
  [ "$old_space_mib" -ge "$min_old_space_mib" ] || old_space_mib=$min_old_space_mib
  flags="$flags --max-old-space-size=$old_space_mib"
fi
# shellcheck disable=SC2086 # the flags are words on purpose
exec "$node" $flags "$main" "$@"
