// The bpf data plane's traffic and map metrics (kube_bpf_proxy_*). The data plane implements
// BpfStatsProvider (it reads the per-CPU counter maps, map fill levels and the conntrack GC's
// work); this reads it once per scrape and exports what it returns. Keeping counters monotonic
// when an id is reused or the agent restarts is the provider's job (it knows the ids); entries
// with equal labels are added up here, so a provider may report per frontend.
// The series are written straight in the text format: with 10,000 services prom-client's
// per-series bookkeeping cost about a second per scrape on the event loop that also runs syncs.

import type {
  BackendTraffic,
  BpfStats,
  BpfStatsProvider,
  CounterValue,
  TrafficCounters,
} from '../dataplanes/stats.js';
import type { Logger } from '../logger.js';

/** At most `max` backends, chosen by name so the exported set is stable from scrape to scrape. */
export function backendsToExport(backends: readonly BackendTraffic[], max: number): BackendTraffic[] {
  if (backends.length <= max) return [...backends];
  const byName = [...backends].sort((a, b) =>
    a.backend < b.backend ? -1 : a.backend > b.backend ? 1 : a.family.localeCompare(b.family),
  );
  return byName.slice(0, max);
}

/** A label value in the text format: backslash, double quote and newline escaped. */
function escapeLabel(value: string): string {
  return /[\\"\n]/.test(value) ? value.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`)) : value;
}

/** `a="x",b="y"`: the inside of a label set. */
function labelPairs(pairs: [string, string][]): string {
  return pairs.map(([name, value]) => `${name}="${escapeLabel(value)}"`).join(',');
}

interface Traffic {
  newConnections: number;
  forwardPackets: number;
  forwardBytes: number;
  replyPackets: number;
  replyBytes: number;
  droppedPackets: number;
}

/** Adds up the traffic of entries with the same labels (a provider may report per frontend). */
function groupTraffic<T extends TrafficCounters>(
  entries: readonly T[],
  labels: (entry: T) => [string, string][],
): Map<string, Traffic> {
  const groups = new Map<string, Traffic>();
  for (const entry of entries) {
    const key = labelPairs(labels(entry));
    const group = groups.get(key);
    if (group) {
      group.newConnections += Number(entry.newConnections);
      group.forwardPackets += Number(entry.forwardPackets);
      group.forwardBytes += Number(entry.forwardBytes);
      group.replyPackets += Number(entry.replyPackets);
      group.replyBytes += Number(entry.replyBytes);
      group.droppedPackets += Number(entry.droppedPackets);
    } else {
      groups.set(key, {
        newConnections: Number(entry.newConnections),
        forwardPackets: Number(entry.forwardPackets),
        forwardBytes: Number(entry.forwardBytes),
        replyPackets: Number(entry.replyPackets),
        replyBytes: Number(entry.replyBytes),
        droppedPackets: Number(entry.droppedPackets),
      });
    }
  }
  return groups;
}

/** Writes the text format: one family at a time, a HELP and TYPE line, then its samples. */
class Exposition {
  private readonly parts: string[] = [];

  family(name: string, type: 'counter' | 'gauge', help: string): void {
    this.parts.push(`# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`);
  }

  sample(name: string, labels: string, value: number): void {
    this.parts.push(labels === '' ? `${name} ${value}\n` : `${name}{${labels}} ${value}\n`);
  }

  text(): string {
    return this.parts.join('');
  }
}

function writeTraffic(
  out: Exposition,
  prefix: string,
  what: string,
  groups: Map<string, Traffic>,
  withDrops: boolean,
): void {
  out.family(
    `${prefix}_new_connections_total`,
    'counter',
    `New connections (flows) the bpf data plane sent to a backend, per ${what}`,
  );
  for (const [labels, t] of groups) out.sample(`${prefix}_new_connections_total`, labels, t.newConnections);
  for (const [unit, forward, reply] of [
    ['packets', 'forwardPackets', 'replyPackets'],
    ['bytes', 'forwardBytes', 'replyBytes'],
  ] as const) {
    const name = `${prefix}_${unit}_total`;
    out.family(
      name,
      'counter',
      `${unit === 'packets' ? 'Packets' : 'Bytes'} of a ${what} translated by the bpf data plane (forward: client to backend; reply: back)`,
    );
    for (const [labels, t] of groups) {
      out.sample(name, `${labels},direction="forward"`, t[forward]);
      out.sample(name, `${labels},direction="reply"`, t[reply]);
    }
  }
  if (!withDrops) return;
  out.family(
    `${prefix}_drops_total`,
    'counter',
    `Packets to a ${what} dropped or rejected by the bpf data plane`,
  );
  for (const [labels, t] of groups) out.sample(`${prefix}_drops_total`, labels, t.droppedPackets);
}

/** The conntrack garbage collector's totals. */
function writeConntrackGC(out: Exposition, gc: BpfStats['conntrackGC']): void {
  for (const [name, help, value] of [
    ['kube_bpf_proxy_conntrack_gc_runs_total', 'Conntrack garbage collection passes', gc.runs],
    [
      'kube_bpf_proxy_conntrack_gc_scanned_entries_total',
      'Conntrack entries the garbage collector examined',
      gc.scannedEntries,
    ],
    [
      'kube_bpf_proxy_conntrack_gc_deleted_entries_total',
      'Expired conntrack entries the garbage collector deleted',
      gc.deletedEntries,
    ],
    [
      'kube_bpf_proxy_conntrack_gc_duration_seconds_total',
      'Time spent in conntrack garbage collection',
      gc.seconds,
    ],
  ] as const) {
    out.family(name, 'counter', help);
    out.sample(name, '', Number(value));
  }
}

/** The text exposition of one BpfStats reading. */
export function renderBpfStats(stats: BpfStats, maxBackends: number): string {
  const out = new Exposition();
  const services = groupTraffic(stats.services, (s) => [
    ['namespace', s.namespace],
    ['service', s.name],
    ['port_name', s.portName],
    ['protocol', s.protocol],
    ['ip_family', s.family],
    ['frontend', s.frontend],
  ]);
  writeTraffic(out, 'kube_bpf_proxy_service', 'service frontend', services, true);

  const exported = backendsToExport(stats.backends, maxBackends);
  const backends = groupTraffic(exported, (b) => [
    ['ip_family', b.family],
    ['backend', b.backend],
  ]);
  writeTraffic(out, 'kube_bpf_proxy_backend', 'backend', backends, false);
  out.family(
    'kube_bpf_proxy_backends_not_exported',
    'gauge',
    'Backends without per-backend series because of bpf.metricsMaxBackends',
  );
  out.sample('kube_bpf_proxy_backends_not_exported', '', stats.backends.length - exported.length);
  out.family(
    'kube_bpf_proxy_backends_not_counted',
    'gauge',
    'Backends without counters of their own because of bpf.mapSizes.backendCounters (counted in their services)',
  );
  out.sample('kube_bpf_proxy_backends_not_counted', '', stats.backendsNotCounted);

  const byLabel = (
    name: string,
    type: 'counter' | 'gauge',
    help: string,
    label: string,
    values: [string, CounterValue][],
  ) => {
    const sums = new Map<string, number>();
    for (const [value, n] of values) sums.set(value, (sums.get(value) ?? 0) + Number(n));
    out.family(name, type, help);
    for (const [value, n] of sums) out.sample(name, labelPairs([[label, value]]), n);
  };
  byLabel(
    'kube_bpf_proxy_drops_total',
    'counter',
    'Packets the bpf data plane dropped or rejected, by reason',
    'reason',
    stats.drops.map((d) => [d.reason, d.packets]),
  );
  byLabel(
    'kube_bpf_proxy_drop_bytes_total',
    'counter',
    'Bytes the bpf data plane dropped or rejected, by reason',
    'reason',
    stats.drops.map((d) => [d.reason, d.bytes]),
  );
  byLabel(
    'kube_bpf_proxy_fragments_total',
    'counter',
    'IPv4 and IPv6 fragments of TCP/UDP datagrams the bpf tc programs saw, by event (later_unknown: passed untouched)',
    'event',
    stats.fragments.map((f) => [f.event, f.packets]),
  );
  byLabel(
    'kube_bpf_proxy_map_entries',
    'gauge',
    'Entries in a BPF map',
    'map',
    stats.maps.map((m) => [m.name, m.entries]),
  );
  byLabel(
    'kube_bpf_proxy_map_capacity',
    'gauge',
    'Maximum entries of a BPF map (max_entries)',
    'map',
    stats.maps.map((m) => [m.name, m.capacity]),
  );
  byLabel(
    'kube_bpf_proxy_conntrack_entries',
    'gauge',
    'Connections tracked by the bpf data plane',
    'ip_family',
    stats.conntrackEntries.map((c) => [c.family, c.entries]),
  );

  writeConntrackGC(out, stats.conntrackGC);
  return out.text();
}

export class BpfMetrics {
  private text = '';

  constructor(
    private readonly provider: BpfStatsProvider,
    /** bpf.metricsMaxBackends: per-backend series for at most this many backends (0 = none). */
    private readonly maxBackends: number,
    private readonly log: Logger,
  ) {}

  /** Reads the provider; on a read error the previous values stay. */
  async refresh(): Promise<void> {
    try {
      this.text = renderBpfStats(await this.provider.read(), this.maxBackends);
    } catch (err) {
      this.log.warn({ err }, 'reading the bpf counters failed; serving the previous values');
    }
  }

  /** The series of the last successful read, in the text format. */
  exposition(): string {
    return this.text;
  }
}
