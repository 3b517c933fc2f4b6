// Stable numeric ids for frontends (service ids) and backends. Conntrack and affinity entries in
// the kernel hold these ids, so an id keeps its meaning across syncs and agent restarts (the
// allocator is rebuilt from the pinned maps), and a released id is not handed out again while a
// tracked flow may still name it: it sits in quarantine, and new ids come from a cursor that moves
// forward through the range, so reuse only happens after a full wrap-around.

export interface IdAllocatorState {
  /** key → id, for the keys in use. */
  assigned: ReadonlyMap<string, number>;
  /** id → the time (ms) it may be reused. */
  quarantined: ReadonlyMap<number, number>;
  /** Where the search for the next free id starts. */
  cursor: number;
}

export class IdAllocator {
  private readonly byKey: Map<string, number>;
  private readonly byId: Map<number, string>;
  private readonly quarantined: Map<number, number>;
  private cursor: number;

  constructor(
    /** What the ids name, for error messages ("service", "backend"). */
    readonly what: string,
    readonly min: number,
    readonly max: number,
    readonly quarantineMs: number,
    state?: IdAllocatorState,
  ) {
    if (!(Number.isInteger(min) && Number.isInteger(max) && min >= 1 && max >= min)) {
      throw new Error(`${what} id range [${min}, ${max}] is empty`);
    }
    this.byKey = new Map(state?.assigned ?? []);
    this.byId = new Map([...this.byKey].map(([k, id]) => [id, k]));
    this.quarantined = new Map(state?.quarantined ?? []);
    this.cursor = state?.cursor ?? min;
  }

  clone(): IdAllocator {
    return new IdAllocator(this.what, this.min, this.max, this.quarantineMs, this.state());
  }

  state(): IdAllocatorState {
    return { assigned: new Map(this.byKey), quarantined: new Map(this.quarantined), cursor: this.cursor };
  }

  get size(): number {
    return this.byKey.size;
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

  /** Records an id found in the kernel at start-up. False when it conflicts with one already known. */
  restore(key: string, id: number): boolean {
    if (id < this.min || id > this.max) return false;
    const known = this.byKey.get(key);
    if (known !== undefined) return known === id;
    if (this.byId.has(id)) return false;
    this.byKey.set(key, id);
    this.byId.set(id, key);
    this.quarantined.delete(id);
    if (id >= this.cursor) this.cursor = id === this.max ? this.min : id + 1;
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
    const span = this.max - this.min + 1;
    for (let i = 0, id = this.cursor; i < span; i++, id = id === this.max ? this.min : id + 1) {
      if (this.byId.has(id)) continue;
      const until = this.quarantined.get(id);
      if (until !== undefined && until > nowMs) continue;
      return this.take(key, id);
    }
    return null;
  }

  /** Releases the key's id, if it has one; the id goes to quarantine. */
  release(key: string, nowMs: number): void {
    const id = this.byKey.get(key);
    if (id === undefined) return;
    this.byKey.delete(key);
    this.byId.delete(id);
    this.quarantined.set(id, nowMs + this.quarantineMs);
  }

  /** Releases every id whose key is not in `keep`; the ids go to quarantine. */
  releaseAllExcept(keep: ReadonlySet<string>, nowMs: number): void {
    for (const [key, id] of [...this.byKey]) {
      if (keep.has(key)) continue;
      this.byKey.delete(key);
      this.byId.delete(id);
      this.quarantined.set(id, nowMs + this.quarantineMs);
    }
    for (const [id, until] of [...this.quarantined]) if (until <= nowMs) this.quarantined.delete(id);
  }

  private take(key: string, id: number): number {
    this.byKey.set(key, id);
    this.byId.set(id, key);
    this.quarantined.delete(id);
    this.cursor = id === this.max ? this.min : id + 1;
    return id;
  }
}
