// The BPF maps as the writer sees them: logical entries (addresses as strings, flags as fields)
// and one call per map operation, each a batch. kernel-store.ts implements it over libbpf with the
// codecs of layout.ts; the writer's unit test implements it in memory to check the order of writes.

import type { BpfScheduler } from '../../config/types.js';
import type { IPFamily } from '../../model/types.js';
import type { FrontendAction, FrontendKey, FrontendKind } from './types.js';

export interface FrontendValue {
  serviceId: number;
  /** Slots [0, count) of generation `gen`; [0, localCount) are node-local backends. */
  count: number;
  localCount: number;
  gen: number;
  scheduler: BpfScheduler;
  action: FrontendAction;
  kind: FrontendKind;
  localOnly: boolean;
  hasInternalScope: boolean;
  /** 0 without ClientIP affinity. */
  affinityTimeoutSeconds: number;
  checksSourceRanges: boolean;
}

export interface FrontendEntry {
  key: FrontendKey;
  value: FrontendValue;
}

export interface BackendEntry {
  id: number;
  family: IPFamily;
  address: string;
  port: number;
  isLocal: boolean;
  terminating: boolean;
}

export interface SlotKey {
  serviceId: number;
  slot: number;
  gen: number;
}

export interface SlotEntry extends SlotKey {
  backendId: number;
}

/** A slot as the writer writes it: with its backend's address and port (kbp_slot_val), which never
 * change for a backend id. */
export interface SlotWrite extends SlotEntry {
  backend: Pick<BackendEntry, 'family' | 'address' | 'port'>;
}

export interface MaglevKey {
  serviceId: number;
}

export interface AffinityMatch {
  backendId: number;
  serviceId: number;
}

export interface SourceRange {
  serviceId: number;
  family: IPFamily;
  /** Canonical CIDR. */
  cidr: string;
}

/** What the maps the writer owns hold, read back at start-up. */
export interface StoredState {
  frontends: FrontendEntry[];
  slots: SlotEntry[];
  backends: BackendEntry[];
  /** The Maglev table each frontend reads (frontends with the same backends share one). */
  maglev: { key: MaglevKey; tableId: number }[];
  /** Each table named above, once: the backend ids it holds (the table is a function of them and
   * M) and its size M. */
  maglevTables: { id: number; backendIds: number[]; size: number }[];
  affinityMatches: AffinityMatch[];
  sourceRanges: SourceRange[];
}

/** A write the map could not take because it is full. */
export class MapFullError extends Error {
  constructor(
    readonly mapName: string,
    readonly capacity: number,
    /** The config setting that raises the capacity, e.g. "bpf.mapSizes.backendSlots". */
    readonly setting: string,
    cause?: unknown,
  ) {
    super(`BPF map ${mapName} is full (capacity ${capacity} entries); raise ${setting}`, { cause });
    this.name = 'MapFullError';
  }
}

export interface MapStore {
  readonly families: readonly IPFamily[];
  upsertBackends(entries: readonly BackendEntry[]): void;
  deleteBackends(entries: readonly Pick<BackendEntry, 'id' | 'family'>[]): void;
  upsertSlots(entries: readonly SlotWrite[]): void;
  deleteSlots(keys: readonly SlotKey[]): void;
  /** Fills a fresh inner table and points `key` at it with one update of the outer map; returns
   * the table's id. The table lives as long as a frontend points at it. */
  installMaglevTable(key: MaglevKey, table: Uint32Array): number;
  /** Points `key` at an installed table (one update of the outer map). */
  shareMaglevTable(key: MaglevKey, tableId: number): void;
  /** An installed table's entries as the maps hold them. */
  readMaglevTable(tableId: number): Uint32Array;
  /** Rewrites entries of an installed table in place: entry indexes[i] becomes backendIds[i]. */
  writeMaglevEntries(tableId: number, indexes: Uint32Array, backendIds: Uint32Array): void;
  /** Removes the frontends' entries of the outer map (a table nothing points at is freed). */
  deleteMaglev(keys: readonly MaglevKey[]): void;
  upsertAffinityMatches(entries: readonly AffinityMatch[]): void;
  deleteAffinityMatches(entries: readonly AffinityMatch[]): void;
  upsertSourceRanges(entries: readonly SourceRange[]): void;
  deleteSourceRanges(entries: readonly SourceRange[]): void;
  /** Zeroes the per-CPU counters of ids about to be (re)used. */
  resetServiceStats(serviceIds: readonly number[]): void;
  resetBackendStats(backendIds: readonly number[]): void;
  upsertFrontends(entries: readonly FrontendEntry[]): void;
  deleteFrontends(keys: readonly FrontendKey[]): void;
  read(): StoredState;
}
