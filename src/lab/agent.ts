// One agent (`kube-bpf-proxy run`) in a lab namespace, as the demo, the benchmark and the e2e
// tests run it: started, followed through its JSON log lines (each "synced" line is a sync),
// its memory read from /proc, stopped.

import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { AgentLog, type SyncLine } from './agent-log.js';
import type { Lab } from './netns.js';

export interface AgentStartOptions {
  /**
   * The agent's view of bpffs. "host": the lab's own mount namespace (bpffs as the host has it).
   * "own": a private mount namespace with no bpffs at /sys/fs/bpf, as on a node whose init system
   * does not mount it: the agent mounts its own (ensureBpffs, src/host/bpffs.ts), which neither the
   * host nor the other lab nodes see. The lab never mounts bpffs for the agent: that is the
   * product's job. Private mount namespaces also get their own /run/kube-bpf-proxy, as every real node has, with the host's
   * cgroup (hostCgroup, else the lab's cgroup of the namespace) bound read-only at /run/kube-bpf-proxy/cgroupv2, where the Helm
   * chart mounts it (the chart's bpf.cgroupPath); the host's mounts are never touched. "node": a
   * private mount namespace whose /sys/fs/bpf is `nodeBpffs`, a directory of the host's bpffs
   * bound there, so pins outlive the process as on a node whose bpffs the chart mounts from the
   * host (an agent killed and started again finds its maps), without sharing pins with the other
   * lab nodes.
   */
  bpffs?: 'host' | 'own' | 'node';
  /** bpffs "node": the directory of the host's bpffs that is this node's /sys/fs/bpf. */
  nodeBpffs?: string;
  /**
   * In a private mount namespace: the cgroup2 directory bound at /run/kube-bpf-proxy/cgroupv2, where
   * the chart mounts the host's hierarchy (cgroup.hostRoot); default the lab's cgroup of the
   * namespace (Lab.setCgroup(), Lab.ownCgroup()), never the machine's cgroup2 root: a lab node's
   * own cgroup here keeps its socket hooks on that node's processes.
   */
  hostCgroup?: string;
  /**
   * The pid of a process whose mount namespace the agent joins instead (nodeMounts()): its bpffs
   * and pins outlive the agent, as a node's do, for a later agent or `cleanup` to find.
   */
  mountsOf?: number;
  /**
   * The words that start the CLI in place of `node CLI`: e.g. the image's entry point
   * (scripts/image-entrypoint.sh) inside a memory cgroup, as bench/agent-memory.ts runs it.
   */
  launcher?: string[];
}

// Run by `sh -ec SCRIPT sh MODE CGROUP2_ROOT NODE_BPFFS AGENT...` inside the private mount
// namespace. "own" unmounts every bpffs at /sys/fs/bpf (it can be mounted several times over the
// same point, hence the loop) and mounts none; "node" binds its directory over the host's mount
// (resolved before it is covered) instead.
const PRIVATE_MOUNTS = [
  'if [ "$1" = node ]; then mount --bind "$3" /sys/fs/bpf; else',
  '  while mountpoint -q /sys/fs/bpf; do umount /sys/fs/bpf; done',
  'fi',
  'mkdir -p /run/kube-bpf-proxy',
  'mount -t tmpfs kbp-lab-run /run/kube-bpf-proxy',
  'mkdir /run/kube-bpf-proxy/cgroupv2',
  'mount --bind "$2" /run/kube-bpf-proxy/cgroupv2',
  'mount -o remount,bind,ro /run/kube-bpf-proxy/cgroupv2',
  'shift 3',
  'exec "$@"',
].join('\n');

export class LabAgent {
  readonly log = new AgentLog('agent');

  private constructor(
    private readonly child: ChildProcess,
    readonly startedAt: number,
  ) {
    child.stderr?.on('data', (d: Buffer) => this.log.feed(d));
    child.stdout?.on('data', () => {});
    // 'close', not 'exit': the last stderr lines (the reason it stopped) arrive before 'close' only.
    child.once('close', (code) => this.log.end(code));
  }

  get syncs(): SyncLine[] {
    return this.log.syncs;
  }

  get lines(): Record<string, unknown>[] {
    return this.log.lines;
  }

  waitForSync(count: number, timeoutMs: number): Promise<SyncLine> {
    return this.log.waitForSync(count, timeoutMs);
  }

  static start(lab: Lab, ns: string, cli: string, args: string[], opts: AgentStartOptions = {}): LabAgent {
    const startedAt = performance.now();
    const agent = [...(opts.launcher ?? [process.execPath, cli]), 'run', ...args];
    const bpffs = opts.bpffs ?? 'host';
    // nsenter --net, then unshare: `ip netns exec` would remount /sys, and with it bpffs.
    const child =
      opts.mountsOf !== undefined
        ? lab.spawn(ns, 'nsenter', [`--mount=/proc/${opts.mountsOf}/ns/mnt`, '--', ...agent])
        : bpffs === 'host'
          ? lab.spawn(ns, agent[0]!, agent.slice(1))
          : spawnWithPrivateMounts(lab, ns, bpffs, agent, opts);
    return new LabAgent(child, startedAt);
  }

  /** VmRSS and VmHWM (peak) of the agent process, in MiB. */
  memory(): { rssMiB: number; peakMiB: number } {
    return processMemory(this.child.pid);
  }

  tail(): string {
    return this.log.tail();
  }

  /** The agent's process id: nsenter, unshare and the shell each exec the next, none forks. */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** SIGKILL, as the OOM killer or a node's crash ends it; resolves once the process is gone. */
  async kill(): Promise<void> {
    if (this.log.exitCode !== undefined) return;
    const closed = new Promise<void>((resolve) => this.child.once('close', () => resolve()));
    this.child.kill('SIGKILL');
    await closed;
  }

  /** The kernel state stays; the caller cleans it up. */
  stop(): Promise<void> {
    return stopAgentProcess(this.child, this.log);
  }
}

/**
 * A node's own mounts, as `bpffs: 'own'` makes them for one agent (no bpffs), held by a process
 * that sleeps (at most `seconds`) until the caller kills it. Agents started with `mountsOf` its
 * pid, one after another, and `cleanup` run in it, share the node's mount namespace: the first
 * agent mounts bpffs there, and that bpffs, with its pins, outlives the agent as a node's does.
 */
export function nodeMounts(lab: Lab, ns: string, seconds: number, hostCgroup?: string): ChildProcess {
  return spawnWithPrivateMounts(lab, ns, 'own', ['sleep', String(seconds)], { hostCgroup });
}

/** `command` in a private mount namespace of `ns` prepared by PRIVATE_MOUNTS. */
function spawnWithPrivateMounts(
  lab: Lab,
  ns: string,
  bpffs: 'own' | 'node',
  command: string[],
  opts: Pick<AgentStartOptions, 'nodeBpffs' | 'hostCgroup'>,
): ChildProcess {
  const args = ['--mount', '--propagation', 'private', '--', 'sh', '-ec', PRIVATE_MOUNTS, 'sh', bpffs];
  const cgroup = opts.hostCgroup ?? lab.cgroupOf(ns);
  if (cgroup === null)
    throw new Error(`no cgroup for ${ns}'s agent: set the lab's (Lab.ownCgroup()) or hostCgroup`);
  return lab.spawn(ns, 'unshare', [...args, cgroup, opts.nodeBpffs ?? '-', ...command]);
}

/** VmRSS and VmHWM (peak) of a process, in MiB, from /proc/PID/status. */
export function processMemory(pid: number | undefined): { rssMiB: number; peakMiB: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? Number.NaN);
  return { rssMiB: kib('VmRSS') / 1024, peakMiB: kib('VmHWM') / 1024 };
}

/** SIGTERM, then SIGKILL after 10 s; resolves once the process is gone (at once if it is). */
export async function stopAgentProcess(child: ChildProcess, log: AgentLog): Promise<void> {
  if (log.exitCode !== undefined) return;
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await closed;
  clearTimeout(timer);
}
