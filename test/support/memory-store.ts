// The BPF maps in memory, for driving the MapWriter without a kernel.

import { frontendName } from '../../src/dataplanes/bpf/plan.js';
import {
  type AffinityMatch,
  type BackendEntry,
  type FrontendEntry,
  type MaglevKey,
  MapFullError,
  type MapStore,
  type SlotEntry,
  type SlotKey,
  type SourceRange,
  type StoredState,
} from '../../src/dataplanes/bpf/store.js';

/** The maps in memory. Every call is recorded, and after each one a reader walks every frontend
 * the way the datapath does and records what it could not resolve. */
export class MemoryStore implements MapStore {
  readonly families = ['IPv4' as const];
  frontends = new Map<string, FrontendEntry>();
  slots = new Map<string, SlotEntry>();
  backends = new Map<number, BackendEntry>();
  maglev = new Map<string, { key: MaglevKey; table: Uint32Array }>();
  matches = new Map<string, AffinityMatch>();
  ranges = new Map<string, SourceRange>();
  ops: string[] = [];
  readerErrors: string[] = [];
  slotCapacity = Number.POSITIVE_INFINITY;

  private record(op: string, n: number) {
    this.ops.push(`${op} ${n}`);
    this.checkReader(op);
  }

  checkReader(after: string) {
    for (const f of this.frontends.values()) {
      // Pods follow TWO_SCOPES to the internal sibling: it must be there.
      if (
        f.key.scope === 'all' &&
        f.value.hasInternalScope &&
        !this.frontends.has(frontendName({ ...f.key, scope: 'internal' }))
      )
        this.readerErrors.push(`after ${after}: ${frontendName(f.key)} names a missing internal entry`);
      const { serviceId, gen, count } = f.value;
      for (let slot = 0; slot < count; slot++) {
        const s = this.slots.get(`${serviceId}/${gen}/${slot}`);
        if (!s)
          this.readerErrors.push(`after ${after}: ${frontendName(f.key)} slot ${slot} gen ${gen} missing`);
        else if (!this.backends.has(s.backendId))
          this.readerErrors.push(`after ${after}: slot names missing backend ${s.backendId}`);
      }
    }
    for (const m of this.maglev.values()) {
      for (const id of new Set(m.table)) {
        if (!this.backends.has(id))
          this.readerErrors.push(`after ${after}: Maglev names missing backend ${id}`);
      }
    }
  }

  upsertBackends(entries: readonly BackendEntry[]) {
    for (const b of entries) this.backends.set(b.id, b);
    this.record('upsertBackends', entries.length);
  }
  deleteBackends(entries: readonly Pick<BackendEntry, 'id'>[]) {
    for (const b of entries) this.backends.delete(b.id);
    this.record('deleteBackends', entries.length);
  }
  upsertSlots(entries: readonly SlotEntry[]) {
    const added = entries.filter((s) => !this.slots.has(`${s.serviceId}/${s.gen}/${s.slot}`)).length;
    if (this.slots.size + added > this.slotCapacity) {
      this.ops.push(`upsertSlots failed ${entries.length}`);
      throw new MapFullError('kbp_slot_v1', this.slotCapacity, 'bpf.mapSizes.backendSlots');
    }
    for (const s of entries) this.slots.set(`${s.serviceId}/${s.gen}/${s.slot}`, s);
    this.record('upsertSlots', entries.length);
  }
  deleteSlots(keys: readonly SlotKey[]) {
    for (const k of keys) this.slots.delete(`${k.serviceId}/${k.gen}/${k.slot}`);
    this.record('deleteSlots', keys.length);
  }
  setMaglev(key: MaglevKey, table: Uint32Array) {
    this.maglev.set(`${key.serviceId}`, { key, table });
    this.record('setMaglev', 1);
  }
  deleteMaglev(keys: readonly MaglevKey[]) {
    for (const k of keys) this.maglev.delete(`${k.serviceId}`);
    this.record('deleteMaglev', keys.length);
  }
  upsertAffinityMatches(entries: readonly AffinityMatch[]) {
    for (const m of entries) this.matches.set(`${m.serviceId}/${m.backendId}`, m);
    this.record('upsertAffinityMatches', entries.length);
  }
  deleteAffinityMatches(entries: readonly AffinityMatch[]) {
    for (const m of entries) this.matches.delete(`${m.serviceId}/${m.backendId}`);
    this.record('deleteAffinityMatches', entries.length);
  }
  upsertSourceRanges(entries: readonly SourceRange[]) {
    for (const r of entries) this.ranges.set(`${r.serviceId}/${r.cidr}`, r);
    this.record('upsertSourceRanges', entries.length);
  }
  deleteSourceRanges(entries: readonly SourceRange[]) {
    for (const r of entries) this.ranges.delete(`${r.serviceId}/${r.cidr}`);
    this.record('deleteSourceRanges', entries.length);
  }
  resetServiceStats(ids: readonly number[]) {
    this.record('resetServiceStats', ids.length);
  }
  resetBackendStats(ids: readonly number[]) {
    this.record('resetBackendStats', ids.length);
  }
  upsertFrontends(entries: readonly FrontendEntry[]) {
    // A batch update is not atomic: readers see its elements arrive one by one.
    for (const f of entries) {
      this.frontends.set(frontendName(f.key), f);
      this.checkReader(`upsertFrontends (${frontendName(f.key)})`);
    }
    this.record('upsertFrontends', entries.length);
  }
  deleteFrontends(keys: readonly FrontendEntry['key'][]) {
    for (const k of keys) {
      this.frontends.delete(frontendName(k));
      this.checkReader(`deleteFrontends (${frontendName(k)})`);
    }
    this.record('deleteFrontends', keys.length);
  }
  read(): StoredState {
    return {
      frontends: [...this.frontends.values()],
      slots: [...this.slots.values()],
      backends: [...this.backends.values()],
      maglev: [...this.maglev.values()].map((m) => ({
        key: m.key,
        backendIds: [...new Set(m.table)],
        size: m.table.length,
      })),
      affinityMatches: [...this.matches.values()],
      sourceRanges: [...this.ranges.values()],
    };
  }
}
