// Go duration strings ("30s", "1m0s", "1h2m3.5s", "0s"), as kube-proxy's metav1.Duration fields
// carry them. Parsing follows Go's time.ParseDuration exactly, including its overflow and
// "0 needs no unit" rules, so a file kube-proxy accepts is accepted here and vice versa.

const NANOSECONDS_PER_UNIT: ReadonlyMap<string, bigint> = new Map([
  ['ns', 1n],
  ['us', 1_000n],
  ['\u00b5s', 1_000n], // MICRO SIGN
  ['\u03bcs', 1_000n], // GREEK SMALL LETTER MU
  ['ms', 1_000_000n],
  ['s', 1_000_000_000n],
  ['m', 60_000_000_000n],
  ['h', 3_600_000_000_000n],
]);

const MAX_INT64 = (1n << 63n) - 1n;

export type DurationParse = { ok: true; nanoseconds: bigint } | { ok: false; message: string };

function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= '0' && c <= '9';
}

export function parseGoDuration(text: string): DurationParse {
  const invalid = (): DurationParse => ({ ok: false, message: `invalid duration ${JSON.stringify(text)}` });
  let rest = text;
  let negative = false;
  if (rest.startsWith('-') || rest.startsWith('+')) {
    negative = rest.startsWith('-');
    rest = rest.slice(1);
  }
  if (rest === '0') return { ok: true, nanoseconds: 0n };
  if (rest === '') return invalid();
  let total = 0n;
  while (rest !== '') {
    if (!(rest[0] === '.' || isDigit(rest[0]))) return invalid();
    let i = 0;
    while (isDigit(rest[i])) i++;
    const wholeDigits = rest.slice(0, i);
    rest = rest.slice(i);
    const whole = wholeDigits === '' ? 0n : BigInt(wholeDigits);
    if (whole > 1n << 63n) return invalid();
    let fractionDigits = '';
    if (rest.startsWith('.')) {
      rest = rest.slice(1);
      let j = 0;
      while (isDigit(rest[j])) j++;
      fractionDigits = rest.slice(0, j);
      rest = rest.slice(j);
    }
    if (wholeDigits === '' && fractionDigits === '') return invalid();
    let u = 0;
    while (u < rest.length && !(rest[u] === '.' || isDigit(rest[u]))) u++;
    if (u === 0) return { ok: false, message: `missing unit in duration ${JSON.stringify(text)}` };
    const unitName = rest.slice(0, u);
    rest = rest.slice(u);
    const unit = NANOSECONDS_PER_UNIT.get(unitName);
    if (unit === undefined) {
      return {
        ok: false,
        message: `unknown unit ${JSON.stringify(unitName)} in duration ${JSON.stringify(text)}`,
      };
    }
    if (whole > (1n << 63n) / unit) return invalid();
    let value = whole * unit;
    // Go keeps at most the fraction digits that fit an int64 and scales in float64; so do we.
    const kept = fractionDigits.slice(0, 18);
    if (kept !== '' && BigInt(kept) > 0n) {
      value += BigInt(Math.trunc(Number(kept) * (Number(unit) / 10 ** kept.length)));
      if (value > 1n << 63n) return invalid();
    }
    total += value;
    if (total > 1n << 63n) return invalid();
  }
  if (negative) return { ok: true, nanoseconds: -total };
  if (total > MAX_INT64) return invalid();
  return { ok: true, nanoseconds: total };
}

export function nanosecondsToSeconds(nanoseconds: bigint): number {
  return Number(nanoseconds) / 1e9;
}

/** Go's time.Duration.String(): "0s", "1.5ms", "1m30s", "24h0m0s". */
export function formatGoDuration(seconds: number): string {
  let ns = BigInt(Math.round(seconds * 1e9));
  if (ns === 0n) return '0s';
  const sign = ns < 0n ? '-' : '';
  if (ns < 0n) ns = -ns;
  const withFraction = (value: bigint, unit: bigint, suffix: string): string => {
    const whole = value / unit;
    const fraction = (value % unit)
      .toString()
      .padStart(unit.toString().length - 1, '0')
      .replace(/0+$/, '');
    return `${whole}${fraction === '' ? '' : `.${fraction}`}${suffix}`;
  };
  if (ns < 1_000n) return `${sign}${ns}ns`;
  if (ns < 1_000_000n) return `${sign}${withFraction(ns, 1_000n, '\u00b5s')}`;
  if (ns < 1_000_000_000n) return `${sign}${withFraction(ns, 1_000_000n, 'ms')}`;
  const hours = ns / 3_600_000_000_000n;
  const minutes = (ns / 60_000_000_000n) % 60n;
  const secondsPart = withFraction(ns % 60_000_000_000n, 1_000_000_000n, 's');
  if (hours > 0n) return `${sign}${hours}h${minutes}m${secondsPart}`;
  if (minutes > 0n) return `${sign}${minutes}m${secondsPart}`;
  return `${sign}${secondsPart}`;
}
