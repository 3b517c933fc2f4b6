// Attaches the programs to the interfaces the config names and keeps them attached:
//   pod-facing interfaces (bpf.podInterfaces)       tc ingress  kbp_tc_pod
//   external interfaces (bpf.externalInterfaces)     tc ingress  kbp_tc_ext, and XDP kbp_xdp_ext
//                                                                when bpf.xdpMode is not "off"
// tc uses tcx links on kernels that have them (6.6+) and a clsact cls_bpf filter otherwise; XDP
// uses an XDP link. Links are pinned under <pinDir>/links, so they outlive the agent: a restarted
// agent swaps the new program into the existing link (bpf_link_update, atomic) and traffic never
// runs without a program. New interfaces that match are picked up by the periodic sync.

import { execFile } from 'node:child_process';
import { existsSync, readdirSync, unlinkSync } from 'node:fs';
import { promisify } from 'node:util';
import {
  BPF_TC_INGRESS,
  BPF_TCX_INGRESS,
  BPF_XDP,
  EINVAL,
  ENOENT,
  getPinned,
  linkCreate,
  linkDetach,
  linkInfo,
  linkUpdate,
  pinObject,
  tcAttach,
  tcDetach,
  tcHookCreate,
  XDP_FLAGS_DRV_MODE,
  XDP_FLAGS_SKB_MODE,
} from '../../../native/libbpf.js';
import { closeFd, NativeError } from '../../../native/libc.js';
import type { BpfConfig } from '../../config/types.js';
import { makeBpffsDir } from '../../host/bpffs.js';
import type { Logger } from '../../logger.js';
import { PROGRAMS } from './layout.js';
import { PIN_LAYOUT_VERSION } from './object.js';

export type Hook = 'tc-pod' | 'tc-ext' | 'xdp-ext';

export const HOOK_PROGRAM: Record<Hook, string> = {
  'tc-pod': PROGRAMS.tcFromPod,
  'tc-ext': PROGRAMS.tcFromExternal,
  'xdp-ext': PROGRAMS.xdpFromExternal,
};

/** cls_bpf filter identity on kernels without tcx ("kb"). */
export const TC_HANDLE = 0x6b62;
export const TC_PRIORITY = 0x6b62;

const EOPNOTSUPP = 95;

export interface NetInterface {
  ifname: string;
  ifindex: number;
}

export interface Attachment {
  ifname: string;
  ifindex: number;
  hook: Hook;
}

/** A trailing "*" matches a prefix; anything else matches the whole name. */
export function matchesPattern(name: string, patterns: readonly string[]): boolean {
  return patterns.some((p) => (p.endsWith('*') ? name.startsWith(p.slice(0, -1)) : name === p));
}

/** Which program goes where (pure). An interface that matches both lists is treated as external. */
export function plannedAttachments(
  interfaces: readonly NetInterface[],
  config: Pick<BpfConfig, 'podInterfaces' | 'externalInterfaces' | 'xdpMode'>,
): Attachment[] {
  const out: Attachment[] = [];
  for (const i of [...interfaces].sort((a, b) => a.ifname.localeCompare(b.ifname))) {
    if (i.ifname === 'lo') continue;
    if (matchesPattern(i.ifname, config.externalInterfaces)) {
      out.push({ ...i, hook: 'tc-ext' });
      if (config.xdpMode !== 'off') out.push({ ...i, hook: 'xdp-ext' });
    } else if (matchesPattern(i.ifname, config.podInterfaces)) {
      out.push({ ...i, hook: 'tc-pod' });
    }
  }
  return out;
}

const execFileAsync = promisify(execFile);

/** The interfaces of the current network namespace (`ip -j link`). */
export async function listInterfaces(): Promise<NetInterface[]> {
  const { stdout } = await execFileAsync('ip', ['-j', 'link', 'show']);
  return (JSON.parse(stdout) as { ifname: string; ifindex: number }[]).map((l) => ({
    ifname: l.ifname,
    ifindex: l.ifindex,
  }));
}

export interface AttachReport {
  attached: Attachment[];
  /** Existing links that got the new program (tcx and XDP links). */
  replaced: Attachment[];
  detached: string[];
  /** New failures (one that persists is reported once). */
  errors: { attachment: Attachment; error: string }[];
}

const linkName = (a: Pick<Attachment, 'hook' | 'ifname'>) => `${a.hook}@${a.ifname}`;

export class Attacher {
  private readonly linkDir: string;
  /** Learned on the first tc attach: null until then. */
  private tcx: boolean | null = null;
  /** The pinned links this process has checked or created, by name, with the ifindex. */
  private readonly current = new Map<string, number>();
  /** Attachments that failed, with the error last reported. */
  private readonly failing = new Map<string, string>();

  constructor(
    pinDir: string,
    private readonly prog: (name: string) => number,
    private readonly config: Pick<BpfConfig, 'podInterfaces' | 'externalInterfaces' | 'xdpMode'>,
    log: Logger,
    /** "clsact" skips tcx even where the kernel has it. */
    tcMethod: 'auto' | 'clsact' = 'auto',
  ) {
    this.linkDir = `${pinDir}/links`;
    makeBpffsDir(this.linkDir, log);
    if (tcMethod === 'clsact') this.tcx = false;
  }

  /** Brings the attachments to what the interfaces and the config ask for. */
  sync(interfaces: readonly NetInterface[]): AttachReport {
    const report: AttachReport = { attached: [], replaced: [], detached: [], errors: [] };
    const wanted = plannedAttachments(interfaces, this.config);
    const wantedNames = new Set(wanted.map(linkName));
    for (const a of wanted) {
      if (this.current.get(linkName(a)) === a.ifindex) continue;
      try {
        if (this.attach(a)) report.replaced.push(a);
        else report.attached.push(a);
        this.current.set(linkName(a), a.ifindex);
        this.failing.delete(linkName(a));
      } catch (err) {
        // Retried at every sync; reported when it starts failing or fails differently.
        const error = (err as Error).message;
        if (this.failing.get(linkName(a)) !== error) report.errors.push({ attachment: a, error });
        this.failing.set(linkName(a), error);
      }
    }
    for (const name of this.failing.keys()) if (!wantedNames.has(name)) this.failing.delete(name);
    // Links of interfaces that are gone or no longer match (an interface that went away took
    // its tcx/XDP attachment with it; the pin is all that is left).
    for (const name of readdirSync(this.linkDir)) {
      if (wantedNames.has(name)) continue;
      this.unpin(name);
      this.current.delete(name);
      report.detached.push(name);
    }
    return report;
  }

  /** Attaches or swaps the program; true when an existing attachment got the new program. */
  private attach(a: Attachment): boolean {
    const progFd = this.prog(HOOK_PROGRAM[a.hook]);
    const path = `${this.linkDir}/${linkName(a)}`;
    if (existsSync(path)) {
      const fd = getPinned(path);
      try {
        if (linkInfo(fd).ifindex === a.ifindex) {
          linkUpdate(fd, progFd);
          return true;
        }
      } finally {
        closeFd(fd);
      }
      // The interface was replaced by another of the same name: the old link is defunct.
      unlinkSync(path);
    }
    if (a.hook === 'xdp-ext') {
      this.pinLink(path, this.xdpLink(progFd, a.ifindex));
      return false;
    }
    if (this.tcx !== false) {
      try {
        this.pinLink(path, linkCreate(progFd, a.ifindex, BPF_TCX_INGRESS));
        this.tcx = true;
        return false;
      } catch (err) {
        if (!(err instanceof NativeError) || (err.errno !== EINVAL && err.errno !== EOPNOTSUPP) || this.tcx)
          throw err;
        this.tcx = false;
      }
    }
    // clsact + cls_bpf: replacing the filter at our handle/priority is atomic as well.
    tcHookCreate(a.ifindex);
    tcAttach(a.ifindex, BPF_TC_INGRESS, progFd, { handle: TC_HANDLE, priority: TC_PRIORITY, replace: true });
    return false;
  }

  private xdpLink(progFd: number, ifindex: number): number {
    if (this.config.xdpMode === 'generic') return linkCreate(progFd, ifindex, BPF_XDP, XDP_FLAGS_SKB_MODE);
    return linkCreate(progFd, ifindex, BPF_XDP, XDP_FLAGS_DRV_MODE);
  }

  private pinLink(path: string, fd: number): void {
    try {
      pinObject(fd, path);
    } finally {
      closeFd(fd);
    }
  }

  private unpin(name: string): void {
    const path = `${this.linkDir}/${name}`;
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
}

/**
 * Removes every attachment kube-bpf-proxy made: pinned links under <pinDir>/links, and the
 * cls_bpf filters at our handle/priority on the given interfaces (kernels without tcx).
 */
export function detachAll(pinDir: string, interfaces: readonly NetInterface[]): string[] {
  const removed: string[] = [];
  const linkDir = `${pinDir}/links`;
  if (existsSync(linkDir)) {
    for (const name of readdirSync(linkDir)) {
      const path = `${linkDir}/${name}`;
      try {
        const fd = getPinned(path);
        try {
          linkDetach(fd);
        } catch {
          // Already detached.
        } finally {
          closeFd(fd);
        }
      } finally {
        unlinkSync(path);
      }
      removed.push(name);
    }
  }
  for (const i of interfaces) {
    try {
      tcDetach(i.ifindex, BPF_TC_INGRESS, TC_HANDLE, TC_PRIORITY);
      removed.push(`tc-filter@${i.ifname}`);
    } catch (err) {
      // No clsact qdisc (EINVAL) or no filter of ours (ENOENT) on this interface.
      if (!(err instanceof NativeError) || (err.errno !== EINVAL && err.errno !== ENOENT)) throw err;
    }
  }
  return removed;
}

/** For `cleanup`: detaches everything the agent attached under <pinPath>/v1 in this namespace. */
export async function detachBpf(pinPath: string): Promise<string[]> {
  // Only interfaces with a clsact qdisc can carry our cls_bpf filter.
  const { stdout } = await execFileAsync('tc', ['-j', 'qdisc', 'show']);
  const clsact = new Set(
    (JSON.parse(stdout) as { kind: string; dev: string }[])
      .filter((q) => q.kind === 'clsact')
      .map((q) => q.dev),
  );
  const interfaces = (await listInterfaces()).filter((i) => clsact.has(i.ifname));
  return detachAll(`${pinPath}/${PIN_LAYOUT_VERSION}`, interfaces);
}
