// The bpf data plane's conntrack work, in the background: periodic GC passes over the four
// conntrack maps (the walk itself is conntrack-gc.ts), the deletion of UDP flows towards backends
// that left, as kube-proxy does, and the quarantine of ids that flows pinned at start still name.

import type { Logger } from '../../logger.js';
import {
  type ConntrackGcStats,
  type ConntrackTimeouts,
  collectConntrack,
  readConntrack,
} from './conntrack-gc.js';
import { FragmentSweep } from './fragment-gc.js';
import { IPPROTO } from './frontend-codec.js';
import type { IdAllocator } from './ids.js';
import type { MapName } from './object.js';
import { type BpfPlan, plannedFrontend } from './plan.js';
import { SerialQueue } from './serial-queue.js';

/** The conntrack maps GC walks, both families. */
export const CONNTRACK_MAPS = ['ct4Tcp', 'ct4Any', 'ct6Tcp', 'ct6Any'] as const;
type ConntrackMap = (typeof CONNTRACK_MAPS)[number];
/** The fragment maps GC sweeps, both families. */
const FRAGMENT_MAPS = ['fragments4', 'fragments6'] as const;
type FragmentMap = (typeof FRAGMENT_MAPS)[number];

/** What the GC passes so far did, and each map's entries after its last pass. */
export interface ConntrackGcTotals {
  runs: number;
  scanned: number;
  deleted: number;
  seconds: number;
  entries: Record<ConntrackMap | FragmentMap, number>;
}

export class ConntrackWork {
  readonly totals: ConntrackGcTotals = {
    runs: 0,
    scanned: 0,
    deleted: 0,
    seconds: 0,
    entries: { ct4Tcp: 0, ct4Any: 0, ct6Tcp: 0, ct6Any: 0, fragments4: 0, fragments6: 0 },
  };
  /** The fragment maps' sweeps (fragment-gc.ts), one pass with each conntrack GC pass. */
  private readonly fragmentSweeps: Record<FragmentMap, FragmentSweep>;
  /** The UDP frontends' "serviceId/backendId" pairs, in all and by frontend name. */
  private readonly udpPairs = new Set<string>();
  private readonly udpPairsOf = new Map<string, string[]>();
  private readonly queue = new SerialQueue();

  constructor(
    private readonly fd: Record<MapName, number>,
    /** The GC's timeouts: the defaults with conntrack.tcpEstablishedTimeout (bpfConntrackTimeouts). */
    readonly timeouts: ConntrackTimeouts,
    private readonly log: Logger,
  ) {
    this.fragmentSweeps = {
      fragments4: new FragmentSweep(fd.fragments4),
      fragments6: new FragmentSweep(fd.fragments6),
    };
  }

  /** Ids released by the previous run are unknown now, but tracked flows may still name them:
   * none is reused before those flows could have expired. */
  quarantineTrackedIds(ids: { serviceIds: IdAllocator; backendIds: IdAllocator }): void {
    const until = Date.now() + this.timeouts.tcpEstablishedSeconds * 1000;
    for (const map of CONNTRACK_MAPS) {
      for (const r of readConntrack(this.fd[map])) {
        ids.serviceIds.quarantine(r.svcId, until);
        ids.backendIds.quarantine(r.backendId, until);
      }
    }
  }

  /** One GC pass over both families' conntrack and fragment maps, after any pass already under way. */
  collect(): Promise<ConntrackGcStats[]> {
    return this.queue.run(async () => {
      const passes: ConntrackGcStats[] = [];
      for (const map of CONNTRACK_MAPS) {
        const pass = await collectConntrack(this.fd[map], this.timeouts);
        this.count(pass);
        this.totals.entries[map] = pass.scanned - pass.deletedEntries;
        passes.push(pass);
      }
      for (const map of FRAGMENT_MAPS) this.totals.entries[map] = this.fragmentSweeps[map].sweep().left;
      return passes;
    });
  }

  /**
   * kube-proxy deletes UDP conntrack entries towards endpoints that left: so do we. The UDP
   * frontends' {service, backend} pairs are kept per frontend, so a scoped sync looks at the
   * frontends in its scope alone.
   */
  cleanStaleUdp(plan: BpfPlan, scope: ReadonlySet<string> | null): void {
    if (this.notePairs(plan, scope)) this.deleteStaleUdp();
  }

  /** Resolves once a pass under way (which still uses the maps) is done. */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  /** Records the planned UDP pairs; true when a pair was lost. */
  private notePairs(plan: BpfPlan, scope: ReadonlySet<string> | null): boolean {
    const pairsOf = (f: BpfPlan['frontends'][number] | undefined) =>
      f?.key.protocol === 'UDP' ? f.backendIds.map((b) => `${f.serviceId}/${b}`) : [];
    let lost = false;
    const update = (name: string, now: string[]) => {
      const before = this.udpPairsOf.get(name) ?? [];
      for (const p of before) this.udpPairs.delete(p);
      for (const p of now) this.udpPairs.add(p);
      if (now.length > 0) this.udpPairsOf.set(name, now);
      else this.udpPairsOf.delete(name);
      const kept = new Set(now);
      if (before.some((p) => !kept.has(p))) lost = true;
    };
    if (scope) {
      for (const name of scope) update(name, pairsOf(plannedFrontend(plan, name)));
    } else {
      const planned = new Set(plan.frontends.map((f) => f.name));
      for (const name of this.udpPairsOf.keys()) if (!planned.has(name)) update(name, []);
      for (const f of plan.frontends) update(f.name, pairsOf(f));
    }
    return lost;
  }

  /** In the background, as a GC pass: the sync does not wait for a walk of the conntrack map. */
  private deleteStaleUdp(): void {
    // What the pairs are when the pass runs: a pair that came back meanwhile keeps its flows.
    const pairs = this.udpPairs;
    this.queue
      .run(async () => {
        const passes: ConntrackGcStats[] = [];
        for (const map of ['ct4Any', 'ct6Any'] as const)
          passes.push(
            await collectConntrack(
              this.fd[map],
              this.timeouts,
              (r) => r.proto === IPPROTO.UDP && !pairs.has(`${r.svcId}/${r.backendId}`),
            ),
          );
        return passes;
      })
      .then(
        (passes) => {
          for (const stats of passes) {
            this.count(stats);
            if (stats.staleUdp)
              this.log.debug({ flows: stats.staleUdp }, 'deleted UDP conntrack entries of removed backends');
          }
        },
        (err: unknown) =>
          this.log.error({ err }, 'deleting UDP conntrack entries of removed backends failed'),
      );
  }

  private count(stats: ConntrackGcStats): void {
    this.totals.runs++;
    this.totals.scanned += stats.scanned;
    this.totals.deleted += stats.deletedEntries;
    this.totals.seconds += stats.durationMs / 1000;
  }
}
