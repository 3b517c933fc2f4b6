// The real-node lab's cgroups (src/lab/real-node.ts): one lab cgroup in the cgroup2 hierarchy, and
// below it a cgroup of each node that its host processes (agent, host servers and clients) start
// in, its pods' processes in a cgroup below that, as a node's pods live below the node's cgroup.
// So each node's agent attaches its socket hooks to its own node's cgroup, never to the machine's
// root, where they would see every process of the machine. As real-cluster/cgroups.ts does for
// the real cluster's nodes, but in cgroup2 alone: only the socket hooks need them. The lab's name
// carries the run's pid, so that a later run removes what a killed one left.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { findCgroup2Root } from '../host/cgroup.js';
import { removeStaleRunCgroups } from './lab-cgroup.js';
import { deadRunPidOf } from './run-names.js';

const LAB_CGROUP_PREFIX = 'kbp-real-node-';

/** The lab's cgroup below the hierarchy's root: the prefix, the run's pid, the lab's prefix. */
export function labCgroupName(labPrefix: string, pid = process.pid): string {
  return `/${LAB_CGROUP_PREFIX}${pid}-${labPrefix}`;
}

/** The pid of the run that named a lab cgroup, when that run is gone. */
export function deadLabPid(name: string, alive?: (pid: number) => boolean): number | null {
  return deadRunPidOf(LAB_CGROUP_PREFIX, name, alive);
}

/** A node's cgroup2 directory in the lab's cgroup. */
export function nodeCgroupDir(labCgroup: string, node: string): string {
  return join(findCgroup2Root(), labCgroup, node);
}

/** The cgroup2 directory of a node's pods, below the node's. */
export function podsCgroupDir(labCgroup: string, node: string): string {
  return join(nodeCgroupDir(labCgroup, node), 'pods');
}

/** Makes the lab's cgroup, each node's and its pods'. */
export function makeLabCgroups(labCgroup: string, nodes: readonly string[]): void {
  for (const node of nodes) mkdirSync(podsCgroupDir(labCgroup, node), { recursive: true });
}

/** Removes the lab cgroups of runs that are gone (a killed run's destroy() never came). */
export function removeStaleLabCgroups(): Promise<void> {
  return removeStaleRunCgroups(LAB_CGROUP_PREFIX);
}
