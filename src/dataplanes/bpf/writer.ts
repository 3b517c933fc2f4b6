// Writes a plan into the BPF maps in the publication order of ARCHITECTURE.md, so a packet never sees a
// half-written service:
//   1. backends (before anything names them), with their counters zeroed when the id is new;
//   2. the complete new slot generation of every changed frontend, in one batch;
//   3. Maglev tables, one per backend set, shared by the frontends with that set: a table only
//      this frontend reads has just its changed entries rewritten in place; otherwise a table
//      already holding the set is shared, or a fresh one filled and swapped in (one outer update);
//   4. affinity matches and source ranges that are new;
//   5. the frontend values (the flip to the new generation), new frontends, removed frontends;
//   6. after a grace period: the old generation's slots and every other entry nothing uses now.
// A publication never waits for an earlier one's grace period: a frontend that changes again
// within it gets a generation of its own (there are 256), and an entry wanted again before its
// deletion is due is simply kept.
// Incremental: the writer mirrors what the maps hold (read back from the pinned maps at start-up
// or after a failed write) and writes only the difference. A frontend whose entries do not fit
// (map full) keeps its previous state and is reported; the others are written.

import { joinHostPort } from '../../net/ip.js';
import { entriesOf, type FrontendEntries, rangeId, slotId, slotsOf } from './frontend-entries.js';
import { buildMaglevTable, MAGLEV_HASH_SEED } from './maglev.js';
import type { BpfPlan, PlannedBackend } from './plan.js';
import { plannedBackend, plannedFrontend } from './plan.js';
import {
  type AffinityMatch,
  type BackendEntry,
  type FrontendEntry,
  type FrontendValue,
  type MaglevKey,
  MapFullError,
  type MapStore,
} from './store.js';
import { frontendName } from './types.js';
import { type Mirror, mirrorOf, PendingDeletions } from './writer-state.js';

export interface WriterOptions {
  maglevTableSize: number;
  maglevSeed?: number;
  /** How long removed entries stay after the flip (programs that read the old value finish). */
  graceMs: number;
  now?: () => number;
}

export interface ServiceFailure {
  servicePortName: string;
  error: string;
}

export interface ApplyResult {
  /** Entries written or deleted now (deferred deletions are counted when they run). */
  written: number;
  deleted: number;
  /** Maglev tables built (filled fresh or rewritten in place), and the table entries written. */
  maglevTables: number;
  maglevEntries: number;
  /** Service ports left at their previous state because a map is full. */
  failures: ServiceFailure[];
  /** Service ports programmed without something they asked for (a Maglev table). */
  degraded: ServiceFailure[];
  /** Why every frontend was written though a scope was given; null when none was. */
  widened: string | null;
}

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

/** One write's working state, shared by its six steps. */
interface WriteRun {
  mirror: Mirror;
  scope: ReadonlySet<string> | null;
  backendOf: (id: number) => PlannedBackend | undefined;
  /** The scoped frontends' service ids (before the write; step 6 adds the planned ones); null
   * for a write of every frontend. */
  scopedIds: Set<number> | null;
  /** Service ids of the frontends that did not fit (map full): they keep their previous state. */
  failed: Set<number>;
  fail: (e: FrontendEntries, err: unknown) => void;
  /** The wanted frontends that have not failed so far. */
  live: () => FrontendEntries[];
  result: ApplyResult;
}

/** Whether a service id's entry is wanted by nothing: `wanted` is asked of the frontend with that
 * service id (one at most); a failed frontend keeps everything. */
type UnusedTest = (serviceId: number, wanted: (e: FrontendEntries) => boolean) => boolean;

function unusedTest(entries: readonly FrontendEntries[], failed: ReadonlySet<number>): UnusedTest {
  const byServiceId = new Map(entries.map((e) => [e.planned.serviceId, e]));
  return (serviceId, wanted) => {
    const e = byServiceId.get(serviceId);
    return !(e && wanted(e)) && !failed.has(serviceId);
  };
}

export class MapWriter {
  private mirror: Mirror | null = null;
  private stale = false;
  private pending = new PendingDeletions();
  private readonly now: () => number;

  constructor(
    private readonly store: MapStore,
    private readonly options: WriterOptions,
  ) {
    this.now = options.now ?? Date.now;
  }

  /**
   * Reads the maps back into the mirror. Returns the ids they hold, to seed the allocators: service
   * ids by frontend name, backend ids by "ip:port".
   */
  restore(): { serviceIds: [string, number][]; backendIds: [string, number][] } {
    const state = this.store.read();
    this.mirror = mirrorOf(state, this.options.maglevTableSize);
    this.pending = new PendingDeletions();
    this.stale = false;
    const serviceIds = state.frontends.map((f): [string, number] => [frontendName(f.key), f.value.serviceId]);
    const backendIds = state.backends.map((b): [string, number] => [joinHostPort(b.address, b.port), b.id]);
    return { serviceIds, backendIds };
  }

  /** Deletions whose grace period has passed; `force` runs them all now. Returns how many entries went. */
  flushDeferred(force = false): number {
    const mirror = this.mirror;
    if (!mirror) {
      this.pending = new PendingDeletions();
      return 0;
    }
    try {
      return this.deleteDue(mirror, this.now(), force);
    } catch (err) {
      this.mirror = null;
      throw err;
    }
  }

  private deleteDue(mirror: Mirror, now: number, force: boolean): number {
    const take = <I, K>(m: Map<I, { key: K; dueMs: number }>) => PendingDeletions.take(m, now, force);
    // Slots and tables first, backends last: nothing may name a backend that is gone.
    const slots = take(this.pending.slots);
    if (slots.length) this.store.deleteSlots(slots);
    for (const k of slots) mirror.slots.delete(k);
    const maglev = take(this.pending.maglev);
    if (maglev.length) this.store.deleteMaglev(maglev);
    for (const k of maglev) mirror.maglev.unref(k.serviceId);
    const ranges = take(this.pending.sourceRanges);
    if (ranges.length) this.store.deleteSourceRanges(ranges);
    for (const r of ranges) mirror.sourceRanges.delete(r);
    const backends = take(this.pending.backends);
    if (backends.length) this.store.deleteBackends(backends);
    for (const b of backends) mirror.backends.delete(b.id);
    return slots.length + maglev.length + ranges.length + backends.length;
  }

  /** Makes the next apply read the maps again instead of trusting the mirror (full syncs: repairs
   * entries someone else changed or deleted). */
  resync(): void {
    this.stale = true;
  }

  /** When the next deferred deletion is due (ms since the epoch of `now`), or null. */
  nextDeferredDue(): number | null {
    return this.pending.nextDue();
  }

  /**
   * Brings the maps to the plan, at once: deletions an earlier apply left pending wait out their
   * own grace period. Throws on a failure other than a full map; the mirror is then read back
   * from the maps before the next apply.
   */
  async apply(plan: BpfPlan, scope: ReadonlySet<string> | null = null): Promise<ApplyResult> {
    // A mirror read back now may hold anything: only a write of every frontend brings it to the plan.
    const readBack = !this.mirror || this.stale;
    const whole = scope === null || readBack;
    if (readBack) this.restore();
    const result: ApplyResult = {
      written: 0,
      deleted: 0,
      maglevTables: 0,
      maglevEntries: 0,
      failures: [],
      degraded: [],
      widened:
        scope !== null && readBack
          ? 'bpf writer: the maps were read back after a failed or partial write'
          : null,
    };
    try {
      result.deleted = this.flushDeferred();
      this.write(plan, whole ? null : scope, result);
    } catch (err) {
      this.mirror = null;
      throw err;
    }
    // A batch that overflowed may have written part of its entries: read the maps again next time.
    if (result.failures.length > 0) this.stale = true;
    return result;
  }

  /** `scope`: the only frontends (by name) that may differ from the mirror; null for all of them.
   * The six steps of the publication order (this file's opening comment), one method each. */
  private write(plan: BpfPlan, scope: ReadonlySet<string> | null, result: ApplyResult): void {
    const run = this.startWrite(plan, scope, result);
    this.writeBackends(run);
    this.writeSlots(run);
    this.writeMaglevTables(run);
    this.writePairsAndRanges(run);
    this.flipFrontends(run);
    this.retireUnused(run);
  }

  /** What the write wants, with the pending deletions of anything wanted again cancelled. */
  private startWrite(plan: BpfPlan, scope: ReadonlySet<string> | null, result: ApplyResult): WriteRun {
    const mirror = this.mirror!;
    const pending = this.pending;
    // A scoped write looks its few frontends and backends up in the plan's sorted lists.
    const allBackends = scope ? null : new Map(plan.backends.map((b) => [b.id, b]));
    const backendOf = (id: number) => (allBackends ? allBackends.get(id) : plannedBackend(plan, id));
    const inScope = scope
      ? [...scope].sort().flatMap((name) => plannedFrontend(plan, name) ?? [])
      : plan.frontends;
    const wanted = inScope.map((f) =>
      entriesOf(f, mirror, pending.slots, backendOf, this.options.maglevTableSize),
    );
    // Whatever is wanted again stays: its pending deletion is cancelled.
    if (pending.slots.size + pending.sourceRanges.size + pending.maglev.size > 0) {
      for (const e of wanted) {
        for (const s of slotsOf(e)) pending.slots.delete(slotId(s));
        for (const r of e.sourceRanges) pending.sourceRanges.delete(rangeId(r));
        if (e.maglev) pending.maglev.delete(e.planned.serviceId);
      }
    }
    for (const id of [...pending.backends.keys()])
      if (backendOf(id) !== undefined) pending.backends.delete(id);
    // The service ids the scoped frontends held before this write: their old entries may go.
    const scopedIds = scope
      ? new Set([...scope].flatMap((name) => mirror.frontends.get(name)?.value.serviceId ?? []))
      : null;
    const failed = new Set<number>();
    const fail = (e: FrontendEntries, err: unknown) => {
      if (!(err instanceof MapFullError)) throw err;
      failed.add(e.planned.serviceId);
      result.failures.push({
        servicePortName: e.planned.servicePortName,
        error: `${e.planned.name}: ${err.message}`,
      });
    };
    const live = () => (failed.size === 0 ? wanted : wanted.filter((e) => !failed.has(e.planned.serviceId)));
    return { mirror, scope, backendOf, scopedIds, failed, fail, live, result };
  }

  /** 1. Backends. A backend's flags (local, terminating) sum up every frontend naming it: a
   * scoped write also refreshes those the scoped frontends stopped naming but others still do. */
  private writeBackends(run: WriteRun): void {
    const { mirror, backendOf, scopedIds, result } = run;
    if (scopedIds) {
      const shared = [...scopedIds]
        .flatMap((id) => mirror.slots.ofService(id))
        .flatMap((s): BackendEntry[] => {
          const b = backendOf(s.backendId);
          const known = mirror.backends.get(s.backendId);
          return b && known && !sameBackend(known, b)
            ? [{ ...known, isLocal: b.isLocal, terminating: b.terminating }]
            : [];
        });
      if (shared.length) {
        this.store.upsertBackends(shared);
        for (const b of shared) mirror.backends.set(b.id, b);
        result.written += shared.length;
      }
    }
    this.inBatches(run.live(), run.fail, (group) => {
      const changed = new Map<number, BackendEntry>();
      for (const e of group) {
        for (const id of e.planned.backendIds) {
          const b = backendOf(id)!;
          const entry: BackendEntry = {
            id,
            family: b.family,
            address: b.address,
            port: b.port,
            isLocal: b.isLocal,
            terminating: b.terminating,
          };
          const known = mirror.backends.get(id);
          if (!known || !sameBackend(known, entry)) changed.set(id, entry);
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
  }

  /** 2. The new slot generations, all frontends in one batch. */
  private writeSlots({ mirror, live, fail, result }: WriteRun): void {
    this.inBatches(live(), fail, (group) => {
      const entries = group.flatMap(slotsOf).filter((s) => mirror.slots.backendIdAt(s) !== s.backendId);
      if (entries.length === 0) return;
      // Every backend a slot names was written in step 1 (or before).
      this.store.upsertSlots(entries.map((s) => ({ ...s, backend: mirror.backends.get(s.backendId)! })));
      for (const s of entries) mirror.slots.set(s);
      result.written += entries.length;
    });
  }

  /** 3. Maglev tables. */
  private writeMaglevTables({ mirror, live, backendOf, result }: WriteRun): void {
    const wantsBySvc = new Map(
      live().flatMap((e) => (e.maglev ? [[e.planned.serviceId, e.maglev.signature]] : [])),
    );
    for (const e of live()) {
      if (e.maglev) this.writeMaglev(e, e.maglev, mirror, backendOf, wantsBySvc, result);
    }
  }

  /** 4. Affinity matches and source ranges that are new. */
  private writePairsAndRanges({ mirror, live, fail, result }: WriteRun): void {
    this.inBatches(live(), fail, (group) => {
      // Every service's {backend, service} pairs, not only those with affinity: the datapath
      // also asks whether a tracked flow's backend still serves its service (SYN re-selection).
      const matches: AffinityMatch[] = [];
      for (const { planned } of group)
        for (const backendId of planned.backendIds)
          if (!mirror.affinityMatches.hasPair(planned.serviceId, backendId))
            matches.push({ backendId, serviceId: planned.serviceId });
      if (matches.length) this.store.upsertAffinityMatches(matches);
      for (const m of matches) mirror.affinityMatches.set(m);
      const ranges = group.flatMap((e) => e.sourceRanges).filter((r) => !mirror.sourceRanges.has(r));
      if (ranges.length) this.store.upsertSourceRanges(ranges);
      for (const r of ranges) mirror.sourceRanges.set(r);
      result.written += matches.length + ranges.length;
    });
  }

  /** 5. The flip: frontend values, then the frontends nothing plans any more. */
  private flipFrontends(run: WriteRun): void {
    const { mirror, live, fail, result } = run;
    const fresh = live()
      .filter((e) => e.isNew)
      .map((e) => e.planned.serviceId);
    if (fresh.length) this.store.resetServiceStats(fresh);
    // Internal-scope entries before the `all` entries: an `all` entry that sends pods to its
    // internal sibling (KBP_SVC_F_TWO_SCOPES) must never be live without it, or pods would be
    // served by the external list (eTP=Local: only the local endpoints, or a drop) meanwhile.
    // A sibling that goes is deleted after its `all` entry stopped naming it (below).
    const flip = (scope: 'internal' | 'all') =>
      this.inBatches(
        live().filter((e) => (e.frontend.key.scope === 'internal') === (scope === 'internal')),
        fail,
        (group) => {
          const entries = group
            .map((e) => e.frontend)
            .filter((f) => {
              const known = mirror.frontends.get(frontendName(f.key));
              return !known || !sameValue(known.value, f.value);
            });
          if (entries.length === 0) return;
          this.store.upsertFrontends(entries);
          for (const f of entries) mirror.frontends.set(frontendName(f.key), f);
          result.written += entries.length;
        },
      );
    flip('internal');
    flip('all');
    this.deleteGoneFrontends(run);
  }

  private deleteGoneFrontends({ mirror, scope, live, failed, result }: WriteRun): void {
    const planned = new Set(live().map((e) => e.planned.name));
    const candidates = scope
      ? [...scope].flatMap((name): [string, FrontendEntry][] => {
          const f = mirror.frontends.get(name);
          return f ? [[name, f]] : [];
        })
      : [...mirror.frontends.entries()];
    // `all` entries before internal ones: an `all` entry that goes must not name a sibling
    // already gone, even for the microseconds between two elements of the batch.
    const gone = candidates
      .filter(([name, f]) => !planned.has(name) && !failed.has(f.value.serviceId))
      .sort(([, a], [, b]) => Number(a.key.scope === 'internal') - Number(b.key.scope === 'internal'));
    if (gone.length) {
      this.store.deleteFrontends(gone.map(([, f]) => f.key));
      for (const [name] of gone) mirror.frontends.delete(name);
      result.deleted += gone.length;
    }
  }

  /**
   * 6. After the grace period, everything no frontend needs any more. A frontend that failed
   * keeps all it had. A scoped write looks only at the entries of the scoped frontends' service
   * ids; a backend goes when the plan (which counts every frontend's references) has dropped it.
   * The {backend, service} pairs of backends that left go now (deleteLeftPairs).
   */
  private retireUnused(run: WriteRun): void {
    const { mirror, scopedIds, failed, backendOf } = run;
    const entries = run.live();
    const unused = unusedTest(entries, failed);
    if (scopedIds) for (const e of entries) scopedIds.add(e.planned.serviceId);
    const within = scopedIds ?? undefined;
    this.deleteLeftPairs(run, unused);
    const failedBackends = new Set(
      failed.size === 0 ? [] : mirror.slots.where((id) => failed.has(id), within).map((s) => s.backendId),
    );
    const fullPlanned = scopedIds ? null : new Set(entries.flatMap((e) => e.planned.backendIds));
    const isPlanned = (id: number) => (fullPlanned ? fullPlanned.has(id) : backendOf(id) !== undefined);
    const backends = scopedIds
      ? [
          ...new Set([...scopedIds].flatMap((id) => mirror.slots.ofService(id)).map((s) => s.backendId)),
        ].flatMap((id) => mirror.backends.get(id) ?? [])
      : [...mirror.backends.values()];
    const maglevReaders = scopedIds
      ? [...scopedIds].filter((id) => mirror.maglev.refs.has(id))
      : [...mirror.maglev.refs.keys()];
    const ranges = scopedIds
      ? [...scopedIds].flatMap((id) => mirror.sourceRanges.ofService(id))
      : mirror.sourceRanges.all();
    const due = this.now() + this.options.graceMs;
    const { pending } = this;
    PendingDeletions.schedule(
      pending.slots,
      mirror.slots.where(
        (serviceId, gen, slot) =>
          unused(serviceId, (e) => gen === e.frontend.value.gen && slot < e.planned.backendIds.length),
        within,
      ),
      slotId,
      due,
    );
    PendingDeletions.schedule(
      pending.maglev,
      maglevReaders.filter((id) => unused(id, (e) => e.maglev !== null)).map((serviceId) => ({ serviceId })),
      (k) => k.serviceId,
      due,
    );
    PendingDeletions.schedule(
      pending.sourceRanges,
      ranges.filter((r) => unused(r.serviceId, (e) => e.planned.sourceRanges.includes(r.cidr))),
      rangeId,
      due,
    );
    PendingDeletions.schedule(
      pending.backends,
      backends.filter((b) => !isPlanned(b.id) && !failedBackends.has(b.id)),
      (b) => b.id,
      due,
    );
  }

  /** The pairs of backends that left a service go now, not after the grace period: from the
   * flip on, affinity must not pick them and a SYN on their tracked flows selects again (a
   * reader of the old generation still finds them in its slots; it needs no pair). */
  private deleteLeftPairs({ mirror, scopedIds, result }: WriteRun, unused: UnusedTest): void {
    const backendSets = new Map<number, Set<number>>();
    const namesBackend = (e: FrontendEntries, backendId: number) => {
      let ids = backendSets.get(e.planned.serviceId);
      if (!ids) {
        ids = new Set(e.planned.backendIds);
        backendSets.set(e.planned.serviceId, ids);
      }
      return ids.has(backendId);
    };
    const leftMatches = mirror.affinityMatches.where(
      (serviceId, backendId) => unused(serviceId, (e) => namesBackend(e, backendId)),
      scopedIds ?? undefined,
    );
    if (leftMatches.length) {
      this.store.deleteAffinityMatches(leftMatches);
      for (const m of leftMatches) mirror.affinityMatches.delete(m);
      result.deleted += leftMatches.length;
    }
  }

  /**
   * Step 3 for one frontend: makes it read a table of its backend set. A table of that set
   * already in the maps is shared; else the table it reads now is rewritten in place when every
   * frontend reading it moves to this set (only the entries whose owner changed, as Katran does:
   * each entry names its old backend or its new one, both in the maps and in one of the frontend's
   * generations); else a fresh table is filled and swapped in.
   */
  private writeMaglev(
    e: FrontendEntries,
    m: { key: MaglevKey; signature: string },
    mirror: Mirror,
    backendOf: (id: number) => PlannedBackend | undefined,
    wantsBySvc: ReadonlyMap<number, string>,
    result: ApplyResult,
  ): void {
    const tables = mirror.maglev;
    const serviceId = m.key.serviceId;
    const current = tables.table(serviceId);
    const holding = tables.holding(m.signature);
    if (current?.signature === m.signature && (holding === undefined || holding === current.id)) return;
    try {
      if (holding !== undefined) {
        this.store.shareMaglevTable(m.key, holding);
        tables.point(serviceId, holding);
        result.maglevEntries++;
        return;
      }
      const table = buildMaglevTable(
        e.planned.backendIds.map((id) => ({ name: backendOf(id)!.name, id })),
        this.options.maglevTableSize,
        this.options.maglevSeed ?? MAGLEV_HASH_SEED,
      );
      if (
        current &&
        current.size === table.length &&
        [...current.readers].every((reader) => wantsBySvc.get(reader) === m.signature)
      ) {
        const old = this.store.readMaglevTable(current.id);
        const indexes: number[] = [];
        for (let i = 0; i < table.length; i++) if (old[i] !== table[i]) indexes.push(i);
        this.store.writeMaglevEntries(
          current.id,
          Uint32Array.from(indexes),
          Uint32Array.from(indexes, (i) => table[i]!),
        );
        tables.resign(current.id, m.signature);
        result.maglevTables++;
        result.maglevEntries += indexes.length;
        return;
      }
      const id = this.store.installMaglevTable(m.key, table);
      tables.add(id, m.signature, table.length);
      tables.point(serviceId, id);
      result.maglevTables++;
      result.maglevEntries += table.length + 1;
    } catch (err) {
      // Only a new key can overflow the outer map; without a table the datapath picks at
      // random, so the frontend stays programmed.
      if (!(err instanceof MapFullError)) throw err;
      result.degraded.push({
        servicePortName: e.planned.servicePortName,
        error: `${e.planned.name}: ${err.message}; backends are chosen at random instead of by Maglev`,
      });
    }
  }

  /** Runs `write` over all frontends at once; when a map is full, once per frontend to find who fits. */
  private inBatches(
    entries: FrontendEntries[],
    fail: (e: FrontendEntries, err: unknown) => void,
    write: (group: FrontendEntries[]) => void,
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
}
