// What the map writer (writer.ts) knows between two writes: the mirror of the maps it owns, with
// the Maglev tables and who reads each, and the deletions waiting out their grace period.

import { EntriesByService, PairsByService, SlotsByService } from './mirror-index.js';
import type { BackendEntry, FrontendEntry, MaglevKey, SlotKey, SourceRange, StoredState } from './store.js';
import { frontendName } from './types.js';

/** The Maglev tables in the maps: which one each frontend (service id) reads, and what each holds. */
export class MaglevTables {
  /** Service id → the id of the table it reads. */
  readonly refs = new Map<number, number>();
  readonly tables = new Map<number, { signature: string; size: number; readers: Set<number> }>();
  /** Signature → the table new readers of that backend set share. */
  private readonly bySignature = new Map<string, number>();

  /** The table holding `signature` that new readers share, if any. */
  holding(signature: string): number | undefined {
    return this.bySignature.get(signature);
  }

  table(serviceId: number) {
    const id = this.refs.get(serviceId);
    return id === undefined ? undefined : { id, ...this.tables.get(id)! };
  }

  /** A table the maps hold (installed now, or read back). */
  add(id: number, signature: string, size: number): void {
    this.tables.set(id, { signature, size, readers: new Set() });
    if (!this.bySignature.has(signature)) this.bySignature.set(signature, id);
  }

  /** The table now holds another backend set (rewritten in place). */
  resign(id: number, signature: string): void {
    const t = this.tables.get(id)!;
    if (this.bySignature.get(t.signature) === id) this.bySignature.delete(t.signature);
    t.signature = signature;
    if (!this.bySignature.has(signature)) this.bySignature.set(signature, id);
  }

  point(serviceId: number, tableId: number): void {
    this.unref(serviceId);
    this.refs.set(serviceId, tableId);
    this.tables.get(tableId)!.readers.add(serviceId);
  }

  /** The frontend reads no table now; a table nobody reads is gone from the maps. */
  unref(serviceId: number): void {
    const id = this.refs.get(serviceId);
    if (id === undefined) return;
    this.refs.delete(serviceId);
    const t = this.tables.get(id)!;
    t.readers.delete(serviceId);
    if (t.readers.size > 0) return;
    this.tables.delete(id);
    if (this.bySignature.get(t.signature) === id) this.bySignature.delete(t.signature);
  }
}

/** The exact contents of the maps the writer owns. */
export interface Mirror {
  frontends: Map<string, FrontendEntry>;
  slots: SlotsByService;
  backends: Map<number, BackendEntry>;
  maglev: MaglevTables;
  affinityMatches: PairsByService;
  sourceRanges: EntriesByService<SourceRange, SourceRange>;
}

/** Entries to delete once their grace period is over, by entry id. An entry wanted again before
 * then stays: its deletion is cancelled, nothing waits. */
export class PendingDeletions {
  readonly slots = new Map<string, { key: SlotKey; dueMs: number }>();
  readonly maglev = new Map<number, { key: MaglevKey; dueMs: number }>();
  readonly sourceRanges = new Map<string, { key: SourceRange; dueMs: number }>();
  readonly backends = new Map<number, { key: BackendEntry; dueMs: number }>();

  /** Adds entries not already waiting (an entry keeps the earlier of two due times). */
  static schedule<I, K>(
    into: Map<I, { key: K; dueMs: number }>,
    keys: K[],
    idOf: (k: K) => I,
    dueMs: number,
  ) {
    for (const key of keys) {
      const id = idOf(key);
      if (!into.has(id)) into.set(id, { key, dueMs });
    }
  }

  /** The entries due by `now` (all with `force`), taken out. */
  static take<I, K>(from: Map<I, { key: K; dueMs: number }>, now: number, force: boolean): K[] {
    const due: K[] = [];
    for (const [id, p] of from) {
      if (!force && p.dueMs > now) continue;
      due.push(p.key);
      from.delete(id);
    }
    return due;
  }

  nextDue(): number | null {
    let due = Number.POSITIVE_INFINITY;
    for (const m of [this.slots, this.maglev, this.sourceRanges, this.backends])
      for (const p of m.values()) due = Math.min(due, p.dueMs);
    return due === Number.POSITIVE_INFINITY ? null : due;
  }
}

export const maglevSignature = (size: number, ids: readonly number[]) =>
  `${size}:${[...ids].sort((a, b) => a - b).join(',')}`;

function maglevOf(state: StoredState, maglevTableSize: number): MaglevTables {
  const tables = new MaglevTables();
  // A table of another size is replaced: its signature cannot match.
  for (const t of state.maglevTables)
    tables.add(t.id, maglevSignature(t.size === maglevTableSize ? t.size : -1, t.backendIds), t.size);
  for (const m of state.maglev) tables.point(m.key.serviceId, m.tableId);
  return tables;
}

export function mirrorOf(state: StoredState, maglevTableSize: number): Mirror {
  return {
    frontends: new Map(state.frontends.map((f) => [frontendName(f.key), f])),
    slots: new SlotsByService(state.slots),
    backends: new Map(state.backends.map((b) => [b.id, b])),
    maglev: maglevOf(state, maglevTableSize),
    affinityMatches: new PairsByService(state.affinityMatches),
    sourceRanges: new EntriesByService((r: SourceRange) => r.cidr, state.sourceRanges),
  };
}
