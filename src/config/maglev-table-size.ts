// The Maglev table size setting (bpf.maglevTableSize): a prime, as consistent hashing needs.

export const DEFAULT_MAGLEV_TABLE_SIZE = 16381;
/** Above this the build cost and the 4·M bytes per service stop being reasonable. */
export const MAX_MAGLEV_TABLE_SIZE = 1_048_573;

export function isPrime(n: number): boolean {
  if (!Number.isInteger(n) || n < 2) return false;
  if (n % 2 === 0) return n === 2;
  for (let d = 3; d * d <= n; d += 2) if (n % d === 0) return false;
  return true;
}

/** Why `size` cannot be a Maglev table size, or null when it can. */
export function maglevTableSizeProblem(size: number): string | null {
  if (!Number.isInteger(size) || size < 3) return `Maglev table size ${size} must be an integer ≥ 3`;
  if (size > MAX_MAGLEV_TABLE_SIZE) return `Maglev table size ${size} exceeds ${MAX_MAGLEV_TABLE_SIZE}`;
  if (!isPrime(size)) return `Maglev table size ${size} is not prime (e.g. 16381, 32749, 65521)`;
  return null;
}
