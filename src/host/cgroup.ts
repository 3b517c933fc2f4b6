// The cgroup v2 hierarchy the socket-hook programs attach to.

import { type Dirent, existsSync, readdirSync, readFileSync, statfsSync, statSync } from 'node:fs';
import { join } from 'node:path';

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

/** The kubelet's cgroup of every pod: kubepods (cgroupfs driver) or kubepods.slice (systemd driver). */
const KUBEPODS = /^kubepods(\.slice)?$/;

/**
 * The node's cgroup on a pod's cgroup path (pure): the parent of the kubelet's kubepods cgroup.
 * On a usual node kubepods sits at the root, so this is "/"; a kubelet run with cgroupRoot /node1
 * (several nodes sharing one machine's hierarchy) puts its pods under /node1/kubepods, and the
 * node's cgroup is /node1. Null for a path outside kubepods: not a kubelet's pod.
 */
export function nodeCgroupOf(cgroupPath: string): string | null {
  const parts = cgroupPath.split('/').filter((p) => p !== '');
  const at = parts.findIndex((p) => KUBEPODS.test(p));
  return at < 0 ? null : `/${parts.slice(0, at).join('/')}`;
}

/** The cgroup2 path in /proc/self/cgroup text (its "0::" line), pure; null without one. */
export function cgroup2PathOf(procCgroup: string): string | null {
  const line = procCgroup.split('\n').find((l) => l.startsWith('0::'));
  return line === undefined ? null : line.slice(3);
}

const holdsPid = (dir: string, pid: number) => {
  try {
    return readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').includes(String(pid));
  } catch {
    return false;
  }
};

/**
 * The directory under a cgroup2 hierarchy root that holds pid, as a path relative to the root:
 * the hint (this process's /proc/self/cgroup path) when it does, else found by walking the tree:
 * in a cgroup namespace /proc/self/cgroup is relative to the namespace, not to the mounted host
 * hierarchy. Null when no directory holds it.
 */
export function cgroupOfPid(root: string, pid: number, hint: string | null): string | null {
  if (hint !== null && holdsPid(join(root, hint), pid)) return hint;
  const walk = (rel: string): string | null => {
    if (holdsPid(join(root, rel), pid)) return rel;
    let entries: Dirent[];
    try {
      entries = readdirSync(join(root, rel), { withFileTypes: true });
    } catch {
      return null; // Removed while walked.
    }
    for (const e of entries) {
      const found = e.isDirectory() ? walk(`${rel === '/' ? '' : rel}/${e.name}`) : null;
      if (found !== null) return found;
    }
    return null;
  };
  return walk('/');
}

/**
 * The cgroup2 directory the socket hooks attach to for a configured path (resolveCgroup2Dir's).
 * A hierarchy's root (it has no cgroup.type file) narrows to the node's cgroup when this process
 * runs in a kubelet's pod: the parent of kubepods, which is the root again on a usual node, but
 * the node's own directory where nodes share a machine's hierarchy, whose root would hold every
 * node's processes. A configured directory below the root is taken as it is.
 */
export function socketHookCgroupDir(configured: string): string {
  const dir = resolveCgroup2Dir(configured);
  if (existsSync(join(dir, 'cgroup.type'))) return dir;
  const own = cgroupOfPid(dir, process.pid, cgroup2PathOf(readFileSync('/proc/self/cgroup', 'utf8')));
  const node = own === null ? null : nodeCgroupOf(own);
  return node === null || node === '/' ? dir : join(dir, node);
}

/** A process as the cgroup coverage check names it. */
export interface NamedProcess {
  pid: number;
  comm: string;
}

/**
 * The first process the socket hooks on a cgroup cannot see (pure): the agent itself when it is
 * outside (then the node's own clients most likely are too), else the first process of its network
 * namespace outside. Null when the cgroup holds them all.
 */
export function firstUncoveredProcess(
  agent: NamedProcess,
  netnsProcesses: readonly NamedProcess[],
  coveredPids: ReadonlySet<number>,
): (NamedProcess & { isAgent: boolean }) | null {
  if (!coveredPids.has(agent.pid)) return { ...agent, isAgent: true };
  const outside = netnsProcesses.find((p) => !coveredPids.has(p.pid));
  return outside ? { ...outside, isAgent: false } : null;
}

/** The warning for an uncovered process, naming the setting that fixes it. */
export function uncoveredProcessWarning(
  cgroupDir: string,
  process: NamedProcess & { isAgent: boolean },
): string {
  const who = process.isAgent ? 'the agent itself' : 'a process of the agent’s network namespace';
  return `bpf.cgroupPath ${cgroupDir} does not contain ${who} (pid ${process.pid}, ${process.comm}): processes outside it get no service translation at the socket hooks (only tc's); set bpf.cgroupPath to a cgroup that holds the node's processes (the cgroup2 root holds all)`;
}

/** Every pid in the cgroup and its descendants (cgroup.procs shows them in this pid namespace). */
export function pidsInCgroupTree(dir: string): Set<number> {
  const pids = new Set<number>();
  const walk = (d: string) => {
    let entries: Dirent[];
    try {
      for (const line of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n')) {
        const pid = Number.parseInt(line, 10);
        if (pid > 0) pids.add(pid);
      }
      entries = readdirSync(d, { withFileTypes: true });
    } catch {
      return; // Removed while walked.
    }
    for (const e of entries) if (e.isDirectory()) walk(join(d, e.name));
  };
  walk(dir);
  return pids;
}

/** User-space processes sharing this process's network namespace (kernel threads have no cmdline). */
export function processesInOwnNetns(): NamedProcess[] {
  const own = statSync('/proc/self/ns/net').ino;
  const found: NamedProcess[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (statSync(`/proc/${name}/ns/net`).ino !== own) continue;
      if (readFileSync(`/proc/${name}/cmdline`).length === 0) continue;
      found.push({ pid: Number(name), comm: readFileSync(`/proc/${name}/comm`, 'utf8').trim() });
    } catch {
      // Exited meanwhile, or not ours to read.
    }
  }
  return found;
}
