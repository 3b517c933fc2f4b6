// The bpf data plane's traffic and map metrics (kube_bpf_proxy_*). The data plane implements
// BpfStatsProvider (it reads the per-CPU counter maps, map fill levels and the conntrack GC's
// work); these collectors call it once per scrape and export what it returns. Keeping counters
// monotonic when an id is reused or the agent restarts is the provider's job (it knows the ids);
// entries with equal labels are added up here, so a provider may report per frontend.

import { Counter, Gauge, type Registry } from 'prom-client';
import type { Logger } from '../logger.js';
import type { IPFamily, Protocol } from '../model/types.js';

/** Counters arrive as the maps hold them (u64 as bigint) or already converted. */
export type CounterValue = number | bigint;

export interface TrafficCounters {
  newConnections: CounterValue;
  forwardPackets: CounterValue;
  forwardBytes: CounterValue;
  replyPackets: CounterValue;
  replyBytes: CounterValue;
  /** Packets to this service (or backend) dropped or rejected, for any reason. */
  droppedPackets: CounterValue;
}

export interface ServiceTraffic extends TrafficCounters {
  namespace: string;
  name: string;
  /** "" for an unnamed port. */
  portName: string;
  protocol: Protocol;
  family: IPFamily;
  /** Which entry the packets matched: ClusterIP, NodePort, LoadBalancer or ExternalIP. */
  frontend: string;
}

export interface BackendTraffic extends TrafficCounters {
  family: IPFamily;
  /** "ip:port" ("[ip6]:port"); backends are shared by every service port that selects them. */
  backend: string;
}

export interface BpfStats {
  services: ServiceTraffic[];
  backends: BackendTraffic[];
  /** kbp_drops_v1, by reason name (e.g. "no_endpoints", "source_range"). */
  drops: { reason: string; packets: CounterValue; bytes: CounterValue }[];
  /** Every map the data plane owns, by pinned name. */
  maps: { name: string; entries: number; capacity: number }[];
  conntrackEntries: { family: IPFamily; entries: number }[];
  conntrackGC: {
    runs: CounterValue;
    scannedEntries: CounterValue;
    deletedEntries: CounterValue;
    seconds: number;
  };
}

export interface BpfStatsProvider {
  /** Called once per scrape. */
  read(): BpfStats | Promise<BpfStats>;
}

const SERVICE_LABELS = ['namespace', 'service', 'port_name', 'protocol', 'ip_family', 'frontend'] as const;
const BACKEND_LABELS = ['ip_family', 'backend'] as const;

/** At most `max` backends, chosen by name so the exported set is stable from scrape to scrape. */
export function backendsToExport(backends: readonly BackendTraffic[], max: number): BackendTraffic[] {
  if (backends.length <= max) return [...backends];
  const byName = [...backends].sort((a, b) =>
    a.backend < b.backend ? -1 : a.backend > b.backend ? 1 : a.family.localeCompare(b.family),
  );
  return byName.slice(0, max);
}

export class BpfMetrics {
  private readonly counters;
  private readonly gauges;

  constructor(
    registry: Registry,
    private readonly provider: BpfStatsProvider,
    /** bpf.metricsMaxBackends: per-backend series for at most this many backends (0 = none). */
    private readonly maxBackends: number,
    private readonly log: Logger,
  ) {
    const registers = [registry];
    const counter = <T extends string>(name: string, help: string, labelNames: readonly T[]) =>
      new Counter<T>({ name, help, labelNames, registers });
    const gauge = <T extends string>(name: string, help: string, labelNames: readonly T[]) =>
      new Gauge<T>({ name, help, labelNames, registers });
    const withDirection = [...SERVICE_LABELS, 'direction'] as const;
    const backendWithDirection = [...BACKEND_LABELS, 'direction'] as const;
    this.counters = {
      serviceConnections: counter(
        'kube_bpf_proxy_service_new_connections_total',
        'New connections (flows) the bpf data plane sent to a backend, per service frontend',
        SERVICE_LABELS,
      ),
      servicePackets: counter(
        'kube_bpf_proxy_service_packets_total',
        'Packets of a service frontend translated by the bpf data plane (forward: client to backend; reply: back)',
        withDirection,
      ),
      serviceBytes: counter(
        'kube_bpf_proxy_service_bytes_total',
        'Bytes of a service frontend translated by the bpf data plane (forward: client to backend; reply: back)',
        withDirection,
      ),
      serviceDrops: counter(
        'kube_bpf_proxy_service_drops_total',
        'Packets to a service frontend dropped or rejected by the bpf data plane',
        SERVICE_LABELS,
      ),
      backendConnections: counter(
        'kube_bpf_proxy_backend_new_connections_total',
        'New connections (flows) the bpf data plane sent to a backend',
        BACKEND_LABELS,
      ),
      backendPackets: counter(
        'kube_bpf_proxy_backend_packets_total',
        'Packets to and from a backend translated by the bpf data plane',
        backendWithDirection,
      ),
      backendBytes: counter(
        'kube_bpf_proxy_backend_bytes_total',
        'Bytes to and from a backend translated by the bpf data plane',
        backendWithDirection,
      ),
      drops: counter(
        'kube_bpf_proxy_drops_total',
        'Packets the bpf data plane dropped or rejected, by reason',
        ['reason'],
      ),
      dropBytes: counter(
        'kube_bpf_proxy_drop_bytes_total',
        'Bytes the bpf data plane dropped or rejected, by reason',
        ['reason'],
      ),
      gcRuns: counter('kube_bpf_proxy_conntrack_gc_runs_total', 'Conntrack garbage collection passes', []),
      gcScanned: counter(
        'kube_bpf_proxy_conntrack_gc_scanned_entries_total',
        'Conntrack entries the garbage collector examined',
        [],
      ),
      gcDeleted: counter(
        'kube_bpf_proxy_conntrack_gc_deleted_entries_total',
        'Expired conntrack entries the garbage collector deleted',
        [],
      ),
      gcSeconds: counter(
        'kube_bpf_proxy_conntrack_gc_duration_seconds_total',
        'Time spent in conntrack garbage collection',
        [],
      ),
    };
    this.gauges = {
      backendsNotExported: gauge(
        'kube_bpf_proxy_backends_not_exported',
        'Backends without per-backend series because of bpf.metricsMaxBackends',
        [],
      ),
      mapEntries: gauge('kube_bpf_proxy_map_entries', 'Entries in a BPF map', ['map']),
      mapCapacity: gauge('kube_bpf_proxy_map_capacity', 'Maximum entries of a BPF map (max_entries)', [
        'map',
      ]),
      conntrackEntries: gauge(
        'kube_bpf_proxy_conntrack_entries',
        'Connections tracked by the bpf data plane',
        ['ip_family'],
      ),
    };
  }

  /** Reads the provider and replaces every value; on a read error the previous values stay. */
  async refresh(): Promise<void> {
    let stats: BpfStats;
    try {
      stats = await this.provider.read();
    } catch (err) {
      this.log.warn({ err }, 'reading the bpf counters failed; serving the previous values');
      return;
    }
    const c = this.counters;
    const g = this.gauges;
    for (const metric of [...Object.values(c), ...Object.values(g)]) metric.reset();

    for (const s of stats.services) {
      const labels = {
        namespace: s.namespace,
        service: s.name,
        port_name: s.portName,
        protocol: s.protocol,
        ip_family: s.family,
        frontend: s.frontend,
      };
      addTraffic(s, labels, c.serviceConnections, c.servicePackets, c.serviceBytes);
      c.serviceDrops.inc(labels, Number(s.droppedPackets));
    }
    const exported = backendsToExport(stats.backends, this.maxBackends);
    g.backendsNotExported.set(stats.backends.length - exported.length);
    for (const b of exported) {
      addTraffic(
        b,
        { ip_family: b.family, backend: b.backend },
        c.backendConnections,
        c.backendPackets,
        c.backendBytes,
      );
    }
    for (const drop of stats.drops) {
      c.drops.inc({ reason: drop.reason }, Number(drop.packets));
      c.dropBytes.inc({ reason: drop.reason }, Number(drop.bytes));
    }
    for (const map of stats.maps) {
      g.mapEntries.set({ map: map.name }, map.entries);
      g.mapCapacity.set({ map: map.name }, map.capacity);
    }
    for (const ct of stats.conntrackEntries) g.conntrackEntries.inc({ ip_family: ct.family }, ct.entries);
    c.gcRuns.inc(Number(stats.conntrackGC.runs));
    c.gcScanned.inc(Number(stats.conntrackGC.scannedEntries));
    c.gcDeleted.inc(Number(stats.conntrackGC.deletedEntries));
    c.gcSeconds.inc(stats.conntrackGC.seconds);
  }
}

function addTraffic<T extends string>(
  traffic: TrafficCounters,
  labels: Partial<Record<T, string>>,
  connections: Counter<T>,
  packets: Counter<T | 'direction'>,
  bytes: Counter<T | 'direction'>,
): void {
  const forward = { ...labels, direction: 'forward' } as Partial<Record<T | 'direction', string>>;
  const reply = { ...labels, direction: 'reply' } as Partial<Record<T | 'direction', string>>;
  connections.inc(labels, Number(traffic.newConnections));
  packets.inc(forward, Number(traffic.forwardPackets));
  packets.inc(reply, Number(traffic.replyPackets));
  bytes.inc(forward, Number(traffic.forwardBytes));
  bytes.inc(reply, Number(traffic.replyBytes));
}
