// The writer's mirror of the entries keyed by service id (slots, {backend, service} pairs, source
// ranges), indexed by service id so that a write scoped to a few frontends finds what they hold
// without a walk over every entry. A cluster has 10^5-10^6 slots and as many pairs: those two keep
// numbers in arrays, not an object and a Map entry per map entry (about 1 KiB per 10-endpoint
// service before, a tenth of that now); the entry objects are made when asked for.

import type { AffinityMatch, SlotEntry, SlotKey } from './store.js';

/** What the writer asks of one map's mirror. */
export interface ServiceIndex<K extends { serviceId: number }, V extends K> {
  get(k: K): V | undefined;
  has(k: K): boolean;
  set(v: V): void;
  delete(k: K): void;
  /** Every entry. */
  all(): V[];
  ofService(serviceId: number): V[];
}

/** Any entries, by service id, then by what tells them apart within it. */
export class EntriesByService<K extends { serviceId: number }, V extends K> implements ServiceIndex<K, V> {
  private readonly index = new Map<number, Map<number | string, V>>();

  constructor(
    private readonly subKey: (k: K) => number | string,
    entries: Iterable<V>,
  ) {
    for (const v of entries) this.set(v);
  }

  get(k: K): V | undefined {
    return this.index.get(k.serviceId)?.get(this.subKey(k));
  }

  has(k: K): boolean {
    return this.get(k) !== undefined;
  }

  set(v: V): void {
    let inner = this.index.get(v.serviceId);
    if (!inner) {
      inner = new Map();
      this.index.set(v.serviceId, inner);
    }
    inner.set(this.subKey(v), v);
  }

  delete(k: K): void {
    const inner = this.index.get(k.serviceId);
    inner?.delete(this.subKey(k));
    if (inner?.size === 0) this.index.delete(k.serviceId);
  }

  all(): V[] {
    const out: V[] = [];
    for (const inner of this.index.values()) for (const v of inner.values()) out.push(v);
    return out;
  }

  ofService(serviceId: number): V[] {
    return [...(this.index.get(serviceId)?.values() ?? [])];
  }
}

/** No backend in that slot (backend ids are never negative). */
const EMPTY = -1;

/**
 * Slots: per service id, per generation, the backend id of each slot. A generation's slots are
 * dense from 0 (a frontend's list), so an array indexed by slot holds them.
 */
export class SlotsByService implements ServiceIndex<SlotKey, SlotEntry> {
  private readonly index = new Map<number, (number[] | undefined)[]>();

  constructor(entries: Iterable<SlotEntry>) {
    for (const s of entries) this.set(s);
  }

  /** The backend id in the slot, or undefined when the mirror has none there. */
  backendIdAt(k: SlotKey): number | undefined {
    const id = this.index.get(k.serviceId)?.[k.gen]?.[k.slot];
    return id === undefined || id === EMPTY ? undefined : id;
  }

  get(k: SlotKey): SlotEntry | undefined {
    const backendId = this.backendIdAt(k);
    return backendId === undefined
      ? undefined
      : { serviceId: k.serviceId, slot: k.slot, gen: k.gen, backendId };
  }

  has(k: SlotKey): boolean {
    return this.backendIdAt(k) !== undefined;
  }

  set(v: SlotEntry): void {
    let gens = this.index.get(v.serviceId);
    if (!gens) {
      gens = [];
      this.index.set(v.serviceId, gens);
    }
    while (gens.length <= v.gen) gens.push(undefined);
    let slots = gens[v.gen];
    if (!slots) {
      slots = [];
      gens[v.gen] = slots;
    }
    while (slots.length < v.slot) slots.push(EMPTY);
    slots[v.slot] = v.backendId;
  }

  delete(k: SlotKey): void {
    const gens = this.index.get(k.serviceId);
    const slots = gens?.[k.gen];
    if (!gens || !slots || k.slot >= slots.length) return;
    slots[k.slot] = EMPTY;
    while (slots.length > 0 && slots[slots.length - 1] === EMPTY) slots.pop();
    if (slots.length > 0) return;
    gens[k.gen] = undefined;
    while (gens.length > 0 && gens[gens.length - 1] === undefined) gens.pop();
    if (gens.length === 0) this.index.delete(k.serviceId);
  }

  all(): SlotEntry[] {
    const out: SlotEntry[] = [];
    for (const serviceId of this.index.keys()) this.collect(serviceId, out);
    return out;
  }

  ofService(serviceId: number): SlotEntry[] {
    return this.collect(serviceId, []);
  }

  /** The entries `keep` accepts, of the given services or of all: no object for the others (a
   * full write asks this of every slot and keeps a few). */
  where(
    keep: (serviceId: number, gen: number, slot: number) => boolean,
    serviceIds?: Iterable<number>,
  ): SlotEntry[] {
    const out: SlotEntry[] = [];
    for (const serviceId of serviceIds ?? this.index.keys()) this.collect(serviceId, out, keep);
    return out;
  }

  private collect(
    serviceId: number,
    out: SlotEntry[],
    keep?: (serviceId: number, gen: number, slot: number) => boolean,
  ): SlotEntry[] {
    const gens = this.index.get(serviceId) ?? [];
    for (let gen = 0; gen < gens.length; gen++) {
      const slots = gens[gen] ?? [];
      for (let slot = 0; slot < slots.length; slot++) {
        const backendId = slots[slot]!;
        if (backendId !== EMPTY && (keep === undefined || keep(serviceId, gen, slot)))
          out.push({ serviceId, slot, gen, backendId });
      }
    }
    return out;
  }
}

/** Beyond this many backends a service's pairs go into a Set (an array is searched linearly). */
const SMALL_PAIRS = 16;

/** {backend, service} pairs: per service id, its backend ids. */
export class PairsByService implements ServiceIndex<AffinityMatch, AffinityMatch> {
  private readonly index = new Map<number, number[] | Set<number>>();

  constructor(entries: Iterable<AffinityMatch>) {
    for (const m of entries) this.set(m);
  }

  has(k: AffinityMatch): boolean {
    return this.hasPair(k.serviceId, k.backendId);
  }

  hasPair(serviceId: number, backendId: number): boolean {
    const ids = this.index.get(serviceId);
    if (!ids) return false;
    return Array.isArray(ids) ? ids.includes(backendId) : ids.has(backendId);
  }

  get(k: AffinityMatch): AffinityMatch | undefined {
    return this.has(k) ? { backendId: k.backendId, serviceId: k.serviceId } : undefined;
  }

  set(v: AffinityMatch): void {
    const ids = this.index.get(v.serviceId);
    if (!ids) this.index.set(v.serviceId, [v.backendId]);
    else if (!Array.isArray(ids)) ids.add(v.backendId);
    else if (ids.includes(v.backendId)) return;
    else if (ids.length < SMALL_PAIRS) ids.push(v.backendId);
    else this.index.set(v.serviceId, new Set([...ids, v.backendId]));
  }

  delete(k: AffinityMatch): void {
    const ids = this.index.get(k.serviceId);
    if (!ids) return;
    if (Array.isArray(ids)) {
      const at = ids.indexOf(k.backendId);
      if (at >= 0) ids.splice(at, 1);
    } else ids.delete(k.backendId);
    if ((Array.isArray(ids) ? ids.length : ids.size) === 0) this.index.delete(k.serviceId);
  }

  all(): AffinityMatch[] {
    const out: AffinityMatch[] = [];
    for (const serviceId of this.index.keys()) this.collect(serviceId, out);
    return out;
  }

  ofService(serviceId: number): AffinityMatch[] {
    return this.collect(serviceId, []);
  }

  /** The pairs `keep` accepts, of the given services or of all. */
  where(
    keep: (serviceId: number, backendId: number) => boolean,
    serviceIds?: Iterable<number>,
  ): AffinityMatch[] {
    const out: AffinityMatch[] = [];
    for (const serviceId of serviceIds ?? this.index.keys()) this.collect(serviceId, out, keep);
    return out;
  }

  private collect(
    serviceId: number,
    out: AffinityMatch[],
    keep?: (serviceId: number, backendId: number) => boolean,
  ): AffinityMatch[] {
    for (const backendId of this.index.get(serviceId) ?? [])
      if (keep === undefined || keep(serviceId, backendId)) out.push({ backendId, serviceId });
    return out;
  }
}
