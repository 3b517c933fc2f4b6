// One agent per pin path. Two agents programming the same pinned maps (two lab nodes sharing one
// bpffs, a second DaemonSet) would overwrite each other's services and reclaim each other's ids.
// The agent takes flock(LOCK_EX | LOCK_NB) on the pin directory itself (bpffs holds no regular
// files, but a directory opens O_RDONLY | O_DIRECTORY), and keeps the descriptor open for its life.
// The kernel drops the lock when the last descriptor closes: on exit, on SIGKILL, on a crash, so
// a dead agent never blocks the next one and there is no marker to go stale. The descriptor is
// close-on-exec, so the commands the agent spawns never inherit the lock.
//
// The holder's pid comes from the kernel too: /proc/locks lists every flock with its owner's pid
// and the device and inode it is on (no pid file to keep in step).

import { readFileSync, statSync } from 'node:fs';
import {
  closeFd,
  flock,
  LOCK_EX,
  LOCK_NB,
  O_CLOEXEC,
  O_DIRECTORY,
  O_RDONLY,
  openPath,
} from '../../native/libc.js';

export const PROC_LOCKS = '/proc/locks';

export interface InodeId {
  major: number;
  minor: number;
  inode: bigint;
}

/**
 * The pids /proc/locks text shows holding a flock on the inode (pure). A line reads
 * "1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF": device as hex major:minor, inode in decimal;
 * lines with "->" are waiters, not holders.
 */
export function flockHolders(procLocks: string, id: InodeId): number[] {
  const pids: number[] = [];
  for (const line of procLocks.split('\n')) {
    const m = /^\d+:\s+FLOCK\s+\S+\s+\S+\s+(-?\d+)\s+([0-9a-f]+):([0-9a-f]+):(\d+)\s/.exec(line);
    if (!m) continue;
    const [, pid, major, minor, inode] = m as unknown as [string, string, string, string, string];
    if (
      Number.parseInt(major, 16) === id.major &&
      Number.parseInt(minor, 16) === id.minor &&
      BigInt(inode) === id.inode
    )
      pids.push(Number(pid));
  }
  return pids;
}

/** The device and inode of a path, as /proc/locks writes them (glibc's dev_t encoding). */
export function inodeOf(path: string): InodeId {
  const st = statSync(path, { bigint: true });
  const major = Number(((st.dev >> 8n) & 0xfffn) | ((st.dev >> 32n) & ~0xfffn));
  const minor = Number((st.dev & 0xffn) | ((st.dev >> 12n) & ~0xffn));
  return { major, minor, inode: st.ino };
}

/** "pid 4242 (node)" for each holder, or a fallback when /proc/locks does not show one. */
function describeHolders(dir: string): string {
  let pids: number[] = [];
  try {
    pids = flockHolders(readFileSync(PROC_LOCKS, 'utf8'), inodeOf(dir));
  } catch {
    // Not readable here: the error below still names the pin path.
  }
  if (pids.length === 0) return 'another process (its pid is not visible in /proc/locks here)';
  return pids
    .map((pid) => {
      let comm = '';
      try {
        comm = ` (${readFileSync(`/proc/${pid}/comm`, 'utf8').trim()})`;
      } catch {
        // Gone or in another pid namespace: the pid alone.
      }
      return `pid ${pid}${comm}`;
    })
    .join(', ');
}

export interface PinPathLock {
  release(): void;
}

/**
 * Takes the exclusive lock on the pin directory `dir` (which must exist), or throws an error that
 * names the agent holding it. Never blocks.
 */
export function lockPinPath(dir: string): PinPathLock {
  const fd = openPath(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  let locked = false;
  try {
    locked = flock(fd, LOCK_EX | LOCK_NB);
  } finally {
    if (!locked) closeFd(fd);
  }
  if (!locked)
    throw new Error(
      `bpf.pinPath ${dir} is in use by another agent: ${describeHolders(dir)}; two agents must not program the same maps (stop it, or give this one its own --bpf-pin-path)`,
    );
  let open = true;
  return {
    release() {
      if (!open) return;
      open = false;
      closeFd(fd);
    },
  };
}
