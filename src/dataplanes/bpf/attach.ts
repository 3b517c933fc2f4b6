// Attaches the programs to the interfaces discover.ts found and keeps them attached:
//   pod-facing       tc ingress kbp_tc_pod      tc egress kbp_tc_egress
//   external, L2     tc ingress kbp_tc_ext      tc egress kbp_tc_egress     XDP kbp_xdp_ext when
//                                                                          bpf.xdpMode is not "off"
//                                                                          and it is not an overlay
//   external, L3     tc ingress kbp_tc_ext_l3   tc egress kbp_tc_egress_l3
// tc uses tcx links on kernels that have them (6.6+) and a clsact cls_bpf filter otherwise; XDP
// uses an XDP link. Links are pinned as <pinDir>/links/<hook>@<interface> (a "." written %2e),
// so they outlive the agent: a restarted agent swaps the new program into the existing link (bpf_link_update, atomic)
// and traffic never runs without a program; so does an interface whose program changes.
// The socket hooks (bpf.socketLB) are cgroup links on one cgroup v2 directory, pinned as
// <pinDir>/links/<hook>@cgroup and swapped the same way, so connect() never misses a program
// while the agent restarts.

import { existsSync, mkdirSync, readdirSync, statSync, unlinkSync } from 'node:fs';
import {
  type LinkInfo,
  linkCreate,
  linkDetach,
  linkInfo,
  linkUpdate,
  tcAttach,
  tcDetach,
  tcHookCreate,
} from '../../../native/libbpf/attach.js';
import {
  BPF_CGROUP_INET4_CONNECT,
  BPF_CGROUP_INET4_GETPEERNAME,
  BPF_CGROUP_INET6_CONNECT,
  BPF_CGROUP_INET6_GETPEERNAME,
  BPF_CGROUP_UDP4_RECVMSG,
  BPF_CGROUP_UDP4_SENDMSG,
  BPF_CGROUP_UDP6_RECVMSG,
  BPF_CGROUP_UDP6_SENDMSG,
  BPF_TC_EGRESS,
  BPF_TC_INGRESS,
  BPF_TCX_EGRESS,
  BPF_TCX_INGRESS,
  BPF_XDP,
  EINVAL,
  ENOENT,
  XDP_FLAGS_DRV_MODE,
  XDP_FLAGS_SKB_MODE,
} from '../../../native/libbpf/constants.js';
import { getPinned, pinObject } from '../../../native/libbpf/object.js';
import { closeFd, NativeError, O_CLOEXEC, O_RDONLY, openPath } from '../../../native/libc.js';
import type { BpfConfig } from '../../config/types.js';
import { makeBpffsDir } from '../../host/bpffs.js';
import { runCommand } from '../../host/command.js';
import type { Logger } from '../../logger.js';
import type { DiscoveredInterface } from './discover.js';
import { PROGRAMS } from './layout.js';
import { PIN_LAYOUT_VERSION } from './object.js';

/** Where a program runs on an interface; also the first part of its pin name. */
export type Hook = 'tc-ingress' | 'tc-egress' | 'xdp';
export const HOOKS: readonly Hook[] = ['tc-ingress', 'tc-egress', 'xdp'];
export type Mechanism = 'tcx' | 'clsact' | 'xdp-drv' | 'xdp-generic' | 'cgroup';

const TC_DIRECTION = {
  'tc-ingress': { tcx: BPF_TCX_INGRESS, clsact: BPF_TC_INGRESS },
  'tc-egress': { tcx: BPF_TCX_EGRESS, clsact: BPF_TC_EGRESS },
} as const;

/** The cgroup socket hooks of socket-level load balancing, attached to one cgroup v2 directory. */
export const SOCK_HOOKS = [
  { hook: 'cgroup-connect4', program: PROGRAMS.sockConnect4, attachType: BPF_CGROUP_INET4_CONNECT },
  { hook: 'cgroup-sendmsg4', program: PROGRAMS.sockSendmsg4, attachType: BPF_CGROUP_UDP4_SENDMSG },
  { hook: 'cgroup-recvmsg4', program: PROGRAMS.sockRecvmsg4, attachType: BPF_CGROUP_UDP4_RECVMSG },
  {
    hook: 'cgroup-getpeername4',
    program: PROGRAMS.sockGetpeername4,
    attachType: BPF_CGROUP_INET4_GETPEERNAME,
  },
  { hook: 'cgroup-connect6', program: PROGRAMS.sockConnect6, attachType: BPF_CGROUP_INET6_CONNECT },
  { hook: 'cgroup-sendmsg6', program: PROGRAMS.sockSendmsg6, attachType: BPF_CGROUP_UDP6_SENDMSG },
  { hook: 'cgroup-recvmsg6', program: PROGRAMS.sockRecvmsg6, attachType: BPF_CGROUP_UDP6_RECVMSG },
  {
    hook: 'cgroup-getpeername6',
    program: PROGRAMS.sockGetpeername6,
    attachType: BPF_CGROUP_INET6_GETPEERNAME,
  },
] as const;
export type SockHook = (typeof SOCK_HOOKS)[number]['hook'];

/** The pin name of a socket hook's link. */
export const sockLinkName = (hook: SockHook) => `${hook}@cgroup`;
/** The socket hook a link name stands for; null for the others. */
export function parseSockLinkName(name: string): SockHook | null {
  return SOCK_HOOKS.find((h) => sockLinkName(h.hook) === name)?.hook ?? null;
}

/** cls_bpf filter identity on kernels without tcx ("kb"). */
export const TC_HANDLE = 0x6b62;
export const TC_PRIORITY = 0x6b62;

const ENODEV = 19;
const EOPNOTSUPP = 95;

export interface NetInterface {
  ifname: string;
  ifindex: number;
}

export interface Attachment extends NetInterface {
  hook: Hook;
  program: string;
}

/** Which program goes on which hook of each interface (pure). */
export function plannedAttachments(
  interfaces: readonly DiscoveredInterface[],
  xdpMode: BpfConfig['xdpMode'],
): Attachment[] {
  const out: Attachment[] = [];
  for (const i of [...interfaces].sort((a, b) => a.ifname.localeCompare(b.ifname))) {
    const at = (hook: Hook, program: string) =>
      out.push({ ifname: i.ifname, ifindex: i.ifindex, hook, program });
    if (i.role === 'pod') {
      at('tc-ingress', PROGRAMS.tcFromPod);
      at('tc-egress', PROGRAMS.tcEgress);
    } else if (i.l3) {
      at('tc-ingress', PROGRAMS.tcFromExternalL3);
      at('tc-egress', PROGRAMS.tcEgressL3);
    } else {
      at('tc-ingress', PROGRAMS.tcFromExternal);
      at('tc-egress', PROGRAMS.tcEgress);
      // Overlay packets were decapsulated by the stack already: XDP would only see the outer ones.
      if (xdpMode !== 'off' && !i.overlay) at('xdp', PROGRAMS.xdpFromExternal);
    }
  }
  return out;
}

/** Can this kernel make AF_INET6 sockets (not booted with ipv6.disable=1)? Such a socket can
 * reach an IPv4 service through its IPv4-mapped address, so net.ipv6.conf.all.disable_ipv6, which
 * only takes the addresses away, does not make the IPv6 socket hooks useless. */
export const kernelHasIPv6Sockets = () => existsSync('/proc/net/if_inet6');

/** The socket hooks a node takes: the IPv6 ones only where IPv6 sockets exist. */
export function sockHooksFor(ipv6Sockets: boolean): (typeof SOCK_HOOKS)[number][] {
  return SOCK_HOOKS.filter((h) => ipv6Sockets || !h.hook.endsWith('6'));
}

/**
 * The programs verified when the agent starts: those of pod-facing and Ethernet external
 * interfaces, which nearly every node has, XDP's when bpf.xdpMode asks for it, and the socket
 * hooks' when bpf.socketLB is on. The L3 variants wait for an interface without an Ethernet header
 * (plannedAttachments asks the follower for them); the benchmark's baseline never loads here.
 */
export function programsAtStart(
  bpf: Pick<BpfConfig, 'xdpMode' | 'socketLB'>,
  ipv6Sockets: boolean,
): string[] {
  const programs: string[] = [PROGRAMS.tcFromPod, PROGRAMS.tcFromExternal, PROGRAMS.tcEgress];
  if (bpf.xdpMode !== 'off') programs.push(PROGRAMS.xdpFromExternal);
  if (bpf.socketLB !== 'off') programs.push(...sockHooksFor(ipv6Sockets).map((h) => h.program));
  return programs;
}

/** `<hook>@<interface>`: how an attachment is named in reports, logs and (encoded) pins. */
export const linkName = (a: { hook: Hook; ifname: string }) => `${a.hook}@${a.ifname}`;

/** bpffs refuses names with a dot (eth0.100, flannel.1): "%" and "." are percent-encoded in pins. */
export const pinFileName = (name: string) => name.replace(/%/g, '%25').replace(/\./g, '%2e');
export const linkNameOfPin = (file: string) =>
  file.replace(/%(25|2e)/g, (_, code: string) => (code === '25' ? '%' : '.'));

/** The hook and interface of a link name; null for a name this version does not write. */
export function parseLinkName(name: string): { hook: Hook; ifname: string } | null {
  const at = name.indexOf('@');
  const hook = name.slice(0, at) as Hook;
  return at > 0 && HOOKS.includes(hook) ? { hook, ifname: name.slice(at + 1) } : null;
}

export type AttachedLink = Attachment & { mechanism: Mechanism };

export interface AttachReport {
  attached: AttachedLink[];
  /** Existing attachments that got a new program (a restart, or an interface changing role). */
  replaced: AttachedLink[];
  /** `<hook>@<interface>` of the attachments released (pins removed, filters deleted). */
  detached: string[];
  /** New failures (one that persists is reported once). */
  errors: { attachment: Attachment; error: string }[];
}

export class Attacher {
  private readonly linkDir: string;
  /** Learned on the first tc attach: null until then. */
  private tcx: boolean | null = null;
  /** What this process has attached or checked, by link name. */
  private readonly current = new Map<string, { ifindex: number; program: string; mechanism: Mechanism }>();
  /** Attachments that failed, with the error last reported. */
  private readonly failing = new Map<string, string>();

  constructor(
    pinDir: string,
    private readonly prog: (name: string) => number,
    private readonly config: Pick<BpfConfig, 'xdpMode'>,
    log: Logger,
    /** "clsact" skips tcx even where the kernel has it. */
    tcMethod: 'auto' | 'clsact' = 'auto',
  ) {
    this.linkDir = `${pinDir}/links`;
    makeBpffsDir(this.linkDir, log);
    if (tcMethod === 'clsact') this.tcx = false;
  }

  /** Brings the attachments to what the discovered interfaces ask for. */
  sync(interfaces: readonly DiscoveredInterface[]): AttachReport {
    const report: AttachReport = { attached: [], replaced: [], detached: [], errors: [] };
    const wanted = plannedAttachments(interfaces, this.config.xdpMode);
    const wantedNames = new Set(wanted.map(linkName));
    for (const name of this.failing.keys()) if (!wantedNames.has(name)) this.failing.delete(name);
    // cls_bpf filters have no pin: those of interfaces that no longer take a program are deleted
    // here (a vanished interface took its filter with it).
    for (const [name, known] of this.current) {
      if (wantedNames.has(name) || known.mechanism !== 'clsact') continue;
      const hook = parseLinkName(name)?.hook;
      if (hook === 'tc-ingress' || hook === 'tc-egress') deleteFilter(known.ifindex, hook);
      this.current.delete(name);
      report.detached.push(name);
    }
    // Links of interfaces that are gone or no longer match (an interface that went away took
    // its tcx/XDP attachment with it; the pin is all that is left).
    for (const file of readdirSync(this.linkDir)) {
      const name = linkNameOfPin(file);
      // The socket hooks are syncSockHooks' business.
      if (wantedNames.has(name) || parseSockLinkName(name)) continue;
      unpinLink(`${this.linkDir}/${file}`);
      this.current.delete(name);
      report.detached.push(name);
    }
    // Attached after the releases: a renamed interface (same ifindex, new name) would otherwise
    // get its program a second time at the same hook, which tcx refuses.
    for (const a of wanted) {
      const name = linkName(a);
      const known = this.current.get(name);
      if (known?.ifindex === a.ifindex && known.program === a.program) continue;
      try {
        const { mechanism, replaced } = this.attach(a);
        (replaced ? report.replaced : report.attached).push({ ...a, mechanism });
        this.current.set(name, { ifindex: a.ifindex, program: a.program, mechanism });
        this.failing.delete(name);
      } catch (err) {
        // Retried at every sync; reported when it starts failing or fails differently.
        const error = (err as Error).message;
        if (this.failing.get(name) !== error) report.errors.push({ attachment: a, error });
        this.failing.set(name, error);
      }
    }
    return report;
  }

  /** Attaches the program, or swaps it into an existing attachment (`replaced`). */
  private attach(a: Attachment): { mechanism: Mechanism; replaced: boolean } {
    const progFd = this.prog(a.program);
    const path = `${this.linkDir}/${pinFileName(linkName(a))}`;
    const xdpMechanism: Mechanism = this.config.xdpMode === 'generic' ? 'xdp-generic' : 'xdp-drv';
    // A link on another interface of the same name (the old one was replaced) is released.
    if (swapIntoPinnedLink(path, progFd, (info) => info.ifindex === a.ifindex)) {
      return { mechanism: a.hook === 'xdp' ? xdpMechanism : 'tcx', replaced: true };
    }
    if (a.hook === 'xdp') {
      const mode = xdpMechanism === 'xdp-generic' ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
      pinLink(path, linkCreate(progFd, a.ifindex, BPF_XDP, mode));
      return { mechanism: xdpMechanism, replaced: false };
    }
    const direction = TC_DIRECTION[a.hook];
    if (this.tcx !== false) {
      try {
        pinLink(path, linkCreate(progFd, a.ifindex, direction.tcx));
        this.tcx = true;
        return { mechanism: 'tcx', replaced: false };
      } catch (err) {
        if (!(err instanceof NativeError) || (err.errno !== EINVAL && err.errno !== EOPNOTSUPP) || this.tcx)
          throw err;
        this.tcx = false;
      }
    }
    // clsact + cls_bpf: replacing the filter at our handle/priority is atomic as well.
    tcHookCreate(a.ifindex);
    tcAttach(a.ifindex, direction.clsact, progFd, {
      handle: TC_HANDLE,
      priority: TC_PRIORITY,
      replace: true,
    });
    return { mechanism: 'clsact', replaced: false };
  }
}

export interface SockAttachReport {
  /** The socket hooks attached anew, swapped into their existing links, and released. */
  attached: SockHook[];
  replaced: SockHook[];
  detached: SockHook[];
}

/**
 * Brings the socket hooks' links under <pinDir>/links to `cgroupPath`: a pinned link on that
 * cgroup gets the new program (bpf_link_update, atomic), one on another cgroup is replaced, and
 * with cgroupPath null (bpf.socketLB off) they are all released, as are those of hooks not in
 * `hooks` (sockHooksFor).
 */
export function syncSockHooks(
  pinDir: string,
  prog: (name: string) => number,
  cgroupPath: string | null,
  hooks: readonly (typeof SOCK_HOOKS)[number][] = SOCK_HOOKS,
): SockAttachReport {
  const report: SockAttachReport = { attached: [], replaced: [], detached: [] };
  const linkDir = `${pinDir}/links`;
  // On cgroup2 a cgroup's id is its directory's inode number.
  const cgroupId = cgroupPath === null ? null : statSync(cgroupPath, { bigint: true }).ino;
  if (cgroupId !== null) mkdirSync(linkDir, { recursive: true });
  for (const h of SOCK_HOOKS) {
    const path = `${linkDir}/${sockLinkName(h.hook)}`;
    if (cgroupPath === null || cgroupId === null || !hooks.includes(h)) {
      if (existsSync(path)) {
        unpinLink(path);
        report.detached.push(h.hook);
      }
      continue;
    }
    // A link on another cgroup is released and made anew on this one.
    if (swapIntoPinnedLink(path, prog(h.program), (info) => info.cgroupId === cgroupId)) {
      report.replaced.push(h.hook);
      continue;
    }
    const cgroupFd = openPath(cgroupPath, O_RDONLY | O_CLOEXEC);
    try {
      pinLink(path, linkCreate(prog(h.program), cgroupFd, h.attachType));
    } finally {
      closeFd(cgroupFd);
    }
    report.attached.push(h.hook);
  }
  return report;
}

/**
 * Swaps the program into the link pinned at `path` (bpf_link_update: traffic never runs without
 * a program) when that link still targets what `sameTarget` accepts; true then. A pin there
 * whose target is another is released; false then, and the caller attaches anew.
 */
function swapIntoPinnedLink(path: string, progFd: number, sameTarget: (info: LinkInfo) => boolean): boolean {
  if (!existsSync(path)) return false;
  const fd = getPinned(path);
  try {
    if (sameTarget(linkInfo(fd))) {
      linkUpdate(fd, progFd);
      return true;
    }
  } finally {
    closeFd(fd);
  }
  unpinLink(path);
  return false;
}

function pinLink(path: string, fd: number): void {
  try {
    pinObject(fd, path);
  } finally {
    closeFd(fd);
  }
}

function unpinLink(path: string): void {
  try {
    const fd = getPinned(path);
    try {
      linkDetach(fd);
    } catch {
      // Already detached (its interface is gone).
    } finally {
      closeFd(fd);
    }
  } finally {
    unlinkSync(path);
  }
}

/** Deletes our cls_bpf filter; false when there is none (no clsact qdisc, no filter, no interface). */
function deleteFilter(ifindex: number, hook: 'tc-ingress' | 'tc-egress'): boolean {
  try {
    tcDetach(ifindex, TC_DIRECTION[hook].clsact, TC_HANDLE, TC_PRIORITY);
    return true;
  } catch (err) {
    if (err instanceof NativeError && [EINVAL, ENOENT, ENODEV].includes(err.errno)) return false;
    throw err;
  }
}

/**
 * Removes every attachment kube-bpf-proxy made: pinned links under <pinDir>/links, and the
 * cls_bpf filters at our handle/priority, ingress and egress, on the given interfaces.
 */
export function detachAll(pinDir: string, interfaces: readonly NetInterface[]): string[] {
  const removed: string[] = [];
  const linkDir = `${pinDir}/links`;
  if (existsSync(linkDir)) {
    for (const file of readdirSync(linkDir)) {
      unpinLink(`${linkDir}/${file}`);
      removed.push(linkNameOfPin(file));
    }
  }
  for (const i of interfaces) {
    for (const hook of ['tc-ingress', 'tc-egress'] as const) {
      if (deleteFilter(i.ifindex, hook)) removed.push(`${linkName({ hook, ifname: i.ifname })} (clsact)`);
    }
  }
  return removed;
}

/** The interfaces of the current network namespace that have a clsact qdisc (ours can hold filters). */
export async function clsactInterfaces(): Promise<NetInterface[]> {
  const [qdiscs, links] = await Promise.all([
    runCommand('tc', ['-j', 'qdisc', 'show']),
    runCommand('ip', ['-j', 'link', 'show']),
  ]);
  const clsact = new Set(
    (JSON.parse(qdiscs.stdout) as { kind: string; dev: string }[])
      .filter((q) => q.kind === 'clsact')
      .map((q) => q.dev),
  );
  return (JSON.parse(links.stdout) as NetInterface[])
    .filter((l) => clsact.has(l.ifname))
    .map(({ ifname, ifindex }) => ({ ifname, ifindex }));
}

/** For `cleanup`: detaches everything the agent attached under <pinPath>/v1 in this namespace. */
export async function detachBpf(pinPath: string): Promise<string[]> {
  return detachAll(`${pinPath}/${PIN_LAYOUT_VERSION}`, await clsactInterfaces());
}
