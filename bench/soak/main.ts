// scripts/soak.sh's driver: builds the soak's cluster (world.ts), runs the steady traffic
// (traffic.ts) and every churn source (churn.ts) for --minutes while sampling the nodes
// (sampler.ts), lets the flows drain, judges (checks.ts), writes the report (report.ts) and ends
// with "N passed, N failed" (exit 1 when anything failed). Needs root, `npm run build`, the CNI
// plugins, helm and the control plane (scripts/install-deps.sh).
// Usage: node dist/bench/soak/main.js --minutes M [--mode bpf|iptables|nftables] [--report-dir DIR]
//        node dist/bench/soak/main.js --render DIR (report.md and plots again from the report.json in DIR)

import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { ProxyMode } from '../../src/config/types.js';
import { runCommand } from '../../src/host/command.js';
import { REAL_NODES } from '../../src/lab/real-node-plan.js';
import { until } from '../../src/lab/until.js';
import {
  type CheckResult,
  checkChurn,
  checkConntrackGC,
  checkFailedRequests,
  checkFlat,
  checkLateAnswers,
  checkLeaks,
  checkMaps,
  checkProgramming,
  checkStreamsRan,
  countedFailures,
  mapProblems,
  processKey,
} from './checks.js';
import { Churn, type ChurnKind, DISRUPTIONS } from './churn.js';
import type { NodeSample } from './metrics.js';
import { type SoakReport, writeReport } from './report.js';
import { Sampler } from './sampler.js';
import { planStreams, type Stream, startProbes, startTraffic, TrafficLedger } from './traffic.js';
import { GC_INTERVAL_S, GRACE_SECONDS, SoakWorld } from './world.js';

const MODES: readonly ProxyMode[] = ['bpf', 'iptables', 'nftables'];
const SAMPLE_PERIOD_MS = 5000;
/** While the flows drain at the end: the drain is over at the first sample that shows it. */
const SETTLE_SAMPLE_PERIOD_MS = 1000;
/** The bound on a change's way to the kernel, held by every single change: the soak's own, a
 * bucket bound of kube-proxy's network programming histogram. A change takes 1-3 s here; one that
 * meets a disruption waits for it (an agent frozen through an API server restart and a relist:
 * about 10 s), and 30 s leaves room for the two together on a busy machine. */
const PROGRAMMING_BOUND_S = 30;
/** A long-lived flow may fail from its pod's deletion until the pod is gone (its grace period) and
 * the proxy has forgotten the flow (a change's bound); later, its requests must find a live backend. */
const FLOW_END_MS = (GRACE_SECONDS + PROGRAMMING_BOUND_S) * 1000;
/** The longest a stream may go without a request ending: a request's timeout (3 s) and interval
 * (0.3 s), with room for a client's event loop held up on a machine this busy. */
const STREAM_PAUSE_BOUND_MS = 15_000;
/** The longest the flows may take to drain at the end: UDP's 60 s idle timeout, then a GC pass. */
const SETTLE_LIMIT_MS = 150_000;
const NODES = REAL_NODES.map((n) => n.name);

function options() {
  const { values } = parseArgs({
    options: {
      minutes: { type: 'string' },
      mode: { type: 'string', default: 'bpf' },
      'report-dir': { type: 'string' },
      render: { type: 'string' },
    },
  });
  if (values.render !== undefined) return { render: resolve(values.render) } as const;
  const minutes = Number(values.minutes);
  const mode = values.mode as ProxyMode;
  if (!(minutes > 0)) throw new Error('--minutes M (M > 0) is required');
  if (!MODES.includes(mode)) throw new Error(`--mode: one of ${MODES.join(', ')}`);
  const reportDir = resolve(values['report-dir'] ?? mkdtempSync(join(tmpdir(), 'kbp-soak-')));
  return { minutes, mode, reportDir, render: undefined };
}

async function labNamespaces(prefix: string): Promise<number> {
  const { stdout } = await runCommand('ip', ['netns', 'list']);
  return stdout.split('\n').filter((line) => line.startsWith(`${prefix}-`)).length;
}

/** Until every node's maps hold what the end needs (bpf; mapProblems), or the limit. */
async function settle(sampler: Sampler, start: readonly NodeSample[]): Promise<void> {
  const settled = (s: NodeSample) => {
    const baseline = start.find((b) => b.node === s.node);
    return baseline !== undefined && mapProblems(baseline, s).length === 0;
  };
  await until(
    'the maps drained',
    async () => {
      const samples = await Promise.all(NODES.map((n) => sampler.sample(n)));
      if (samples.every(settled)) return true;
      await new Promise((r) => setTimeout(r, SETTLE_SAMPLE_PERIOD_MS));
      return false;
    },
    SETTLE_LIMIT_MS,
  ).catch(() => {});
}

/** The first sample of the process that was the node's agent at the end: its baseline. */
function processBaseline(samples: readonly NodeSample[], final: NodeSample): NodeSample {
  return samples.find((s) => s.up && processKey(s) === processKey(final)) ?? final;
}

/**
 * The start line: until every stream's target has answered once from the stream's namespace (each
 * kind of client, TCP and UDP, both families), so that no request counts before both nodes' data
 * planes have every Service's endpoints. A dual-stack Service's IPv4 and IPv6 EndpointSlices reach
 * an agent as two changes, which may land in syncs a second apart: a Service with endpoints in one
 * family only still refuses the other's requests then, as kube-proxy's rules do.
 */
async function streamsAnswer(world: SoakWorld, streams: readonly Stream[]): Promise<void> {
  await Promise.all(
    startProbes(streams).map((probe) =>
      until(
        `${probe.target} (${probe.proto}) answers in ${probe.ns}`,
        async () => {
          const [result] = await world.lab.requests(probe.ns, probe.target, {
            proto: probe.proto,
            count: 1,
            timeoutMs: 500,
          });
          return result?.error === null;
        },
        60_000,
      ),
    ),
  );
}

/** What a soak recorded, for the checks and the report. */
interface Recorded {
  steady: string;
  startedAt: number;
  churnEnds: number;
  trafficEndedAt: number;
  settleMs: number;
  streams: Stream[];
  ledger: TrafficLedger;
  churn: Churn;
  sampler: Sampler;
  /** Each node's sample before the traffic, and after the drain. */
  start: NodeSample[];
  finals: NodeSample[];
  netns: { before: number; after: number };
}

/** Traffic, churn and samples for `minutes`, then the drain. */
async function record(world: SoakWorld, minutes: number): Promise<Recorded> {
  const sampler = new Sampler(world);
  // One node's agent lives through the soak (its RSS and lag are the trend), the other's is disrupted.
  const [steady, disrupted] = Math.random() < 0.5 ? NODES : [...NODES].reverse();
  if (!steady || !disrupted) throw new Error('the soak needs two nodes');
  const churn = new Churn(world, disrupted, async (node) => {
    await sampler.sample(node);
  });
  await churn.init();
  // The streams' targets only: the streams themselves are planned for the real start.
  await streamsAnswer(world, planStreams(world, Date.now()));
  const netnsBefore = await labNamespaces(world.lab.prefix);
  const start = await Promise.all(NODES.map((n) => sampler.sample(n)));
  const startedAt = Date.now();
  const churnEnds = startedAt + minutes * 60_000;
  console.log(
    `soak: ${minutes} min of traffic and churn from ${new Date(startedAt).toISOString()}; ${disrupted}'s agent is disrupted, ${steady}'s lives through`,
  );
  const sampling = sampler.every(NODES, SAMPLE_PERIOD_MS);
  // The clients' own bound; they are stopped once the churn has finished.
  const clientDeadline = churnEnds + (GRACE_SECONDS + 120) * 1000;
  const streams = planStreams(world, clientDeadline);
  const ledger = new TrafficLedger(streams, startedAt);
  const traffic = startTraffic(world, streams, clientDeadline, ledger);
  await churn.run(churnEnds, Math.max(20_000, Math.min(60_000, (minutes * 60_000) / 8)));
  await churn.finish();
  traffic.stop();
  await traffic.done;
  const trafficEndedAt = Date.now();
  console.log('soak: traffic stopped; waiting for the flows to drain');
  await sampling.stop();
  if (world.mode === 'bpf') await settle(sampler, start);
  const finals = await Promise.all(NODES.map((n) => sampler.sample(n)));
  const netns = { before: netnsBefore, after: await labNamespaces(world.lab.prefix) };
  const settleMs = Date.now() - trafficEndedAt;
  return {
    steady,
    startedAt,
    churnEnds,
    trafficEndedAt,
    settleMs,
    streams,
    ledger,
    churn,
    sampler,
    start,
    finals,
    netns,
  };
}

const CHURN_KINDS: readonly ChurnKind[] = [
  'scale-up',
  'scale-down',
  'move',
  'service-create',
  'service-change',
  'service-delete',
  ...DISRUPTIONS,
];

function judge(r: Recorded, bpf: boolean): CheckResult[] {
  const { ledger, churn, sampler, finals } = r;
  // Pins, the port reservation and Maglev as at the start; fds and timers as when the last agent started.
  const baselines = finals.map((final) => {
    const atStart = r.start.find((s) => s.node === final.node);
    const first = processBaseline(sampler.samples, final);
    return { ...first, pins: atStart?.pins, reservedPorts: atStart?.reservedPorts, kernel: atStart?.kernel };
  });
  const steadySamples = sampler.samples.filter((s) => s.node === r.steady);
  return [
    checkFailedRequests(r.streams, ledger.requests, ledger.failures, churn.incarnations, FLOW_END_MS),
    checkStreamsRan(r.streams, ledger.pace, r.churnEnds, STREAM_PAUSE_BOUND_MS, ledger.clientExits),
    checkLateAnswers(ledger.backends, churn.incarnations, GRACE_SECONDS * 1000),
    checkProgramming(churn.events, sampler.samples, PROGRAMMING_BOUND_S),
    ...(bpf
      ? [
          checkMaps(baselines, finals, sampler.samples, r.startedAt),
          checkConntrackGC(sampler.samples, r.churnEnds - r.startedAt, GC_INTERVAL_S),
        ]
      : []),
    checkLeaks(baselines, finals, bpf, r.netns),
    checkFlat(steadySamples, 'rssBytes', r.startedAt, r.churnEnds),
    checkFlat(steadySamples, 'lagP50Seconds', r.startedAt, r.churnEnds),
    checkChurn(churn.events, CHURN_KINDS),
  ];
}

async function soak(world: SoakWorld, minutes: number, reportDir: string): Promise<CheckResult[]> {
  const r = await record(world, minutes);
  const checks = judge(r, world.mode === 'bpf');
  const { ledger } = r;
  await writeReport(reportDir, {
    mode: world.mode,
    minutes,
    steady: r.steady,
    startedAt: r.startedAt,
    trafficEndedAt: r.trafficEndedAt,
    settleMs: r.settleMs,
    checks,
    streams: r.streams.map((s, i) => ({
      name: s.name,
      requests: ledger.requests[i] ?? 0,
      failures: ledger.failures.filter((f) => f.stream === i).length,
    })),
    failures: countedFailures(r.streams, ledger.failures, r.churn.incarnations, FLOW_END_MS).map((f) => ({
      at: f.at,
      stream: r.streams[f.stream]?.name ?? String(f.stream),
      error: f.error,
      lastBackend: f.lastBackend,
    })),
    perSecond: [...ledger.perSecond].sort((a, b) => a[0] - b[0]).map(([t, [ok, failed]]) => [t, ok, failed]),
    events: r.churn.events,
    samples: r.sampler.samples,
    sampleErrors: r.sampler.errors,
  });
  return checks;
}

/** --render DIR: report.md and the plots drawn again from the report.json in DIR (a kept run's plots). */
async function render(dir: string): Promise<number> {
  await writeReport(dir, JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as SoakReport);
  console.log(`report: ${join(dir, 'report.md')}`);
  return 0;
}

async function main(): Promise<number> {
  const opts = options();
  if (opts.render !== undefined) return render(opts.render);
  const { minutes, mode, reportDir } = opts;
  const world = new SoakWorld(mode, `kbpsoak${process.pid}`);
  const cleanup = async () => {
    await world.destroy().catch((err) => console.error(`cleanup: ${err}`));
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void cleanup().then(() => process.exit(130));
    });
  }
  let checks: CheckResult[] = [];
  try {
    await world.build();
    checks = await soak(world, minutes, reportDir);
  } catch (err) {
    console.error(`soak: ${(err as Error).stack ?? err}`);
    world.cp?.printLogs();
    for (const node of NODES)
      console.error(`----- agent ${node} -----\n${world.nodes.agents.get(node)?.tail() ?? ''}`);
    checks.push({
      name: 'the soak ran to its end',
      passed: false,
      detail: String((err as Error).message ?? err),
    });
  } finally {
    await cleanup();
  }
  for (const c of checks) console.log(`${c.passed ? 'pass' : 'FAIL'}  ${c.name}: ${c.detail}`);
  console.log(`report: ${join(reportDir, 'report.md')}`);
  const passed = checks.filter((c) => c.passed).length;
  console.log(`${passed} passed, ${checks.length - passed} failed`);
  return checks.length > 0 && passed === checks.length ? 0 : 1;
}

process.exit(await main());
