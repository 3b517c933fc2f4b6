// Each node's own cgroup (the kubelet's cgroupRoot) in every hierarchy of this machine: the
// kubelet wants it to exist before it starts, runc puts the node's pods below it in the v1
// hierarchies and in cgroup2, and the node's daemons live in its cgroup2 directory too, so that
// socket hooks attached there see exactly that node. Removed depth first once the node is gone.

import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { findCgroup2Root } from '../../host/cgroup.js';
import { until } from '../until.js';

/** The mount points of every cgroup (v1) and cgroup2 hierarchy in /proc/self/mountinfo text (pure). */
export function cgroupHierarchies(mountinfo: string): string[] {
  const found: string[] = [];
  for (const line of mountinfo.split('\n')) {
    const [before, after] = line.split(' - ');
    const fsType = after?.split(' ')[0];
    if (fsType !== 'cgroup' && fsType !== 'cgroup2') continue;
    const fields = before?.split(' ') ?? [];
    if (fields[3] === '/' && fields[4]) found.push(fields[4]);
  }
  return [...new Set(found)];
}

const mountinfo = () => readFileSync('/proc/self/mountinfo', 'utf8');

/** The cgroup2 directory the node's own daemons live in (below the node's cgroup). */
export function nodeDaemonsCgroup(cgroupRoot: string): string {
  return join(findCgroup2Root(), cgroupRoot, 'system');
}

/**
 * Makes the node's cgroup in every hierarchy (a cpuset gets its parent's CPUs and memory nodes, or
 * nothing can join it) and the cgroup2 directory of its daemons.
 */
export function makeNodeCgroups(cgroupRoot: string): void {
  for (const hierarchy of cgroupHierarchies(mountinfo())) {
    const dir = join(hierarchy, cgroupRoot);
    mkdirSync(dir, { recursive: true });
    for (const file of ['cpuset.cpus', 'cpuset.mems']) {
      const parent = join(hierarchy, file);
      if (existsSync(parent)) writeFileSync(join(dir, file), readFileSync(parent));
    }
  }
  mkdirSync(nodeDaemonsCgroup(cgroupRoot), { recursive: true });
}

/** Every cgroup directory below (and including) dir, deepest first. */
function depthFirst(dir: string): string[] {
  const below = readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .flatMap((e) => depthFirst(join(dir, e.name)));
  return [...below, dir];
}

/**
 * Removes the node's cgroups in every hierarchy. A cgroup empties a moment after its last process
 * is killed, so each removal is retried, within timeoutMs in all.
 */
export async function removeNodeCgroups(cgroupRoot: string, timeoutMs = 20_000): Promise<void> {
  const dirs = cgroupHierarchies(mountinfo())
    .map((hierarchy) => join(hierarchy, cgroupRoot))
    .filter((dir) => existsSync(dir));
  await until(
    `cgroups ${cgroupRoot} removed`,
    () => {
      for (const dir of dirs.filter((d) => existsSync(d)).flatMap(depthFirst)) {
        try {
          rmdirSync(dir);
        } catch {
          // Still busy: the next round tries again.
        }
      }
      return dirs.every((d) => !existsSync(d));
    },
    timeoutMs,
  );
}

/** The top-level cgroup names (in any hierarchy) that start with prefix. */
export function cgroupRootsWithPrefix(prefix: string): string[] {
  const names = new Set<string>();
  for (const hierarchy of cgroupHierarchies(mountinfo()))
    for (const entry of readdirSync(hierarchy, { withFileTypes: true }))
      if (entry.isDirectory() && entry.name.startsWith(prefix)) names.add(`/${entry.name}`);
  return [...names];
}
