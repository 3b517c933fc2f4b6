#!/usr/bin/env bash
# The init of one node of the real cluster (src/lab/real-cluster/node.ts starts it): pid 1 of the
# node's own pid namespace, in its own mount and network namespaces, made by
#
#   nsenter --net=/run/netns/<node> -- unshare --kill-child --mount --pid --fork --mount-proc \
#     --propagation private bash cluster-node.sh STATE_DIR CGROUP2_DIR RUNTIME_BIN KUBELET ARGS...
#
# It moves itself (and so every daemon of the node) into the node's cgroup2 directory, gives the
# node the private paths the kubelet, containerd and the CNI plugins hard-code (a tmpfs /run,
# per-node /var/lib and /var/log), a sysfs of its own network namespace (bound over /sys/class/net
# and /sys/devices/virtual/net only: `ip netns exec` would remount /sys and lose the cgroup mounts),
# no bpffs (a fresh node has none until something mounts it), then starts containerd and the
# kubelet. When either exits, so does this script, and with pid 1 the whole node.
set -euo pipefail
state=$1 cgroup2=$2 runtime_bin=$3
shift 3

echo $$ >"$cgroup2/cgroup.procs"
# The node's mounts are its own; shared within the node, as on a host, so that Bidirectional
# volume mounts (the agent's bpffs init container) reach the node.
mount --make-rshared /
mount -t tmpfs -o mode=0755 node-run /run
mount --bind "$state/var-lib" /var/lib
mount --bind "$state/var-log" /var/log
mount -t sysfs node-sys "$state/sys"
mount --bind "$state/sys/class/net" /sys/class/net
mount --bind "$state/sys/devices/virtual/net" /sys/devices/virtual/net
while mountpoint -q /sys/fs/bpf; do umount /sys/fs/bpf; done

export PATH=$runtime_bin:$PATH
containerd --config "$state/containerd/config.toml" >"$state/logs/containerd.log" 2>&1 &
for _ in $(seq 200); do
  [[ -S $state/containerd.sock ]] && break
  sleep 0.05
done
"$@" >"$state/logs/kubelet.log" 2>&1 &
wait -n
echo "cluster-node: a daemon of the node exited" >&2
exit 1
