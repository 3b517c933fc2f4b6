// Stable numeric ids for frontends (service ids) and backends. Conntrack and affinity entries in
// the kernel hold these ids, so an id keeps its meaning across syncs and agent restarts (the
// allocator is rebuilt from the pinned maps), and a released id is not handed out again while a
// tracked flow may still name it: it sits in quarantine, and new ids come from a cursor that moves
// forward through the range, so reuse only happens after a full wrap-around.
// A range may prefer its low part (backend ids: only ids below bpf.mapSizes.backendCounters have
// per-CPU counters of their own): ids come from there, cursor and all, while it has a free one.

export interface IdAllocatorState {
  /** key → id, for the keys in use. */
  assigned: ReadonlyMap<string, number>;
  /** id → the time (ms) it may be reused. */
  quarantined: ReadonlyMap<number, number>;
  /** Where the search for the next free id starts, in the preferred part and in the rest. */
  cursors: readonly number[];
}

/** A part of the range searched on its own, with its own cursor. */
interface Zone {
  min: number;
  max: number;
  cursor: number;
  /** Before this time (ms) the zone has no id to give: every id is in use or in quarantine (a
   * full zone is not searched id by id on every allocation). 0: not known, search. */
  freeAtMs: number;
}

export class IdAllocator {
  private readonly byKey: Map<string, number>;
  private readonly byId: Map<number, string>;
  private readonly quarantined: Map<number, number>;
  private readonly zones: Zone[];
  /** Ids in use past `preferredMax`. */
  private pastPreferred = 0;

  constructor(
    /** What the ids name, for error messages ("service", "backend"). */
    readonly what: string,
    readonly min: number,
    readonly max: number,
    readonly quarantineMs: number,
    state?: IdAllocatorState,
    /** Ids up to this one are handed out first. */
    readonly preferredMax = max,
  ) {
    if (!(Number.isInteger(min) && Number.isInteger(max) && min >= 1 && max >= min)) {
      throw new Error(`${what} id range [${min}, ${max}] is empty`);
    }
    this.byKey = new Map(state?.assigned ?? []);
    this.byId = new Map([...this.byKey].map(([k, id]) => [id, k]));
    for (const id of this.byId.keys()) if (id > preferredMax) this.pastPreferred++;
    this.quarantined = new Map(state?.quarantined ?? []);
    const split = Math.max(min, Math.min(preferredMax, max));
    const bounds = split < max ? [[min, split] as const, [split + 1, max] as const] : [[min, max] as const];
    this.zones = bounds.map(([lo, hi], i) => ({
      min: lo,
      max: hi,
      cursor: state?.cursors[i] ?? lo,
      freeAtMs: 0,
    }));
  }

  clone(): IdAllocator {
    return new IdAllocator(this.what, this.min, this.max, this.quarantineMs, this.state(), this.preferredMax);
  }

  state(): IdAllocatorState {
    return {
      assigned: new Map(this.byKey),
      quarantined: new Map(this.quarantined),
      cursors: this.zones.map((z) => z.cursor),
    };
  }

  get size(): number {
    return this.byKey.size;
  }

  /** How many ids in use lie past `preferredMax` (for backends: those without counters of their own). */
  get inUsePastPreferred(): number {
    return this.pastPreferred;
  }

  idOf(key: string): number | undefined {
    return this.byKey.get(key);
  }

  keyOf(id: number): string | undefined {
    return this.byId.get(id);
  }

  entries(): IterableIterator<[string, number]> {
    return this.byKey.entries();
  }

  private zoneOf(id: number): Zone {
    return this.zones.find((z) => id <= z.max)!;
  }

  /** Records an id found in the kernel at start-up. False when it conflicts with one already known. */
  restore(key: string, id: number): boolean {
    if (id < this.min || id > this.max) return false;
    const known = this.byKey.get(key);
    if (known !== undefined) return known === id;
    if (this.byId.has(id)) return false;
    this.byKey.set(key, id);
    this.byId.set(id, key);
    if (id > this.preferredMax) this.pastPreferred++;
    this.quarantined.delete(id);
    const zone = this.zoneOf(id);
    if (id >= zone.cursor) zone.cursor = id === zone.max ? zone.min : id + 1;
    return true;
  }

  /** Keeps a free id out of use until `untilMs` (an id a conntrack entry still names). */
  quarantine(id: number, untilMs: number): void {
    if (id < this.min || id > this.max || this.byId.has(id)) return;
    this.quarantined.set(id, Math.max(untilMs, this.quarantined.get(id) ?? 0));
  }

  /** The key's id, allocating one if needed; null when every id is in use or in quarantine. */
  allocate(key: string, nowMs: number): number | null {
    const known = this.byKey.get(key);
    if (known !== undefined) return known;
    for (const zone of this.zones) {
      if (zone.freeAtMs > nowMs) continue;
      const id = this.search(zone, nowMs);
      if (id !== null) return this.take(key, id, zone);
    }
    return null;
  }

  /** The zone's next free id from its cursor on; when there is none, notes when there may be one. */
  private search(zone: Zone, nowMs: number): number | null {
    let freeAtMs = Number.POSITIVE_INFINITY;
    const span = zone.max - zone.min + 1;
    for (let i = 0, id = zone.cursor; i < span; i++, id = id === zone.max ? zone.min : id + 1) {
      if (this.byId.has(id)) continue;
      const until = this.quarantined.get(id);
      if (until === undefined || until <= nowMs) return id;
      freeAtMs = Math.min(freeAtMs, until);
    }
    zone.freeAtMs = freeAtMs;
    return null;
  }

  /** Releases the key's id, if it has one; the id goes to quarantine. */
  release(key: string, nowMs: number): void {
    const id = this.byKey.get(key);
    if (id === undefined) return;
    this.free(key, id, nowMs);
  }

  /** Releases every id whose key is not in `keep`; the ids go to quarantine. */
  releaseAllExcept(keep: ReadonlySet<string>, nowMs: number): void {
    for (const [key, id] of [...this.byKey]) if (!keep.has(key)) this.free(key, id, nowMs);
    for (const [id, until] of [...this.quarantined]) if (until <= nowMs) this.quarantined.delete(id);
  }

  private free(key: string, id: number, nowMs: number): void {
    this.byKey.delete(key);
    this.byId.delete(id);
    if (id > this.preferredMax) this.pastPreferred--;
    const until = nowMs + this.quarantineMs;
    this.quarantined.set(id, until);
    const zone = this.zoneOf(id);
    zone.freeAtMs = Math.min(zone.freeAtMs, until);
  }

  private take(key: string, id: number, zone: Zone): number {
    this.byKey.set(key, id);
    this.byId.set(id, key);
    if (id > this.preferredMax) this.pastPreferred++;
    this.quarantined.delete(id);
    zone.cursor = id === zone.max ? zone.min : id + 1;
    return id;
  }
}
