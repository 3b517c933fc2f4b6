// The bpf data plane as `run` uses it: open() loads the programs (reusing the pinned maps and
// links of a previous run, so established connections survive a restart), sync() plans and
// writes the brain's decisions, periodic work keeps the attachments, node addresses and
// conntrack in shape (interface-follower.ts, conntrack-work.ts), and read() gives the metrics
// their counters (stats-read.ts). close() leaves everything in the kernel for the next run;
// `cleanup` removes it (detachAll and the pin directory).

import { type Dataplane, escalate, type SyncResult, type SyncScope } from '../../brain/dataplane.js';
import type { ProxyDecisions } from '../../brain/types.js';
import { maglevTableSizeProblem } from '../../config/maglev-table-size.js';
import type { ProxyConfig } from '../../config/types.js';
import type { PortReservation } from '../../host/reserved-ports.js';
import type { Logger } from '../../logger.js';
import type { IPFamily } from '../../model/types.js';
import type { BpfStats, BpfStatsProvider } from '../stats.js';
import { Attacher, type AttachReport, kernelHasIPv6Sockets, programsAtStart } from './attach.js';
import { bpfConntrackTimeouts, type ConntrackGcStats } from './conntrack-gc.js';
import { takeOverNetfilterFlows } from './conntrack-handoff.js';
import { ConntrackWork } from './conntrack-work.js';
import { hostRoutingDecision, kernelHasHostRoutingHelpers, readNetfilterChains } from './host-route.js';
import { IdAllocator } from './ids.js';
import { INTERFACE_RESYNC_MS, InterfaceFollower } from './interface-follower.js';
import { KernelStore } from './kernel-store.js';
import { MAGLEV_HASH_SEED } from './maglev.js';
import { NamesFile, namesFilePath } from './names-file.js';
import { type LoadedObject, loadPinnedObject, MAP_SIZE_SETTING } from './object.js';
import { type BpfPlan, BpfPlanner } from './plan.js';
import { releaseSnatPorts, reserveSnatPorts, SNAT_PORT_RANGE } from './snat-ports.js';
import { attachSocketLB } from './socket-lb.js';
import { BpfStatsReader } from './stats-read.js';
import { ANY_ADDRESS, type PlanProblem } from './types.js';
import { MapWriter } from './writer.js';

/** How long replaced slots, tables and backends stay for programs that read the old values. */
export const DEFAULT_GRACE_MS = 1000;

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

export class BpfDataplane implements Dataplane, BpfStatsProvider {
  readonly mode = 'bpf' as const;
  private readonly ids: { serviceIds: IdAllocator; backendIds: IdAllocator };
  private readonly planner: BpfPlanner;
  private plan: BpfPlan | null = null;
  private problems = new Set<string>();
  private readonly timers: NodeJS.Timeout[] = [];
  private flushTimer: NodeJS.Timeout | null = null;
  private readonly stats = new BpfStatsReader();
  private readonly conntrack: ConntrackWork;
  private readonly interfaces: InterfaceFollower;
  private readonly names: NamesFile;
  private closed = false;
  private reservation: PortReservation | null = null;
  /** Backends whose id is past kbp_best_v1 at the last sync (counted per service only). */
  private uncountedBackends = 0;
  /** The first sync took over netfilter's flows (conntrack-handoff.ts). */
  private tookOver = false;

  private constructor(
    readonly lb: LoadedObject,
    readonly store: KernelStore,
    private readonly writer: MapWriter,
    readonly attacher: Attacher,
    private readonly config: ProxyConfig,
    private readonly log: Logger,
    options: BpfDataplaneOptions,
    /** Host routing loaded (hostRoutingDecision): the pods' devices go into kbp_hostif_v1. */
    hostRouting: boolean,
  ) {
    this.conntrack = new ConntrackWork(lb.fd, bpfConntrackTimeouts(config.conntrack), log);
    this.interfaces = new InterfaceFollower(attacher, lb.loadPrograms, store, config.bpf, hostRouting, log);
    this.names = new NamesFile(options.namesFile ?? namesFilePath(config.bpf.pinPath), log);
    // A released id is not reused before every conntrack entry that could name it has expired.
    const quarantineMs = this.conntrack.timeouts.tcpEstablishedSeconds * 1000;
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
    const ipv6Sockets = kernelHasIPv6Sockets();
    const hostRoutingDecided = decideHostRouting(bpf, log);
    // Awaited by loadPinnedObject; a load that fails before it does reports its own error.
    hostRoutingDecided.catch(() => {});
    // The kernel creates the maps (the largest part of a first start) while the decision's
    // commands read the node's netfilter chains: loadPinnedObject starts the creation within the
    // call and awaits the decision only before the programs, which it sets up, load.
    const lb = await loadPinnedObject({
      pinPath: bpf.pinPath,
      mapSizes: bpf.mapSizes,
      objectPath: options.objectPath,
      hostRouting: hostRoutingDecided,
      programs: programsAtStart(bpf, ipv6Sockets),
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
    const dp = new BpfDataplane(lb, store, writer, attacher, config, log, options, lb.hostRouting);
    dp.restoreIds();
    dp.reservation = reserveSnatPorts(dp.names.path, log);
    attachSocketLB(lb, store, bpf, ipv6Sockets, log);
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
      dp.interfaces.startWatch();
      await dp.refreshInterfaces();
      dp.every(INTERFACE_RESYNC_MS, async () => dp.interfaces.requestRefresh());
    }
    if (options.conntrackGC ?? true) {
      dp.every(bpf.conntrackGCIntervalSeconds * 1000, () => dp.collectConntrack());
    }
    return dp;
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
    this.conntrack.quarantineTrackedIds(this.ids);
  }

  private every(ms: number, task: () => Promise<unknown>): void {
    const timer = setInterval(() => {
      task().catch((err: unknown) => this.log.error({ err }, 'bpf background task failed'));
    }, ms);
    timer.unref();
    this.timers.push(timer);
  }

  /** The planner and the writer may widen a partial sync to every frontend, and say why. */
  async sync(decisions: ProxyDecisions, given: SyncScope): Promise<SyncResult> {
    const bpf = this.config.bpf;
    const { plan, scope, widened } = this.planner.plan(
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
      given.full ? null : given.changedServices,
    );
    await this.writeConfig(decisions, plan);
    this.interfaces.noteNodeIPs(decisions);
    // The maps are read back on the full syncs the sync loop or the brain ask for (the periodic
    // repair), not when the planner widens one for its own reasons.
    if (given.full) this.writer.resync();
    // Before the first frontends: flows kube-proxy's rules opened stay the kernel's to translate.
    if (!this.tookOver) {
      this.tookOver = true;
      await takeOverNetfilterFlows(plan, this.store.families, this.lb.fd, this.log);
    }
    const result = await this.writer.apply(plan, scope);
    this.plan = plan;
    this.reportProblems([
      ...plan.problems,
      ...result.failures.map((f) => ({ servicePortName: f.servicePortName, reason: f.error })),
      ...result.degraded.map((f) => ({ servicePortName: f.servicePortName, reason: f.error })),
    ]);
    this.names.write(plan, scope);
    this.noteUncountedBackends();
    this.conntrack.cleanStaleUdp(plan, scope);
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
    return { scope: escalate(escalate(given, widened), result.widened) };
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

  /** One discovery pass: attach to the interfaces found, release gone ones, refresh the node's addresses. */
  refreshInterfaces(): Promise<AttachReport> {
    return this.interfaces.refresh();
  }

  /** One GC pass over both conntrack maps, after any pass already under way. */
  collectConntrack(): Promise<ConntrackGcStats[]> {
    return this.conntrack.collect();
  }

  read(): BpfStats {
    return this.stats.read({
      plan: this.plan,
      store: this.store,
      capacity: this.lb.capacity,
      gc: this.conntrack.totals,
      uncountedBackends: this.uncountedBackends,
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    // A pass under way still uses the programs: it finishes before they are closed.
    await this.interfaces.close();
    await this.conntrack.idle();
    try {
      this.writer.flushDeferred(true);
    } finally {
      this.lb.close();
      releaseSnatPorts(this.reservation, this.log);
      this.reservation = null;
    }
  }
}

/** Whether the programs route to the node's devices themselves (hostRoutingDecision), logged. */
async function decideHostRouting(bpf: ProxyConfig['bpf'], log: Logger): Promise<boolean> {
  const decision = hostRoutingDecision(bpf.hostRouting, {
    helpers: kernelHasHostRoutingHelpers(),
    chains: bpf.hostRouting === 'auto' ? await readNetfilterChains() : [],
  });
  if (!decision)
    throw new Error('bpf.hostRouting: bpf needs bpf_redirect_peer and bpf_redirect_neigh (kernel 5.10+)');
  log.info({ setting: bpf.hostRouting, bpf: decision.bpf, reason: decision.reason }, 'host routing');
  return decision.bpf;
}

export function openBpfDataplane(
  config: ProxyConfig,
  log: Logger,
  options: BpfDataplaneOptions = {},
): Promise<BpfDataplane> {
  return BpfDataplane.open(config, log, options);
}
