// kube-proxy's own metrics (pkg/proxy/metrics/metrics.go, 1.33): the same names, types, help,
// labels and buckets, so the kubernetes-mixin "Proxy" dashboard and clusterloader2 keep working.
// Values are set by the sync observer (metrics/registry.ts), read from the change tracker
// and the rule-mode data planes at scrape time, and counted by the health servers.

import { Counter, exponentialBuckets, Gauge, Histogram, linearBuckets, type Registry } from 'prom-client';
import type { NfacctPackets, RuleModeStats, RuleModeStatsProvider } from '../dataplanes/stats.js';
import type { IPFamily } from '../model/types.js';

/** ExponentialBuckets(0.001, 2, 15): 1 ms … 16.384 s. */
export const SYNC_DURATION_BUCKETS: readonly number[] = exponentialBuckets(0.001, 2, 15);

/** [0] ++ Linear(0.25,0.25,2) ++ Linear(1,1,59) ++ Linear(60,5,12) ++ Linear(120,30,7): 81 bounds. */
export const NETWORK_PROGRAMMING_BUCKETS: readonly number[] = [
  0,
  ...linearBuckets(0.25, 0.25, 2),
  ...linearBuckets(1, 1, 59),
  ...linearBuckets(60, 5, 12),
  ...linearBuckets(120, 30, 7),
];

/** What the change tracker (model/tracker.ts) offers for the *_changes_{pending,total} metrics. */
export interface ChangeCounts {
  readonly totals: { readonly serviceChanges: number; readonly endpointChanges: number };
  peekPending(): { readonly serviceChanges: number; readonly endpointChanges: number };
}

export interface KubeProxyMetricsSources {
  changes?: ChangeCounts;
  ruleStats?: RuleModeStatsProvider;
  /** The families the proxy has synced so far (rule-mode stats are read for these). */
  families: () => readonly IPFamily[];
}

const IP_FAMILY = ['ip_family'] as const;

export function createKubeProxyMetrics(registry: Registry, sources: KubeProxyMetricsSources) {
  const registers = [registry];
  const histogram = (name: string, help: string, buckets: readonly number[]) =>
    new Histogram({ name, help, labelNames: IP_FAMILY, buckets: [...buckets], registers });

  // Rule-mode counters read from the data plane at scrape time, for every synced family. The
  // source keeps them monotonic; reset + inc is how a prom-client counter takes a total.
  const ruleCounter = (name: string, help: string, read: (stats: RuleModeStats) => number | undefined) =>
    new Counter({
      name,
      help,
      labelNames: IP_FAMILY,
      registers,
      collect() {
        this.reset();
        for (const family of sources.families()) {
          const stats = sources.ruleStats?.stats(family);
          const value = stats ? read(stats) : undefined;
          if (value !== undefined) this.inc({ ip_family: family }, value);
        }
      },
    });
  const ruleGauge = (
    name: string,
    help: string,
    read: (stats: RuleModeStats) => RuleModeStats['rulesTotal'],
  ) =>
    new Gauge({
      name,
      help,
      labelNames: ['ip_family', 'table'] as const,
      registers,
      collect() {
        this.reset();
        for (const family of sources.families()) {
          const stats = sources.ruleStats?.stats(family);
          const tables = stats ? read(stats) : undefined;
          if (!tables) continue;
          this.set({ ip_family: family, table: 'filter' }, tables.filter);
          this.set({ ip_family: family, table: 'nat' }, tables.nat);
        }
      },
    });

  // iptables mode: kube-proxy's nfacct collectors (the agent creates both counters where the
  // nfacct match works, as kube-proxy does).
  const nfacctPackets = sources.ruleStats?.nfacctPackets?.bind(sources.ruleStats);
  const nfacctCounter = (name: string, help: string, read: (p: NfacctPackets) => number | undefined) =>
    nfacctPackets &&
    new Counter({
      name,
      help,
      registers,
      async collect() {
        this.reset();
        const packets = read(await nfacctPackets());
        if (packets !== undefined) this.inc(packets);
      },
    });
  nfacctCounter(
    'kubeproxy_iptables_ct_state_invalid_dropped_packets_total',
    'packets dropped by iptables to work around conntrack problems',
    (p) => p.ctStateInvalidDropped,
  );
  nfacctCounter(
    'kubeproxy_iptables_localhost_nodeports_accepted_packets_total',
    'Number of packets accepted on nodeports of loopback interface',
    (p) => p.localhostNodePortsAccepted,
  );

  const { changes } = sources;
  return {
    syncDuration: histogram(
      'kubeproxy_sync_proxy_rules_duration_seconds',
      'SyncProxyRules latency in seconds',
      SYNC_DURATION_BUCKETS,
    ),
    syncFullDuration: histogram(
      'kubeproxy_sync_full_proxy_rules_duration_seconds',
      'SyncProxyRules latency in seconds for full resyncs',
      SYNC_DURATION_BUCKETS,
    ),
    syncPartialDuration: histogram(
      'kubeproxy_sync_partial_proxy_rules_duration_seconds',
      'SyncProxyRules latency in seconds for partial resyncs',
      SYNC_DURATION_BUCKETS,
    ),
    networkProgrammingDuration: histogram(
      'kubeproxy_network_programming_duration_seconds',
      'In Cluster Network Programming Latency in seconds',
      NETWORK_PROGRAMMING_BUCKETS,
    ),
    lastSyncTimestamp: new Gauge({
      name: 'kubeproxy_sync_proxy_rules_last_timestamp_seconds',
      help: 'The last time proxy rules were successfully synced',
      labelNames: IP_FAMILY,
      registers,
    }),
    lastQueuedTimestamp: new Gauge({
      name: 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds',
      help: 'The last time a sync of proxy rules was queued',
      labelNames: IP_FAMILY,
      registers,
    }),
    endpointChangesPending: new Gauge({
      name: 'kubeproxy_sync_proxy_rules_endpoint_changes_pending',
      help: 'Pending proxy rules Endpoint changes',
      registers,
      collect() {
        if (changes) this.set(changes.peekPending().endpointChanges);
      },
    }),
    endpointChangesTotal: new Counter({
      name: 'kubeproxy_sync_proxy_rules_endpoint_changes_total',
      help: 'Cumulative proxy rules Endpoint changes',
      registers,
      collect() {
        this.reset();
        if (changes) this.inc(changes.totals.endpointChanges);
      },
    }),
    serviceChangesPending: new Gauge({
      name: 'kubeproxy_sync_proxy_rules_service_changes_pending',
      help: 'Pending proxy rules Service changes',
      registers,
      collect() {
        if (changes) this.set(changes.peekPending().serviceChanges);
      },
    }),
    serviceChangesTotal: new Counter({
      name: 'kubeproxy_sync_proxy_rules_service_changes_total',
      help: 'Cumulative proxy rules Service changes',
      registers,
      collect() {
        this.reset();
        if (changes) this.inc(changes.totals.serviceChanges);
      },
    }),
    noLocalEndpoints: new Gauge({
      name: 'kubeproxy_sync_proxy_rules_no_local_endpoints_total',
      help: 'Number of services with a Local traffic policy and no endpoints',
      labelNames: ['ip_family', 'traffic_policy'] as const,
      registers,
    }),
    iptablesRestoreFailures: ruleCounter(
      'kubeproxy_sync_proxy_rules_iptables_restore_failures_total',
      'Cumulative proxy iptables restore failures',
      (stats) => stats.restoreFailures,
    ),
    iptablesPartialRestoreFailures: ruleCounter(
      'kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total',
      'Cumulative proxy iptables partial restore failures',
      (stats) => stats.partialRestoreFailures,
    ),
    iptablesRulesTotal: ruleGauge(
      'kubeproxy_sync_proxy_rules_iptables_total',
      'Total number of iptables rules owned by kube-proxy',
      (stats) => stats.rulesTotal,
    ),
    iptablesRulesLast: ruleGauge(
      'kubeproxy_sync_proxy_rules_iptables_last',
      'Number of iptables rules written by kube-proxy in last sync',
      (stats) => stats.rulesLast,
    ),
    nftablesSyncFailures: ruleCounter(
      'kubeproxy_sync_proxy_rules_nftables_sync_failures_total',
      'Cumulative proxy nftables sync failures',
      (stats) => stats.nftablesSyncFailures,
    ),
    nftablesCleanupFailures: ruleCounter(
      'kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total',
      'Cumulative proxy nftables cleanup failures',
      (stats) => stats.nftablesCleanupFailures,
    ),
    conntrackReconcileDuration: histogram(
      'kubeproxy_conntrack_reconciler_sync_duration_seconds',
      'ReconcileConntrackFlowsLatency latency in seconds',
      SYNC_DURATION_BUCKETS,
    ),
    conntrackDeletedEntries: new Counter({
      name: 'kubeproxy_conntrack_reconciler_deleted_entries_total',
      help: 'Cumulative conntrack flows deleted by conntrack reconciler',
      labelNames: IP_FAMILY,
      registers,
    }),
    healthzTotal: new Counter({
      name: 'kubeproxy_proxy_healthz_total',
      help: 'Cumulative proxy healthz HTTP status',
      labelNames: ['code'] as const,
      registers,
    }),
    livezTotal: new Counter({
      name: 'kubeproxy_proxy_livez_total',
      help: 'Cumulative proxy livez HTTP status',
      labelNames: ['code'] as const,
      registers,
    }),
  };
}

export type KubeProxyMetrics = ReturnType<typeof createKubeProxyMetrics>;
