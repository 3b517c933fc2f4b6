// bpffs for the pins, as Cilium does it: the pin path must lie on a bpffs mount; when it lies
// under /sys/fs/bpf and nothing is mounted there, the agent mounts bpffs itself (and says so);
// anything else fails at once with the fix. The check comes before any mkdir: Node's recursive
// mkdirSync loops forever on a plain sysfs /sys/fs/bpf, where mkdir fails with ENOENT.

import { mkdirSync, statfsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { mount } from '../../native/libc.js';
import type { Logger } from '../logger.js';

export const BPFFS_ROOT = '/sys/fs/bpf';
/** statfs(2) f_type of bpffs (linux/magic.h). */
export const BPF_FS_MAGIC = 0xcafe4a11;

/** Names for the filesystems a misplaced pin path usually lands on, for the error text. */
const FS_NAMES = new Map<number, string>([
  [0x62656572, 'sysfs'],
  [0x01021994, 'tmpfs'],
  [0xef53, 'ext4'],
  [0x58465342, 'xfs'],
  [0x9123683e, 'btrfs'],
  [0x794c7630, 'overlayfs'],
]);

export interface BpffsFacts {
  /** The pin path, absolute and normalized. */
  pinPath: string;
  /** The pin path or its nearest existing ancestor. */
  existing: string;
  /** statfs f_type of `existing`. */
  fsType: number;
}

export type BpffsVerdict =
  | { action: 'ok' }
  /** Mount bpffs at BPFFS_ROOT; `why` says what is there instead. */
  | { action: 'mount'; why: string }
  | { action: 'fail'; why: string };

const within = (path: string, root: string) => path === root || path.startsWith(`${root}/`);

function fsName(fsType: number): string {
  return FS_NAMES.get(fsType) ?? `a filesystem of type 0x${fsType.toString(16)}`;
}

/** What to do about the pin path's filesystem (pure). */
export function bpffsVerdict(facts: BpffsFacts): BpffsVerdict {
  const { pinPath, existing, fsType } = facts;
  if (fsType === BPF_FS_MAGIC) return { action: 'ok' };
  if (within(pinPath, BPFFS_ROOT) && !within(existing, BPFFS_ROOT))
    return { action: 'fail', why: `${BPFFS_ROOT} does not exist` };
  const why = `${existing} is on ${fsName(fsType)}, not bpffs`;
  // Only on the bare sysfs directory: an existing directory below it is another filesystem's
  // mount, which a bpffs mounted on top of /sys/fs/bpf would hide.
  if (existing === BPFFS_ROOT) return { action: 'mount', why };
  return { action: 'fail', why };
}

/** The error for a pin path that cannot be on bpffs, naming the fix. */
export function pinPathError(pinPath: string, why: string): string {
  return `bpf.pinPath ${pinPath} is not on a bpffs mount (${why}); mount one with "mount -t bpf bpffs ${BPFFS_ROOT}" or set bpf.pinPath/--bpf-pin-path under a bpffs mount`;
}

/** statfs of the pin path, or of its nearest existing ancestor. */
export function probeBpffs(pinPath: string): BpffsFacts {
  const normalized = resolve(pinPath);
  let existing = normalized;
  for (;;) {
    try {
      return { pinPath: normalized, existing, fsType: statfsSync(existing).type };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || existing === '/') throw err;
      existing = dirname(existing);
    }
  }
}

/** Why the pin path is not on bpffs, or null when it is. Never mounts: for readers of the pins. */
export function notOnBpffs(pinPath: string): string | null {
  const verdict = bpffsVerdict(probeBpffs(pinPath));
  return verdict.action === 'ok' ? null : verdict.why;
}

/** Makes sure the pin path lies on bpffs, mounting bpffs at /sys/fs/bpf when the verdict says so. */
export function ensureBpffs(pinPath: string, log: Logger): void {
  const facts = probeBpffs(pinPath);
  const verdict = bpffsVerdict(facts);
  if (verdict.action === 'ok') return;
  if (verdict.action === 'fail') throw new Error(pinPathError(facts.pinPath, verdict.why));
  try {
    mount('bpffs', BPFFS_ROOT, 'bpf');
  } catch (err) {
    throw new Error(
      `${pinPathError(facts.pinPath, verdict.why)}; mounting it here failed: ${(err as Error).message} (needs CAP_SYS_ADMIN)`,
    );
  }
  // Cilium warns here too: in a container the mount lives only as long as the container's mount
  // namespace, and with it the pins that keep connections alive across restarts.
  log.warn(
    { path: BPFFS_ROOT },
    `mounted bpffs at ${BPFFS_ROOT} (${verdict.why}); mount it on the host so pins outlive this mount namespace`,
  );
}

/** Creates a directory for pins, and its parents, once ensureBpffs has put them on bpffs. */
export function makeBpffsDir(dir: string, log: Logger): void {
  ensureBpffs(dir, log);
  mkdirSync(dir, { recursive: true });
}
