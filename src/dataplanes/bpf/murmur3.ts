// MurmurHash3 x64_128 (Austin Appleby, SMHasher), the 128-bit hash Maglev's permutation is drawn from.
// BigInt keeps the 64-bit arithmetic exact; it only runs once per backend per table build.

const MASK64 = (1n << 64n) - 1n;
const C1 = 0x87c37b91114253d5n;
const C2 = 0x4cf5ad432745937fn;

function rotl64(x: bigint, r: bigint): bigint {
  return ((x << r) | (x >> (64n - r))) & MASK64;
}

function fmix64(k: bigint): bigint {
  let h = k;
  h ^= h >> 33n;
  h = (h * 0xff51afd7ed558ccdn) & MASK64;
  h ^= h >> 33n;
  h = (h * 0xc4ceb9fe1a85ec53n) & MASK64;
  h ^= h >> 33n;
  return h;
}

function mixK1(k: bigint): bigint {
  return (rotl64((k * C1) & MASK64, 31n) * C2) & MASK64;
}

function mixK2(k: bigint): bigint {
  return (rotl64((k * C2) & MASK64, 33n) * C1) & MASK64;
}

/** Little-endian 64-bit word of `data` starting at `offset`, `count` bytes (≤ 8) of it. */
function readLE(data: Uint8Array, offset: number, count: number): bigint {
  let v = 0n;
  for (let i = count - 1; i >= 0; i--) v = (v << 8n) | BigInt(data[offset + i]!);
  return v;
}

/** The two 64-bit halves [h1, h2] of MurmurHash3_x64_128(data, seed). */
export function murmur3x64_128(data: Uint8Array, seed = 0): [bigint, bigint] {
  const len = data.length;
  const blocks = Math.floor(len / 16);
  let h1 = BigInt(seed >>> 0);
  let h2 = h1;
  for (let i = 0; i < blocks; i++) {
    h1 ^= mixK1(readLE(data, i * 16, 8));
    h1 = (((rotl64(h1, 27n) + h2) & MASK64) * 5n + 0x52dce729n) & MASK64;
    h2 ^= mixK2(readLE(data, i * 16 + 8, 8));
    h2 = (((rotl64(h2, 31n) + h1) & MASK64) * 5n + 0x38495ab5n) & MASK64;
  }
  const tail = blocks * 16;
  const rest = len & 15;
  if (rest > 8) h2 ^= mixK2(readLE(data, tail + 8, rest - 8));
  if (rest > 0) h1 ^= mixK1(readLE(data, tail, Math.min(rest, 8)));
  h1 ^= BigInt(len);
  h2 ^= BigInt(len);
  h1 = (h1 + h2) & MASK64;
  h2 = (h2 + h1) & MASK64;
  h1 = fmix64(h1);
  h2 = fmix64(h2);
  h1 = (h1 + h2) & MASK64;
  h2 = (h2 + h1) & MASK64;
  return [h1, h2];
}
