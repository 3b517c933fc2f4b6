// Map elements by fd: single and batched updates, lookups and deletes, whole-map dumps, maps created
// outside any object (Maglev inner tables), and a map's info.

import { NativeError } from '../libc.js';
import { check, f } from './bindings.js';
import { BPF_ANY, EINVAL, ENOENT, ENOTSUPP } from './constants.js';

export function mapUpdate(fd: number, key: Buffer, value: Buffer, flags: bigint = BPF_ANY): void {
  check('bpf_map_update_elem', f.update(fd, key, value, flags) as number);
}

/** Fills `value` and returns true, or returns false when the key is absent. */
export function mapLookup(fd: number, key: Buffer, value: Buffer): boolean {
  const rc = f.lookup(fd, key, value) as number;
  if (rc === -ENOENT) return false;
  check('bpf_map_lookup_elem', rc);
  return true;
}

/** Returns false when the key was absent. */
export function mapDelete(fd: number, key: Buffer): boolean {
  const rc = f.delete(fd, key) as number;
  if (rc === -ENOENT) return false;
  check('bpf_map_delete_elem', rc);
  return true;
}

/** Writes the key after `key` (the first key when `key` is null) into `next`; false at the end. */
export function mapNextKey(fd: number, key: Buffer | null, next: Buffer): boolean {
  const rc = f.next_key(fd, key, next) as number;
  if (rc === -ENOENT) return false;
  check('bpf_map_get_next_key', rc);
  return true;
}

function batchOpts(elemFlags: bigint): Buffer {
  const opts = Buffer.alloc(24);
  opts.writeBigUInt64LE(24n, 0);
  opts.writeBigUInt64LE(elemFlags, 8);
  return opts;
}

/** Writes `count` keys/values (packed back to back) in one syscall. Returns how many were written. */
export function mapUpdateBatch(
  fd: number,
  keys: Buffer,
  values: Buffer,
  count: number,
  elemFlags: bigint = BPF_ANY,
): number {
  const n = [count];
  check('bpf_map_update_batch', f.update_batch(fd, keys, values, n, batchOpts(elemFlags)) as number);
  return n[0]!;
}

/** Deletes `count` packed keys. Missing keys fail with ENOENT after the ones before them. */
export function mapDeleteBatch(fd: number, keys: Buffer, count: number): number {
  const n = [count];
  check('bpf_map_delete_batch', f.delete_batch(fd, keys, n, batchOpts(0n)) as number);
  return n[0]!;
}

export interface BatchChunk {
  /** Elements written into keys/values. */
  count: number;
  /** True when the map has no more elements after this chunk. */
  done: boolean;
}

/**
 * One chunk of a batched walk. `inBatch` is null for the first call, then the previous
 * `outBatch`; both tokens must be at least max(keySize, 8) bytes. Values of per-CPU maps take
 * roundUp(valueSize, 8) * possibleCpus() bytes each.
 */
export function mapLookupBatch(
  fd: number,
  inBatch: Buffer | null,
  outBatch: Buffer,
  keys: Buffer,
  values: Buffer,
  maxCount: number,
): BatchChunk {
  return batchWalk('bpf_map_lookup_batch', f.lookup_batch, fd, inBatch, outBatch, keys, values, maxCount);
}

/** As mapLookupBatch, deleting what it returns. */
export function mapLookupAndDeleteBatch(
  fd: number,
  inBatch: Buffer | null,
  outBatch: Buffer,
  keys: Buffer,
  values: Buffer,
  maxCount: number,
): BatchChunk {
  return batchWalk(
    'bpf_map_lookup_and_delete_batch',
    f.lookup_and_delete_batch,
    fd,
    inBatch,
    outBatch,
    keys,
    values,
    maxCount,
  );
}

function batchWalk(
  name: string,
  fn: (typeof f)['lookup_batch'],
  fd: number,
  inBatch: Buffer | null,
  outBatch: Buffer,
  keys: Buffer,
  values: Buffer,
  maxCount: number,
): BatchChunk {
  const n = [maxCount];
  const rc = fn(fd, inBatch, outBatch, keys, values, n, batchOpts(0n)) as number;
  if (rc === -ENOENT) return { count: n[0]!, done: true };
  check(name, rc);
  return { count: n[0]!, done: false };
}

export interface MapDump {
  keys: Buffer[];
  values: Buffer[];
}

/**
 * Every element of a map: batched lookups where the map type supports them, get_next_key plus
 * lookup otherwise (LPM tries, map-in-map). `valueSize` is the full per-element size (per-CPU
 * maps: roundUp(value_size, 8) * possibleCpus()).
 */
export function dumpMap(fd: number, keySize: number, valueSize: number, chunk = 4096): MapDump {
  const out: MapDump = { keys: [], values: [] };
  const tokenSize = Math.max(keySize, 8);
  const keys = Buffer.alloc(keySize * chunk);
  const values = Buffer.alloc(valueSize * chunk);
  let inBatch: Buffer | null = null;
  for (;;) {
    const outBatch = Buffer.alloc(tokenSize);
    let res: BatchChunk;
    try {
      res = mapLookupBatch(fd, inBatch, outBatch, keys, values, chunk);
    } catch (err) {
      if (
        inBatch === null &&
        err instanceof NativeError &&
        (err.errno === EINVAL || err.errno === ENOTSUPP)
      ) {
        return dumpMapByKeys(fd, keySize, valueSize);
      }
      throw err;
    }
    for (let i = 0; i < res.count; i++) {
      out.keys.push(Buffer.from(keys.subarray(i * keySize, (i + 1) * keySize)));
      out.values.push(Buffer.from(values.subarray(i * valueSize, (i + 1) * valueSize)));
    }
    if (res.done) return out;
    inBatch = outBatch;
  }
}

function dumpMapByKeys(fd: number, keySize: number, valueSize: number): MapDump {
  const out: MapDump = { keys: [], values: [] };
  let key: Buffer | null = null;
  for (;;) {
    const next = Buffer.alloc(keySize);
    if (!mapNextKey(fd, key, next)) return out;
    const value = Buffer.alloc(valueSize);
    // An element deleted between the two calls is simply skipped.
    if (mapLookup(fd, next, value)) {
      out.keys.push(next);
      out.values.push(value);
    }
    key = next;
  }
}

export interface MapCreateOptions {
  mapFlags?: number;
  innerMapFd?: number;
}

/** Creates a map outside any object (Maglev inner tables). Returns its fd. */
export function createMap(
  type: number,
  name: string,
  keySize: number,
  valueSize: number,
  maxEntries: number,
  options: MapCreateOptions = {},
): number {
  const opts = Buffer.alloc(48);
  opts.writeBigUInt64LE(48n, 0);
  opts.writeUInt32LE(options.innerMapFd ?? 0, 24);
  opts.writeUInt32LE(options.mapFlags ?? 0, 28);
  return check(
    'bpf_map_create',
    f.map_create(type, name, keySize, valueSize, maxEntries, opts) as number,
    name,
  );
}

export interface MapInfo {
  type: number;
  id: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  mapFlags: number;
  name: string;
}

export function mapInfo(fd: number): MapInfo {
  const info = Buffer.alloc(96);
  check('bpf_obj_get_info_by_fd', f.obj_info(fd, info, [info.length]) as number);
  const nameEnd = info.indexOf(0, 24);
  return {
    type: info.readUInt32LE(0),
    id: info.readUInt32LE(4),
    keySize: info.readUInt32LE(8),
    valueSize: info.readUInt32LE(12),
    maxEntries: info.readUInt32LE(16),
    mapFlags: info.readUInt32LE(20),
    name: info.toString('latin1', 24, nameEnd < 0 || nameEnd > 40 ? 40 : nameEnd),
  };
}

/** Opens a map by its id (e.g. a Maglev inner map named by its outer map). Returns its fd. */
export function mapFdById(id: number): number {
  return check('bpf_map_get_fd_by_id', f.map_fd_by_id(id) as number, `map id ${id}`);
}
