// One cell of the matrix: one mode at one N in one IP family. Starts the node's proxy cold (our agent, or the real
// kube-proxy in the kube-proxy-* modes) on the scenario, read from its manifest files or from the
// API server, measures the control plane (cold programming, memory, endpoint-change latency) and
// the data plane (new connections, first-packet latencies, keep-alive throughput) through the
// measured ClusterIP, then stops the proxy and removes what it programmed. A control-plane cell
// (the large N, where the loads would not fit the time) measures the control plane alone.

import { mkdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BpfConfig } from '../src/config/types.js';
import { cleanupNode } from '../src/dataplanes/cleanup.js';
import { LabAgent } from '../src/lab/agent.js';
import { iptablesBackendDir, KubeProxyProcess, kubeProxyConfig } from '../src/lab/kube-proxy.js';
import { inCgroup, type Lab } from '../src/lab/netns.js';
import { type IPFamily, joinHostPort } from '../src/net/ip.js';
import type { ApiCluster } from './api-cluster.js';
import { pinned, withSystemCpu } from './cpu.js';
import {
  type BenchMode,
  endpointInKernel,
  isKubeProxyMode,
  KUBE_PROXY_MODES,
  kernelMode,
  type ProbeContext,
} from './kernel-probe.js';
import type { MeasureId, Sample } from './measures.js';
import {
  backendPodIP,
  changedEndpointIP,
  DUAL_STACK_CLUSTER_CIDR,
  endpointSlice,
  MEASURED_SLICE_FILE,
  measuredService,
  NODE_NAME,
  type Scenario,
  SERVICE_TCP_PORT,
  SERVICE_UDP_PORT,
  scenarioFamily,
  scenarioMapSizes,
  TCP_TARGET_PORT,
  UDP_TARGET_PORT,
} from './scenario.js';
import { histogram, summarize } from './stats.js';
import {
  imageEntrypoint,
  type LoadgenSummary,
  parseColumns,
  parseLoadgen,
  parseWrk,
  type Tools,
} from './tools.js';
import type { BenchTopology } from './topology.js';

export interface CellSettings {
  /** Seconds of each timed load (the TCP_CRR-like loop, saturated and paced; wrk). */
  seconds: number;
  /** New connections per second of the paced load CPU per connection is measured at. */
  offeredRate: number;
  udpProbes: number;
  endpointChanges: number;
  /** When, after the first sync, the settled memory is read (SETTLED_AFTER_FIRST_SYNC_MS unless told). */
  settleMs: number;
  /** Bound on the whole cold start (large N in iptables mode takes minutes). */
  coldStartTimeoutMs: number;
  /**
   * The bounds on waits (the API server's readiness, a change reaching the kernel and its sync)
   * are multiplied by this: 1 natively; the IPVS lab's guest, under software emulation, passes
   * LAB_TIMEOUT_SCALE.
   */
  timeoutScale: number;
  /**
   * iptables mode's backend: "auto" lets the agent detect it as kube-proxy's iptables-wrapper does
   * (nft on a clean node); "legacy" or "nft" plant kubelet's hint chain in that backend first.
   */
  iptablesBackend: 'auto' | 'legacy' | 'nft';
  /** The bpf modes' bpf.hostRouting; unset: the agent's default (auto). */
  hostRouting?: BpfConfig['hostRouting'];
}

/** The ipvs modes' scheduler (kube-proxy's default), as the real kube-proxy's ipvs mode needs one. */
const IPVS_SCHEDULER = 'rr';

/** kubelet's hint chain, which tells kube-proxy's iptables-wrapper (and our agent) the backend. */
const HINT_CHAIN = ['-t', 'mangle', '-N', 'KUBE-IPTABLES-HINT'];

export interface CellContext {
  lab: Lab;
  topology: BenchTopology;
  tools: Tools;
  cli: string;
  workDir: string;
  /** Where the node's proxy reads the cluster from (kube-proxy: always the API server). */
  feed: ClusterFeed;
  settings: CellSettings;
  /** Progress of the steps inside the cell. */
  step: (text: string) => void;
}

/**
 * The bench's cluster as the node's proxy reads it: this N's manifest files (the agent watches the
 * directory), or the API server (the same objects, written by the bench: api-cluster.ts).
 */
export type ClusterFeed = { kind: 'manifests'; dir: string } | { kind: 'apiserver'; api: ApiCluster };

/** Writes the measured Service's slice: its E backend pods plus `extraIPs`. */
async function setMeasuredSlice(feed: ClusterFeed, scenario: Scenario, extraIPs: string[]): Promise<void> {
  if (feed.kind === 'apiserver') return feed.api.setMeasuredSlice(scenario, extraIPs);
  const slice = endpointSlice(measuredService(scenario).index, scenario, extraIPs);
  writeFileSync(join(feed.dir, MEASURED_SLICE_FILE), JSON.stringify(slice));
}

function agentConfig(
  mode: BenchMode,
  feed: ClusterFeed,
  pinPath: string,
  cgroups: { sock: string | null; load: string },
  scenario: Scenario,
  hostRouting: BpfConfig['hostRouting'] | undefined,
): string {
  const bpf = [
    'bpf:',
    `  pinPath: ${pinPath}`,
    // Past the default sizes, the maps are raised as an operator would.
    '  mapSizes:',
    `    services: ${scenarioMapSizes(scenario).services}`,
    `    backendSlots: ${scenarioMapSizes(scenario).backendSlots}`,
    // bpf mode's socket hooks (socketLB host) go on the load's cgroup, never the machine's cgroup2
    // root: they still run on the client's connects, as on a node, and on nothing else of the machine.
    ...(cgroups.sock
      ? ['  socketLB: all', `  cgroupPath: ${cgroups.sock}`]
      : [`  cgroupPath: ${cgroups.load}`]),
    ...(hostRouting ? [`  hostRouting: ${hostRouting}`] : []),
  ];
  const proxyMode = isKubeProxyMode(mode) ? KUBE_PROXY_MODES[mode] : mode === 'bpf-sock' ? 'bpf' : mode;
  // kube-proxy's documented defaults for the periods (minSyncPeriod 1 s, syncPeriod 30 s); ipvs
  // names its scheduler, rr (kube-proxy's default), so both read it from the same line.
  if (feed.kind === 'apiserver')
    return kubeProxyConfig({
      mode: proxyMode,
      hostname: NODE_NAME,
      clusterCIDR: DUAL_STACK_CLUSTER_CIDR,
      kubeconfig: feed.api.kubeconfigPath,
      ...(proxyMode === 'ipvs' ? { ipvsScheduler: IPVS_SCHEDULER } : {}),
      extraLines: isKubeProxyMode(mode) ? [] : bpf,
    });
  return [
    'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
    'kind: KubeProxyConfiguration',
    `mode: ${proxyMode}`,
    `clusterCIDR: ${DUAL_STACK_CLUSTER_CIDR}`,
    ...bpf,
    '',
  ].join('\n');
}

/** Where the rule for `ip` sits in nat KUBE-SERVICES (of its family's table), counting its rules from 1. */
async function kubeServicesPosition(
  ctx: CellContext,
  backend: string,
  ip: string,
  family: IPFamily,
): Promise<{ rule: number; of: number } | undefined> {
  const listed = await ctx.lab.exec(
    ctx.topology.nodeNs,
    `${family === 'IPv6' ? 'ip6tables' : 'iptables'}-${backend}`,
    ['-w', '-t', 'nat', '-S', 'KUBE-SERVICES'],
    {
      allowFailure: true,
    },
  );
  const rules = listed.stdout.split('\n').filter((line) => line.startsWith('-A KUBE-SERVICES '));
  const index = rules.findIndex((line) => line.includes(`-d ${ip}/${family === 'IPv6' ? 128 : 32} `));
  return index < 0 ? undefined : { rule: index + 1, of: rules.length };
}

/** The modes whose rules go through iptables: iptables itself, and ipvs for its companion rules. */
function usesIptables(mode: BenchMode): boolean {
  return mode === 'iptables' || mode === 'ipvs';
}

/** Starts the node's proxy for this mode: the real kube-proxy, or our agent. */
function startProxy(
  ctx: CellContext,
  mode: BenchMode,
  configPath: string,
  iptablesBackend: 'legacy' | 'nft',
  family: IPFamily,
): LabAgent | KubeProxyProcess {
  const { lab, topology, feed } = ctx;
  if (isKubeProxyMode(mode)) {
    if (feed.kind !== 'apiserver') throw new Error(`${mode} needs the API server`);
    const ruleMode = KUBE_PROXY_MODES[mode];
    return KubeProxyProcess.start({
      lab,
      ns: topology.nodeNs,
      binary: join(feed.api.binaries.k8s, 'kube-proxy'),
      configPath,
      mode: ruleMode,
      // Its syncs are those of the measured family's proxier (it runs one per family).
      family,
      // ipvs mode writes its companion rules (masquerade, ipset matches) with iptables too.
      iptablesDir: usesIptables(ruleMode)
        ? iptablesBackendDir(join(ctx.workDir, `iptables-${iptablesBackend}`), iptablesBackend)
        : undefined,
    });
  }
  const source = feed.kind === 'manifests' ? ['--manifests', feed.dir, '--hostname-override', NODE_NAME] : [];
  // As the image starts it (its entry point's V8 flags), beside kube-proxy as its image runs it.
  return LabAgent.start(lab, topology.nodeNs, ctx.cli, ['--config', configPath, ...source], {
    launcher: imageEntrypoint(ctx.cli),
  });
}

/** Where the client's loads go: the measured Service, or (direct) its backend pods themselves. */
export interface LoadTargets {
  /** loadgen's address list: one ClusterIP, or every backend pod's address (taken in turn). */
  ips: string;
  tcpPort: number;
  udpPort: number;
  /** wrk's URL: one address (wrk takes one host; its 2 connections go to the first backend in direct). */
  wrkUrl: string;
}

export function loadTargets(mode: BenchMode, scenario: Scenario): LoadTargets {
  if (mode === 'direct') {
    // The same E backend pods the Service's slice lists, so the load spreads over the same servers.
    const ips = Array.from({ length: scenario.endpoints }, (_, e) =>
      backendPodIP(e, scenarioFamily(scenario)),
    );
    return {
      ips: ips.join(','),
      tcpPort: TCP_TARGET_PORT,
      udpPort: UDP_TARGET_PORT,
      wrkUrl: `http://${joinHostPort(ips[0] as string, TCP_TARGET_PORT)}/`,
    };
  }
  const { ip } = measuredService(scenario);
  return {
    ips: ip,
    tcpPort: SERVICE_TCP_PORT,
    udpPort: SERVICE_UDP_PORT,
    wrkUrl: `http://${joinHostPort(ip, SERVICE_TCP_PORT)}/`,
  };
}

type ClientExec = (cmd: string, args: string[]) => Promise<{ stdout: string }>;
type AddSample = (measure: MeasureId, value: number, extra?: Partial<Sample>) => void;

/** One loadgen crr run (paced at `rate` per second, or 0: as fast as they complete). */
async function crrRun(
  clientExec: ClientExec,
  ctx: CellContext,
  targets: LoadTargets,
  seconds: number,
  file: string,
  rate = 0,
): Promise<{ summary: LoadgenSummary; connectUs: number[]; totalUs: number[] }> {
  const args = [targets.ips, String(targets.tcpPort), String(seconds), '2000000', file, String(rate)];
  const summary = parseLoadgen((await clientExec(ctx.tools.loadgen, ['crr', ...args])).stdout);
  const [connectUs = [], totalUs = []] = parseColumns(readFileSync(file, 'utf8'), 2);
  rmSync(file, { force: true });
  return { summary, connectUs, totalUs };
}

/**
 * New connections, UDP request/responses and keep-alive throughput through the measured Service
 * (direct: to its backends), with the CPU per connection and per request (cpu.ts: the system time
 * of the client and the backends, the node's per-packet work in it): over the saturated runs, and
 * over a run paced at the offered rate (below every mode's saturation).
 */
async function measureDataPlane(
  ctx: CellContext,
  scenario: Scenario,
  mode: BenchMode,
  rep: number,
  clientExec: ClientExec,
  add: AddSample,
  /** Where the Service's rule sits in KUBE-SERVICES (iptables modes). */
  position: { rule: number; of: number } | undefined,
): Promise<void> {
  const { settings } = ctx;
  const targets = loadTargets(mode, scenario);
  const out = (name: string) =>
    join(ctx.workDir, `${mode}-${scenarioFamily(scenario)}-${scenario.services}-${rep}-${name}.txt`);
  // Warm-up (ARP, the backends' first accept): a failure here means the mode does not carry traffic.
  const warm = await crrRun(clientExec, ctx, targets, 0.3, out('warm'));
  if (warm.summary.attempts > 0 && warm.summary.errors === warm.summary.attempts)
    throw new Error(
      `no connection to ${targets.ips} port ${targets.tcpPort} succeeded (${warm.summary.errors} failed)`,
    );

  ctx.step(
    `new connections (TCP_CRR-like)${position ? `; the Service's rule is #${position.rule} of ${position.of} in KUBE-SERVICES` : ''}`,
  );
  const { result: crr, cpuUsPerUnit: crrCpu } = await withSystemCpu(
    ctx.topology.cgroups.root,
    () => crrRun(clientExec, ctx, targets, settings.seconds, out('crr')),
    (r) => r.totalUs.length,
  );
  const counts = { errors: crr.summary.errors, attempts: crr.summary.attempts };
  add('crrPerSec', crr.totalUs.length / (crr.summary.elapsedUs / 1e6), {
    ...counts,
    ...(position ? { kubeServicesPosition: position } : {}),
  });
  add('cpuPerConnSaturatedUs', crrCpu, counts);
  const connect = summarize(crr.connectUs);
  add('tcpConnectUs', connect.median, { summary: connect, histogram: histogram(crr.connectUs), ...counts });

  ctx.step(`new connections paced at ${settings.offeredRate}/s (CPU per connection)`);
  const { result: paced, cpuUsPerUnit: pacedCpu } = await withSystemCpu(
    ctx.topology.cgroups.root,
    () => crrRun(clientExec, ctx, targets, settings.seconds, out('paced'), settings.offeredRate),
    (r) => r.totalUs.length,
  );
  add('cpuPerConnUs', pacedCpu, {
    errors: paced.summary.errors,
    attempts: paced.summary.attempts,
    achievedPerSec: paced.totalUs.length / (paced.summary.elapsedUs / 1e6),
  });

  await measureUdp(ctx, targets, clientExec, add, out('udp'));

  await measureKeepAlive(ctx, targets, clientExec, add);
}

/** Keep-alive HTTP throughput (wrk, 2 connections) and its CPU per request. */
async function measureKeepAlive(
  ctx: CellContext,
  targets: LoadTargets,
  clientExec: ClientExec,
  add: AddSample,
): Promise<void> {
  ctx.step('keep-alive HTTP (wrk)');
  const seconds = Math.max(1, Math.round(ctx.settings.seconds));
  const { result: wrk, cpuUsPerUnit } = await withSystemCpu(
    ctx.topology.cgroups.root,
    async () =>
      parseWrk(
        (await clientExec('wrk', ['-t1', '-c2', `-d${seconds}s`, '--timeout', '2s', targets.wrkUrl])).stdout,
      ),
    (r) => r.requests,
  );
  add('wrkReqPerSec', wrk.requestsPerSec, { errors: wrk.errors });
  add('cpuPerRequestUs', cpuUsPerUnit, { errors: wrk.errors });
}

/** UDP request/response, a new socket (so a new conntrack or flow entry) per datagram. */
async function measureUdp(
  ctx: CellContext,
  targets: LoadTargets,
  clientExec: ClientExec,
  add: AddSample,
  file: string,
): Promise<void> {
  ctx.step('UDP request/response');
  const args = [targets.ips, String(targets.udpPort), String(ctx.settings.udpProbes), file];
  const udp = parseLoadgen((await clientExec(ctx.tools.loadgen, ['udp', ...args])).stdout);
  const [rttUs = []] = parseColumns(readFileSync(file, 'utf8'), 1);
  rmSync(file, { force: true });
  const rtt = summarize(rttUs);
  add('udpRttUs', rtt.median, {
    summary: rtt,
    histogram: histogram(rttUs),
    errors: udp.errors,
    attempts: udp.attempts,
  });
}

/** Empties the node's netfilter conntrack table, both families' entries. */
async function flushConntrack(ctx: CellContext): Promise<void> {
  for (const family of ['ipv4', 'ipv6'])
    await ctx.lab.exec(ctx.topology.nodeNs, 'conntrack', ['-F', '-f', family], { allowFailure: true });
}

/** Bounds, natively, on an endpoint change reaching the kernel and on its sync being logged after. */
const CHANGE_TO_KERNEL_MS = 120_000;
const CHANGE_SYNC_LOGGED_MS = 30_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs a client command in the client pod: on the client's CPU when the topology places it, and
 * inside the socket-LB cgroup when there is one (bpf-sock).
 */
function clientCommand(ctx: CellContext, sockCgroup: string | null): ClientExec {
  const { lab, topology } = ctx;
  return (cmd, args) =>
    lab.exec(
      topology.clientNs,
      ...inCgroup(sockCgroup ?? topology.cgroups.client, ...pinned(topology.placement?.clientCpu, cmd, args)),
    );
}

/** The direct mode: no proxy, the client's loads straight to the backend pods (data plane only). */
async function runDirectCell(ctx: CellContext, scenario: Scenario, rep: number): Promise<Sample[]> {
  const samples: Sample[] = [];
  const base = {
    mode: 'direct' as const,
    family: scenarioFamily(scenario),
    services: scenario.services,
    rep,
  };
  await flushConntrack(ctx);
  try {
    await measureDataPlane(
      ctx,
      scenario,
      'direct',
      rep,
      clientCommand(ctx, null),
      (measure, value, extra = {}) => samples.push({ measure, ...base, value, ...extra }),
      undefined,
    );
    return samples;
  } finally {
    await flushConntrack(ctx);
  }
}

/** What a cell sets up on the node before its proxy starts, and takes down after. */
interface CellSetup {
  pinPath: string;
  configPath: string;
  /** The socket-LB cgroup (bpf-sock), or null. */
  sockCgroup: string | null;
  clientExec: ClientExec;
  /** The iptables binary that writes the backend hint chain, when the run names a backend. */
  hintBinary: string | null;
}

export async function runCell(
  ctx: CellContext,
  mode: BenchMode,
  scenario: Scenario,
  rep: number,
  dataPlane = true,
): Promise<Sample[]> {
  if (mode === 'direct') return runDirectCell(ctx, scenario, rep);
  const { settings } = ctx;
  const samples: Sample[] = [];
  const family = scenarioFamily(scenario);
  const base: Pick<Sample, 'mode' | 'family' | 'services' | 'rep' | 'iptablesBackend'> = {
    mode,
    family,
    services: scenario.services,
    rep,
  };
  const add = (measure: MeasureId, value: number, extra: Partial<Sample> = {}) =>
    samples.push({ measure, ...base, value, ...extra });
  const setup = await setUpCell(ctx, mode, scenario);

  ctx.step(`${isKubeProxyMode(mode) ? 'kube-proxy' : 'agent'} cold start`);
  // The real kube-proxy has no backend detection of its own: it is given the one ours would pick
  // ("auto": nft on a clean node, as kube-proxy's iptables-wrapper decides).
  const kubeProxyBackend = settings.iptablesBackend === 'legacy' ? 'legacy' : 'nft';
  const agent = startProxy(ctx, mode, setup.configPath, kubeProxyBackend, family);
  /** The iptables backend in use: the one kube-proxy was given, or the one our agent logged. */
  const probeBackend = () =>
    isKubeProxyMode(mode)
      ? kubeProxyBackend
      : String(agent.lines.find((l) => l.msg === 'iptables backend chosen')?.backend ?? 'nft');
  try {
    const first = await agent.waitForSync(1, settings.coldStartTimeoutMs);
    // Every sample of a cell whose rules go through iptables says which backend held them.
    if (usesIptables(kernelMode(mode))) base.iptablesBackend = probeBackend();
    add('coldStartMs', first.at - agent.startedAt);
    add('firstSyncMs', first.durationMs);
    const synced = agent.memory();
    add('agentRssMiB', synced.rssMiB);
    add('agentPeakRssMiB', synced.peakMiB);

    if (dataPlane) {
      const position =
        kernelMode(mode) === 'iptables'
          ? await kubeServicesPosition(ctx, probeBackend(), measuredService(scenario).ip, family)
          : undefined;
      await measureDataPlane(ctx, scenario, mode, rep, setup.clientExec, add, position);
    }
    await measureEndpointChanges(ctx, mode, scenario, rep, agent, setup.pinPath, probeBackend(), add);
    await sleep(first.at + ctx.settings.settleMs - performance.now());
    add('agentSettledRssMiB', agent.memory().rssMiB);
    return samples;
  } catch (err) {
    const apiLogs = ctx.feed.kind === 'apiserver' ? `\n${ctx.feed.api.logTails()}` : '';
    throw new Error(`${(err as Error).message}\nproxy log tail:\n${agent.tail().slice(-3000)}${apiLogs}`);
  } finally {
    ctx.step('stop and clean up');
    await agent.stop();
    await tearDownCell(ctx, setup);
  }
}

/** The agent's config, the socket-LB cgroup, the measured slice emptied, conntrack flushed, the hint. */
async function setUpCell(ctx: CellContext, mode: BenchMode, scenario: Scenario): Promise<CellSetup> {
  const { lab, topology, settings } = ctx;
  const pinPath = `/sys/fs/bpf/${lab.prefix}-${mode}`;
  const configPath = join(ctx.workDir, `agent-${mode}.yaml`);
  // socketLB all serves every socket under its cgroup: a cgroup of the bench's own, which only the
  // client's commands join, so nothing else on a shared machine is translated. It sits under the
  // load's cgroup, whose system time is the CPU measures'.
  const sockCgroup = mode === 'bpf-sock' ? join(topology.cgroups.root, 'bpf-sock') : null;
  if (sockCgroup) mkdirSync(sockCgroup, { recursive: true });
  writeFileSync(
    configPath,
    agentConfig(
      mode,
      ctx.feed,
      pinPath,
      { sock: sockCgroup, load: topology.cgroups.root },
      scenario,
      settings.hostRouting,
    ),
  );
  const clientExec = clientCommand(ctx, sockCgroup);
  await setMeasuredSlice(ctx.feed, scenario, []);
  await flushConntrack(ctx);
  const hintBinary =
    settings.iptablesBackend !== 'auto' && usesIptables(kernelMode(mode))
      ? `iptables-${settings.iptablesBackend}`
      : null;
  if (hintBinary) await lab.exec(topology.nodeNs, hintBinary, HINT_CHAIN);
  return { pinPath, configPath, sockCgroup, clientExec, hintBinary };
}

/** After the proxy stopped: its kernel state, conntrack, the socket-LB cgroup and the hint go. */
async function tearDownCell(ctx: CellContext, setup: CellSetup): Promise<void> {
  const { lab, topology } = ctx;
  await cleanupNode({
    pinPath: setup.pinPath,
    exec: (cmd, args, opts) => lab.exec(topology.nodeNs, cmd, args, opts),
  });
  await flushConntrack(ctx);
  // Empty once the client's commands have exited.
  if (setup.sockCgroup) rmdirSync(setup.sockCgroup);
  if (setup.hintBinary)
    await lab.exec(topology.nodeNs, setup.hintBinary, ['-t', 'mangle', '-X', 'KUBE-IPTABLES-HINT'], {
      allowFailure: true,
    });
}

/**
 * The EndpointSlice change measures: per change, the time until the new endpoint is in the kernel
 * (polled) and the duration of the sync the proxy logs for it.
 */
async function measureEndpointChanges(
  ctx: CellContext,
  mode: BenchMode,
  scenario: Scenario,
  rep: number,
  agent: LabAgent | KubeProxyProcess,
  pinPath: string,
  iptablesBackend: string,
  add: AddSample,
): Promise<void> {
  const { lab, topology, settings } = ctx;
  const family = scenarioFamily(scenario);
  const target = measuredService(scenario);
  ctx.step('EndpointSlice change to kernel');
  const probe: ProbeContext = {
    lab,
    nodeNs: topology.nodeNs,
    pinPath,
    iptablesBackend,
    serviceIP: target.ip,
    family,
  };
  for (let change = 0; change < settings.endpointChanges; change++) {
    // Past minSyncPeriod since the last sync, so the change is not held back by the rate limit.
    await sleep(1100);
    const ip = changedEndpointIP(rep * settings.endpointChanges + change, family);
    const syncsBefore = agent.syncs.length;
    const started = performance.now();
    await setMeasuredSlice(ctx.feed, scenario, [ip]);
    const deadline = started + CHANGE_TO_KERNEL_MS * settings.timeoutScale;
    while (!(await endpointInKernel(mode, probe, target.name, ip))) {
      if (performance.now() > deadline)
        throw new Error(`endpoint ${ip} not in the kernel after ${(deadline - started) / 1000} s`);
      await sleep(2);
    }
    add('endpointChangeMs', performance.now() - started);
    const sync = await agent.waitForSync(syncsBefore + 1, CHANGE_SYNC_LOGGED_MS * settings.timeoutScale);
    add('changeSyncMs', sync.durationMs);
  }
}
