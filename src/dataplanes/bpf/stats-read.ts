// What the metrics read from the bpf data plane once per scrape (metrics/bpf.ts renders it): the
// per-CPU counters of each programmed service and backend, kept monotonic across id changes, the
// drop and fragment counters, each map's fill and the conntrack GC's totals.

import type { IPFamily } from '../../model/types.js';
import type { BpfStats, TrafficCounters } from '../stats.js';
import type { ConntrackGcTotals } from './conntrack-work.js';
import type { KernelStore } from './kernel-store.js';
import { DROP_REASON, MAPS, type TrafficStats } from './layout.js';
import type { MapName } from './object.js';
import type { BpfPlan } from './plan.js';

const ZERO: TrafficCounters = {
  newConnections: 0n,
  forwardPackets: 0n,
  forwardBytes: 0n,
  replyPackets: 0n,
  replyBytes: 0n,
  droppedPackets: 0n,
};

function toCounters(s: TrafficStats): TrafficCounters {
  return {
    newConnections: s.newConns,
    forwardPackets: s.fwdPackets,
    forwardBytes: s.fwdBytes,
    replyPackets: s.replyPackets,
    replyBytes: s.replyBytes,
    droppedPackets: s.drops,
  };
}

function addCounters(a: TrafficCounters, b: TrafficCounters): TrafficCounters {
  const out = { ...a };
  for (const k of Object.keys(out) as (keyof TrafficCounters)[]) out[k] = BigInt(a[k]) + BigInt(b[k]);
  return out;
}

/** camelCase enum names as the metrics' snake_case label values. */
const snakeCase = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/**
 * Keeps a counter series monotonic while the id behind it changes (a frontend re-created under
 * a new id, or an id's counters zeroed on reuse): what the old id had counted is carried over.
 */
export class MonotonicCounters {
  private readonly series = new Map<string, { id: number; last: TrafficCounters; base: TrafficCounters }>();

  value(series: string, id: number, raw: TrafficCounters): TrafficCounters {
    const known = this.series.get(series);
    let base = known?.base ?? ZERO;
    if (known && (known.id !== id || BigInt(raw.forwardPackets) < BigInt(known.last.forwardPackets))) {
      base = addCounters(base, known.last);
    }
    this.series.set(series, { id, last: raw, base });
    return addCounters(base, raw);
  }
}

/** What the data plane knows beside the maps when the metrics read it. */
export interface StatsSources {
  plan: BpfPlan | null;
  store: KernelStore;
  capacity: Record<MapName, number>;
  gc: ConntrackGcTotals;
  uncountedBackends: number;
}

export class BpfStatsReader {
  private readonly services = new MonotonicCounters();
  private readonly backends = new MonotonicCounters();

  read(src: StatsSources): BpfStats {
    const { gc } = src;
    return {
      services: this.serviceTraffic(src),
      backends: this.backendTraffic(src),
      backendsNotCounted: src.uncountedBackends,
      drops: dropCounters(src.store),
      fragments: Object.entries(src.store.fragmentStats() ?? {}).map(([event, packets]) => ({
        event: snakeCase(event),
        packets,
      })),
      maps: mapFill(src),
      conntrackEntries: [
        { family: 'IPv4', entries: gc.entries.ct4Tcp + gc.entries.ct4Any },
        { family: 'IPv6', entries: gc.entries.ct6Tcp + gc.entries.ct6Any },
      ],
      conntrackGC: {
        runs: gc.runs,
        scannedEntries: gc.scanned,
        deletedEntries: gc.deleted,
        seconds: gc.seconds,
      },
    };
  }

  private serviceTraffic({ plan, store }: StatsSources): BpfStats['services'] {
    return (plan?.frontends ?? []).map((f) => {
      const raw = store.trafficStats('service', f.serviceId);
      return {
        namespace: f.namespace,
        name: f.serviceName,
        portName: f.portName,
        protocol: f.key.protocol,
        family: f.key.family,
        frontend: f.kind,
        ...this.services.value(f.name, f.serviceId, raw ? toCounters(raw) : ZERO),
      };
    });
  }

  private backendTraffic({ plan, store }: StatsSources): BpfStats['backends'] {
    const out: BpfStats['backends'] = [];
    for (const b of plan?.backends ?? []) {
      const raw = store.trafficStats('backend', b.id);
      if (!raw) continue; // past kbp_best_v1: no series rather than one stuck at zero
      out.push({ family: b.family, backend: b.name, ...this.backends.value(b.name, b.id, toCounters(raw)) });
    }
    return out;
  }
}

function dropCounters(store: KernelStore): BpfStats['drops'] {
  const out: BpfStats['drops'] = [];
  for (const [name, index] of Object.entries(DROP_REASON)) {
    if (index === DROP_REASON.none) continue;
    const d = store.dropStats(index);
    if (d) out.push({ reason: snakeCase(name), packets: d.packets, bytes: d.bytes });
  }
  return out;
}

/** Entries per map as the plan and the last GC passes counted them. */
function mapFill({ plan, capacity, gc }: StatsSources): BpfStats['maps'] {
  const frontends = plan?.frontends ?? [];
  const ofFamily = <T extends { family: IPFamily }>(items: readonly T[] | undefined, family: IPFamily) =>
    (items ?? []).filter((i) => i.family === family).length;
  const entries: Partial<Record<MapName, number>> = {
    svc4: frontends.filter((f) => f.key.family === 'IPv4').length,
    svc6: frontends.filter((f) => f.key.family === 'IPv6').length,
    backends4: ofFamily(plan?.backends, 'IPv4'),
    backends6: ofFamily(plan?.backends, 'IPv6'),
    slots: frontends.reduce((n, f) => n + f.backendIds.length, 0),
    ...gc.entries,
  };
  return (Object.entries(entries) as [MapName, number][]).map(([key, count]) => ({
    name: MAPS[key].name,
    entries: count,
    capacity: capacity[key],
  }));
}
