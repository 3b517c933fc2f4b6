// The CPU a timed load costs, and where its work runs.
//
// What is counted: the system time of the lab's own load, the client pod's commands and the
// backend pods, each in a cgroup v2 of the bench's (cpu.stat's system_usec, which cgroup v2 keeps
// without any controller enabled). The node's per-packet work is counted there too: a veth hands
// a packet to its peer on the sending CPU (netif_rx into that CPU's backlog) and, without RPS,
// the receive softirq runs right after, in the sender's own system call (local_bh_enable), so the
// node's forwarding, its netfilter rules and conntrack, IPVS or the BPF programs, and the
// receiving pod's TCP all run in the context of the process that sent the packet, client or
// backend; the kernel charges that softirq time to the current task's cgroup as system time
// (tick accounting, this kernel has no IRQ_TIME_ACCOUNTING). Counting per cgroup, and not
// /proc/stat's machine-wide system and softirq, keeps the other sessions' builds and tests on
// this shared machine out of the figure; what it misses is softirq work deferred to ksoftirqd
// (only under sustained overload) and the proxy's own process (its syncs, not per-packet work).
// The client and the backends cost the same in every mode: the "direct" mode (no Service, no
// proxy) measures them alone, so a mode's figure ÷ direct's says what the proxy adds.
//
// Placement (two CPUs or more): the client's commands on CPU 0, the backends on CPU 1 (taskset).
// With the softirq in the sender's context, the node's work on the request direction runs on the
// client's CPU and on the reply direction on the backends' CPU. RPS on the node's veths could
// move all of it to CPU 1, but the softirq would then run in whatever task CPU 1 happens to be in
// (the idle task, another session's process) and its time could not be told apart from theirs.

import { mkdirSync, readFileSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';

export interface Placement {
  /** The client's load generators. */
  clientCpu: number;
  /** The backend pods. */
  backendCpu: number;
}

/** Where the load and the backends run: on separate CPUs when there are two or more. */
export function placement(cores: number): Placement | null {
  return cores >= 2 ? { clientCpu: 0, backendCpu: 1 } : null;
}

/** A command prefixed to run on `cpu` (or as it is without a placement). */
export function pinned(cpu: number | undefined, cmd: string, args: string[]): [string, string[]] {
  return cpu === undefined ? [cmd, args] : ['taskset', ['-c', String(cpu), cmd, ...args]];
}

/** The bench's cgroups: the client pod's commands and the backend pods, under one of the run's. */
export interface LoadCgroups {
  root: string;
  client: string;
  backends: string;
}

export function createLoadCgroups(cgroup2Root: string, prefix: string): LoadCgroups {
  const root = join(cgroup2Root, `${prefix}-load`);
  const cgroups = { root, client: join(root, 'client'), backends: join(root, 'backends') };
  for (const dir of [cgroups.client, cgroups.backends]) mkdirSync(dir, { recursive: true });
  return cgroups;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Removes the cgroups once their processes are gone (a killed process leaves them a moment later). */
export async function removeLoadCgroups(cgroups: LoadCgroups): Promise<void> {
  for (const dir of [cgroups.client, cgroups.backends, cgroups.root]) {
    for (let attempt = 0; ; attempt++) {
      try {
        rmdirSync(dir);
        break;
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') break;
        if (code !== 'EBUSY' || attempt >= 100) throw err;
        await sleep(20);
      }
    }
  }
}

/** system_usec of a cgroup v2 cpu.stat text (its own and its descendants' system time). */
export function parseSystemUs(cpuStat: string): number {
  const value = /^system_usec (\d+)$/m.exec(cpuStat)?.[1];
  if (value === undefined) throw new Error(`cpu.stat has no system_usec:\n${cpuStat}`);
  return Number(value);
}

export const readSystemUs = (cgroup: string): number =>
  parseSystemUs(readFileSync(join(cgroup, 'cpu.stat'), 'utf8'));

/** CPU µs per unit of work; NaN when no unit was done. */
export const usPerUnit = (us: number, units: number): number => (units > 0 ? us / units : Number.NaN);

/** Runs `load` and returns its result with the system time `cgroup` spent per unit it reports. */
export async function withSystemCpu<T>(
  cgroup: string,
  load: () => Promise<T>,
  units: (result: T) => number,
): Promise<{ result: T; cpuUsPerUnit: number }> {
  const before = readSystemUs(cgroup);
  const result = await load();
  return { result, cpuUsPerUnit: usPerUnit(readSystemUs(cgroup) - before, units(result)) };
}
