// The bpf data plane as `run` uses it: open() loads the programs (reusing the pinned maps and
// links of a previous run, so established connections survive a restart), sync() plans and
// writes the brain's decisions, periodic work keeps the attachments, node addresses and
// conntrack in shape, and read() gives the metrics their counters. Interfaces are found by
// discover.ts and followed through netlink (link-watch.ts): a new pod's veth is hooked, and a
// removed one released, within a debounce interval. close() leaves everything in
// the kernel for the next run; `cleanup` removes it (detachAll and the pin directory).

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { netnsCookie } from '../../../native/libc.js';
import type { ChangeSet, Dataplane, SyncResult } from '../../brain/dataplane.js';
import type { ProxyDecisions } from '../../brain/types.js';
import { maglevTableSizeProblem } from '../../config/maglev-table-size.js';
import type { ProxyConfig } from '../../config/types.js';
import {
  findCgroup2Root,
  firstUncoveredProcess,
  pidsInCgroupTree,
  processesInOwnNetns,
  socketHookCgroupDir,
  uncoveredProcessWarning,
} from '../../host/cgroup.js';
import { LinkWatch } from '../../host/link-watch.js';
import { type PortReservation, reservePorts } from '../../host/reserved-ports.js';
import type { Logger } from '../../logger.js';
import type { IPFamily } from '../../model/types.js';
import { canonicalIP, isLoopback, parseIP } from '../../net/ip.js';
import type { BpfStats, BpfStatsProvider, TrafficCounters } from '../stats.js';
import { Attacher, type AttachReport, syncSockHooks } from './attach.js';
import {
  bpfConntrackTimeouts,
  type ConntrackGcStats,
  type ConntrackTimeouts,
  collectConntrack,
  readConntrack,
} from './conntrack-gc.js';
import { discoverInterfaces, type IpLink, probeHostNetwork } from './discover.js';
import {
  hostRouteInterfaces,
  hostRoutingDecision,
  kernelHasHostRoutingHelpers,
  readNetfilterChains,
} from './host-route.js';
import { IdAllocator } from './ids.js';
import { IPPROTO, KernelStore } from './kernel-store.js';
import { DROP_REASON, MAPS, SOCK_SCOPE, type TrafficStats } from './layout.js';
import { MAGLEV_HASH_SEED } from './maglev.js';
import { type LoadedObject, loadPinnedObject, MAP_SIZE_SETTING } from './object.js';
import { ANY_ADDRESS, type BpfPlan, BpfPlanner, type PlanProblem, plannedFrontend } from './plan.js';
import { MapWriter } from './writer.js';

/** SNAT source ports: above Linux's default ephemeral range (32768-60999), and reserved in
 * net.ipv4.ip_local_reserved_ports while the agent runs, so the node's own connections never take
 * one whatever its ip_local_port_range (docs/bpf-datapath.md, "SNAT ports"). */
export const SNAT_PORT_RANGE = { min: 61000, max: 65535 } as const;
/** How long replaced slots, tables and backends stay for programs that read the old values. */
export const DEFAULT_GRACE_MS = 1000;
/** A burst of netlink events (a pod start adds a link, addresses and routes) becomes one pass. */
export const WATCH_DEBOUNCE_MS = 150;
/** The safety net under the netlink watch: interfaces and node addresses are re-read this often. */
export const INTERFACE_RESYNC_MS = 60_000;

export interface BpfDataplaneOptions {
  /** Follow interfaces and node addresses in the background (tests call refreshInterfaces()). */
  watchInterfaces?: boolean;
  /** Run conntrack GC every bpf.conntrackGCIntervalSeconds (tests call collectConntrack()). */
  conntrackGC?: boolean;
  objectPath?: string;
  graceMs?: number;
  /** Where the frontend names for `list` and `trace` are written (default: namesFilePath(pinPath)). */
  namesFile?: string;
}

/** Service port names of the programmed frontends: the maps only hold numbers. */
export interface FrontendNames {
  frontends: { serviceId: number; servicePortName: string; kind: string }[];
}

export function namesFilePath(pinPath: string): string {
  return `/run/kube-bpf-proxy/${pinPath.replace(/^\/+/, '').replace(/\//g, '_')}.names.json`;
}

/** Where the agent records the ip_local_reserved_ports value it replaced (beside the names file). */
export function reservedPortsStatePath(namesFile: string): string {
  return `${namesFile.replace(/\.names\.json$/, '')}.reserved-ports.json`;
}

const ZERO: TrafficCounters = {
  newConnections: 0n,
  forwardPackets: 0n,
  forwardBytes: 0n,
  replyPackets: 0n,
  replyBytes: 0n,
  droppedPackets: 0n,
};

function toCounters(s: TrafficStats): TrafficCounters {
  return {
    newConnections: s.newConns,
    forwardPackets: s.fwdPackets,
    forwardBytes: s.fwdBytes,
    replyPackets: s.replyPackets,
    replyBytes: s.replyBytes,
    droppedPackets: s.drops,
  };
}

function addCounters(a: TrafficCounters, b: TrafficCounters): TrafficCounters {
  const out = { ...a };
  for (const k of Object.keys(out) as (keyof TrafficCounters)[]) out[k] = BigInt(a[k]) + BigInt(b[k]);
  return out;
}

/**
 * Keeps a counter series monotonic while the id behind it changes (a frontend re-created under
 * a new id, or an id's counters zeroed on reuse): what the old id had counted is carried over.
 */
export class MonotonicCounters {
  private readonly series = new Map<string, { id: number; last: TrafficCounters; base: TrafficCounters }>();

  value(series: string, id: number, raw: TrafficCounters): TrafficCounters {
    const known = this.series.get(series);
    let base = known?.base ?? ZERO;
    if (known && (known.id !== id || BigInt(raw.forwardPackets) < BigInt(known.last.forwardPackets))) {
      base = addCounters(base, known.last);
    }
    this.series.set(series, { id, last: raw, base });
    return addCounters(base, raw);
  }
}

type AddrInfo = NonNullable<IpLink['addr_info']>[number];

/** An IPv6 address the kernel may use as a source: not still in (or failed) duplicate address
 * detection. */
const usable6 = (a: AddrInfo) => !a.tentative && !a.dadfailed;

/**
 * Each interface's SNAT source by ifindex, per family, as MASQUERADE would pick it: its first
 * global IPv4 address; its first global IPv6 address that is usable (usable6), one not deprecated
 * before a deprecated one (RFC 6724 rule 3). Interfaces without one are absent.
 */
export function interfaceAddresses(
  interfaces: readonly Pick<IpLink, 'ifindex' | 'addr_info'>[],
): Record<IPFamily, Map<number, string>> {
  const out: Record<IPFamily, Map<number, string>> = { IPv4: new Map(), IPv6: new Map() };
  for (const i of interfaces) {
    const global = (i.addr_info ?? []).filter((a) => a.local && (a.scope ?? 'global') === 'global');
    const v4 = global.find((a) => a.family === 'inet');
    const v6 = global.filter((a) => a.family === 'inet6' && usable6(a));
    const pick6 = v6.find((a) => !a.deprecated) ?? v6[0];
    if (v4?.local) out.IPv4.set(i.ifindex, v4.local);
    const ip6 = pick6?.local ? canonicalIP(pick6.local) : null;
    if (ip6) out.IPv6.set(i.ifindex, ip6);
  }
  return out;
}

/** Every IPv4 address of the node except loopback, and every global IPv6 one (not ::1, not
 * link-local): NodePorts open on "every node address", as kube-proxy's nodePortAddresses default. */
export function nodeAddresses(interfaces: readonly Pick<IpLink, 'ifname' | 'addr_info'>[]): string[] {
  const out = new Set<string>();
  for (const i of interfaces) {
    for (const a of i.addr_info ?? []) {
      if (!a.local) continue;
      if (a.family === 'inet' && !a.local.startsWith('127.')) out.add(a.local);
      const ip = a.family === 'inet6' ? parseIP(a.local) : null;
      if (ip && !isLoopback(ip) && !(ip.bytes[0] === 0xfe && (ip.bytes[1]! & 0xc0) === 0x80))
        out.add(a.local);
    }
  }
  return [...out].sort();
}

/** The conntrack maps GC walks, both families. */
const CONNTRACK_MAPS = ['ct4Tcp', 'ct4Any', 'ct6Tcp', 'ct6Any'] as const;

export class BpfDataplane implements Dataplane, BpfStatsProvider {
  readonly mode = 'bpf' as const;
  private readonly ids: { serviceIds: IdAllocator; backendIds: IdAllocator };
  private readonly planner: BpfPlanner;
  private plan: BpfPlan | null = null;
  private problems = new Set<string>();
  /** The UDP frontends' "serviceId/backendId" pairs, in all and by frontend name. */
  private readonly udpPairs = new Set<string>();
  private readonly udpPairsOf = new Map<string, string[]>();
  private readonly timers: NodeJS.Timeout[] = [];
  private flushTimer: NodeJS.Timeout | null = null;
  private readonly counters = new MonotonicCounters();
  private readonly backendCounters = new MonotonicCounters();
  private readonly gc = {
    runs: 0,
    scanned: 0,
    deleted: 0,
    seconds: 0,
    entries: { ct4Tcp: 0, ct4Any: 0, ct6Tcp: 0, ct6Any: 0 },
  };
  private closed = false;
  /** What the names file holds, by frontend name; null until it is written. */
  private namesWritten: Map<string, string> | null = null;
  /** The node's IPs from the last sync's decisions: devices holding them are external. */
  private nodeIPs: string[] = [];
  private watch: LinkWatch | null = null;
  private refreshTimer: NodeJS.Timeout | null = null;
  private readonly refreshQueue = new SerialQueue();
  private readonly gcQueue = new SerialQueue();
  private reservation: PortReservation | null = null;
  /** The GC's timeouts: the defaults with conntrack.tcpEstablishedTimeout (bpfConntrackTimeouts). */
  private readonly ctTimeouts: ConntrackTimeouts;
  /** Backends whose id is past kbp_best_v1 at the last sync (counted per service only). */
  private uncountedBackends = 0;

  private constructor(
    readonly lb: LoadedObject,
    readonly store: KernelStore,
    private readonly writer: MapWriter,
    readonly attacher: Attacher,
    private readonly config: ProxyConfig,
    private readonly log: Logger,
    private readonly options: BpfDataplaneOptions,
    /** Host routing loaded (hostRoutingDecision): the pods' devices go into kbp_hostif_v1. */
    private readonly hostRouting: boolean,
  ) {
    this.ctTimeouts = bpfConntrackTimeouts(config.conntrack);
    // A released id is not reused before every conntrack entry that could name it has expired.
    const quarantineMs = this.ctTimeouts.tcpEstablishedSeconds * 1000;
    this.ids = {
      serviceIds: new IdAllocator('service', 1, lb.capacity.svcStats - 1, quarantineMs),
      // Ids with per-CPU counters of their own first (kbp_best_v1 is indexed by backend id).
      backendIds: new IdAllocator(
        'backend',
        1,
        lb.capacity.backends4 - 1,
        quarantineMs,
        undefined,
        lb.capacity.backendStats - 1,
      ),
    };
    this.planner = new BpfPlanner(this.ids);
  }

  static async open(
    config: ProxyConfig,
    log: Logger,
    options: BpfDataplaneOptions = {},
  ): Promise<BpfDataplane> {
    const bpf = config.bpf;
    const problem = maglevTableSizeProblem(bpf.maglevTableSize);
    if (problem) throw new Error(`bpf.maglevTableSize: ${problem}`);
    const started = performance.now();
    const hostRouting = hostRoutingDecision(bpf.hostRouting, {
      helpers: kernelHasHostRoutingHelpers(),
      chains: bpf.hostRouting === 'auto' ? await readNetfilterChains() : [],
    });
    if (!hostRouting)
      throw new Error('bpf.hostRouting: bpf needs bpf_redirect_peer and bpf_redirect_neigh (kernel 5.10+)');
    log.info({ setting: bpf.hostRouting, bpf: hostRouting.bpf, reason: hostRouting.reason }, 'host routing');
    const lb = await loadPinnedObject({
      pinPath: bpf.pinPath,
      mapSizes: bpf.mapSizes,
      objectPath: options.objectPath,
      hostRouting: hostRouting.bpf,
      log,
    });
    for (const r of lb.reused) {
      if (r.configured !== null && r.configured !== r.capacity) {
        log.warn(
          { map: r.name, capacity: r.capacity, configured: r.configured },
          'pinned map reused with its old size; run `kube-bpf-proxy cleanup` to apply the new one',
        );
      }
    }
    const store = new KernelStore(lb.fd, lb.capacity);
    const writer = new MapWriter(store, {
      maglevTableSize: bpf.maglevTableSize,
      graceMs: options.graceMs ?? DEFAULT_GRACE_MS,
    });
    const attacher = new Attacher(lb.pinDir, lb.prog, bpf, log);
    const dp = new BpfDataplane(lb, store, writer, attacher, config, log, options, hostRouting.bpf);
    dp.restoreIds();
    dp.reserveSnatPorts();
    dp.attachSockHooks();
    log.info(
      {
        pinDir: lb.pinDir,
        reusedMaps: lb.reused.length,
        services: dp.ids.serviceIds.size,
        backends: dp.ids.backendIds.size,
        ms: Math.round(performance.now() - started),
      },
      'bpf programs loaded',
    );
    if (options.watchInterfaces ?? true) {
      // Watching starts first: a device that appears during the first pass is not missed.
      dp.watch = new LinkWatch(() => dp.requestRefresh(), log);
      dp.watch.start();
      await dp.refreshInterfaces();
      dp.every(INTERFACE_RESYNC_MS, async () => dp.requestRefresh());
    }
    if (options.conntrackGC ?? true) {
      dp.every(bpf.conntrackGCIntervalSeconds * 1000, () => dp.collectConntrack());
    }
    return dp;
  }

  /** The SNAT range into net.ipv4.ip_local_reserved_ports (put back by close()). */
  private reserveSnatPorts(): void {
    const namesFile = this.options.namesFile ?? namesFilePath(this.config.bpf.pinPath);
    try {
      this.reservation = reservePorts(
        [SNAT_PORT_RANGE.min, SNAT_PORT_RANGE.max],
        reservedPortsStatePath(namesFile),
      );
      this.log.info({ ipLocalReservedPorts: this.reservation.value }, 'SNAT ports reserved');
    } catch (err) {
      this.log.warn(
        { err: String(err), range: `${SNAT_PORT_RANGE.min}-${SNAT_PORT_RANGE.max}` },
        'cannot reserve the SNAT ports in net.ipv4.ip_local_reserved_ports: host connections may collide with SNATed flows',
      );
    }
  }

  private restoreIds(): void {
    const restored = this.writer.restore();
    for (const [key, id] of restored.serviceIds) {
      if (!this.ids.serviceIds.restore(key, id))
        this.log.warn({ frontend: key, id }, 'conflicting service id in the maps');
    }
    for (const [key, id] of restored.backendIds) {
      if (!this.ids.backendIds.restore(key, id))
        this.log.warn({ backend: key, id }, 'conflicting backend id in the maps');
    }
    // Ids released by the previous run are unknown now, but tracked flows may still name them.
    const until = Date.now() + this.ctTimeouts.tcpEstablishedSeconds * 1000;
    for (const map of CONNTRACK_MAPS) {
      for (const r of readConntrack(this.lb.fd[map])) {
        this.ids.serviceIds.quarantine(r.svcId, until);
        this.ids.backendIds.quarantine(r.backendId, until);
      }
    }
  }

  /**
   * The socket hooks of bpf.socketLB on the configured cgroup (the node's: the cgroup2 root by
   * default, narrowed to the node's cgroup where the kubelet's pods live below one), or
   * none when it is off. Scope "host" needs this namespace's cookie (SO_NETNS_COOKIE, kernel
   * 5.14+): without it the hooks stay off and host clients keep only what tc gives them.
   */
  private attachSockHooks(): void {
    const { socketLB, cgroupPath } = this.config.bpf;
    let cgroup: string | null = null;
    if (socketLB !== 'off') {
      try {
        this.store.writeSockConfig({
          hostNetnsCookie: socketLB === 'host' ? netnsCookie() : 0n,
          scope: SOCK_SCOPE[socketLB],
        });
        cgroup = socketHookCgroupDir(cgroupPath || findCgroup2Root());
      } catch (err) {
        this.log.warn(
          { err, socketLB },
          'socket-level load balancing unavailable: host-namespace clients of services are not balanced',
        );
      }
    }
    let report: ReturnType<typeof syncSockHooks>;
    try {
      report = syncSockHooks(this.lb.pinDir, this.lb.prog, cgroup);
    } catch (err) {
      this.log.error({ err, cgroup }, 'attaching the socket hooks failed');
      return;
    }
    for (const hook of report.attached) this.log.info({ hook, cgroup }, 'bpf program attached');
    for (const hook of report.replaced) this.log.info({ hook, cgroup }, 'bpf program swapped in');
    for (const hook of report.detached) this.log.info({ hook }, 'bpf program detached');
    if (cgroup !== null) this.warnIfCgroupMissesProcesses(cgroup);
  }

  /** Once, at start: clients the socket hooks cannot see would get only tc's translation, silently. */
  private warnIfCgroupMissesProcesses(cgroup: string): void {
    try {
      const agent = { pid: process.pid, comm: process.title };
      const outside = firstUncoveredProcess(agent, processesInOwnNetns(), pidsInCgroupTree(cgroup));
      if (outside)
        this.log.warn(
          { cgroup, pid: outside.pid, comm: outside.comm },
          uncoveredProcessWarning(cgroup, outside),
        );
    } catch (err) {
      this.log.debug({ err: String(err), cgroup }, 'cannot check which processes the socket hooks see');
    }
  }

  private every(ms: number, task: () => Promise<unknown>): void {
    const timer = setInterval(() => {
      task().catch((err: unknown) => this.log.error({ err }, 'bpf background task failed'));
    }, ms);
    timer.unref();
    this.timers.push(timer);
  }

  async sync(decisions: ProxyDecisions, changes: ChangeSet): Promise<SyncResult> {
    const bpf = this.config.bpf;
    const { plan, scope } = this.planner.plan(
      decisions,
      {
        defaultScheduler: bpf.scheduler,
        maglevFrontends: bpf.maglevFrontends,
        families: this.store.families,
        capacity: {
          frontends: this.lb.capacity.svc4,
          backends: this.lb.capacity.backends4 - 1,
          // Room for two generations while a frontend switches.
          slots: Math.floor(this.lb.capacity.slots / 2),
          sourceRanges: this.lb.capacity.srcRange4,
        },
        nowMs: Date.now(),
      },
      changes.fullSyncRequired ? null : changes.changedServices,
    );
    await this.writeConfig(decisions, plan);
    this.noteNodeIPs(decisions);
    if (changes.fullSyncRequired) this.writer.resync();
    const result = await this.writer.apply(plan, scope);
    this.plan = plan;
    this.reportProblems([
      ...plan.problems,
      ...result.failures.map((f) => ({ servicePortName: f.servicePortName, reason: f.error })),
      ...result.degraded.map((f) => ({ servicePortName: f.servicePortName, reason: f.error })),
    ]);
    this.writeNames(plan, scope);
    this.noteUncountedBackends();
    this.cleanStaleUdp(plan, scope);
    this.scheduleFlush();
    this.log.debug(
      {
        frontends: plan.frontends.length,
        backends: plan.backends.length,
        written: result.written,
        deleted: result.deleted,
        maglevTables: result.maglevTables,
        maglevEntries: result.maglevEntries,
      },
      'bpf maps synced',
    );
    return { full: changes.fullSyncRequired };
  }

  private async writeConfig(decisions: ProxyDecisions, plan: BpfPlan): Promise<void> {
    const nodeIP = (family: IPFamily) =>
      decisions.families.find((f) => f.family === family)?.nodeIP || ANY_ADDRESS[family];
    // Without any NodePort on every node address, a range nothing falls in keeps the node
    // address lookup off the path (0 would mean "every port").
    const nodeport = plan.anyAddressNodePorts ?? { min: 65535, max: 65535 };
    const wanted = {
      snatAddr4: nodeIP('IPv4'),
      snatAddr6: nodeIP('IPv6'),
      snatPortMin: SNAT_PORT_RANGE.min,
      snatPortMax: SNAT_PORT_RANGE.max,
      maglevSize: this.config.bpf.maglevTableSize,
      hashSeed: MAGLEV_HASH_SEED,
      nodeportMin: nodeport.min,
      nodeportMax: nodeport.max,
      newFlowRate: this.config.bpf.newFlowsPerSecondPerCpu,
    };
    const current = this.store.readConfig();
    if ((Object.keys(wanted) as (keyof typeof wanted)[]).some((k) => current[k] !== wanted[k])) {
      // The generation to write may still be read by a program that started before the last
      // flip: only after the (short) grace period.
      const wait = this.store.configGraceRemainingMs();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      this.store.writeConfig(wanted);
    }
  }

  /** Logs each problem once, when it first appears. */
  private reportProblems(problems: PlanProblem[]): void {
    const now = new Set(problems.map((p) => `${p.servicePortName}\u0000${p.reason}`));
    for (const p of problems) {
      if (!this.problems.has(`${p.servicePortName}\u0000${p.reason}`)) {
        this.log.warn(
          { servicePortName: p.servicePortName, reason: p.reason },
          'service port not fully programmed',
        );
      }
    }
    this.problems = now;
  }

  /** Rewrites the names file when a frontend's name, id or kind changed: a change of endpoints
   * alone (most changes) leaves it as it is. */
  private writeNames(plan: BpfPlan, scope: ReadonlySet<string> | null): void {
    const named = (f: BpfPlan['frontends'][number]) =>
      `${f.serviceId}\u0000${f.servicePortName}\u0000${f.kind}`;
    const written = this.namesWritten;
    if (scope && written) {
      const unchanged = (name: string) => {
        const f = plannedFrontend(plan, name);
        return written.get(name) === (f ? named(f) : undefined);
      };
      if ([...scope].every(unchanged)) return;
    }
    const names: FrontendNames = {
      frontends: plan.frontends.map((f) => ({
        serviceId: f.serviceId,
        servicePortName: f.servicePortName,
        kind: f.kind,
      })),
    };
    const path = this.options.namesFile ?? namesFilePath(this.config.bpf.pinPath);
    try {
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, `${JSON.stringify(names)}\n`);
      this.namesWritten = new Map(plan.frontends.map((f) => [f.name, named(f)]));
    } catch (err) {
      this.namesWritten = null;
      this.log.debug({ err, path }, 'could not write frontend names for list/trace');
    }
  }

  /** Says once, when their number changes, that some backends have no counters of their own. */
  private noteUncountedBackends(): void {
    const limit = this.lb.capacity.backendStats;
    // The ids past the counter map's, kept by the allocator (no walk over every backend).
    const uncounted = this.ids.backendIds.inUsePastPreferred;
    if (uncounted !== this.uncountedBackends && uncounted > 0) {
      this.log.warn(
        { backends: uncounted, capacity: limit, setting: MAP_SIZE_SETTING.backendStats },
        'backends without per-backend counters (ids past the per-CPU counter map): counted in their services only',
      );
    }
    this.uncountedBackends = uncounted;
  }

  /**
   * kube-proxy deletes UDP conntrack entries towards endpoints that left: so do we. The UDP
   * frontends' {service, backend} pairs are kept per frontend, so a scoped sync looks at the
   * frontends in its scope alone.
   */
  private cleanStaleUdp(plan: BpfPlan, scope: ReadonlySet<string> | null): void {
    const pairsOf = (f: BpfPlan['frontends'][number] | undefined) =>
      f?.key.protocol === 'UDP' ? f.backendIds.map((b) => `${f.serviceId}/${b}`) : [];
    let lost = false;
    const update = (name: string, now: string[]) => {
      const before = this.udpPairsOf.get(name) ?? [];
      for (const p of before) this.udpPairs.delete(p);
      for (const p of now) this.udpPairs.add(p);
      if (now.length > 0) this.udpPairsOf.set(name, now);
      else this.udpPairsOf.delete(name);
      const kept = new Set(now);
      if (before.some((p) => !kept.has(p))) lost = true;
    };
    if (scope) {
      for (const name of scope) update(name, pairsOf(plannedFrontend(plan, name)));
    } else {
      const planned = new Set(plan.frontends.map((f) => f.name));
      for (const name of this.udpPairsOf.keys()) if (!planned.has(name)) update(name, []);
      for (const f of plan.frontends) update(f.name, pairsOf(f));
    }
    if (!lost) return;
    // What the pairs are when the pass runs: a pair that came back meanwhile keeps its flows.
    const pairs = this.udpPairs;
    // In the background, as a GC pass: the sync does not wait for a walk of the conntrack map.
    this.gcQueue
      .run(async () => {
        const passes: ConntrackGcStats[] = [];
        for (const map of ['ct4Any', 'ct6Any'] as const)
          passes.push(
            await collectConntrack(
              this.lb.fd[map],
              this.ctTimeouts,
              (r) => r.proto === IPPROTO.UDP && !pairs.has(`${r.svcId}/${r.backendId}`),
            ),
          );
        return passes;
      })
      .then(
        (passes) => {
          for (const stats of passes) {
            this.countGc(stats);
            if (stats.staleUdp)
              this.log.debug({ flows: stats.staleUdp }, 'deleted UDP conntrack entries of removed backends');
          }
        },
        (err: unknown) =>
          this.log.error({ err }, 'deleting UDP conntrack entries of removed backends failed'),
      );
  }

  private scheduleFlush(): void {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    const due = this.writer.nextDeferredDue();
    if (due === null || this.closed) return;
    this.flushTimer = setTimeout(
      () => {
        this.flushTimer = null;
        try {
          this.writer.flushDeferred();
        } catch (err) {
          this.log.error({ err }, 'deleting replaced bpf map entries failed; retried at the next sync');
        }
        this.scheduleFlush();
      },
      Math.max(0, due - Date.now()),
    );
    this.flushTimer.unref();
  }

  /** A device holding a node IP is external: new node IPs mean another discovery pass. */
  private noteNodeIPs(decisions: ProxyDecisions): void {
    const ips = decisions.families.map((f) => f.nodeIP).filter((ip) => ip !== '');
    if (ips.join() === this.nodeIPs.join()) return;
    this.nodeIPs = ips;
    if (this.watch) this.requestRefresh();
  }

  /** A discovery pass soon, once a burst of events has settled. */
  private requestRefresh(): void {
    if (this.closed || this.refreshTimer) return;
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = null;
      this.refreshInterfaces().catch((err: unknown) =>
        this.log.error({ err }, 'interface discovery failed; retried at the next netlink event or resync'),
      );
    }, WATCH_DEBOUNCE_MS);
    this.refreshTimer.unref();
  }

  /** One discovery pass: attach to the interfaces found, release gone ones, refresh the node's addresses. */
  refreshInterfaces(): Promise<AttachReport> {
    return this.refreshQueue.run(() => this.refreshOnce());
  }

  private async refreshOnce(): Promise<AttachReport> {
    const host = await probeHostNetwork();
    if (this.closed) return { attached: [], replaced: [], detached: [], errors: [] };
    const interfaces = discoverInterfaces(host, this.nodeIPs, this.config.bpf);
    const report = this.attacher.sync(interfaces);
    const role = (ifname: string) => {
      const i = interfaces.find((d) => d.ifname === ifname);
      return i ? { role: i.role, l3: i.l3, reason: i.reason } : {};
    };
    for (const [msg, links] of [
      ['bpf program attached', report.attached],
      ['bpf program swapped in', report.replaced],
    ] as const) {
      for (const a of links) {
        this.log.info(
          {
            interface: a.ifname,
            hook: a.hook,
            program: a.program,
            mechanism: a.mechanism,
            ...role(a.ifname),
          },
          msg,
        );
      }
    }
    for (const link of report.detached) this.log.info({ link }, 'bpf program detached');
    for (const e of report.errors) {
      this.log.warn(
        {
          interface: e.attachment.ifname,
          hook: e.attachment.hook,
          program: e.attachment.program,
          error: e.error,
        },
        'attach failed',
      );
    }
    this.store.setNodeAddresses(nodeAddresses(host.links));
    this.store.setInterfaceAddresses(interfaceAddresses(host.links));
    this.store.setHostRouteInterfaces(
      this.hostRouting ? hostRouteInterfaces(host.links, interfaces) : new Map(),
    );
    return report;
  }

  /** One GC pass over both conntrack maps, after any pass already under way. */
  collectConntrack(): Promise<ConntrackGcStats[]> {
    return this.gcQueue.run(async () => {
      const passes: ConntrackGcStats[] = [];
      for (const map of CONNTRACK_MAPS) {
        const pass = await collectConntrack(this.lb.fd[map], this.ctTimeouts);
        this.countGc(pass);
        this.gc.entries[map] = pass.scanned - pass.deletedEntries;
        passes.push(pass);
      }
      return passes;
    });
  }

  private countGc(stats: ConntrackGcStats): void {
    this.gc.runs++;
    this.gc.scanned += stats.scanned;
    this.gc.deleted += stats.deletedEntries;
    this.gc.seconds += stats.durationMs / 1000;
  }

  read(): BpfStats {
    const plan = this.plan;
    const stats: BpfStats = {
      services: [],
      backends: [],
      backendsNotCounted: this.uncountedBackends,
      drops: [],
      fragments: [],
      maps: [],
      conntrackEntries: [
        { family: 'IPv4', entries: this.gc.entries.ct4Tcp + this.gc.entries.ct4Any },
        { family: 'IPv6', entries: this.gc.entries.ct6Tcp + this.gc.entries.ct6Any },
      ],
      conntrackGC: {
        runs: this.gc.runs,
        scannedEntries: this.gc.scanned,
        deletedEntries: this.gc.deleted,
        seconds: this.gc.seconds,
      },
    };
    for (const f of plan?.frontends ?? []) {
      const raw = this.store.trafficStats('service', f.serviceId);
      const counters = raw ? toCounters(raw) : ZERO;
      stats.services.push({
        namespace: f.namespace,
        name: f.serviceName,
        portName: f.portName,
        protocol: f.key.protocol,
        family: f.key.family,
        frontend: f.kind,
        ...this.counters.value(f.name, f.serviceId, counters),
      });
    }
    for (const b of plan?.backends ?? []) {
      const raw = this.store.trafficStats('backend', b.id);
      if (!raw) continue; // past kbp_best_v1: no series rather than one stuck at zero
      const counters = toCounters(raw);
      stats.backends.push({
        family: b.family,
        backend: b.name,
        ...this.backendCounters.value(b.name, b.id, counters),
      });
    }
    for (const [name, index] of Object.entries(DROP_REASON)) {
      if (index === DROP_REASON.none) continue;
      const d = this.store.dropStats(index);
      if (!d) continue;
      stats.drops.push({
        reason: name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`),
        packets: d.packets,
        bytes: d.bytes,
      });
    }
    const frags = this.store.fragmentStats();
    for (const [event, packets] of Object.entries(frags ?? {})) {
      stats.fragments.push({ event: event.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), packets });
    }
    const slots = (plan?.frontends ?? []).reduce((n, f) => n + f.backendIds.length, 0);
    const ofFamily = <T extends { family: IPFamily }>(items: readonly T[] | undefined, family: IPFamily) =>
      (items ?? []).filter((i) => i.family === family).length;
    const entries: Partial<Record<keyof typeof MAPS, number>> = {
      svc4: (plan?.frontends ?? []).filter((f) => f.key.family === 'IPv4').length,
      svc6: (plan?.frontends ?? []).filter((f) => f.key.family === 'IPv6').length,
      backends4: ofFamily(plan?.backends, 'IPv4'),
      backends6: ofFamily(plan?.backends, 'IPv6'),
      slots,
      ...this.gc.entries,
    };
    for (const [key, count] of Object.entries(entries) as [keyof typeof MAPS, number][]) {
      stats.maps.push({ name: MAPS[key].name, entries: count, capacity: this.lb.capacity[key] });
    }
    return stats;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    this.watch?.close();
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    this.refreshTimer = null;
    // A pass under way still uses the programs: it finishes before they are closed.
    await this.refreshQueue.idle();
    await this.gcQueue.idle();
    try {
      this.writer.flushDeferred(true);
    } finally {
      this.lb.close();
      try {
        this.reservation?.release();
      } catch (err) {
        this.log.warn({ err: String(err) }, 'cannot restore net.ipv4.ip_local_reserved_ports');
      }
      this.reservation = null;
    }
  }
}

export function openBpfDataplane(
  config: ProxyConfig,
  log: Logger,
  options: BpfDataplaneOptions = {},
): Promise<BpfDataplane> {
  return BpfDataplane.open(config, log, options);
}

/** Runs tasks one after the other: discovery passes never overwrite a newer snapshot with an
 * older one, and GC passes (each in slices, between which syncs run) never overlap. */
class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.tail.then(task);
    this.tail = result.catch(() => {});
    return result;
  }

  /** Resolves when every task queued so far has settled. */
  async idle(): Promise<void> {
    await this.tail;
  }
}
