// From samples to what a reader sees: per (mode, family, N, measure) median and p99, the ratio
// tables (each of our modes ÷ the real kube-proxy's, bpf ÷ each other mode, one row per measure and
// family; IPv6 ÷ IPv4 of each mode; same run) and the Markdown summary.

import type { IPFamily } from '../src/net/ip.js';
import { type BenchMode, isKubeProxyMode, KUBE_PROXY_MODES } from './kernel-probe.js';
import { type BpfCostSample, MEASURE_IDS, MEASURES, type MeasureId, type Sample } from './measures.js';
import { mergeHistograms, type Summary, summarize, summarizeHistogram } from './stats.js';

export interface Aggregate extends Summary {
  mode: BenchMode;
  family: IPFamily;
  services: number;
  measure: MeasureId;
  errors: number;
  /** The iptables backends of its cells (modes whose rules go through iptables), once each. */
  iptablesBackends?: string[];
}

/** Median and p99 over every run (pooled measures: over every request of every run). */
export function aggregate(samples: readonly Sample[]): Aggregate[] {
  const groups = new Map<string, Sample[]>();
  for (const s of samples) {
    const key = `${s.mode}|${s.family ?? 'IPv4'}|${s.services}|${s.measure}`;
    const group = groups.get(key) ?? [];
    group.push(s);
    groups.set(key, group);
  }
  const out: Aggregate[] = [];
  for (const group of groups.values()) {
    const first = group[0] as Sample;
    const histograms = group.flatMap((s) => (s.histogram ? [s.histogram] : []));
    const summary =
      MEASURES[first.measure].pooled && histograms.length > 0
        ? summarizeHistogram(mergeHistograms(histograms))
        : summarize(group.map((s) => s.value));
    const backends = [...new Set(group.flatMap((s) => (s.iptablesBackend ? [s.iptablesBackend] : [])))];
    out.push({
      mode: first.mode,
      family: first.family ?? 'IPv4',
      services: first.services,
      measure: first.measure,
      ...summary,
      errors: group.reduce((sum, s) => sum + (s.errors ?? 0), 0),
      ...(backends.length > 0 ? { iptablesBackends: backends } : {}),
    });
  }
  return out.sort(
    (a, b) =>
      a.measure.localeCompare(b.measure) ||
      a.family.localeCompare(b.family) ||
      a.services - b.services ||
      a.mode.localeCompare(b.mode),
  );
}

/** Older runs' aggregates have no family: theirs was IPv4. */
const familyOf = (a: { family?: IPFamily }): IPFamily => a.family ?? 'IPv4';

export function findAggregate(
  aggregates: readonly Aggregate[],
  mode: BenchMode,
  services: number,
  measure: MeasureId,
  family: IPFamily = 'IPv4',
): Aggregate | undefined {
  return aggregates.find(
    (a) => a.mode === mode && a.services === services && a.measure === measure && familyOf(a) === family,
  );
}

/** The families a run's aggregates cover, IPv4 first. */
export function familiesOf(aggregates: readonly { family?: IPFamily }[]): IPFamily[] {
  const seen = new Set(aggregates.map(familyOf));
  return (['IPv4', 'IPv6'] as const).filter((f) => seen.has(f));
}

export interface BpfCostAggregate extends Summary {
  program: string;
  family: IPFamily;
  services: number;
  /** The row's floor (BpfCostSample.floor). */
  floor?: string;
}

export function aggregateBpfCost(samples: readonly BpfCostSample[]): BpfCostAggregate[] {
  const keyOf = (s: BpfCostSample) => `${s.program}|${s.family ?? 'IPv4'}|${s.services}`;
  const keys = [...new Set(samples.map(keyOf))];
  return keys.map((key) => {
    const group = samples.filter((s) => keyOf(s) === key);
    const first = group[0] as BpfCostSample;
    return {
      program: first.program,
      family: first.family ?? 'IPv4',
      services: first.services,
      ...(first.floor === undefined ? {} : { floor: first.floor }),
      ...summarize(group.map((s) => s.nsPerPacket)),
    };
  });
}

/** Two modes compared: numerator ÷ denominator. */
export type ModePair = readonly [BenchMode, BenchMode];

/** numerator ÷ denominator, of the medians (both of `family`); null when either is missing. */
export function ratio(
  aggregates: readonly Aggregate[],
  [numerator, denominator]: ModePair,
  services: number,
  measure: MeasureId,
  family: IPFamily = 'IPv4',
): number | null {
  const top = findAggregate(aggregates, numerator, services, measure, family);
  const base = findAggregate(aggregates, denominator, services, measure, family);
  if (!top || !base || !(base.median > 0) || !Number.isFinite(top.median)) return null;
  return top.median / base.median;
}

/**
 * Against each real kube-proxy mode that ran: the mode of ours that re-implements it, then bpf.
 * Ours ÷ real near 1 means the re-implementation matches it.
 */
export function kubeProxyPairs(modes: readonly BenchMode[]): ModePair[] {
  return modes
    .filter(isKubeProxyMode)
    .flatMap((real) =>
      [KUBE_PROXY_MODES[real], 'bpf' as const]
        .filter((ours) => modes.includes(ours))
        .map((ours): ModePair => [ours, real]),
    );
}

/** bpf ÷ each other mode of ours. */
export function bpfPairs(modes: readonly BenchMode[]): ModePair[] {
  if (!modes.includes('bpf')) return [];
  return modes.filter((m) => m !== 'bpf' && !isKubeProxyMode(m)).map((m): ModePair => ['bpf', m]);
}

function formatNumber(v: number): string {
  if (!Number.isFinite(v)) return '–';
  if (Math.abs(v) >= 100) return Math.round(v).toLocaleString('en');
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

export interface ReportInput {
  modes: BenchMode[];
  /** The families measured, IPv4 first: the tables have a row for each. */
  families: IPFamily[];
  serviceCounts: number[];
  aggregates: Aggregate[];
  bpfCost: BpfCostAggregate[];
  /** Modes that could not run here, with the reason (e.g. ipvs: no IPVS in this kernel). */
  unavailable: { mode: BenchMode; reason: string }[];
  failures: { mode: BenchMode; family?: IPFamily; services: number; rep: number; error: string }[];
}

/** A ratio cell: "1.23×", or "–" when either side is missing. */
const ratioCell = (r: number | null) => (r === null ? '–' : `${r.toFixed(2)}×`);

/** One row per measure and family, one column per N and pair. */
export function ratioTable(input: ReportInput, pairs: readonly ModePair[]): string {
  if (pairs.length === 0) return '_No ratio: bpf and at least one other mode must run._\n';
  const lines = [
    `| measure | family | better | ${input.serviceCounts.flatMap((n) => pairs.map(([a, b]) => `${a} ÷ ${b} @ N=${n.toLocaleString('en')}`)).join(' | ')} |`,
    `|---|---|---|${input.serviceCounts.flatMap(() => pairs.map(() => '---:')).join('|')}|`,
  ];
  for (const measure of MEASURE_IDS) {
    for (const family of input.families) {
      const cells = input.serviceCounts.flatMap((n) =>
        pairs.map((pair) => ratioCell(ratio(input.aggregates, pair, n, measure, family))),
      );
      lines.push(
        `| ${MEASURES[measure].title} | ${family} | ${MEASURES[measure].better} | ${cells.join(' | ')} |`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

/** Each mode's IPv6 median ÷ its IPv4 median (same run), one column per N and mode. */
export function familyRatioTable(input: ReportInput): string {
  const columns = input.serviceCounts.flatMap((n) => input.modes.map((mode) => ({ n, mode })));
  const lines = [
    `| measure | better | ${columns.map(({ n, mode }) => `${mode} @ N=${n.toLocaleString('en')}`).join(' | ')} |`,
    `|---|---|${columns.map(() => '---:').join('|')}|`,
  ];
  for (const measure of MEASURE_IDS) {
    const cells = columns.map(({ n, mode }) => {
      const v6 = findAggregate(input.aggregates, mode, n, measure, 'IPv6');
      const v4 = findAggregate(input.aggregates, mode, n, measure, 'IPv4');
      return ratioCell(
        v6 && v4 && v4.median > 0 && Number.isFinite(v6.median) ? v6.median / v4.median : null,
      );
    });
    lines.push(`| ${MEASURES[measure].title} | ${MEASURES[measure].better} | ${cells.join(' | ')} |`);
  }
  return `${lines.join('\n')}\n`;
}

export function valuesTable(input: ReportInput): string {
  if (input.modes.length === 0) return '_No mode was measured._\n';
  const lines = [
    `| measure | family | N | ${input.modes.map((m) => `${m} median (p99)`).join(' | ')} |`,
    `|---|---|---:|${input.modes.map(() => '---:').join('|')}|`,
  ];
  for (const measure of MEASURE_IDS) {
    for (const family of input.families) {
      for (const n of input.serviceCounts) {
        const cells = input.modes.map((mode) => {
          const a = findAggregate(input.aggregates, mode, n, measure, family);
          if (!a) return '–';
          const errors = a.errors > 0 ? `, ${a.errors} failed` : '';
          return `${formatNumber(a.median)} (${formatNumber(a.p99)}${errors})`;
        });
        // A control-plane N measured in one family only has no row in the other.
        if (cells.every((c) => c === '–')) continue;
        lines.push(
          `| ${MEASURES[measure].title} [${MEASURES[measure].unit}] | ${family} | ${n.toLocaleString('en')} | ${cells.join(' | ')} |`,
        );
        if (MEASURES[measure].plane === 'data' && input.modes.includes('direct')) {
          const ratios = input.modes.map((mode) =>
            ratioCell(ratio(input.aggregates, [mode, 'direct'], n, measure, family)),
          );
          lines.push(`| ↳ ÷ direct | ${family} | ${n.toLocaleString('en')} | ${ratios.join(' | ')} |`);
        }
      }
    }
  }
  return `${lines.join('\n')}\n`;
}

/** A row's median ÷ its floor's at the same service count (the floor is measured in one family
 * only); undefined without a floor. */
export function floorRatio(rows: readonly BpfCostAggregate[], row: BpfCostAggregate): number | undefined {
  const floor = rows.find((x) => x.program === row.floor && x.services === row.services);
  return floor && floor.median > 0 ? row.median / floor.median : undefined;
}

/** One row per program and family (IPv4 first), one column per service count; a row with a floor
 * also shows its median ÷ the floor's. */
export function bpfCostTable(rows: readonly BpfCostAggregate[]): string {
  if (rows.length === 0) return '_Not measured (see the failures below)._\n';
  const counts = [...new Set(rows.map((r) => r.services))].sort((a, b) => a - b);
  const keys = [...new Map(rows.map((r) => [`${r.program}|${familyOf(r)}`, r])).values()].sort((a, b) =>
    familyOf(a).localeCompare(familyOf(b)),
  );
  const lines = [
    `| program | family | ${counts.map((n) => `${n.toLocaleString('en')} service(s): ns/packet median (p99), ÷ its floor`).join(' | ')} |`,
    `|---|---|${counts.map(() => '---:').join('|')}|`,
  ];
  for (const key of keys) {
    const cells = counts.map((n) => {
      const r = rows.find(
        (x) => x.program === key.program && familyOf(x) === familyOf(key) && x.services === n,
      );
      if (!r) return '–';
      const x = floorRatio(rows, r);
      return `${formatNumber(r.median)} (${formatNumber(r.p99)})${x === undefined ? '' : `, ${x.toFixed(2)}× floor`}`;
    });
    lines.push(`| ${key.program} | ${familyOf(key)} | ${cells.join(' | ')} |`);
  }
  return `${lines.join('\n')}\n`;
}

/** The data-plane measures: the ones the direct mode has, the proxy's cost over it. */
const DATA_PLANE_MEASURES = MEASURE_IDS.filter((m) => MEASURES[m].plane === 'data');

/** Each mode ÷ direct (no proxy), data-plane measures, one column per N and mode. */
export function directRatioTable(input: ReportInput): string {
  const modes = input.modes.filter((m) => m !== 'direct');
  const columns = input.serviceCounts.flatMap((n) => modes.map((mode) => ({ n, mode })));
  const lines = [
    `| measure | family | better | ${columns.map(({ n, mode }) => `${mode} ÷ direct @ N=${n.toLocaleString('en')}`).join(' | ')} |`,
    `|---|---|---|${columns.map(() => '---:').join('|')}|`,
  ];
  for (const measure of DATA_PLANE_MEASURES)
    for (const family of input.families) {
      const cells = columns.map(({ n, mode }) =>
        ratioCell(ratio(input.aggregates, [mode, 'direct'], n, measure, family)),
      );
      lines.push(
        `| ${MEASURES[measure].title} | ${family} | ${MEASURES[measure].better} | ${cells.join(' | ')} |`,
      );
    }
  return `${lines.join('\n')}\n`;
}

/** A goal on a ratio of the same run: numerator ÷ denominator of a measure, at one N or at every N. */
export interface Goal {
  pair: ModePair;
  measure: MeasureId;
  services: number | 'every';
  /** At least this for a "higher" measure, at most for a "lower" one. */
  bound: number;
}

/** Issue 26's goals: bpf at the physical limit in throughput, and cheaper per connection than kube-proxy. */
export const GOALS: readonly Goal[] = [
  { pair: ['bpf', 'direct'], measure: 'crrPerSec', services: 'every', bound: 0.98 },
  { pair: ['bpf', 'direct'], measure: 'wrkReqPerSec', services: 'every', bound: 0.98 },
  { pair: ['bpf', 'kube-proxy-nftables'], measure: 'cpuPerConnUs', services: 1, bound: 0.7 },
  { pair: ['bpf', 'kube-proxy-iptables'], measure: 'cpuPerConnUs', services: 10_000, bound: 0.5 },
];

export interface GoalResult {
  goal: Goal;
  services: number;
  ratio: number | null;
  /** null when either side was not measured. */
  reached: boolean | null;
  /**
   * What each proxy adds over direct, compared: (numerator − direct) ÷ (denominator − direct);
   * null without direct, or against direct itself.
   */
  overDirect: number | null;
}

/** Each goal at each N it applies to (IPv4, medians of the same run). */
export function goalResults(input: ReportInput, goals: readonly Goal[] = GOALS): GoalResult[] {
  return goals.flatMap((goal) =>
    (goal.services === 'every' ? input.serviceCounts : [goal.services]).flatMap((services) => {
      const r = ratio(input.aggregates, goal.pair, services, goal.measure);
      // "every N" means every N the data plane was measured at (the control-plane N have no loads).
      if (goal.services === 'every' && r === null) return [];
      const higher = MEASURES[goal.measure].better === 'higher';
      const median = (mode: BenchMode) =>
        findAggregate(input.aggregates, mode, services, goal.measure)?.median;
      const [top, base, direct] = [median(goal.pair[0]), median(goal.pair[1]), median('direct')];
      return [
        {
          goal,
          services,
          ratio: r,
          reached: r === null ? null : higher ? r >= goal.bound : r <= goal.bound,
          overDirect: goal.pair[1] === 'direct' ? null : excessRatio(top, base, direct, higher),
        },
      ];
    }),
  );
}

/**
 * (top − direct) ÷ (base − direct): what one proxy adds over direct against what the other adds.
 * null when a side is missing or when base adds nothing measurable (its median at or past
 * direct's: a cost of noise's size, which would turn the ratio's sign or size meaningless).
 */
export function excessRatio(
  top: number | undefined,
  base: number | undefined,
  direct: number | undefined,
  higher: boolean,
): number | null {
  if (top === undefined || base === undefined || direct === undefined) return null;
  const baseCost = higher ? direct - base : base - direct;
  const topCost = higher ? direct - top : top - direct;
  return baseCost > 0 ? topCost / baseCost : null;
}

export function goalsTable(input: ReportInput): string {
  const lines = [
    '| goal | N | ratio | reached | over direct: (a − direct) ÷ (b − direct) |',
    '|---|---:|---:|---|---:|',
  ];
  for (const { goal, services, ratio: r, reached, overDirect } of goalResults(input)) {
    const sign = MEASURES[goal.measure].better === 'higher' ? '≥' : '≤';
    const verdict = reached === null ? 'not measured' : reached ? 'reached' : 'missed';
    // Three decimals: a ratio just under its bound must not print as the bound itself.
    const measured = r === null ? '–' : `${r.toFixed(3)}×`;
    lines.push(
      `| ${goal.pair[0]} ÷ ${goal.pair[1]}, ${MEASURES[goal.measure].title} ${sign} ${goal.bound} | ${services.toLocaleString('en')} | ${measured} | ${verdict} | ${ratioCell(overDirect)} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}

/** Which iptables backend held each mode's rules at each N (from its cells' samples). */
export function iptablesBackendLines(input: ReportInput): string[] {
  const seen = new Map<string, Set<string>>();
  for (const a of input.aggregates)
    for (const backend of a.iptablesBackends ?? []) {
      const key = `${a.mode} N=${a.services.toLocaleString('en')} ${familyOf(a)}`;
      seen.set(key, (seen.get(key) ?? new Set()).add(backend));
    }
  return [...seen].map(([key, backends]) => `- ${key}: ${[...backends].join(', ')}`);
}

export function markdownReport(input: ReportInput, header: string): string {
  const parts = [header, ''];
  const real = kubeProxyPairs(input.modes);
  if (real.length > 0)
    parts.push(
      '### Ours ÷ the real kube-proxy (medians of the same run; near 1× means they match)',
      '',
      ratioTable(input, real),
    );
  parts.push(
    '### Ratios (bpf ÷ other mode, medians of the same run)',
    '',
    ratioTable(input, bpfPairs(input.modes)),
  );
  if (input.modes.includes('direct'))
    parts.push(
      '### Each mode ÷ direct (no Service, no proxy: the physical limit; medians of the same run)',
      '',
      directRatioTable(input),
    );
  parts.push("### Issue 26's goals (IPv4, medians of the same run)", '', goalsTable(input));
  const backends = iptablesBackendLines(input);
  if (backends.length > 0) parts.push('### iptables backend of each cell', '', ...backends, '');
  if (input.families.length > 1)
    parts.push(
      '### IPv6 ÷ IPv4 (each mode, medians of the same run; near 1× means IPv6 costs what IPv4 does)',
      '',
      familyRatioTable(input),
    );
  parts.push('### Values', '', valuesTable(input));
  parts.push('### BPF per-packet cost (BPF_PROG_TEST_RUN)', '', bpfCostTable(input.bpfCost));
  if (input.unavailable.length > 0) {
    parts.push('### Modes not run', '', ...input.unavailable.map((u) => `- **${u.mode}**: ${u.reason}`), '');
  }
  if (input.failures.length > 0) {
    parts.push(
      '### Cells that failed',
      '',
      ...input.failures.map(
        (f) => `- ${f.mode} ${f.family ?? 'IPv4'} N=${f.services} rep ${f.rep}: ${f.error.split('\n')[0]}`,
      ),
      '',
    );
  }
  return `${parts.join('\n')}\n`;
}
