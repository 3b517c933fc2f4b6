// kube-proxy prints `--probability` with Go's fmt "%0.10f" of 1/n. Go rounds the exact binary
// value of the double half-to-even; JavaScript's toFixed rounds decimal ties away from zero, so
// the two differ where 1/n is an exact tie at the last digit (n = 2048: Go prints 0.0004882812).
// This prints the exact decimal expansion of the double instead of trusting toFixed.

/** Go's strconv.FormatFloat(x, 'f', digits, 64) for finite x >= 0. */
export function formatFixedLikeGo(x: number, digits: number): string {
  if (!Number.isFinite(x) || x < 0) throw new Error(`formatFixedLikeGo: unsupported value ${x}`);
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  const biasedExponent = Number((bits >> 52n) & 0x7ffn);
  const fraction = bits & ((1n << 52n) - 1n);
  // x = mantissa * 2^exponent exactly.
  const mantissa = biasedExponent === 0 ? fraction : fraction | (1n << 52n);
  const exponent = (biasedExponent === 0 ? 1 : biasedExponent) - 1075;

  const scale = 10n ** BigInt(digits);
  let scaled: bigint;
  if (exponent >= 0) {
    scaled = (mantissa << BigInt(exponent)) * scale;
  } else {
    const denominator = 1n << BigInt(-exponent);
    const numerator = mantissa * scale;
    scaled = numerator / denominator;
    const twiceRemainder = (numerator % denominator) * 2n;
    if (twiceRemainder > denominator || (twiceRemainder === denominator && scaled % 2n === 1n)) {
      scaled += 1n;
    }
  }
  const text = scaled.toString().padStart(digits + 1, '0');
  if (digits === 0) return text;
  return `${text.slice(0, -digits)}.${text.slice(-digits)}`;
}

const probabilityCache = new Map<number, string>();

/** computeProbability(n) of the iptables proxier: "%0.10f" of 1/n. */
export function probability(n: number): string {
  let cached = probabilityCache.get(n);
  if (cached === undefined) {
    cached = formatFixedLikeGo(1 / n, 10);
    probabilityCache.set(n, cached);
  }
  return cached;
}
