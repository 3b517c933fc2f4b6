// The agent's Prometheus registry: kube-proxy's metrics (metrics/kube-proxy.ts), ours
// (kube_bpf_proxy_*: skipped objects, failed syncs, and the bpf data plane's counters from
// metrics/bpf.ts) and the Node.js process metrics. It observes syncs like kube-proxy's proxiers
// update their metrics, once per IP family the node runs.

import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import type { SyncObserver, SyncReport } from '../brain/sync-loop.js';
import type { FamilyDecisions, ProxyDecisions, SkippedObject } from '../brain/types.js';
import type { ProxyMode } from '../config/types.js';
import type { BpfStatsProvider, RuleModeStatsProvider } from '../dataplanes/stats.js';
import { serviceKey } from '../dataplanes/types.js';
import { type Logger, silentLogger } from '../logger.js';
import type { IPFamily } from '../model/types.js';
import { BpfMetrics } from './bpf.js';
import { type ChangeCounts, createKubeProxyMetrics, type KubeProxyMetrics } from './kube-proxy.js';

export interface ProxyMetricsOptions {
  mode: ProxyMode;
  /** The change tracker (pending and total service/endpoint changes). */
  changes?: ChangeCounts;
  /** iptables/nftables: their failure and rule counters. */
  ruleStats?: RuleModeStatsProvider;
  /** bpf: traffic counters and map fill levels. */
  bpfStats?: BpfStatsProvider;
  /** bpf.metricsMaxBackends. */
  maxBackends?: number;
  /** Node.js process metrics (process_*, nodejs_*); on by default. */
  processMetrics?: boolean;
  now?: () => number;
  log?: Logger;
}

/** Bounded label values for kube_bpf_proxy_skipped_objects{reason}. */
export type SkipReasonClass =
  | 'invalid'
  | 'partly_invalid'
  | 'headless'
  | 'external_name'
  | 'fqdn_slice'
  | 'no_service_name'
  | 'other';

/**
 * The class of a reason the brain gives for an object it ignores (brain/decide.ts ignoredObjects,
 * brain/service-ports.ts skipReason); every malformed object is "invalid", and one used without
 * the entries it could not use "partly_invalid".
 */
export function ignoredReasonClass(reason: string): SkipReasonClass {
  if (reason.startsWith('headless')) return 'headless';
  if (reason.startsWith('ExternalName')) return 'external_name';
  if (reason.startsWith('FQDN')) return 'fqdn_slice';
  if (reason.includes('service-name')) return 'no_service_name';
  return 'other';
}

/** Objects left out of the decisions, counted by kind and reason class. */
export function skippedObjectCounts(decisions: ProxyDecisions): Map<string, number> {
  const counts = new Map<string, number>();
  const add = (object: SkippedObject, reason: SkipReasonClass) => {
    const key = `${object.kind}\u0000${reason}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  };
  for (const object of decisions.skipped) add(object, object.entriesLeftOut ? 'partly_invalid' : 'invalid');
  for (const object of decisions.ignored) add(object, ignoredReasonClass(object.reason));
  return counts;
}

/**
 * kubeproxy_sync_proxy_rules_no_local_endpoints_total: service ports whose traffic policy is Local
 * and that have endpoints, but none on this node (kube-proxy's "has no local endpoints" DROP).
 */
export function noLocalEndpointCounts(family: FamilyDecisions): { internal: number; external: number } {
  const counts = { internal: 0, external: 0 };
  for (const sp of family.servicePorts) {
    if (sp.internal.action === 'drop') counts.internal++;
    if (sp.external.action === 'drop') counts.external++;
  }
  return counts;
}

export class ProxyMetrics {
  readonly registry = new Registry();
  readonly kubeProxy: KubeProxyMetrics;
  private readonly skippedObjects: Gauge<'kind' | 'reason'>;
  private readonly syncFailures: Counter<'mode'>;
  private readonly conntrackFailures: Counter<'ip_family'>;
  private readonly bpf: BpfMetrics | null;
  /** Families synced so far, in order of appearance. */
  private readonly families: IPFamily[] = [];
  private lastQueuedAt: Date | null = null;
  private readonly now: () => number;

  constructor(private readonly options: ProxyMetricsOptions) {
    this.now = options.now ?? Date.now;
    const registers = [this.registry];
    this.kubeProxy = createKubeProxyMetrics(this.registry, {
      changes: options.changes,
      ruleStats: options.ruleStats,
      families: () => this.families,
    });
    this.skippedObjects = new Gauge({
      name: 'kube_bpf_proxy_skipped_objects',
      help: 'Services and EndpointSlices left out of the proxy rules, by kind and reason (invalid: malformed; partly_invalid: used without the entries that are malformed; the others as kube-proxy ignores them)',
      labelNames: ['kind', 'reason'] as const,
      registers,
    });
    this.syncFailures = new Counter({
      name: 'kube_bpf_proxy_sync_failures_total',
      help: 'Syncs that failed to apply to the data plane (the last good state stays; a full sync is retried)',
      labelNames: ['mode'] as const,
      registers,
    });
    this.syncFailures.inc({ mode: options.mode }, 0);
    this.conntrackFailures = new Counter({
      name: 'kube_bpf_proxy_conntrack_reconciler_failures_total',
      help: 'Rule modes: conntrack reconciles that failed to list or delete entries (logged; retried after the next sync)',
      labelNames: ['ip_family'] as const,
      registers,
    });
    const log = options.log ?? silentLogger;
    this.bpf = options.bpfStats ? new BpfMetrics(options.bpfStats, options.maxBackends ?? 0, log) : null;
    if (options.processMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** The text exposition format, with the bpf counters read just before. */
  async render(): Promise<string> {
    if (!this.bpf) return this.registry.metrics();
    await this.bpf.refresh();
    return `${await this.registry.metrics()}\n${this.bpf.exposition()}`;
  }

  /** Counts one answer of /healthz or /livez (kubeproxy_proxy_{healthz,livez}_total{code}). */
  served(endpoint: 'healthz' | 'livez', code: number): void {
    const counter = endpoint === 'healthz' ? this.kubeProxy.healthzTotal : this.kubeProxy.livezTotal;
    counter.inc({ code: String(code) });
  }

  syncObserver(): SyncObserver {
    return {
      // Each family's proxier sets its own gauge in Sync(), when a change of its family arrives.
      queued: (at, families) => {
        this.lastQueuedAt = at;
        for (const family of this.families)
          if (families.has(family))
            this.kubeProxy.lastQueuedTimestamp.set({ ip_family: family }, at.getTime() / 1000);
      },
      synced: (report) => this.synced(report),
      failed: ({ full, durationSeconds }) => {
        this.syncFailures.inc({ mode: this.options.mode });
        // kube-proxy observes the duration of every sync, failed ones included.
        for (const family of this.families) this.observeDuration(family, full, durationSeconds);
      },
    };
  }

  private synced(report: SyncReport): void {
    const m = this.kubeProxy;
    const nowSeconds = this.now() / 1000;
    for (const { family } of report.decisions.families) {
      if (this.families.includes(family)) continue;
      this.families.push(family);
      if (this.lastQueuedAt)
        m.lastQueuedTimestamp.set({ ip_family: family }, this.lastQueuedAt.getTime() / 1000);
    }
    for (const familyDecisions of report.decisions.families) {
      const ip_family = familyDecisions.family;
      this.observeDuration(ip_family, report.full, report.durationSeconds);
      m.lastSyncTimestamp.set({ ip_family }, nowSeconds);
      const noLocal = noLocalEndpointCounts(familyDecisions);
      m.noLocalEndpoints.set({ ip_family, traffic_policy: 'internal' }, noLocal.internal);
      m.noLocalEndpoints.set({ ip_family, traffic_policy: 'external' }, noLocal.external);
    }
    this.observeProgrammingLatencies(report);
    this.observeConntrackReconciles(report);
    this.skippedObjects.reset();
    for (const [key, count] of skippedObjectCounts(report.decisions)) {
      const [kind, reason] = key.split('\u0000') as [string, string];
      this.skippedObjects.set({ kind, reason }, count);
    }
  }

  /** As kube-proxy: a reconcile that could not list its entries observes no duration. */
  private observeConntrackReconciles(report: SyncReport): void {
    for (const { family: ip_family, listed, durationSeconds, deleted, error } of report.conntrack) {
      if (listed) {
        this.kubeProxy.conntrackReconcileDuration.observe({ ip_family }, durationSeconds);
        this.kubeProxy.conntrackDeletedEntries.inc({ ip_family }, deleted);
      }
      if (error !== null) this.conntrackFailures.inc({ ip_family });
    }
  }

  private observeDuration(ip_family: IPFamily, full: boolean, seconds: number): void {
    const m = this.kubeProxy;
    m.syncDuration.observe({ ip_family }, seconds);
    (full ? m.syncFullDuration : m.syncPartialDuration).observe({ ip_family }, seconds);
  }

  /**
   * Each latency goes to the families the Service has ports in (kube-proxy's per-family proxiers
   * each see the EndpointSlices of their family); a Service gone from the decisions counts for
   * the first family.
   */
  private observeProgrammingLatencies(report: SyncReport): void {
    if (report.programmingLatenciesSeconds.length === 0) return;
    const familiesOf = new Map<string, IPFamily[]>();
    for (const { family, servicePorts } of report.decisions.families) {
      for (const sp of servicePorts) {
        const key = serviceKey(sp.namespace, sp.name);
        const families = familiesOf.get(key) ?? [];
        if (!families.includes(family)) families.push(family);
        familiesOf.set(key, families);
      }
    }
    const fallback = report.decisions.families.slice(0, 1).map((f) => f.family);
    // programmingLatenciesSeconds follows the iteration order of changes.triggerTimes.
    const services = [...report.changes.triggerTimes.keys()];
    report.programmingLatenciesSeconds.forEach((seconds, i) => {
      const families = familiesOf.get(services[i] ?? '') ?? fallback;
      for (const ip_family of families)
        this.kubeProxy.networkProgrammingDuration.observe({ ip_family }, seconds);
    });
  }
}
