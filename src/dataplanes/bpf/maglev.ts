// Maglev consistent hashing (Eisenbud et al., NSDI 2016, "Pseudocode 1"): a table of M slots, M
// prime, each holding a backend id. Every backend walks its own permutation of the slots
// (offset + j·skip mod M) and the backends take turns claiming their next free preferred slot,
// so each owns ⌊M/N⌋ or ⌈M/N⌉ slots and a change of the backend set moves few slots.
// The permutation comes from the backend's "ip:port" name, never from node-local ids, and the
// backends are sorted first: every node builds the same table from the same endpoints.

import { DEFAULT_MAGLEV_TABLE_SIZE, maglevTableSizeProblem } from '../../config/maglev-table-size.js';
import { murmur3x64_128 } from './murmur3.js';

/** Same seed on every node (the tables must agree cluster-wide); changing it reshuffles every table. */
export const MAGLEV_HASH_SEED = 0x6b627078; // "kbpx"
export interface MaglevBackend {
  /** "ip:port" as the endpoint's net.JoinHostPort form; the permutation is derived from it. */
  name: string;
  /** What the table slot holds: the node-local backend id the datapath resolves. */
  id: number;
}

const encoder = new TextEncoder();

/** offset ∈ [0, M) and skip ∈ [1, M-1] of a backend's permutation. */
export function maglevPermutation(
  name: string,
  size: number,
  seed = MAGLEV_HASH_SEED,
): { offset: number; skip: number } {
  const [h1, h2] = murmur3x64_128(encoder.encode(name), seed);
  const m = BigInt(size);
  return { offset: Number(h1 % m), skip: Number(h2 % (m - 1n)) + 1 };
}

/**
 * The lookup table: entry[i] is the id of the backend owning slot i. An empty backend list gives a
 * table of zeros (0 is never a backend id). Throws on a non-prime size or duplicate names.
 */
export function buildMaglevTable(
  backends: readonly MaglevBackend[],
  size = DEFAULT_MAGLEV_TABLE_SIZE,
  seed = MAGLEV_HASH_SEED,
): Uint32Array {
  const problem = maglevTableSizeProblem(size);
  if (problem) throw new Error(problem);
  const table = new Uint32Array(size);
  const n = backends.length;
  if (n === 0) return table;
  const sorted = [...backends].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (let i = 1; i < n; i++) {
    if (sorted[i]!.name === sorted[i - 1]!.name)
      throw new Error(`duplicate Maglev backend ${sorted[i]!.name}`);
  }
  const ids = new Uint32Array(n);
  const skip = new Uint32Array(n);
  // Each backend's next preferred slot, advanced incrementally ((prev + skip) mod M) so the
  // arithmetic stays within 32-bit integers.
  const cursor = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const perm = maglevPermutation(sorted[i]!.name, size, seed);
    ids[i] = sorted[i]!.id;
    skip[i] = perm.skip;
    cursor[i] = perm.offset;
  }
  const taken = new Uint8Array(size);
  let filled = 0;
  while (true) {
    for (let i = 0; i < n; i++) {
      let c = cursor[i]!;
      while (taken[c]) c = (c + skip[i]!) % size;
      taken[c] = 1;
      table[c] = ids[i]!;
      cursor[i] = (c + skip[i]!) % size;
      if (++filled === size) return table;
    }
  }
}
