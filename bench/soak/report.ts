// The soak's report: report.md (the verdicts, the traffic per stream, the churn, the plots),
// report.json (everything the verdicts were drawn from) and plots over time (bench/plot.ts).

import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { type Chart, chartSvg, type Series, stackedSvg, writePlot } from '../plot.js';
import type { CheckResult } from './checks.js';
import type { ChurnEvent, ChurnKind } from './churn.js';
import type { CountedMap, NodeSample } from './metrics.js';

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

/** Failed requests listed one by one in report.md (an hour that goes wrong may have thousands). */
const FAILURES_LISTED = 200;

/** The plots' width: an hour of samples every 5 s is 720 points a series. */
const PLOT_WIDTH = 900;

/** Requests per second over 5 s windows, answered or failed. */
function trafficSeries(report: SoakReport, index: 1 | 2, name: string, color: string): Series {
  const window = 5;
  const buckets = new Map<number, number>();
  for (const row of report.perSecond) {
    const w = Math.floor(row[0] / window);
    buckets.set(w, (buckets.get(w) ?? 0) + row[index]);
  }
  return { name, color, points: [...buckets].map(([w, n]) => ({ x: (w * window) / 60, y: n / window })) };
}

/** A chart over the soak's minutes. */
const chart = (title: string, yLabel: string, series: Series[]): Chart => ({
  title,
  xLabel: 'minutes since the start',
  yLabel,
  xScale: 'linear',
  yScale: 'linear',
  plotWidth: PLOT_WIDTH,
  series,
});

/** The BPF maps' entries over time: the flow maps, and the maps of the services. */
function mapCharts(report: SoakReport): Chart[] {
  const sum = (s: NodeSample, keys: CountedMap[]) =>
    s.kernel ? keys.reduce((n, k) => n + (s.kernel?.[k] ?? 0), 0) : undefined;
  return [
    chart('BPF flow map entries (counted in the kernel)', 'entries', [
      ...nodeSeries(report, ' conntrack', (s) => sum(s, ['ct4Tcp', 'ct4Any', 'ct6Tcp', 'ct6Any'])),
      ...nodeSeries(report, ' fragments', (s) => sum(s, ['fragments4', 'fragments6']), 2),
      ...nodeSeries(report, ' socket reverse', (s) => sum(s, ['sockRev4', 'sockRev6']), 4),
    ]),
    chart('BPF service map entries (counted in the kernel)', 'entries', [
      ...nodeSeries(report, ' slots', (s) => sum(s, ['slots'])),
      ...nodeSeries(report, ' services', (s) => sum(s, ['svc4', 'svc6']), 2),
      ...nodeSeries(report, ' backends', (s) => sum(s, ['backends4', 'backends6']), 4),
    ]),
  ];
}

/** The plots over time: one picture each, some of two charts one above the other, so that a small
 * series (the failed requests, the services) is not drawn flat against a large one's scale. */
function charts(report: SoakReport): Record<string, string> {
  const ms = (v: number | undefined) => (v === undefined ? undefined : v * 1000);
  return {
    rss: chartSvg(
      chart(
        'Agent RSS',
        'MiB',
        nodeSeries(report, '', (s) => (s.rssBytes === undefined ? undefined : s.rssBytes / 2 ** 20)),
      ),
    ),
    lag: stackedSvg([
      chart(
        'Agent event-loop lag p50 between scrapes (10 ms timer included)',
        'ms',
        nodeSeries(report, ' p50', (s) => ms(s.lagP50Seconds)),
      ),
      chart(
        'Agent event-loop lag p99 between scrapes',
        'ms',
        nodeSeries(report, ' p99', (s) => ms(s.lagP99Seconds), 2),
      ),
    ]),
    traffic: stackedSvg([
      chart('Requests answered per second (5 s windows)', 'requests/s', [
        trafficSeries(report, 1, 'answered', PALETTE[0]!),
      ]),
      chart('Requests failed per second (5 s windows; excused ones included)', 'requests/s', [
        trafficSeries(report, 2, 'failed', PALETTE[1]!),
      ]),
    ]),
    // The BPF maps: bpf mode's only (the rule modes' samples count none).
    ...(report.samples.some((s) => s.kernel) ? { maps: stackedSvg(mapCharts(report)) } : {}),
    fds: stackedSvg([
      chart(
        'Agent file descriptors',
        'count',
        nodeSeries(report, ' fds', (s) => s.fds?.total),
      ),
      chart(
        'Agent timers (nodejs_active_resources Timeout)',
        'count',
        nodeSeries(report, ' timers', (s) => s.timers, 2),
      ),
    ]),
    load: chartSvg(
      chart("The machine's load (1-minute average, 2 cores)", 'load', [
        {
          name: 'load average',
          color: PALETTE[5]!,
          points: report.samples
            .filter(
              (s) => s.node === report.samples[0]?.node && s.t >= report.startedAt && s.load1 !== undefined,
            )
            .map((s) => ({ x: minutes(report, s.t), y: s.load1 ?? 0 })),
        },
      ]),
    ),
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

/** How busy the machine was while the soak ran: its 1-minute load average over the samples. */
export function loadLine(report: SoakReport): string {
  const loads = report.samples
    .filter((s) => s.t >= report.startedAt && s.t <= report.trafficEndedAt && s.load1 !== undefined)
    .map((s) => s.load1 ?? 0)
    .sort((a, b) => a - b);
  if (loads.length === 0) return "The machine's load was not sampled.";
  const at = (q: number) => loads[Math.min(loads.length - 1, Math.floor(q * loads.length))]!.toFixed(1);
  return `The machine's 1-minute load average while the traffic ran (${availableParallelism()} CPUs, shared with other work): median ${at(0.5)}, 90th percentile ${at(0.9)}, highest ${loads.at(-1)!.toFixed(1)}.`;
}

function markdown(report: SoakReport, plots: string[]): string {
  const passed = report.checks.filter((c) => c.passed).length;
  const kinds = [...new Set(report.events.map((e) => e.kind))] as ChurnKind[];
  const disruptions = report.events.filter((e) => /agent|apiserver|relist/.test(e.kind));
  const lines = [
    `# Soak: ${report.minutes} minutes, ${report.mode} mode`,
    '',
    `Started ${new Date(report.startedAt).toISOString()}; traffic and churn for ${report.minutes} minutes, then ${(report.settleMs / 1000).toFixed(0)} s ${report.mode === 'bpf' ? 'until the maps had drained' : 'to the last samples (no BPF maps to drain in this mode)'}. ${report.steady}'s agent lived through the soak (its RSS and event-loop lag are the ones checked for flatness); the other node's was killed, stopped and frozen. Made by \`scripts/soak.sh\`.`,
    '',
    loadLine(report),
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
          ...report.failures
            .slice(0, FAILURES_LISTED)
            .map(
              (f) =>
                `- ${minutes(report, f.at).toFixed(3)} min: ${f.stream}: ${f.error} (last backend ${f.lastBackend ?? 'none'}): ${failureContext(report, f.at)}`,
            ),
          ...(report.failures.length > FAILURES_LISTED
            ? [`- and ${report.failures.length - FAILURES_LISTED} more (report.json has them all)`]
            : []),
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
