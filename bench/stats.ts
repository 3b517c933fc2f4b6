// Summaries of samples: median and p99 (nearest rank), and a compact log-bucket histogram so
// that per-connection latencies from every run can be pooled without storing each sample.

export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number;
}

export const median = (samples: readonly number[]) => percentile(samples, 50);

export interface Summary {
  median: number;
  p99: number;
  n: number;
}

export function summarize(samples: readonly number[]): Summary {
  return { median: median(samples), p99: percentile(samples, 99), n: samples.length };
}

/** Bucket width: 2 % (a value is reported as its bucket's lower bound, at most 2 % low). */
const BUCKET_GROWTH = 1.02;
const LOG_GROWTH = Math.log(BUCKET_GROWTH);

/** Sparse histogram: bucket index (floor(log_1.02(value))) → count. Values below 1 go to bucket 0. */
export type Histogram = Record<string, number>;

export function histogram(samples: readonly number[]): Histogram {
  const out: Histogram = {};
  for (const v of samples) {
    const bucket = v <= 1 ? 0 : Math.floor(Math.log(v) / LOG_GROWTH);
    out[bucket] = (out[bucket] ?? 0) + 1;
  }
  return out;
}

export function mergeHistograms(histograms: readonly Histogram[]): Histogram {
  const out: Histogram = {};
  for (const h of histograms) for (const [k, n] of Object.entries(h)) out[k] = (out[k] ?? 0) + n;
  return out;
}

export function histogramPercentile(h: Histogram, p: number): number {
  const buckets = Object.entries(h)
    .map(([k, n]) => [Number(k), n] as const)
    .sort((a, b) => a[0] - b[0]);
  const total = buckets.reduce((s, [, n]) => s + n, 0);
  if (total === 0) return Number.NaN;
  const rank = Math.max(1, Math.ceil((p / 100) * total));
  let seen = 0;
  for (const [bucket, n] of buckets) {
    seen += n;
    if (seen >= rank) return bucket === 0 ? 1 : BUCKET_GROWTH ** bucket;
  }
  return Number.NaN;
}

export function summarizeHistogram(h: Histogram): Summary {
  return {
    median: histogramPercentile(h, 50),
    p99: histogramPercentile(h, 99),
    n: Object.values(h).reduce((s, n) => s + n, 0),
  };
}
