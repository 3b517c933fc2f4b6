// A lab's own cgroup2 directory (Lab.ownCgroup()): the cgroup its namespaces' processes start in
// and its agents attach their socket hooks to, so that no lab (the demo, an e2e test, a bench)
// attaches them at the machine's cgroup2 root, where they would see every process of the machine.
// The name carries the run's pid, so that a later run removes what a killed one left.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { findCgroup2Root } from '../host/cgroup.js';
import { cgroupRootsWithPrefix, removeNodeCgroups } from './real-cluster/cgroups.js';
import { deadRunPidOf } from './run-names.js';

const LAB_CGROUP_PREFIX = 'kube-bpf-proxy-lab-';

/** The lab's cgroup below the hierarchy's root: the prefix, the run's pid, the lab's prefix. */
export function ownCgroupName(labPrefix: string, pid = process.pid): string {
  return `/${LAB_CGROUP_PREFIX}${pid}-${labPrefix}`;
}

/** Removes the top-level cgroups named `<prefix><pid>-…` of runs that are gone (killed ones'). */
export async function removeStaleRunCgroups(prefix: string): Promise<void> {
  const stale = cgroupRootsWithPrefix(prefix).filter((name) => deadRunPidOf(prefix, name) !== null);
  for (const name of stale) await removeNodeCgroups(name);
}

/** Makes the lab's cgroup2 directory, after removing those of runs that are gone; returns it. */
export async function makeOwnCgroup(labPrefix: string): Promise<string> {
  await removeStaleRunCgroups(LAB_CGROUP_PREFIX);
  const dir = join(findCgroup2Root(), ownCgroupName(labPrefix));
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** Removes the lab's cgroup once its processes are gone (retried while they leave). */
export function removeOwnCgroup(labPrefix: string): Promise<void> {
  return removeNodeCgroups(ownCgroupName(labPrefix));
}
