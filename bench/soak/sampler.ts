// What the soak reads of each node while it runs, every few seconds and once more before an agent
// is stopped: the agent's own metrics (its /metrics in the node's network namespace: RSS, event
// loop lag, active timers, the map entries its plan holds, conntrack GC passes, kube-proxy's
// network programming histogram), its open file descriptors by kind (/proc), and in bpf mode the
// kernel's side: each BPF map's entries counted in the pinned maps themselves, the files pinned
// under the node's bpffs, and the node's ip_local_reserved_ports (the SNAT port reservation).

import { readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { mapInfo, mapNextKey } from '../../native/libbpf/map.js';
import { getPinned } from '../../native/libbpf/object.js';
import { closeFd } from '../../native/libc.js';
import { MAPS } from '../../src/dataplanes/bpf/layout.js';
import { PIN_LAYOUT_VERSION } from '../../src/dataplanes/bpf/object.js';
import {
  COUNTED_MAPS,
  type CountedMap,
  type FdCounts,
  type NodeSample,
  readAgentMetrics,
  unreachablesSent,
} from './metrics.js';
import { CLIENT_PODS, POOL, type SoakWorld, STABLE_PODS } from './world.js';

export function fdCounts(pid: number): FdCounts {
  const counts: FdCounts = { total: 0, bpfMaps: 0, bpfProgs: 0, bpfLinks: 0, sockets: 0 };
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let target = '';
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue;
    }
    counts.total += 1;
    if (target === 'anon_inode:bpf-map') counts.bpfMaps += 1;
    else if (target === 'anon_inode:bpf-prog') counts.bpfProgs += 1;
    else if (target === 'anon_inode:bpf_link') counts.bpfLinks += 1;
    else if (target.startsWith('socket:')) counts.sockets += 1;
  }
  return counts;
}

/** Entries of a map, counted key by key (bounded by its capacity: keys deleted meanwhile restart
 * the walk), and whether it was at its capacity. */
function countEntries(fd: number): { n: number; full: boolean } {
  const { keySize, maxEntries } = mapInfo(fd);
  let key: Buffer | null = null;
  let n = 0;
  for (;;) {
    const next = Buffer.alloc(keySize);
    if (n > maxEntries || !mapNextKey(fd, key, next)) return { n, full: n >= maxEntries };
    n += 1;
    key = next;
  }
}

/** Every counted map's entries, from the pins of an agent's pin path, and the maps at capacity. */
export function kernelEntries(pinPath: string): {
  entries: Partial<Record<CountedMap, number>>;
  full: CountedMap[];
} {
  const entries: Partial<Record<CountedMap, number>> = {};
  const full: CountedMap[] = [];
  for (const key of COUNTED_MAPS) {
    const fd = getPinned(join(pinPath, PIN_LAYOUT_VERSION, 'maps', MAPS[key].name));
    try {
      const counted = countEntries(fd);
      entries[key] = counted.n;
      if (counted.full) full.push(key);
    } finally {
      closeFd(fd);
    }
  }
  return { entries, full };
}

/** Files pinned under a directory of bpffs, at any depth. */
export function countPins(dir: string): number {
  let n = 0;
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    n += statSync(path).isDirectory() ? countPins(path) : 1;
  }
  return n;
}

export class Sampler {
  readonly samples: NodeSample[] = [];
  /** Samples that could not be taken, and why (the report lists them). */
  readonly errors: string[] = [];

  constructor(private readonly world: SoakWorld) {}

  /** The agent's pin path as the host sees it (the chart's default pin path under the node's bpffs). */
  pinPath(node: string): string {
    return join(this.world.pinRoot, node, 'kube-bpf-proxy');
  }

  async sample(node: string): Promise<NodeSample> {
    const { world } = this;
    const ns = world.nodes.nodeNs(node);
    const pid = world.nodes.labAgent(node).pid ?? null;
    const { stdout } = await world.lab.exec(ns, process.execPath, [
      '-e',
      "fetch('http://127.0.0.1:10249/metrics').then((r) => r.text()).then((t) => process.stdout.write(t), () => {})",
    ]);
    const load1 = Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
    const sample: NodeSample = { t: Date.now(), node, pid, up: stdout !== '', load1 };
    if (sample.up) Object.assign(sample, readAgentMetrics(stdout));
    try {
      if (pid !== null) sample.fds = fdCounts(pid);
    } catch {
      // The agent exited between the two reads.
    }
    sample.unreachSent = await this.unreachables(node);
    if (world.mode === 'bpf') {
      const { entries, full } = kernelEntries(this.pinPath(node));
      sample.kernel = entries;
      if (full.length > 0) sample.full = full;
      sample.pins = countPins(join(world.pinRoot, node));
      const reserved = await world.lab.exec(ns, 'cat', ['/proc/sys/net/ipv4/ip_local_reserved_ports']);
      sample.reservedPorts = reserved.stdout.trim();
    }
    this.samples.push(sample);
    return sample;
  }

  /** The ICMP unreachables each namespace of the node has sent: the node's and its pods'. */
  private async unreachables(node: string): Promise<Record<string, { v4: number; v6: number }>> {
    const { nodes, lab } = this.world;
    const pods = [...CLIENT_PODS, ...STABLE_PODS, ...POOL.map((p) => ({ name: p.slot, node: p.node }))];
    const out: Record<string, { v4: number; v6: number }> = {};
    for (const ns of [
      nodes.nodeNs(node),
      ...pods.filter((p) => p.node === node).map((p) => nodes.podNs(p.name)),
    ]) {
      const { stdout } = await lab.exec(ns, 'cat', ['/proc/net/snmp', '/proc/net/snmp6']);
      out[ns] = unreachablesSent(stdout);
    }
    return out;
  }

  /** Samples every node every `periodMs` until stop() is called; resolves once the last is in. */
  every(nodes: readonly string[], periodMs: number): { stop: () => Promise<void> } {
    let running = true;
    const loop = (async () => {
      while (running) {
        for (const node of nodes) await this.sample(node).catch((e) => this.errors.push(`${node}: ${e}`));
        await new Promise((resolve) => setTimeout(resolve, periodMs));
      }
    })();
    return {
      stop: async () => {
        running = false;
        await loop;
      },
    };
  }
}
