// Writes a plan into the BPF maps in the publication order of DESIGN.md, so a packet never sees a
// half-written service:
//   1. backends (before anything names them), with their counters zeroed when the id is new;
//   2. the complete new slot generation of every changed service, in one batch;
//   3. Maglev tables: a fresh inner map per changed table, swapped in with one outer-map update;
//   4. affinity matches and source ranges that are new;
//   5. the frontend values (the flip to the new generation), new frontends, removed frontends;
//   6. after a grace period: the old generation's slots and every other entry nothing uses now.
// Incremental: the writer mirrors what the maps hold (read back from the pinned maps at start-up
// or after a failed write) and writes only the difference. A service whose entries do not fit
// (map full) keeps its previous state and is reported; the others are written.

import { joinHostPort } from '../../proxy/ip.js';
import { buildMaglevTable, MAGLEV_HASH_SEED } from './maglev.js';
import type { BpfPlan, PlannedService } from './plan.js';
import { frontendName } from './plan.js';
import {
  type AffinityMatch,
  type BackendEntry,
  type BackendSet,
  type FrontendEntry,
  type FrontendValue,
  type MaglevKey,
  MapFullError,
  type MapStore,
  type SlotEntry,
  type SlotKey,
  type SourceRange,
  type StoredState,
} from './store.js';

export interface WriterOptions {
  maglevTableSize: number;
  maglevSeed?: number;
  /** How long removed entries stay after the flip (programs that read the old value finish). */
  graceMs: number;
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
}

export interface ServiceFailure {
  servicePortName: string;
  error: string;
}

export interface ApplyResult {
  /** Entries written or deleted now (deferred deletions are counted when they run). */
  written: number;
  deleted: number;
  maglevTables: number;
  /** Service ports left at their previous state because a map is full. */
  failures: ServiceFailure[];
  /** Service ports programmed without something they asked for (a Maglev table). */
  degraded: ServiceFailure[];
}

/** The exact contents of the maps the writer owns. */
interface Mirror {
  frontends: Map<string, FrontendEntry>;
  slots: Map<string, SlotEntry>;
  backends: Map<number, BackendEntry>;
  maglev: Map<string, { key: MaglevKey; signature: string }>;
  affinityMatches: Map<string, AffinityMatch>;
  sourceRanges: Map<string, SourceRange>;
}

interface Deferred {
  dueMs: number;
  slots: SlotKey[];
  maglev: MaglevKey[];
  affinityMatches: AffinityMatch[];
  sourceRanges: SourceRange[];
  backends: BackendEntry[];
}

const slotId = (k: SlotKey) => `${k.serviceId}/${k.gen}/${k.slot}`;
const maglevId = (k: MaglevKey) => `${k.serviceId}/${k.set}`;
const affinityId = (m: AffinityMatch) => `${m.serviceId}/${m.backendId}`;
const rangeId = (r: SourceRange) => `${r.serviceId}/${r.cidr}`;
const maglevSignature = (size: number, ids: readonly number[]) =>
  `${size}:${[...ids].sort((a, b) => a - b).join(',')}`;

function sameValue(a: FrontendValue, b: FrontendValue): boolean {
  return (Object.keys(a) as (keyof FrontendValue)[]).every((k) => a[k] === b[k]);
}

function sameBackend(a: BackendEntry, b: BackendEntry): boolean {
  return (
    a.family === b.family &&
    a.address === b.address &&
    a.port === b.port &&
    a.isLocal === b.isLocal &&
    a.terminating === b.terminating
  );
}

/** Everything one planned service puts in the maps. */
interface ServiceEntries {
  service: PlannedService;
  frontends: FrontendEntry[];
  slots: SlotEntry[];
  maglev: { key: MaglevKey; signature: string; backendIds: number[] }[];
  affinityMatches: AffinityMatch[];
  sourceRanges: SourceRange[];
  /** True when the mirror has no frontend of this service id yet: its counters start at zero. */
  isNew: boolean;
}

export class MapWriter {
  private mirror: Mirror | null = null;
  private deferred: Deferred[] = [];
  private readonly now: () => number;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(
    private readonly store: MapStore,
    private readonly options: WriterOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
  }

  /**
   * Reads the maps back into the mirror. Returns the ids they hold, to seed the allocators: service
   * ids by their ClusterIP frontend's name, backend ids by "ip:port".
   */
  restore(): { serviceIds: [string, number][]; backendIds: [string, number][] } {
    const state = this.store.read();
    this.mirror = mirrorOf(state, this.options.maglevTableSize);
    this.deferred = [];
    const serviceIds: [string, number][] = [];
    for (const f of state.frontends) {
      if (f.value.kind === 'ClusterIP') serviceIds.push([frontendName(f.key), f.value.serviceId]);
    }
    const backendIds = state.backends.map((b): [string, number] => [joinHostPort(b.address, b.port), b.id]);
    return { serviceIds, backendIds };
  }

  /** Deletions whose grace period has passed; `force` runs them all now. Returns how many entries went. */
  flushDeferred(force = false): number {
    const mirror = this.mirror;
    if (!mirror) {
      this.deferred = [];
      return 0;
    }
    const now = this.now();
    let deleted = 0;
    const keep: Deferred[] = [];
    try {
      deleted = this.deleteDue(mirror, now, force, keep);
    } catch (err) {
      this.mirror = null;
      throw err;
    }
    this.deferred = keep;
    return deleted;
  }

  private deleteDue(mirror: Mirror, now: number, force: boolean, keep: Deferred[]): number {
    let deleted = 0;
    for (const d of this.deferred) {
      if (!force && d.dueMs > now) {
        keep.push(d);
        continue;
      }
      // Slots and tables first, backends last: nothing may name a backend that is gone.
      if (d.slots.length) this.store.deleteSlots(d.slots);
      for (const k of d.slots) mirror.slots.delete(slotId(k));
      if (d.maglev.length) this.store.deleteMaglev(d.maglev);
      for (const k of d.maglev) mirror.maglev.delete(maglevId(k));
      if (d.affinityMatches.length) this.store.deleteAffinityMatches(d.affinityMatches);
      for (const m of d.affinityMatches) mirror.affinityMatches.delete(affinityId(m));
      if (d.sourceRanges.length) this.store.deleteSourceRanges(d.sourceRanges);
      for (const r of d.sourceRanges) mirror.sourceRanges.delete(rangeId(r));
      if (d.backends.length) this.store.deleteBackends(d.backends);
      for (const b of d.backends) mirror.backends.delete(b.id);
      deleted +=
        d.slots.length +
        d.maglev.length +
        d.affinityMatches.length +
        d.sourceRanges.length +
        d.backends.length;
    }
    return deleted;
  }

  /** When the next deferred deletion is due (ms since the epoch of `now`), or null. */
  nextDeferredDue(): number | null {
    return this.deferred.length ? Math.min(...this.deferred.map((d) => d.dueMs)) : null;
  }

  /**
   * Brings the maps to the plan. Throws on a failure other than a full map; the mirror is then
   * read back from the maps before the next apply.
   */
  async apply(plan: BpfPlan): Promise<ApplyResult> {
    if (!this.mirror) this.restore();
    // Entries deleted by the previous apply must be gone before generations flip again.
    const due = this.nextDeferredDue();
    if (due !== null && due > this.now()) await this.sleep(due - this.now());
    const result: ApplyResult = { written: 0, deleted: 0, maglevTables: 0, failures: [], degraded: [] };
    try {
      result.deleted = this.flushDeferred(true);
      this.write(plan, result);
    } catch (err) {
      this.mirror = null;
      throw err;
    }
    return result;
  }

  private write(plan: BpfPlan, result: ApplyResult): void {
    const mirror = this.mirror!;
    const backendsById = new Map(plan.backends.map((b) => [b.id, b]));
    const liveGen = new Map<number, number>();
    for (const f of mirror.frontends.values()) liveGen.set(f.value.serviceId, f.value.gen);
    const wanted = plan.services.map((s) =>
      this.entriesOf(s, mirror, liveGen.get(s.serviceId), backendsById),
    );
    const failed = new Set<PlannedService>();
    const fail = (e: ServiceEntries, err: unknown) => {
      if (!(err instanceof MapFullError)) throw err;
      failed.add(e.service);
      result.failures.push({ servicePortName: e.service.servicePortName, error: err.message });
    };
    const live = () => wanted.filter((e) => !failed.has(e.service));

    // 1. Backends.
    const backendsOf = (e: ServiceEntries): BackendEntry[] => {
      const ids = new Set([...e.service.clusterBackendIds, ...e.service.localBackendIds]);
      return [...ids]
        .map((id) => backendsById.get(id)!)
        .map((b) => ({
          id: b.id,
          family: b.family,
          address: b.address,
          port: b.port,
          isLocal: b.isLocal,
          terminating: b.terminating,
        }));
    };
    this.inBatches(live(), fail, (group) => {
      const changed = new Map<number, BackendEntry>();
      for (const e of group) {
        for (const b of backendsOf(e)) {
          const known = mirror.backends.get(b.id);
          if (!known || !sameBackend(known, b)) changed.set(b.id, b);
        }
      }
      if (changed.size === 0) return;
      const entries = [...changed.values()];
      const fresh = entries.filter((b) => !mirror.backends.has(b.id)).map((b) => b.id);
      if (fresh.length) this.store.resetBackendStats(fresh);
      this.store.upsertBackends(entries);
      for (const b of entries) mirror.backends.set(b.id, b);
      result.written += entries.length;
    });

    // 2. The new slot generations, all services in one batch.
    this.inBatches(live(), fail, (group) => {
      const entries = group
        .flatMap((e) => e.slots)
        .filter((s) => mirror.slots.get(slotId(s))?.backendId !== s.backendId);
      if (entries.length === 0) return;
      this.store.upsertSlots(entries);
      for (const s of entries) mirror.slots.set(slotId(s), s);
      result.written += entries.length;
    });

    // 3. Maglev tables: built only when the set of backends (or M) changed.
    for (const e of live()) {
      for (const m of e.maglev) {
        if (mirror.maglev.get(maglevId(m.key))?.signature === m.signature) continue;
        const members = m.backendIds.map((id) => {
          const b = backendsById.get(id)!;
          return { name: joinHostPort(b.address, b.port), id };
        });
        const table = buildMaglevTable(
          members,
          this.options.maglevTableSize,
          this.options.maglevSeed ?? MAGLEV_HASH_SEED,
        );
        try {
          this.store.setMaglev(m.key, table);
        } catch (err) {
          // Only a new key can overflow the outer map; without a table the datapath picks at
          // random within the set, so the service stays programmed.
          if (!(err instanceof MapFullError)) throw err;
          result.degraded.push({
            servicePortName: e.service.servicePortName,
            error: `${err.message}; ${m.key.set} backends are chosen at random instead of by Maglev`,
          });
          continue;
        }
        mirror.maglev.set(maglevId(m.key), { key: m.key, signature: m.signature });
        result.maglevTables++;
      }
    }

    // 4. Affinity matches and source ranges that are new.
    this.inBatches(live(), fail, (group) => {
      const matches = group
        .flatMap((e) => e.affinityMatches)
        .filter((m) => !mirror.affinityMatches.has(affinityId(m)));
      if (matches.length) this.store.upsertAffinityMatches(matches);
      for (const m of matches) mirror.affinityMatches.set(affinityId(m), m);
      const ranges = group.flatMap((e) => e.sourceRanges).filter((r) => !mirror.sourceRanges.has(rangeId(r)));
      if (ranges.length) this.store.upsertSourceRanges(ranges);
      for (const r of ranges) mirror.sourceRanges.set(rangeId(r), r);
      result.written += matches.length + ranges.length;
    });

    // 5. The flip: frontend values, then frontends nothing plans any more.
    const fresh = live()
      .filter((e) => e.isNew)
      .map((e) => e.service.serviceId);
    if (fresh.length) this.store.resetServiceStats(fresh);
    this.inBatches(live(), fail, (group) => {
      const entries = group
        .flatMap((e) => e.frontends)
        .filter((f) => {
          const known = mirror.frontends.get(frontendName(f.key));
          return !known || !sameValue(known.value, f.value);
        });
      if (entries.length === 0) return;
      this.store.upsertFrontends(entries);
      for (const f of entries) mirror.frontends.set(frontendName(f.key), f);
      result.written += entries.length;
    });
    const keptServiceIds = new Set(plan.services.filter((s) => failed.has(s)).map((s) => s.serviceId));
    const plannedFrontends = new Set(live().flatMap((e) => e.frontends.map((f) => frontendName(f.key))));
    const goneFrontends = [...mirror.frontends.entries()].filter(
      ([name, f]) => !plannedFrontends.has(name) && !keptServiceIds.has(f.value.serviceId),
    );
    if (goneFrontends.length) {
      this.store.deleteFrontends(goneFrontends.map(([, f]) => f.key));
      for (const [name] of goneFrontends) mirror.frontends.delete(name);
      result.deleted += goneFrontends.length;
    }

    // 6. Everything no live frontend needs any more goes after the grace period. A failed
    // service keeps all it had.
    const entries = live();
    const wantedSlots = new Set(entries.flatMap((e) => e.slots.map(slotId)));
    const wantedMaglev = new Set(entries.flatMap((e) => e.maglev.map((m) => maglevId(m.key))));
    const wantedMatches = new Set(entries.flatMap((e) => e.affinityMatches.map(affinityId)));
    const wantedRanges = new Set(entries.flatMap((e) => e.sourceRanges.map(rangeId)));
    const wantedBackends = new Set(
      entries.flatMap((e) => [...e.service.clusterBackendIds, ...e.service.localBackendIds]),
    );
    for (const s of mirror.slots.values())
      if (keptServiceIds.has(s.serviceId)) wantedBackends.add(s.backendId);
    const kept = (serviceId: number) => keptServiceIds.has(serviceId);
    this.deferred.push({
      dueMs: this.now() + this.options.graceMs,
      slots: [...mirror.slots.values()].filter((s) => !wantedSlots.has(slotId(s)) && !kept(s.serviceId)),
      maglev: [...mirror.maglev.values()]
        .map((m) => m.key)
        .filter((k) => !wantedMaglev.has(maglevId(k)) && !kept(k.serviceId)),
      affinityMatches: [...mirror.affinityMatches.values()].filter(
        (m) => !wantedMatches.has(affinityId(m)) && !kept(m.serviceId),
      ),
      sourceRanges: [...mirror.sourceRanges.values()].filter(
        (r) => !wantedRanges.has(rangeId(r)) && !kept(r.serviceId),
      ),
      backends: [...mirror.backends.values()].filter((b) => !wantedBackends.has(b.id)),
    });
  }

  /** Runs `write` over all services at once; when a map is full, once per service to find who fits. */
  private inBatches(
    entries: ServiceEntries[],
    fail: (e: ServiceEntries, err: unknown) => void,
    write: (group: ServiceEntries[]) => void,
  ): void {
    try {
      write(entries);
    } catch (err) {
      if (!(err instanceof MapFullError)) throw err;
      for (const e of entries) {
        try {
          write([e]);
        } catch (one) {
          fail(e, one);
        }
      }
    }
  }

  private entriesOf(
    service: PlannedService,
    mirror: Mirror,
    /** The generation the service's frontends read now; kept when it already holds the list. */
    current: number | undefined,
    backendsById: ReadonlyMap<number, { address: string; port: number }>,
  ): ServiceEntries {
    const slotList = [...service.clusterBackendIds, ...service.localBackendIds];
    const holds = (gen: number) => {
      if (
        !slotList.every(
          (id, slot) =>
            mirror.slots.get(slotId({ serviceId: service.serviceId, gen, slot }))?.backendId === id,
        )
      ) {
        return false;
      }
      return !mirror.slots.has(slotId({ serviceId: service.serviceId, gen, slot: slotList.length }));
    };
    const gen = current === undefined ? 0 : holds(current) ? current : current ^ 1;
    const slots = slotList.map(
      (backendId, slot): SlotEntry => ({ serviceId: service.serviceId, slot, gen, backendId }),
    );

    const value = (f: PlannedService['frontends'][number]): FrontendValue => ({
      serviceId: service.serviceId,
      count: service.clusterBackendIds.length,
      localCount: service.localBackendIds.length,
      gen,
      scheduler: service.scheduler,
      kind: f.kind,
      externalPolicyLocal: service.externalPolicyLocal,
      internalPolicyLocal: service.internalPolicyLocal,
      affinityTimeoutSeconds: service.affinityTimeoutSeconds,
      checksSourceRanges: f.checksSourceRanges,
      noEndpoints: service.noEndpoints,
    });

    const maglev: ServiceEntries['maglev'] = [];
    if (service.scheduler === 'maglev') {
      const sets: [BackendSet, number[]][] = [
        ['cluster', service.clusterBackendIds],
        ['local', service.localBackendIds],
      ];
      for (const [set, ids] of sets) {
        if (ids.length === 0) continue;
        for (const id of ids)
          if (!backendsById.has(id)) throw new Error(`plan names backend ${id} it does not hold`);
        maglev.push({
          key: { serviceId: service.serviceId, set },
          signature: maglevSignature(this.options.maglevTableSize, ids),
          backendIds: ids,
        });
      }
    }
    const affinityMatches =
      service.affinityTimeoutSeconds > 0
        ? [...new Set(slotList)].map((backendId) => ({ backendId, serviceId: service.serviceId }))
        : [];
    const sourceRanges = service.sourceRanges.map((cidr) => ({
      serviceId: service.serviceId,
      family: service.family,
      cidr,
    }));
    return {
      service,
      frontends: service.frontends.map((f) => ({ key: f.key, value: value(f) })),
      slots,
      maglev,
      affinityMatches,
      sourceRanges,
      isNew: current === undefined,
    };
  }
}

function mirrorOf(state: StoredState, maglevTableSize: number): Mirror {
  return {
    frontends: new Map(state.frontends.map((f) => [frontendName(f.key), f])),
    slots: new Map(state.slots.map((s) => [slotId(s), s])),
    backends: new Map(state.backends.map((b) => [b.id, b])),
    maglev: new Map(
      state.maglev.map((m) => [
        maglevId(m.key),
        // A table of another size is rewritten: its signature cannot match.
        { key: m.key, signature: maglevSignature(m.size === maglevTableSize ? m.size : -1, m.backendIds) },
      ]),
    ),
    affinityMatches: new Map(state.affinityMatches.map((m) => [affinityId(m), m])),
    sourceRanges: new Map(state.sourceRanges.map((r) => [rangeId(r), r])),
  };
}
