// Attaching programs: XDP, tc (clsact filters), bpf links (tcx, XDP, cgroup) and what is attached.

import { closeFd } from '../libc.js';
import { check, f } from './bindings.js';
import { BPF_TC_EGRESS, BPF_TC_F_REPLACE, BPF_TC_INGRESS, EEXIST, EINVAL, ENOENT } from './constants.js';

export function xdpAttach(ifindex: number, progFd: number, flags: number): void {
  check('bpf_xdp_attach', f.xdp_attach(ifindex, progFd, flags, null) as number, `ifindex ${ifindex}`);
}

export function xdpDetach(ifindex: number, flags: number): void {
  check('bpf_xdp_detach', f.xdp_detach(ifindex, flags, null) as number, `ifindex ${ifindex}`);
}

/** The id of the XDP program attached in the given mode, 0 when none. */
export function xdpQueryId(ifindex: number, flags: number): number {
  const id = [0];
  check('bpf_xdp_query_id', f.xdp_query_id(ifindex, flags, id) as number, `ifindex ${ifindex}`);
  return id[0]!;
}

function tcHook(ifindex: number, attachPoint: number): Buffer {
  const hook = Buffer.alloc(24);
  hook.writeBigUInt64LE(24n, 0);
  hook.writeInt32LE(ifindex, 8);
  hook.writeUInt32LE(attachPoint, 12);
  return hook;
}

function tcOpts(progFd: number, flags: number, handle: number, priority: number): Buffer {
  const opts = Buffer.alloc(32);
  opts.writeBigUInt64LE(32n, 0);
  opts.writeInt32LE(progFd, 8);
  opts.writeUInt32LE(flags, 12);
  opts.writeUInt32LE(handle, 20);
  opts.writeUInt32LE(priority, 24);
  return opts;
}

/** Creates the clsact qdisc; an existing one is fine. */
export function tcHookCreate(ifindex: number): void {
  const rc = f.tc_hook_create(tcHook(ifindex, BPF_TC_INGRESS | BPF_TC_EGRESS)) as number;
  if (rc !== -EEXIST) check('bpf_tc_hook_create', rc, `ifindex ${ifindex}`);
}

export interface TcFilter {
  handle: number;
  priority: number;
  progId: number;
}

/** Attaches a direct-action cls_bpf filter; handle/priority 0 let the kernel choose. */
export function tcAttach(
  ifindex: number,
  attachPoint: number,
  progFd: number,
  options: { handle?: number; priority?: number; replace?: boolean } = {},
): TcFilter {
  const opts = tcOpts(
    progFd,
    options.replace ? BPF_TC_F_REPLACE : 0,
    options.handle ?? 0,
    options.priority ?? 0,
  );
  check('bpf_tc_attach', f.tc_attach(tcHook(ifindex, attachPoint), opts) as number, `ifindex ${ifindex}`);
  return { progId: opts.readUInt32LE(16), handle: opts.readUInt32LE(20), priority: opts.readUInt32LE(24) };
}

export function tcDetach(ifindex: number, attachPoint: number, handle: number, priority: number): void {
  check(
    'bpf_tc_detach',
    f.tc_detach(tcHook(ifindex, attachPoint), tcOpts(0, 0, handle, priority)) as number,
    `ifindex ${ifindex}`,
  );
}

/** The program id of the filter at handle/priority, or null when there is none. */
export function tcQuery(
  ifindex: number,
  attachPoint: number,
  handle: number,
  priority: number,
): number | null {
  if (handle === 0 || priority === 0 || priority > 0xffff)
    throw new Error(`tcQuery: bad handle/priority ${handle}/${priority}`);
  const opts = tcOpts(0, 0, handle, priority);
  const rc = f.tc_query(tcHook(ifindex, attachPoint), opts) as number;
  // The kernel answers EINVAL ("Cannot find specified filter chain") once the last filter of the
  // chain is gone, ENOENT while other filters remain.
  if (rc === -ENOENT || rc === -EINVAL) return null;
  check('bpf_tc_query', rc, `ifindex ${ifindex}`);
  return opts.readUInt32LE(16);
}

/**
 * bpf_link_create: for tcx pass the ifindex and BPF_TCX_INGRESS/EGRESS; for XDP the ifindex,
 * BPF_XDP and the XDP_FLAGS_* mode in `flags`. Returns the link fd.
 */
export function linkCreate(progFd: number, targetFd: number, attachType: number, flags = 0): number {
  // struct bpf_link_create_opts: size_t sz; __u32 flags; (the union after it is not used here)
  const opts = Buffer.alloc(16);
  opts.writeBigUInt64LE(16n, 0);
  opts.writeUInt32LE(flags, 8);
  return check('bpf_link_create', f.link_create(progFd, targetFd, attachType, opts) as number);
}

export function linkDetach(linkFd: number): void {
  check('bpf_link_detach', f.link_detach(linkFd) as number);
}

/** Swaps the program behind a link in one step (the hook never runs without a program). */
export function linkUpdate(linkFd: number, progFd: number): void {
  check('bpf_link_update', f.link_update(linkFd, progFd, null) as number);
}

export interface LinkInfo {
  type: number;
  id: number;
  progId: number;
  /** tcx links: the interface (0 once it is gone) and BPF_TCX_INGRESS/EGRESS. */
  ifindex: number;
  attachType: number;
  /** cgroup links: the cgroup's id (its directory's inode number on cgroup2); the attach type
   * follows it at 24. */
  cgroupId: bigint;
  cgroupAttachType: number;
}

export function linkInfo(fd: number): LinkInfo {
  // struct bpf_link_info: type, id, prog_id, then a union aligned to 8 (tcx: ifindex, attach_type).
  const info = Buffer.alloc(64);
  check('bpf_obj_get_info_by_fd', f.obj_info(fd, info, [info.length]) as number);
  return {
    type: info.readUInt32LE(0),
    id: info.readUInt32LE(4),
    progId: info.readUInt32LE(8),
    ifindex: info.readUInt32LE(16),
    attachType: info.readUInt32LE(20),
    cgroupId: info.readBigUInt64LE(16),
    cgroupAttachType: info.readUInt32LE(24),
  };
}

/**
 * The name of a loaded program, by id: the kernel keeps the first 15 characters of the name
 * (BPF_OBJ_NAME_LEN), so a longer one comes back cut.
 */
export function programNameById(id: number): string {
  const fd = check('bpf_prog_get_fd_by_id', f.prog_fd_by_id(id) as number, `program id ${id}`);
  try {
    // struct bpf_prog_info: char name[16] at offset 64.
    const info = Buffer.alloc(80);
    check('bpf_obj_get_info_by_fd', f.obj_info(fd, info, [info.length]) as number);
    const end = info.indexOf(0, 64);
    return info.toString('latin1', 64, end < 0 || end > 80 ? 80 : end);
  } finally {
    closeFd(fd);
  }
}
