// The benchmark run: builds the namespaces once (and, for the real kube-proxy's modes, the control
// plane), then walks N ascending and, at each N, runs every repetition, in each repetition every
// family and in each family every mode in an order rotated by one each repetition (so drift on a
// shared machine hits every mode and both families alike); then
// measures BPF per-packet cost; then writes the results JSON, the Markdown report and the plots
// under <out>/<timestamp>/ and copies them to <out>/latest/. N is the outer loop because the API
// server holds one N's objects at a time (writing 10,000 Services takes a while).

import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { BPFFS_ROOT, ensureBpffs } from '../src/host/bpffs.js';
import { findCgroup2Root } from '../src/host/cgroup.js';
import { deleteStaleNamespaces, Lab } from '../src/lab/netns.js';
import { createLogger } from '../src/logger.js';
import type { IPFamily } from '../src/net/ip.js';
import { ApiCluster, controlPlaneMissing } from './api-cluster.js';
import { measureBpfCost } from './bpf-cost.js';
import { type CellSettings, type ClusterFeed, runCell } from './cell.js';
import { createLoadCgroups, placement, removeLoadCgroups } from './cpu.js';
import { type BenchMode, isKubeProxyMode, kernelMode } from './kernel-probe.js';
import { type MachineInfo, machineInfo } from './machine.js';
import { type BpfCostSample, type CellFailure, MEASURE_IDS, MEASURES, type Sample } from './measures.js';
import { chartSvg, stackedSvg, writePlot } from './plot.js';
import { aggregate, aggregateBpfCost, familiesOf, markdownReport, type ReportInput } from './report.js';
import { measureCharts } from './run-plots.js';
import { manifestFiles, type Scenario, scenarioFamily } from './scenario.js';
import { cliEntryPoint, compileTools } from './tools.js';
import { buildTopology } from './topology.js';

export const ALL_MODES: BenchMode[] = [
  'direct',
  'bpf',
  'bpf-sock',
  'iptables',
  'nftables',
  'ipvs',
  'kube-proxy-iptables',
  'kube-proxy-nftables',
  'kube-proxy-ipvs',
];

export interface BenchOptions {
  modes: BenchMode[];
  serviceCounts: number[];
  /**
   * The Services' families of the data-plane cells (one scenario of single-stack Services each,
   * on the same dual-stack node); the control-plane cells are IPv4. Absent in older results: IPv4.
   */
  families: IPFamily[];
  /** Larger N measured in bpf mode for the control plane alone (no loads: they would not fit the time). */
  controlPlaneServiceCounts: number[];
  endpoints: number;
  reps: number;
  cell: CellSettings;
  bpfCost: { services: number[]; rounds: number; repeat: number };
  /** Results root: <out>/<timestamp>/ and <out>/latest/. */
  out: string;
  quick: boolean;
  progress: (line: string) => void;
}

export interface BenchResults {
  version: 1;
  startedAt: string;
  finishedAt: string;
  quick: boolean;
  machine: MachineInfo;
  settings: Omit<BenchOptions, 'progress' | 'out'>;
  /**
   * Where every proxy of the run read the cluster from: the API server when the real kube-proxy
   * ran (ours then read it from there too), else the bench's manifest files.
   */
  source: ClusterFeed['kind'];
  /** Modes measured (at least one cell succeeded). */
  modes: BenchMode[];
  unavailable: { mode: BenchMode; reason: string }[];
  methodology: string[];
  measures: typeof MEASURES;
  samples: Sample[];
  aggregates: ReturnType<typeof aggregate>;
  bpfCostSamples: BpfCostSample[];
  bpfCost: ReturnType<typeof aggregateBpfCost>;
  failures: CellFailure[];
}

const METHODOLOGY = [
  'One node namespace runs the proxy: our agent (`kube-bpf-proxy run`) or, in the kube-proxy-* modes, the real kube-proxy binary of the same Kubernetes release as the API server, with the same KubeProxyConfiguration and kube-proxy default periods (minSyncPeriod 1 s, syncPeriod 30 s); E backend pods and one client pod are namespaces routed behind it (veth, /32 and /128 routes, as many CNIs do).',
  'Families: the node and the pods are dual-stack (IPv6 forwarding on, an IPv6 node address, clusterCIDR of both families); an IPv4 cell measures N single-stack IPv4 Services, an IPv6 cell N single-stack IPv6 Services (fd00::a60:2 onwards; the IPv6 counterpart of each IPv4 address is its 32 bits in the low bits of fd00::/96), and the rule modes, ours and kube-proxy, serve them with ip6tables or `ip6 kube-proxy`. Control-plane cells are IPv4.',
  'Source: with the kube-proxy-* modes in the run, every proxy (ours too) lists and watches a real kube-apiserver (etcd, kube-apiserver, kube-controller-manager in a namespace linked to the node); the bench writes the Services and EndpointSlices through the API as a controller would. Without them, our agent reads the same objects from manifest files (`--manifests DIR`).',
  'N Services with E endpoints each; every Service has its own ClusterIP and EndpointSlice, all slices list the same E real backend pods (a C epoll server: HTTP keep-alive on 8080, UDP echo on 5353), because N × E real backends cannot run on one machine.',
  'Traffic goes from the client pod to the last Service (the worst case for iptables: last in KUBE-SERVICES); only that Service also has a UDP port.',
  'Cold start: proxy process start to its first full sync (our "synced" log line; kube-proxy\'s first IPv4 "SyncProxyRules complete", logged at --v=2; in ipvs mode "syncProxyRules complete", logged at --v=4), including listing or reading every object; first sync: the duration the proxy logs for that sync (ours: durationMs; kube-proxy: elapsed).',
  "Endpoint change: the measured Service's EndpointSlice gets one more endpoint (one API write, or one manifest file rewritten); timed until the kernel shows it (polled: the endpoint's iptables chain, its nft chain, its IPVS real server, or the BPF backends map); from manifests it includes the watcher's 200 ms debounce and re-read. The proxy's own duration of that sync is reported next to it.",
  'New connections: a C client connects, sends one HTTP/1.1 request, reads the reply and closes with RST (no TIME_WAIT), sequentially, for a fixed time; first-packet latency is the connect() time. UDP: a new socket (new source port, so a new conntrack/flow entry) per datagram.',
  'Keep-alive throughput: wrk -t1 -c2 for the same fixed time.',
  "direct: the same loads with no Service and no proxy: the client connects to the E backend pods' own addresses (the load generator takes them in turn, so its connections spread over the same backends as the Service's; wrk's two connections go to the first backend), the physical limit every mode is compared with (÷ direct rows and table).",
  "CPU per connection and per request: the kernel's time (system + irq + softirq of /proc/stat, all CPUs) over each timed load, divided by the connections or requests it completed: over the saturated new-connections run, over the wrk run, and over a new-connections run paced at a fixed offered rate below every mode's saturation (--offered-rate). The namespaces share one kernel, so this is the whole path of a request (client, node, backends); direct measures the client and backends alone.",
  "Placement (two CPUs or more): the client's load generators on CPU 0 (taskset), the backend pods on CPU 1, and the node's pod-facing veths steer what they receive to CPU 1 (RPS), so the node's forwarding (tc, netfilter, routing: softirq on the receiving CPU) runs beside the backends and not on the client's CPU; without RPS a veth delivers on the sender's CPU.",
  'Each repetition walks every N and, at each N, every mode in an order rotated by one per repetition; conntrack is flushed and the node cleaned (`cleanup`) between cells.',
  'Median and p99: over the runs for per-run values; over every request of every run for latencies (2 % histogram buckets).',
  'Control-plane cells (the larger N, bpf mode): the same agent, manifests and endpoint changes, without the data-plane loads; the E real backend pods still serve every Service.',
  "BPF per-packet cost: BPF_PROG_TEST_RUN of the tc and XDP programs, in each family, with 1 and many services of each family in the maps, each row beside a trivial `return XDP_TX` program (xdp_tx) measured the same way and reported as a ratio to it (comparable across machines, where nanoseconds are not): a tracked flow averaged over `repeat` runs a call (floor: xdp_tx repeated alike); a tracked flow and a new flow (a SYN no entry has) one run per call, averaged over 1,000 calls interleaved with the floor's (xdp_tx one run per call: the kernel's clock reads around one run are most of it).",
];

function formatDuration(ms: number): string {
  const s = Math.round(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s` : `${s}s`;
}

function rotate<T>(items: readonly T[], by: number): T[] {
  const k = items.length === 0 ? 0 : by % items.length;
  return [...items.slice(k), ...items.slice(0, k)];
}

/**
 * Every N with the families and modes measured there: the data-plane N in every family and mode,
 * the larger ones IPv4 in bpf mode, control plane only.
 */
export function benchMatrix(
  options: Pick<BenchOptions, 'serviceCounts' | 'controlPlaneServiceCounts' | 'families'>,
  modes: readonly BenchMode[],
): BenchMatrixRow[] {
  return [
    ...options.serviceCounts.map((services) => ({
      services,
      families: options.families,
      modes,
      dataPlane: true,
    })),
    ...options.controlPlaneServiceCounts
      .filter((n) => !options.serviceCounts.includes(n))
      .map((services) => ({
        services,
        families: ['IPv4' as const],
        modes: modes.filter((m) => m === 'bpf'),
        dataPlane: false,
      })),
  ];
}

export interface BenchMatrixRow {
  services: number;
  families: readonly IPFamily[];
  modes: readonly BenchMode[];
  dataPlane: boolean;
}

export interface BenchCell {
  services: number;
  family: IPFamily;
  rep: number;
  mode: BenchMode;
  dataPlane: boolean;
}

/**
 * The run's cells in order: N ascending, then each repetition, in it each family, in that each
 * mode, the modes rotated by one per repetition.
 */
export function benchCells(matrix: readonly BenchMatrixRow[], reps: number): BenchCell[] {
  return matrix.flatMap(({ services, families, modes, dataPlane }) =>
    Array.from({ length: reps }, (_, rep) =>
      families.flatMap((family) =>
        rotate(modes, rep).map((mode) => ({ services, family, rep, mode, dataPlane })),
      ),
    ).flat(),
  );
}

/**
 * The requested modes this machine cannot measure, each with its reason: the ipvs modes (ours and
 * the real kube-proxy's) need a kernel with IPVS, the real kube-proxy's modes the control plane.
 */
export function unavailableModes(
  modes: readonly BenchMode[],
  ipvs: MachineInfo['ipvs'],
  controlPlaneMissing: string | null,
): BenchResults['unavailable'] {
  return modes.flatMap((mode) => {
    if (kernelMode(mode) === 'ipvs' && !ipvs.available) return [{ mode, reason: ipvs.reason }];
    if (isKubeProxyMode(mode) && controlPlaneMissing) return [{ mode, reason: controlPlaneMissing }];
    return [];
  });
}

/** What runCells runs the matrix with. */
interface CellRun {
  options: BenchOptions;
  modes: readonly BenchMode[];
  lab: Lab;
  topology: Awaited<ReturnType<typeof buildTopology>>;
  tools: Awaited<ReturnType<typeof compileTools>>;
  cli: string;
  workDir: string;
  api: ApiCluster | undefined;
  say: (line: string) => void;
  /** performance.now() at the run's start, for the elapsed time. */
  started: number;
}

/** Every cell of the matrix in its interleaved order, with progress and an ETA; what they measure
 * goes into `into` (a mode the agent refuses becomes unavailable; a failed cell is recorded). */
async function runCells(
  run: CellRun,
  into: { samples: Sample[]; failures: CellFailure[]; unavailable: BenchResults['unavailable'] },
): Promise<void> {
  const { options, modes, api, workDir, say, started, lab, topology, tools, cli } = run;
  const { samples, failures, unavailable } = into;
  const cells = benchCells(benchMatrix(options, modes), options.reps);
  const cellTimes = new Map<number, number[]>();
  const eta = (remaining: readonly { services: number }[]) => {
    const all = [...cellTimes.values()].flat();
    const mean = (times: number[]) => times.reduce((s, t) => s + t, 0) / times.length;
    if (all.length === 0) return '?';
    const ms = remaining.reduce((sum, c) => sum + mean(cellTimes.get(c.services) ?? all), 0);
    return formatDuration(ms);
  };
  // The API server holds one scenario (N, family) at a time, written before its first cell; each
  // scenario's manifest files are written once.
  const feeds = new Map<string, ClusterFeed>();
  let inApi = '';
  for (const [index, { services, family, rep, mode, dataPlane }] of cells.entries()) {
    const scenario: Scenario = { services, endpoints: options.endpoints, family };
    const key = `${services}|${family}`;
    // A control-plane cell reads manifests: its N need not fit the API server's service range.
    const cellApi = dataPlane ? api : undefined;
    if (cellApi && inApi !== key) {
      await prepareFeed(cellApi, scenario, workDir, say);
      inApi = key;
    }
    const feed: ClusterFeed = cellApi
      ? { kind: 'apiserver', api: cellApi }
      : (feeds.get(key) ?? (await prepareFeed(undefined, scenario, workDir, say)));
    feeds.set(key, feed);
    if (unavailable.some((u) => u.mode === mode)) continue;
    const label = `[${index + 1}/${cells.length}] N=${services.toLocaleString('en')} · rep ${rep + 1}/${options.reps} · ${family} · ${mode}`;
    say(`${label} · elapsed ${formatDuration(performance.now() - started)} · ETA ${eta(cells.slice(index))}`);
    const cellStart = performance.now();
    try {
      samples.push(
        ...(await runCell(
          {
            lab,
            topology,
            tools,
            cli,
            workDir,
            feed,
            settings: options.cell,
            step: (text) => say(`    ${label}: ${text}`),
          },
          mode,
          scenario,
          rep,
          dataPlane,
        )),
      );
    } catch (err) {
      const message = (err as Error).message;
      if (/not implemented yet/.test(message)) {
        const reason = /proxy mode "[^"]+" is not implemented yet[^\n]*/.exec(message)?.[0] ?? message;
        unavailable.push({ mode, reason: `the agent refuses it: ${reason}` });
        say(`${mode}: not measured: ${reason}`);
      } else {
        failures.push({ mode, family, services, rep, error: message.slice(0, 4000) });
        say(`    ${label}: FAILED: ${message.split('\n')[0]}`);
      }
    }
    const times = cellTimes.get(services) ?? [];
    times.push(performance.now() - cellStart);
    cellTimes.set(services, times);
  }
}

/** The BPF per-packet cost; a failure is recorded and the run goes on. */
async function bpfCostOrFailure(
  options: BenchOptions,
  pinPath: string,
  log: ReturnType<typeof createLogger>,
  say: (line: string) => void,
  failures: CellFailure[],
): Promise<BpfCostSample[]> {
  say('BPF per-packet cost (BPF_PROG_TEST_RUN)');
  try {
    return await measureBpfCost({
      serviceCounts: options.bpfCost.services,
      rounds: options.bpfCost.rounds,
      repeat: options.bpfCost.repeat,
      families: options.families,
      pinPath,
      log,
      onStep: (text) => say(`    ${text}`),
    });
  } catch (err) {
    failures.push({
      mode: 'bpf',
      services: 0,
      rep: 0,
      error: `BPF_PROG_TEST_RUN: ${(err as Error).message}`,
    });
    say(`    BPF_PROG_TEST_RUN FAILED: ${(err as Error).message}`);
  }
  return [];
}

/** A run's results, as results.json holds them: the modes that produced samples, the aggregates. */
function benchResults(
  options: BenchOptions,
  run: Pick<
    BenchResults,
    'machine' | 'source' | 'unavailable' | 'samples' | 'bpfCostSamples' | 'failures'
  > & {
    startedAt: Date;
    modes: readonly BenchMode[];
  },
): BenchResults {
  const { startedAt, machine, source, modes, unavailable, samples, bpfCostSamples, failures } = run;
  const measured = modes.filter((m) => samples.some((s) => s.mode === m));
  const { progress: _progress, out: _out, ...settings } = options;
  return {
    version: 1,
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    quick: options.quick,
    machine,
    settings,
    source,
    modes: measured,
    unavailable,
    methodology: METHODOLOGY,
    measures: MEASURES,
    samples,
    aggregates: aggregate(samples),
    bpfCostSamples,
    bpfCost: aggregateBpfCost(bpfCostSamples),
    failures,
  };
}

export async function runBench(options: BenchOptions): Promise<{ dir: string; results: BenchResults }> {
  const startedAt = new Date();
  const started = performance.now();
  const say = options.progress;
  const machine = await machineInfo();
  const unavailable: BenchResults['unavailable'] = [];
  let modes = [...options.modes];
  const drop = (which: (mode: BenchMode) => boolean, reason: string) => {
    for (const mode of modes.filter(which)) {
      unavailable.push({ mode, reason });
      say(`${mode}: not measured: ${reason}`);
    }
    modes = modes.filter((mode) => !which(mode));
  };
  for (const { mode, reason } of unavailableModes(modes, machine.ipvs, controlPlaneMissing()))
    drop((m) => m === mode, reason);

  // Every bpf pin of the run lives under BPFFS_ROOT (the agents' and BPF_PROG_TEST_RUN's): a node
  // that cannot have bpffs fails before any namespace exists.
  const log = createLogger();
  ensureBpffs(BPFFS_ROOT, log);
  const prefix = `kbpb${process.pid}`;
  await deleteStaleNamespaces(prefix);
  const lab = new Lab(prefix);
  const cgroups = createLoadCgroups(findCgroup2Root(), prefix);
  const workDir = mkdtempSync(join(tmpdir(), 'kbp-bench-'));
  const samples: Sample[] = [];
  const failures: CellFailure[] = [];
  let bpfCostSamples: BpfCostSample[] = [];
  let api: ApiCluster | undefined;
  let source: ClusterFeed['kind'] = 'manifests';
  const onSignal = () => {
    say('interrupted: cleaning up');
    void Promise.resolve(api?.stop())
      .then(() => lab.destroy())
      .then(() => removeLoadCgroups(cgroups))
      .finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    say(
      `machine: ${machine.cpuModel}, ${machine.cores} cores, ${machine.memoryGiB} GiB, kernel ${machine.kernel}`,
    );
    const tools = await compileTools(workDir);
    say(`building the namespaces: 1 node, ${options.endpoints} backend pods, 1 client pod`);
    const topology = await buildTopology(lab, options.endpoints, tools, placement(machine.cores), cgroups);
    const cli = cliEntryPoint();
    if (modes.some(isKubeProxyMode)) {
      say(
        'starting the control plane (etcd, kube-apiserver, kube-controller-manager) for the real kube-proxy',
      );
      try {
        api = await ApiCluster.start(lab, topology.nodeNs, workDir, options.cell.timeoutScale);
      } catch (err) {
        drop(isKubeProxyMode, `the control plane did not start: ${(err as Error).message.split('\n')[0]}`);
      }
    }
    source = api ? 'apiserver' : 'manifests';

    await runCells(
      { options, modes, lab, topology, tools, cli, workDir, api, say, started },
      {
        samples,
        failures,
        unavailable,
      },
    );
    bpfCostSamples = await bpfCostOrFailure(options, `${BPFFS_ROOT}/${prefix}-cost`, log, say, failures);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await api?.stop();
    await lab.destroy();
    await removeLoadCgroups(cgroups);
    rmSync(workDir, { recursive: true, force: true });
  }

  const results = benchResults(options, {
    startedAt,
    machine,
    source,
    modes,
    unavailable,
    samples,
    bpfCostSamples,
    failures,
  });
  const dir = await writeResults(options.out, results);
  say(
    `results: ${dir} (and ${join(resolve(options.out), 'latest')}) in ${formatDuration(performance.now() - started)}`,
  );
  return { dir, results };
}

/** One N's cluster for the proxies: written through the API server, or as manifest files. */
async function prepareFeed(
  api: ApiCluster | undefined,
  scenario: Scenario,
  workDir: string,
  say: (line: string) => void,
): Promise<ClusterFeed> {
  if (api) {
    const n = scenario.services.toLocaleString('en');
    const begun = performance.now();
    await api.apply(scenario);
    say(
      `    ${n} ${scenarioFamily(scenario)} Services and EndpointSlices in the API server (${formatDuration(performance.now() - begun)})`,
    );
    return { kind: 'apiserver', api };
  }
  const dir = join(workDir, `manifests-${scenario.services}-${scenarioFamily(scenario)}`);
  mkdirSync(dir);
  for (const [name, text] of Object.entries(manifestFiles(scenario))) writeFileSync(join(dir, name), text);
  return { kind: 'manifests', dir };
}

/** Every N of a run: the full cells' and the control-plane cells' (absent from older results). */
function allServiceCounts(results: BenchResults): number[] {
  const { serviceCounts, controlPlaneServiceCounts = [] } = results.settings;
  return [...new Set([...serviceCounts, ...controlPlaneServiceCounts])].sort((a, b) => a - b);
}

/** The families of a run's cells, IPv4 first (older runs: IPv4). */
export function resultFamilies(results: Pick<BenchResults, 'aggregates'>): IPFamily[] {
  const families = familiesOf(results.aggregates);
  return families.length > 0 ? families : ['IPv4'];
}

export function reportInput(results: BenchResults): ReportInput {
  return {
    modes: results.modes,
    families: resultFamilies(results),
    serviceCounts: allServiceCounts(results),
    aggregates: results.aggregates,
    bpfCost: results.bpfCost,
    unavailable: results.unavailable,
    failures: results.failures,
  };
}

export function machineLine(m: MachineInfo): string {
  return `${m.cpuModel}, ${m.cores} cores, ${m.memoryGiB} GiB, kernel ${m.kernel}, Node ${m.node}, ${m.iptables}, ${m.nft}, wrk ${m.wrk}, commit ${m.gitCommit}${
    m.gitChanges.length > 0 ? ` with local changes (${m.gitChanges.map((c) => c.trim()).join('; ')})` : ''
  }`;
}

/** A measure's plot of one family: IPv4's keeps the measure's name, IPv6's is `<measure>-ipv6`. */
export function plotName(measure: string, family: IPFamily): string {
  return family === 'IPv4' ? measure : `${measure}-${family.toLowerCase()}`;
}

/** Every plot of a run: each measure's for each family, and the BPF per-packet cost. */
export function plotFiles(results: Pick<BenchResults, 'aggregates'>): string[] {
  return [
    ...resultFamilies(results).flatMap((family) => MEASURE_IDS.map((m) => plotName(m, family))),
    'bpfCost',
  ];
}

async function writeResults(outRoot: string, results: BenchResults): Promise<string> {
  const root = resolve(outRoot);
  const dir = join(root, results.startedAt.replace(/[:.]/g, '-'));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'results.json'), `${JSON.stringify(results, null, 1)}\n`);
  await writeReport(dir, results);
  const latest = join(root, 'latest');
  rmSync(latest, { recursive: true, force: true });
  cpSync(dir, latest, { recursive: true });
  return dir;
}

/** results.md and plots/ of a run, from its results (also `bench --render DIR` on a saved run). */
export async function writeReport(dir: string, results: BenchResults): Promise<void> {
  mkdirSync(join(dir, 'plots'), { recursive: true });
  const backend = results.settings.cell.iptablesBackend;
  const header = [
    `## kube-bpf-proxy bench${results.quick ? ' (--quick)' : ''}, ${results.startedAt}`,
    '',
    `Machine: ${machineLine(results.machine)}.`,
    '',
    `Matrix: N ∈ {${results.settings.serviceCounts.join(', ')}}${(results.settings.controlPlaneServiceCounts ?? []).length > 0 ? ` and, bpf control plane only, {${results.settings.controlPlaneServiceCounts.join(', ')}}` : ''} services × ${results.settings.endpoints} endpoints, Services of ${resultFamilies(results).join(' and ')}, ${results.settings.reps} repetition(s), ${results.settings.cell.seconds} s per timed load${results.settings.cell.offeredRate ? `, CPU per connection at ${results.settings.cell.offeredRate} new connections/s offered` : ''}, modes ${results.modes.join(', ') || 'none'}; iptables backend: ${backend === 'auto' ? 'detected by the agent' : `${backend} (kubelet's hint chain)`}.`,
    '',
    results.source === 'apiserver'
      ? 'Source: every proxy, ours and the real kube-proxy, listed and watched a real kube-apiserver; the bench wrote the Services and EndpointSlices through the API.'
      : "Source: the agent read the bench's manifest files (no real kube-proxy in this run).",
  ].join('\n');
  writeFileSync(join(dir, 'results.md'), markdownReport(reportInput(results), header));

  const counts = allServiceCounts(results);
  for (const family of resultFamilies(results)) {
    for (const measure of MEASURE_IDS)
      await writePlot(
        dir,
        plotName(measure, family),
        stackedSvg(measureCharts(results, counts, measure, family)),
      );
  }
  // One line per program and family (older runs' rows have no family: IPv4).
  const programs = [...new Set(results.bpfCost.map((r) => `${r.program}, ${r.family ?? 'IPv4'}`))];
  const palette = ['#1b7837', '#2166ac', '#777777', '#c51b7d', '#e08214', '#5e3c99', '#01665e'];
  await writePlot(
    dir,
    'bpfCost',
    chartSvg({
      title: 'BPF per-packet cost (BPF_PROG_TEST_RUN)',
      xLabel: 'services in the map (log scale)',
      yLabel: 'ns/packet',
      series: programs.map((program, i) => ({
        name: program,
        color: palette[i % palette.length] as string,
        points: results.bpfCost
          .filter((r) => `${r.program}, ${r.family ?? 'IPv4'}` === program)
          .map((r) => ({ x: r.services, y: r.median })),
      })),
    }),
  );
}
