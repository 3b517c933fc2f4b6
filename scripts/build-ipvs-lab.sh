#!/usr/bin/env bash
# Builds the IPVS lab: Debian 12's own kernel (it has IPVS; this machine's kernel has not) booted by
# QEMU into a small busybox initramfs that loads the netfilter/IPVS modules, mounts this host's root
# filesystem read-only over 9p and runs every command chrooted into it. So the guest runs the host's
# node, ipvsadm, ipset, iptables and iproute2 on the project checkout as it is, with nothing copied.
# Everything comes from the Debian archive (apt); the result is cached in .cache/ipvs-lab/.
# Usage: bash scripts/build-ipvs-lab.sh [LABDIR]   (docs/ipvs.md describes the lab)
set -euo pipefail
SCRIPT=$(readlink -f "$0")
ROOT=$(cd "$(dirname "$SCRIPT")/.." && pwd)
LAB=${1:-$ROOT/.cache/ipvs-lab}
mkdir -p "$LAB" && LAB=$(cd "$LAB" && pwd) && cd "$LAB"

# The guest runs these from the host's root; qemu, busybox, cpio, kmod and xz build the guest.
debs=(qemu-system-x86 busybox-static cpio kmod xz-utils ipvsadm ipset iptables iproute2)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 1. Debian's kernel: modules from the .deb, and the uncompressed vmlinux (PVH entry) that QEMU boots
#    directly, which skips about 3 s of XZ decompression under software emulation.
kernel_package() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
KPKG=$(kernel_package)
# Images often ship without package lists.
[[ -n $KPKG ]] || { apt-get update -qq && KPKG=$(kernel_package); }
[[ -n $KPKG ]] || { echo "build-ipvs-lab: no linux-image-amd64 in the apt sources" >&2; exit 1; }
if [[ ! -f kpkg/.done-$KPKG ]]; then
  rm -rf kpkg ./*.deb
  apt-get download "$KPKG" >/dev/null
  dpkg-deb -x "$KPKG"_*.deb kpkg
  rm -f ./*.deb
  touch "kpkg/.done-$KPKG"
fi
KVER=$(ls kpkg/lib/modules/)
[[ -f kpkg/lib/modules/$KVER/modules.dep ]] || depmod -b kpkg "$KVER"
VMLINUZ=kpkg/boot/vmlinuz-$KVER
if [[ ! -f vmlinux || vmlinux -ot "$VMLINUZ" ]]; then
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$VMLINUZ" | head -1 | cut -d: -f1)
  # Trailing bytes after the XZ stream make xz exit 1; the kernel image is complete.
  tail -c +$((off + 1)) "$VMLINUZ" | xz -dcq >vmlinux 2>/dev/null || true
fi

# Steps 2 and 3 depend only on this script and the kernel: skip them when their output is newer.
if [[ initramfs.cpio.gz -nt $SCRIPT && initramfs.cpio.gz -nt kpkg/.done-$KPKG && -x run-guest.sh &&
  $(cat project-root 2>/dev/null) == "$ROOT" ]]; then
  echo "ipvs lab up to date in $LAB (kernel $KVER)"
  exit 0
fi

# 2. The initramfs: busybox, the modules the lab uses (netfilter, IPVS, ipset, bridge, veth, dummy,
#    9p), and /init. Matches and targets not loaded by /init are autoloaded by the kernel, whose
#    modprobe helper runs in the initramfs root, next to these modules.
R=$LAB/rootfs
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,proc,sys,dev,run,tmp,host,lib/modules/"$KVER"}
cp /usr/bin/busybox "$R/bin/"
for applet in $(busybox --list); do [[ $applet == busybox ]] || ln -sf busybox "$R/bin/$applet"; done
ln -sf ../bin/busybox "$R/sbin/modprobe"
M=kpkg/lib/modules/$KVER/kernel
{
  find "$M/net/netfilter" "$M/net/ipv4/netfilter" "$M/net/ipv6/netfilter" "$M/net/bridge" "$M/net/sched" \
    "$M/net/9p" "$M/fs/9p" -name '*.ko*'
  ls "$M"/drivers/net/{dummy,veth}.ko* "$M"/drivers/virtio/virtio_pci*.ko* "$M"/crypto/crc32c_generic.ko* \
    "$M"/lib/libcrc32c.ko* 2>/dev/null
} | while read -r f; do
  rel=${f#kpkg}
  mkdir -p "$R$(dirname "$rel")"
  cp "$f" "$R$rel"
done
# The modules' own dependencies (nf_defrag, x_tables, llc, stp, netfs, ...) wherever they live.
find "$R/lib/modules/$KVER" -name '*.ko*' -printf '%f\n' | sed 's/\.ko.*//' |
  xargs -n 50 modprobe -d kpkg -S "$KVER" -a --show-depends | awk '$1=="insmod"{print $2}' | sort -u |
  while read -r f; do
    rel=${f#"$LAB"/kpkg}
    rel=${rel#kpkg}
    [[ -f $R$rel ]] || {
      mkdir -p "$R$(dirname "$rel")"
      cp "$f" "$R$rel"
    }
  done
cp kpkg/lib/modules/"$KVER"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KVER/"
depmod -b "$R" "$KVER"

cat >"$R/init" <<'EOF_INIT'
#!/bin/sh
# PID 1 of the lab guest: load modules, chroot-ready host root at /host, then serve commands that
# the host drops into the io share (req/<n>.sh -> res/<n>.out, .err, .rc), or run lab.run=.
export PATH=/bin:/sbin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
echo 1 > /proc/sys/kernel/printk 2>/dev/null
# busybox modprobe ignores softdeps: libcrc32c (conntrack, ipvs) needs crc32c loaded first.
modprobe crc32c_generic
modprobe -a virtio_pci 9pnet_virtio 9p ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack nf_nat veth dummy bridge \
  br_netfilter ip_tables iptable_nat iptable_filter iptable_mangle ip6_tables ip6table_nat ip6table_filter \
  ip6table_mangle nf_tables nft_compat nft_chain_nat ip_set ip_set_hash_ip ip_set_hash_ipport \
  ip_set_hash_ipportip ip_set_hash_ipportnet ip_set_bitmap_port xt_set xt_ipvs xt_comment xt_mark \
  xt_MASQUERADE xt_conntrack xt_nat xt_tcpudp xt_addrtype xt_physdev xt_statistic xt_recent sch_netem
# br_netfilter would send bridged traffic through iptables; the lab has no bridges that want that.
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro,cache=loose hostroot /host
mount -t proc proc /host/proc; mount -t sysfs sys /host/sys; mount -t devtmpfs dev /host/dev
mount -t bpf bpf /host/sys/fs/bpf 2>/dev/null
mount -t tmpfs run /host/run; mount -t tmpfs tmp /host/tmp
mkdir -p /host/run/netns /host/run/lab
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 labio /host/run/lab
# The checkout may sit under /tmp or /run, which the tmpfs mounts above hide: it is shared on its own.
for arg in $(cat /proc/cmdline); do case "$arg" in lab.project=*) PROJECT=${arg#lab.project=};; esac; done
if [ -n "$PROJECT" ]; then
  mkdir -p "/host$PROJECT" 2>/dev/null
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro,cache=loose project "/host$PROJECT"
fi
chroot /host ip link set lo up
echo "GUEST-READY uptime=$(cut -d' ' -f1 /proc/uptime)s kernel=$(uname -r)"
IO=/host/run/lab
touch $IO/ready
RUN=""
for arg in $(cat /proc/cmdline); do case "$arg" in lab.run=*) RUN=$(echo "${arg#lab.run=}" | tr , " ");; esac; done
if [ -n "$RUN" ]; then
  chroot /host /bin/sh -c "cd /run/lab && $RUN" 2>&1; echo "GUEST-DONE rc=$?"
else
  mkdir -p $IO/req $IO/res
  while [ ! -e $IO/poweroff ]; do
    for f in $IO/req/*.sh; do
      [ -e "$f" ] || continue
      n=$(basename "$f" .sh)
      mv "$f" $IO/req/$n.run
      (chroot /host /bin/sh /run/lab/req/$n.run > $IO/res/$n.out 2> $IO/res/$n.err; echo $? > $IO/res/$n.tmp; mv $IO/res/$n.tmp $IO/res/$n.rc) &
    done
    usleep 20000
  done
fi
sync; poweroff -f
EOF_INIT
chmod +x "$R/init"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) >initramfs.cpio.gz.tmp
mv initramfs.cpio.gz.tmp initramfs.cpio.gz

# 3. The launcher: the host root read-only as "hostroot", an io folder read-write as "labio".
cat >run-guest.sh <<'EOF_RUN'
#!/bin/bash
# run-guest.sh IO_DIR [kernel args...] : boots the lab guest with IO_DIR shared at /run/lab (its
# working directory); without lab.run= the guest serves commands dropped into IO_DIR/req (see
# docs/ipvs.md). Serial console on stdio. Env: SMP (default 1), MEM (MiB, default 1024), TMO (s, 900),
# ACCEL=kvm to use KVM (default: emulation; this project's build machines have PVM-based KVM, which
# runs Debian's unmodified kernel about 250x slower than emulation, measured when the lab was built).
LAB=$(cd "$(dirname "$0")" && pwd)
PROJECT=$(cat "$LAB/project-root")
IO=$(cd "$1" && pwd); shift
ACCEL_ARGS=(-accel tcg,thread=multi -cpu max)
[[ ${ACCEL:-tcg} == kvm ]] && ACCEL_ARGS=(-accel kvm -cpu host)
exec timeout "${TMO:-900}" qemu-system-x86_64 "${ACCEL_ARGS[@]}" -m "${MEM:-1024}" -smp "${SMP:-1}" \
  -nographic -no-reboot -nic none \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap,id=hostroot \
  -virtfs "local,path=$IO,mount_tag=labio,security_model=none,multidevs=remap,id=labio" \
  -virtfs "local,path=$PROJECT,mount_tag=project,security_model=none,readonly=on,multidevs=remap,id=project" \
  -kernel "$LAB/vmlinux" -initrd "$LAB/initramfs.cpio.gz" \
  -append "console=ttyS0 quiet panic=-1 lab.project=$PROJECT $*"
EOF_RUN
chmod +x run-guest.sh
echo "$ROOT" >project-root
echo "$KVER" >kernel-version
ls -la vmlinux initramfs.cpio.gz
echo "ipvs lab ready in $LAB (kernel $KVER)"
