// The BPF maps in memory, for driving the MapWriter without a kernel.

import {
  type AffinityMatch,
  type BackendEntry,
  type FrontendEntry,
  type MaglevKey,
  MapFullError,
  type MapStore,
  type SlotEntry,
  type SlotKey,
  type SlotWrite,
  type SourceRange,
  type StoredState,
} from '../../src/dataplanes/bpf/store.js';
import { frontendName } from '../../src/dataplanes/bpf/types.js';

/** The maps in memory. Every call is recorded, and after each one a reader walks every frontend
 * the way the datapath does and records what it could not resolve. */
export class MemoryStore implements MapStore {
  readonly families = ['IPv4' as const];
  frontends = new Map<string, FrontendEntry>();
  slots = new Map<string, SlotEntry>();
  backends = new Map<number, BackendEntry>();
  /** Maglev tables by id, and the table each service id points at (the outer map). */
  maglevTables = new Map<number, Uint32Array>();
  maglevRefs = new Map<number, number>();
  private nextTableId = 1;
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
    for (const f of this.frontends.values()) this.checkMaglev(after, f);
  }

  /** The Maglev table of a frontend that forwards by Maglev names backends that exist and that
   * one of its slot generations holds: while a table is rewritten in place, each entry is its old
   * owner or its new one. */
  private checkMaglev(after: string, f: FrontendEntry) {
    const tableId = this.maglevRefs.get(f.value.serviceId);
    if (f.value.scheduler !== 'maglev' || f.value.action !== 'forward' || tableId === undefined) return;
    const named = new Set(
      [...this.slots.values()].filter((s) => s.serviceId === f.value.serviceId).map((s) => s.backendId),
    );
    for (const id of new Set(this.maglevTables.get(tableId)!)) {
      if (!this.backends.has(id))
        this.readerErrors.push(`after ${after}: Maglev names missing backend ${id}`);
      else if (!named.has(id))
        this.readerErrors.push(
          `after ${after}: Maglev of ${frontendName(f.key)} names backend ${id} it never held`,
        );
    }
  }

  /** Tables no frontend points at are freed, as the kernel frees an inner map. */
  private freeUnusedTables() {
    const used = new Set(this.maglevRefs.values());
    for (const id of this.maglevTables.keys()) if (!used.has(id)) this.maglevTables.delete(id);
  }

  private installedTable(tableId: number): Uint32Array {
    const table = this.maglevTables.get(tableId);
    if (!table) throw new Error(`Maglev table ${tableId} is not installed`);
    return table;
  }

  /** The Maglev table each service id reads, by content. */
  maglevByService(): Map<number, Uint32Array> {
    return new Map([...this.maglevRefs].map(([serviceId, id]) => [serviceId, this.maglevTables.get(id)!]));
  }

  upsertBackends(entries: readonly BackendEntry[]) {
    for (const b of entries) this.backends.set(b.id, b);
    this.record('upsertBackends', entries.length);
  }
  deleteBackends(entries: readonly Pick<BackendEntry, 'id'>[]) {
    for (const b of entries) this.backends.delete(b.id);
    this.record('deleteBackends', entries.length);
  }
  upsertSlots(entries: readonly SlotWrite[]) {
    const added = entries.filter((s) => !this.slots.has(`${s.serviceId}/${s.gen}/${s.slot}`)).length;
    if (this.slots.size + added > this.slotCapacity) {
      this.ops.push(`upsertSlots failed ${entries.length}`);
      throw new MapFullError('kbp_slot_v2', this.slotCapacity, 'bpf.mapSizes.backendSlots');
    }
    // The store's state holds what it reads back: the backend id (its address is the backend's).
    for (const { backend: _backend, ...s } of entries) this.slots.set(`${s.serviceId}/${s.gen}/${s.slot}`, s);
    this.record('upsertSlots', entries.length);
  }
  deleteSlots(keys: readonly SlotKey[]) {
    for (const k of keys) this.slots.delete(`${k.serviceId}/${k.gen}/${k.slot}`);
    this.record('deleteSlots', keys.length);
  }
  installMaglevTable(key: MaglevKey, table: Uint32Array) {
    const id = this.nextTableId++;
    this.maglevTables.set(id, Uint32Array.from(table));
    this.maglevRefs.set(key.serviceId, id);
    this.freeUnusedTables();
    this.record('installMaglevTable', table.length);
    return id;
  }
  shareMaglevTable(key: MaglevKey, tableId: number) {
    this.installedTable(tableId);
    this.maglevRefs.set(key.serviceId, tableId);
    this.freeUnusedTables();
    this.record('shareMaglevTable', 1);
  }
  readMaglevTable(tableId: number) {
    return Uint32Array.from(this.installedTable(tableId));
  }
  writeMaglevEntries(tableId: number, indexes: Uint32Array, backendIds: Uint32Array) {
    const table = this.installedTable(tableId);
    // Not atomic either: the readers of this table see the entries change one by one.
    const readers = [...this.frontends.values()].filter(
      (f) => this.maglevRefs.get(f.value.serviceId) === tableId,
    );
    indexes.forEach((index, i) => {
      table[index] = backendIds[i]!;
      for (const f of readers) this.checkMaglev(`writeMaglevEntries (entry ${index})`, f);
    });
    this.record('writeMaglevEntries', indexes.length);
  }
  deleteMaglev(keys: readonly MaglevKey[]) {
    for (const k of keys) this.maglevRefs.delete(k.serviceId);
    this.freeUnusedTables();
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
      maglev: [...this.maglevRefs].map(([serviceId, tableId]) => ({ key: { serviceId }, tableId })),
      maglevTables: [...this.maglevTables].map(([id, table]) => ({
        id,
        backendIds: [...new Set(table)],
        size: table.length,
      })),
      affinityMatches: [...this.matches.values()],
      sourceRanges: [...this.ranges.values()],
    };
  }
}
