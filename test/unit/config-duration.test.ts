import { describe, expect, test } from 'vitest';
import { formatGoDuration, parseGoDuration } from '../../src/config/duration.js';

// Expected values follow Go's time.ParseDuration and Duration.String documentation and examples.
const ok = (text: string) => {
  const parsed = parseGoDuration(text);
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.nanoseconds;
};

describe('parseGoDuration', () => {
  test.each([
    ['0', 0n],
    ['0s', 0n],
    ['-0', 0n],
    ['+5s', 5_000_000_000n],
    ['30s', 30_000_000_000n],
    ['1m0s', 60_000_000_000n],
    ['1h2m3.5s', 3_723_500_000_000n],
    ['1.5h', 5_400_000_000_000n],
    ['.5s', 500_000_000n],
    ['5.s', 5_000_000_000n],
    ['300ms', 300_000_000n],
    ['-1.5h', -5_400_000_000_000n],
    ['2h45m', 9_900_000_000_000n],
    ['1us', 1_000n],
    ['1\u00b5s', 1_000n],
    ['1\u03bcs', 1_000n],
    ['7ns', 7n],
    ['1h1h', 7_200_000_000_000n],
    ['9223372036854775807ns', 9_223_372_036_854_775_807n],
    ['-9223372036854775808ns', -9_223_372_036_854_775_808n],
    ['0.000000001s', 1n],
  ])('%s', (text, nanoseconds) => {
    expect(ok(text)).toBe(nanoseconds);
  });

  test.each([
    ['', 'invalid duration ""'],
    ['30', 'missing unit in duration "30"'],
    ['1sec', 'unknown unit "sec" in duration "1sec"'],
    ['1d', 'unknown unit "d" in duration "1d"'],
    ['.s', 'invalid duration ".s"'],
    ['s', 'invalid duration "s"'],
    ['-', 'invalid duration "-"'],
    ['1 s', 'unknown unit " s" in duration "1 s"'],
    ['9223372036854775808ns', 'invalid duration "9223372036854775808ns"'],
    ['3000000h', 'invalid duration "3000000h"'],
  ])('rejects %j', (text, message) => {
    expect(parseGoDuration(text)).toEqual({ ok: false, message });
  });
});

describe('formatGoDuration (Go Duration.String)', () => {
  test.each([
    [0, '0s'],
    [30, '30s'],
    [60, '1m0s'],
    [90, '1m30s'],
    [900, '15m0s'],
    [3600, '1h0m0s'],
    [86400, '24h0m0s'],
    [3723.5, '1h2m3.5s'],
    [1.5, '1.5s'],
    [0.25, '250ms'],
    [0.0015, '1.5ms'],
    [0.000001, '1\u00b5s'],
    [0.000000007, '7ns'],
    [-90, '-1m30s'],
  ])('%s seconds → %s', (seconds, text) => {
    expect(formatGoDuration(seconds)).toBe(text);
  });

  test('formatting then parsing gives the same duration', () => {
    for (const seconds of [0, 0.001, 1, 59.999, 61, 3599, 3601.25, 123456.789]) {
      expect(Number(ok(formatGoDuration(seconds))) / 1e9).toBeCloseTo(seconds, 9);
    }
  });
});
