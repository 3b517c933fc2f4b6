// The soak's report: report.md (the verdicts, the traffic per stream, the churn, the plots),
// report.json (everything the verdicts were drawn from) and plots over time (bench/plot.ts).

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chartSvg, type Series, writePlot } from '../plot.js';
import type { CheckResult } from './checks.js';
import type { ChurnEvent, ChurnKind } from './churn.js';
import type { NodeSample } from './metrics.js';

export interface SoakReport {
  mode: string;
  minutes: number;
  /** The node whose agent lived through the soak (the other's was disrupted). */
  steady: string;
  startedAt: number;
  trafficEndedAt: number;
  /** From the end of traffic until every map had drained (or the limit). */
  settleMs: number;
  checks: CheckResult[];
  streams: { name: string; requests: number; failures: number }[];
  /** Every failed request the check counted: when, which stream, the error, the flow's last backend. */
  failures: { at: number; stream: string; error: string; lastBackend: string | null }[];
  perSecond: [number, number, number][];
  events: ChurnEvent[];
  samples: NodeSample[];
  sampleErrors: string[];
}

const PALETTE = ['#1b7837', '#c51b7d', '#2166ac', '#e08214', '#762a83', '#000000'];

/** Minutes since the start, for the x axis. */
const minutes = (report: SoakReport, t: number) => (t - report.startedAt) / 60_000;

function nodeSeries(
  report: SoakReport,
  label: string,
  value: (s: NodeSample) => number | undefined,
  colorOffset = 0,
): Series[] {
  const nodes = [...new Set(report.samples.map((s) => s.node))].sort();
  return nodes.map((node, i) => ({
    name: `${node}${label}`,
    color: PALETTE[(i + colorOffset) % PALETTE.length]!,
    // From the start on: the samples taken before it are the checks' baselines.
    points: report.samples
      .filter((s) => s.node === node && s.t >= report.startedAt)
      .flatMap((s) => {
        const y = value(s);
        return y === undefined ? [] : [{ x: minutes(report, s.t), y }];
      }),
  }));
}

function charts(report: SoakReport): Record<string, string> {
  const time = 'minutes since the start';
  const sum = (s: NodeSample, keys: string[]) =>
    s.kernel ? keys.reduce((n, k) => n + ((s.kernel as Record<string, number>)[k] ?? 0), 0) : undefined;
  const window = 5;
  const traffic = (index: 1 | 2, name: string, color: string): Series => {
    const buckets = new Map<number, number>();
    for (const row of report.perSecond) {
      const w = Math.floor(row[0] / window);
      buckets.set(w, (buckets.get(w) ?? 0) + row[index]);
    }
    return {
      name,
      color,
      points: [...buckets].map(([w, n]) => ({ x: (w * window) / 60, y: n / window })),
    };
  };
  return {
    rss: chartSvg({
      title: 'Agent RSS',
      xLabel: time,
      yLabel: 'MiB',
      xScale: 'linear',
      series: nodeSeries(report, '', (s) => (s.rssBytes === undefined ? undefined : s.rssBytes / 2 ** 20)),
    }),
    lag: chartSvg({
      title: 'Agent event-loop lag between scrapes (10 ms timer included)',
      xLabel: time,
      yLabel: 'ms',
      xScale: 'linear',
      series: [
        ...nodeSeries(report, ' p50', (s) =>
          s.lagP50Seconds === undefined ? undefined : s.lagP50Seconds * 1000,
        ),
        ...nodeSeries(
          report,
          ' p99',
          (s) => (s.lagP99Seconds === undefined ? undefined : s.lagP99Seconds * 1000),
          2,
        ),
      ],
    }),
    traffic: chartSvg({
      title: 'Requests per second (5 s windows)',
      xLabel: time,
      yLabel: 'requests/s',
      xScale: 'linear',
      series: [traffic(1, 'answered', PALETTE[0]!), traffic(2, 'failed', PALETTE[1]!)],
    }),
    maps: chartSvg({
      title: 'BPF map entries (counted in the kernel)',
      xLabel: time,
      yLabel: 'entries',
      xScale: 'linear',
      series: [
        ...nodeSeries(report, ' conntrack', (s) => sum(s, ['ct4Tcp', 'ct4Any', 'ct6Tcp', 'ct6Any'])),
        ...nodeSeries(report, ' slots', (s) => sum(s, ['slots']), 2),
        ...nodeSeries(report, ' services', (s) => sum(s, ['svc4', 'svc6']), 4),
      ],
    }),
    fds: chartSvg({
      title: 'Agent file descriptors and timers',
      xLabel: time,
      yLabel: 'count',
      xScale: 'linear',
      series: [
        ...nodeSeries(report, ' fds', (s) => s.fds?.total),
        ...nodeSeries(report, ' timers', (s) => s.timers, 2),
      ],
    }),
  };
}

type Counts = Record<string, number>;

/** What grew between two samples' counters (only what grew). */
function grown(before: Counts | undefined, after: Counts | undefined): string[] {
  return Object.entries(after ?? {}).flatMap(([k, v]) => {
    const d = v - (before?.[k] ?? 0);
    return d > 0 ? [`${k} +${d}`] : [];
  });
}

/** Around one failure: the churn just before it, and on each node the drops and the ICMP
 * unreachables sent between the samples that enclose it (who refused the request). */
export function failureContext(report: SoakReport, at: number): string {
  const events = report.events
    .filter((e) => e.at >= at - 5000 && e.at <= at + 1000)
    .map((e) => `${((e.at - at) / 1000).toFixed(1)} s ${e.kind} ${e.detail}`);
  const nodes = [...new Set(report.samples.map((s) => s.node))].sort();
  const perNode = nodes.flatMap((node) => {
    const mine = report.samples.filter((s) => s.node === node);
    const before = mine.filter((s) => s.t <= at).at(-1);
    const after = mine.find((s) => s.t > at);
    if (!before || !after) return [];
    const unreach = (s: NodeSample, v: 'v4' | 'v6') =>
      Object.fromEntries(Object.entries(s.unreachSent ?? {}).map(([ns, c]) => [`${ns} ${v}`, c[v]]));
    const seen = [
      ...grown(before.drops, after.drops).map((d) => `drop ${d}`),
      ...grown(
        { ...unreach(before, 'v4'), ...unreach(before, 'v6') },
        { ...unreach(after, 'v4'), ...unreach(after, 'v6') },
      ).map((d) => `unreachable sent by ${d}`),
    ];
    return seen.length ? [`${node}: ${seen.join(', ')}`] : [];
  });
  return [...events, ...perNode].join('; ') || 'nothing seen';
}

function markdown(report: SoakReport, plots: string[]): string {
  const passed = report.checks.filter((c) => c.passed).length;
  const kinds = [...new Set(report.events.map((e) => e.kind))] as ChurnKind[];
  const disruptions = report.events.filter((e) => /agent|apiserver|relist/.test(e.kind));
  const lines = [
    `# Soak: ${report.minutes} minutes, ${report.mode} mode`,
    '',
    `Started ${new Date(report.startedAt).toISOString()}; traffic and churn for ${report.minutes} minutes, then ${(report.settleMs / 1000).toFixed(0)} s until the maps had drained. ${report.steady}'s agent lived through the soak (its RSS and event-loop lag are the ones checked for flatness); the other node's was killed, stopped and frozen. Made by \`scripts/soak.sh\`.`,
    '',
    '| | check | what was seen |',
    '| - | ----- | ------------- |',
    ...report.checks.map(
      (c) => `| ${c.passed ? 'pass' : '**FAIL**'} | ${c.name} | ${c.detail.replaceAll('|', '\\|')} |`,
    ),
    '',
    '## Traffic',
    '',
    '| stream | requests | failed |',
    '| ------ | -------: | -----: |',
    ...report.streams.map((s) => `| ${s.name} | ${s.requests} | ${s.failures} |`),
    '',
    ...(report.failures.length
      ? [
          'Failed requests (time from the start; churn in the 5 s before; what grew between the samples around it):',
          '',
          ...report.failures.map(
            (f) =>
              `- ${minutes(report, f.at).toFixed(3)} min: ${f.stream}: ${f.error} (last backend ${f.lastBackend ?? 'none'}): ${failureContext(report, f.at)}`,
          ),
          '',
        ]
      : []),
    '## Churn',
    '',
    '| source | done | refused (API server away) or failed |',
    '| ------ | ---: | ---------------------------------: |',
    ...kinds.map(
      (k) =>
        `| ${k} | ${report.events.filter((e) => e.kind === k && e.ok).length} | ${report.events.filter((e) => e.kind === k && !e.ok).length} |`,
    ),
    '',
    'Disruptions (time from the start, and until the agent synced again, the API server answered, or the agent relisted):',
    '',
    ...disruptions.map(
      (e) =>
        `- ${minutes(report, e.at).toFixed(2)} min: ${e.kind}${e.detail ? ` ${e.detail}` : ''}: ${e.ok ? `${((e.ms ?? 0) / 1000).toFixed(1)} s` : `failed: ${e.error}`}`,
    ),
    '',
    '## Plots',
    '',
    ...plots.map((p) => `![${p}](plots/${p}.png)`),
    '',
    ...(report.sampleErrors.length
      ? ['Samples not taken:', '', ...report.sampleErrors.map((e) => `- ${e}`), '']
      : []),
    `${passed} passed, ${report.checks.length - passed} failed`,
    '',
  ];
  return lines.join('\n');
}

export async function writeReport(dir: string, report: SoakReport): Promise<void> {
  mkdirSync(join(dir, 'plots'), { recursive: true });
  const plots = charts(report);
  for (const [name, svg] of Object.entries(plots)) await writePlot(dir, name, svg);
  writeFileSync(join(dir, 'report.json'), `${JSON.stringify(report)}\n`);
  writeFileSync(join(dir, 'report.md'), markdown(report, Object.keys(plots)));
}
