import { describe, expect, it } from 'vitest';
import {
  DEFAULT_MAGLEV_TABLE_SIZE,
  isPrime,
  maglevTableSizeProblem,
} from '../../src/config/maglev-table-size.js';
import { buildMaglevTable, type MaglevBackend, maglevPermutation } from '../../src/dataplanes/bpf/maglev.js';
import { murmur3x64_128 } from '../../src/dataplanes/bpf/murmur3.js';

const hex = (s: string, seed: number) =>
  murmur3x64_128(new TextEncoder().encode(s), seed).map((h) => `0x${h.toString(16)}`);

function backends(n: number, firstId = 1): MaglevBackend[] {
  return Array.from({ length: n }, (_, i) => ({ name: `10.0.${i >> 8}.${i & 255}:8080`, id: firstId + i }));
}

function ownership(table: Uint32Array): Map<number, number> {
  const counts = new Map<number, number>();
  for (const id of table) counts.set(id, (counts.get(id) ?? 0) + 1);
  return counts;
}

describe('murmur3x64_128', () => {
  // Reference values from the mmh3 5.3.1 Python package (hash64(data, seed, signed=False)).
  it.each([
    ['', 0, '0x0', '0x0'],
    ['', 42, '0xf02aa77dfa1b8523', '0xd1016610da11cbb9'],
    ['hello', 0, '0xcbd8a7b341bd9b02', '0x5b1e906a48ae1d19'],
    ['hello', 42, '0xc4b8b3c960af6f08', '0x2334b875b0efbc7a'],
    ['10.0.1.5:8080', 0, '0xb7d090511b8c3dd0', '0x5c122e0b3272c726'],
    ['10.0.1.5:8080', 42, '0xa26c1a08a635b55e', '0x3149417a47c5b642'],
    ['The quick brown fox jumps over the lazy dog', 0, '0xe34bbc7bbc071b6c', '0x7a433ca9c49a9347'],
    ['The quick brown fox jumps over the lazy dog', 42, '0x740dcf93fe0bd5d7', '0xc4546cf4ec705c8f'],
    ['0123456789abcdef0', 0, '0xeb24ae8785a5c075', '0x73fb68b3313128ca'],
    ['0123456789abcdef0', 42, '0x66fb2273f71d63e3', '0xc5a33661978eeeee'],
  ])('hash of %j with seed %i', (s, seed, h1, h2) => {
    expect(hex(s, seed)).toEqual([h1, h2]);
  });
});

describe('Maglev table size', () => {
  it('accepts primes and rejects the rest', () => {
    expect([2, 3, 251, 16381, 65521, 65537].every(isPrime)).toBe(true);
    expect([0, 1, 4, 9, 16383, 65535, 1.5, -7].some(isPrime)).toBe(false);
    expect(maglevTableSizeProblem(16381)).toBeNull();
    expect(maglevTableSizeProblem(16384)).toMatch(/not prime/);
    expect(maglevTableSizeProblem(2)).toMatch(/≥ 3/);
    expect(maglevTableSizeProblem(2_000_003)).toMatch(/exceeds/);
    expect(() => buildMaglevTable(backends(3), 1000)).toThrow(/not prime/);
  });

  it('draws skip from [1, M-1] and offset from [0, M)', () => {
    for (const b of backends(200)) {
      const { offset, skip } = maglevPermutation(b.name, 251);
      expect(offset).toBeGreaterThanOrEqual(0);
      expect(offset).toBeLessThan(251);
      expect(skip).toBeGreaterThanOrEqual(1);
      expect(skip).toBeLessThanOrEqual(250);
    }
  });
});

describe('buildMaglevTable', () => {
  it('gives every backend ⌊M/N⌋ or ⌈M/N⌉ slots and fills every slot', () => {
    for (const n of [1, 2, 3, 7, 10, 100, 160]) {
      const table = buildMaglevTable(backends(n));
      const counts = ownership(table);
      expect(counts.size).toBe(n);
      expect(counts.has(0)).toBe(false);
      const lo = Math.floor(DEFAULT_MAGLEV_TABLE_SIZE / n);
      const hi = Math.ceil(DEFAULT_MAGLEV_TABLE_SIZE / n);
      for (const c of counts.values()) {
        expect(c).toBeGreaterThanOrEqual(lo);
        expect(c).toBeLessThanOrEqual(hi);
      }
    }
  });

  it('is the same table whatever the input order', () => {
    const list = backends(25);
    const shuffled = [...list].reverse().sort((a, b) => ((a.id * 7919) % 31) - ((b.id * 7919) % 31));
    expect(buildMaglevTable(shuffled)).toEqual(buildMaglevTable(list));
  });

  it('depends on the names, not on where the ids come from', () => {
    const a = buildMaglevTable(backends(10, 1));
    const b = buildMaglevTable(backends(10, 101));
    expect(Array.from(b, (id) => id - 100)).toEqual(Array.from(a));
  });

  it('moves about 1/N of the slots when one of N backends goes', () => {
    for (const n of [10, 50, 160]) {
      const before = buildMaglevTable(backends(n));
      const gone = n >> 1; // id gone + 1
      const after = buildMaglevTable(backends(n).filter((b) => b.id !== gone + 1));
      let moved = 0;
      let movedUnrelated = 0;
      for (let i = 0; i < before.length; i++) {
        if (before[i] !== after[i]) {
          moved++;
          if (before[i] !== gone + 1) movedUnrelated++;
        }
      }
      const share = DEFAULT_MAGLEV_TABLE_SIZE / n;
      // Every slot of the departed backend moves; the others mostly stay (M ≥ 100·N ⇒ ≤ ~1 % extra).
      expect(moved).toBeGreaterThanOrEqual(Math.floor(share));
      expect(movedUnrelated / DEFAULT_MAGLEV_TABLE_SIZE).toBeLessThan(0.02);
    }
  });

  it('returns zeros for no backends and rejects duplicate names', () => {
    expect(buildMaglevTable([], 251).every((v) => v === 0)).toBe(true);
    expect(() =>
      buildMaglevTable(
        [
          { name: 'a:1', id: 1 },
          { name: 'a:1', id: 2 },
        ],
        251,
      ),
    ).toThrow(/duplicate/);
  });

  it('builds a default-size table for 1000 backends quickly', () => {
    const start = performance.now();
    const table = buildMaglevTable(backends(1000));
    expect(ownership(table).size).toBe(1000);
    expect(performance.now() - start).toBeLessThan(2000);
  });
});
