// The cgroup v2 hierarchy the socket-hook programs attach to.

import { readFileSync, statfsSync } from 'node:fs';

/** statfs(2) f_type of cgroup2 (linux/magic.h CGROUP2_SUPER_MAGIC). */
export const CGROUP2_SUPER_MAGIC = 0x63677270;

/**
 * The mount point of the cgroup2 hierarchy in /proc/self/mountinfo text: /sys/fs/cgroup on a
 * unified layout, /sys/fs/cgroup/unified on a hybrid one. Null when cgroup2 is not mounted.
 * The shortest mount point wins when it is mounted more than once (a container's view may add
 * nested mounts).
 */
export function cgroup2MountPoint(mountinfo: string): string | null {
  let best: string | null = null;
  for (const line of mountinfo.split('\n')) {
    // "<id> <parent> <maj:min> <root> <mount point> <options> [optional...] - <fstype> <source> <super options>"
    const [before, after] = line.split(' - ');
    if (!before || !after || after.split(' ')[0] !== 'cgroup2') continue;
    const fields = before.split(' ');
    if (fields[3] !== '/') continue;
    const mountPoint = unescapeMountinfo(fields[4] ?? '');
    if (mountPoint && (best === null || mountPoint.length < best.length)) best = mountPoint;
  }
  return best;
}

/** mountinfo escapes space, tab, newline and backslash as \ooo. */
function unescapeMountinfo(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(Number.parseInt(oct, 8)));
}

/** The cgroup2 root of this machine; throws when cgroup v2 is not mounted. */
export function findCgroup2Root(): string {
  const root = cgroup2MountPoint(readFileSync('/proc/self/mountinfo', 'utf8'));
  if (root === null) throw new Error('cgroup v2 is not mounted (no cgroup2 line in /proc/self/mountinfo)');
  return root;
}

/**
 * The cgroup2 directory to attach to for a configured path: the path itself when it is on cgroup2,
 * else its `unified` subdirectory when that is (a hybrid host's /sys/fs/cgroup given whole, as the
 * chart's default cgroup.hostRoot mounts it). Throws naming both otherwise.
 */
export function resolveCgroup2Dir(
  path: string,
  fsType: (path: string) => number = (p) => statfsSync(p).type,
): string {
  if (fsType(path) === CGROUP2_SUPER_MAGIC) return path;
  const unified = `${path.replace(/\/$/, '')}/unified`;
  let unifiedType: number | null = null;
  try {
    unifiedType = fsType(unified);
  } catch {
    // No such directory: a cgroup v1-only host, or a wrong path.
  }
  if (unifiedType === CGROUP2_SUPER_MAGIC) return unified;
  throw new Error(`${path} is not a cgroup v2 directory, nor is ${unified}: set bpf.cgroupPath to one`);
}
