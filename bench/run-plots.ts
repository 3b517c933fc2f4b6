// The charts of one measure of a run (bench/harness.ts draws them). A throughput's "p99" over a few
// repetitions says little, so each mode's median is drawn with its spread: a whisker from its
// lowest to its highest repetition (the per-run values). A latency pools every request of every
// run, so its tail is real: its p99 is drawn dashed beside the median. When the real kube-proxy
// ran, a second panel below gives each of our modes' median ÷ the real kube-proxy's (1× = the same).

import type { IPFamily } from '../src/net/ip.js';
import type { BenchMode } from './kernel-probe.js';
import { MEASURES, type MeasureId, type Sample } from './measures.js';
import type { Chart, Series } from './plot.js';
import { MODE_COLORS } from './plot.js';
import { type Aggregate, findAggregate, kubeProxyPairs, ratio } from './report.js';

/** What the charts are drawn from: a run's results. */
export interface RunData {
  modes: readonly BenchMode[];
  samples: readonly Sample[];
  aggregates: readonly Aggregate[];
}

/** The measure's panel, then (when the real kube-proxy ran) its ratio panel. */
export function measureCharts(
  run: RunData,
  counts: readonly number[],
  measure: MeasureId,
  family: IPFamily,
): Chart[] {
  const info = MEASURES[measure];
  const charts: Chart[] = [
    {
      title: `${info.title}, ${family}`,
      xLabel: 'services (N, log scale)',
      yLabel: info.unit,
      series: run.modes.flatMap((mode) => modeSeries(run, counts, measure, family, mode)),
    },
  ];
  const ratios = ratioSeries(run, counts, measure, family);
  if (ratios.length > 0)
    charts.push({
      title: `The same, ÷ the real kube-proxy (medians; ${info.better} is better)`,
      xLabel: 'services (N, log scale)',
      yLabel: '× the real kube-proxy',
      series: ratios,
      reference: 1,
    });
  return charts;
}

/** A mode's median with its min–max whiskers, and its p99 for a pooled measure; none without data
 * (direct has no control-plane measures: no empty legend entries for it). */
function modeSeries(
  run: RunData,
  counts: readonly number[],
  measure: MeasureId,
  family: IPFamily,
  mode: BenchMode,
): Series[] {
  const found = counts.flatMap((n) => {
    const a = findAggregate(run.aggregates, mode, n, measure, family);
    return a ? [{ n, a }] : [];
  });
  if (found.length === 0) return [];
  const color = MODE_COLORS[mode] ?? '#000';
  const reps = (n: number) =>
    run.samples
      .filter(
        (s) =>
          s.mode === mode && s.services === n && s.measure === measure && (s.family ?? 'IPv4') === family,
      )
      .map((s) => s.value)
      .filter(Number.isFinite);
  const spread = found.flatMap(({ n }) => {
    const values = reps(n);
    return values.length > 1 ? [{ x: n, lo: Math.min(...values), hi: Math.max(...values) }] : [];
  });
  const median: Series = {
    name: spread.length > 0 ? `${mode} median, min–max` : `${mode} median`,
    color,
    points: found.map(({ n, a }) => ({ x: n, y: a.median })),
    spread,
  };
  if (!MEASURES[measure].pooled) return [median];
  return [
    median,
    { name: `${mode} p99`, color, points: found.map(({ n, a }) => ({ x: n, y: a.p99 })), dashed: true },
  ];
}

/** Each of our modes ÷ the real kube-proxy mode it is compared with, at every N both have. */
function ratioSeries(
  run: RunData,
  counts: readonly number[],
  measure: MeasureId,
  family: IPFamily,
): Series[] {
  const drawn = new Set<BenchMode>();
  return kubeProxyPairs(run.modes).flatMap(([ours, real]) => {
    const points = counts.flatMap((n) => {
      const r = ratio(run.aggregates, [ours, real], n, measure, family);
      return r === null ? [] : [{ x: n, y: r }];
    });
    if (points.length === 0) return [];
    // bpf is compared with each real mode: its second line is dashed.
    const dashed = drawn.has(ours);
    drawn.add(ours);
    return [{ name: `${ours} ÷ ${real}`, color: MODE_COLORS[ours] ?? '#000', points, dashed }];
  });
}
