// From samples to what a reader sees: per (mode, N, measure) median and p99, the ratio table
// (bpf ÷ each other mode, same run) and the Markdown summary.

import type { BenchMode } from './kernel-probe.js';
import { type BpfCostSample, MEASURE_IDS, MEASURES, type MeasureId, type Sample } from './measures.js';
import { mergeHistograms, type Summary, summarize, summarizeHistogram } from './stats.js';

export interface Aggregate extends Summary {
  mode: BenchMode;
  services: number;
  measure: MeasureId;
  errors: number;
}

/** Median and p99 over every run (pooled measures: over every request of every run). */
export function aggregate(samples: readonly Sample[]): Aggregate[] {
  const groups = new Map<string, Sample[]>();
  for (const s of samples) {
    const key = `${s.mode}|${s.services}|${s.measure}`;
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
    out.push({
      mode: first.mode,
      services: first.services,
      measure: first.measure,
      ...summary,
      errors: group.reduce((sum, s) => sum + (s.errors ?? 0), 0),
    });
  }
  return out.sort(
    (a, b) => a.measure.localeCompare(b.measure) || a.services - b.services || a.mode.localeCompare(b.mode),
  );
}

export function findAggregate(
  aggregates: readonly Aggregate[],
  mode: BenchMode,
  services: number,
  measure: MeasureId,
): Aggregate | undefined {
  return aggregates.find((a) => a.mode === mode && a.services === services && a.measure === measure);
}

export interface BpfCostAggregate extends Summary {
  program: string;
  services: number;
}

export function aggregateBpfCost(samples: readonly BpfCostSample[]): BpfCostAggregate[] {
  const keys = [...new Set(samples.map((s) => `${s.program}|${s.services}`))];
  return keys.map((key) => {
    const group = samples.filter((s) => `${s.program}|${s.services}` === key);
    const first = group[0] as BpfCostSample;
    return {
      program: first.program,
      services: first.services,
      ...summarize(group.map((s) => s.nsPerPacket)),
    };
  });
}

/** bpf ÷ other, of the medians; null when either is missing. */
export function ratio(
  aggregates: readonly Aggregate[],
  other: BenchMode,
  services: number,
  measure: MeasureId,
): number | null {
  const bpf = findAggregate(aggregates, 'bpf', services, measure);
  const base = findAggregate(aggregates, other, services, measure);
  if (!bpf || !base || !(base.median > 0) || !Number.isFinite(bpf.median)) return null;
  return bpf.median / base.median;
}

function formatNumber(v: number): string {
  if (!Number.isFinite(v)) return '–';
  if (Math.abs(v) >= 100) return Math.round(v).toLocaleString('en');
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

export interface ReportInput {
  modes: BenchMode[];
  serviceCounts: number[];
  aggregates: Aggregate[];
  bpfCost: BpfCostAggregate[];
  /** Modes that could not run here, with the reason (e.g. ipvs: no IPVS in this kernel). */
  unavailable: { mode: BenchMode; reason: string }[];
  failures: { mode: BenchMode; services: number; rep: number; error: string }[];
}

export function ratioTable(input: ReportInput): string {
  const others = input.modes.filter((m) => m !== 'bpf');
  if (!input.modes.includes('bpf') || others.length === 0)
    return '_No ratio: bpf and at least one other mode must run._\n';
  const lines = [
    `| measure | better | ${input.serviceCounts.flatMap((n) => others.map((o) => `bpf ÷ ${o} @ N=${n.toLocaleString('en')}`)).join(' | ')} |`,
    `|---|---|${input.serviceCounts.flatMap(() => others.map(() => '---:')).join('|')}|`,
  ];
  for (const measure of MEASURE_IDS) {
    const cells = input.serviceCounts.flatMap((n) =>
      others.map((o) => {
        const r = ratio(input.aggregates, o, n, measure);
        return r === null ? '–' : `${r.toFixed(2)}×`;
      }),
    );
    lines.push(`| ${MEASURES[measure].title} | ${MEASURES[measure].better} | ${cells.join(' | ')} |`);
  }
  return `${lines.join('\n')}\n`;
}

export function valuesTable(input: ReportInput): string {
  if (input.modes.length === 0) return '_No mode was measured._\n';
  const lines = [
    `| measure | N | ${input.modes.map((m) => `${m} median (p99)`).join(' | ')} |`,
    `|---|---:|${input.modes.map(() => '---:').join('|')}|`,
  ];
  for (const measure of MEASURE_IDS) {
    for (const n of input.serviceCounts) {
      const cells = input.modes.map((mode) => {
        const a = findAggregate(input.aggregates, mode, n, measure);
        if (!a) return '–';
        const errors = a.errors > 0 ? `, ${a.errors} failed` : '';
        return `${formatNumber(a.median)} (${formatNumber(a.p99)}${errors})`;
      });
      lines.push(
        `| ${MEASURES[measure].title} [${MEASURES[measure].unit}] | ${n.toLocaleString('en')} | ${cells.join(' | ')} |`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

export function bpfCostTable(rows: readonly BpfCostAggregate[]): string {
  if (rows.length === 0) return '_Not measured (see the failures below)._\n';
  const counts = [...new Set(rows.map((r) => r.services))].sort((a, b) => a - b);
  const programs = [...new Set(rows.map((r) => r.program))];
  const lines = [
    `| program | ${counts.map((n) => `${n.toLocaleString('en')} service(s): ns/packet median (p99)`).join(' | ')} |`,
    `|---|${counts.map(() => '---:').join('|')}|`,
  ];
  for (const program of programs) {
    const cells = counts.map((n) => {
      const r = rows.find((x) => x.program === program && x.services === n);
      return r ? `${formatNumber(r.median)} (${formatNumber(r.p99)})` : '–';
    });
    lines.push(`| ${program} | ${cells.join(' | ')} |`);
  }
  return `${lines.join('\n')}\n`;
}

export function markdownReport(input: ReportInput, header: string): string {
  const parts = [header, '', '### Ratios (bpf ÷ other mode, medians of the same run)', '', ratioTable(input)];
  parts.push('### Values', '', valuesTable(input));
  parts.push('### BPF per-packet cost (BPF_PROG_TEST_RUN)', '', bpfCostTable(input.bpfCost));
  if (input.unavailable.length > 0) {
    parts.push('### Modes not run', '', ...input.unavailable.map((u) => `- **${u.mode}**: ${u.reason}`), '');
  }
  if (input.failures.length > 0) {
    parts.push(
      '### Cells that failed',
      '',
      ...input.failures.map((f) => `- ${f.mode} N=${f.services} rep ${f.rep}: ${f.error.split('\n')[0]}`),
      '',
    );
  }
  return `${parts.join('\n')}\n`;
}
