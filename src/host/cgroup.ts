// The cgroup v2 hierarchy the socket-hook programs attach to.

import { readFileSync } from 'node:fs';

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
