import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { decide } from '../../src/brain/decide.js';
import type { SyncReport } from '../../src/brain/sync-loop.js';
import type { ProxyDecisions } from '../../src/brain/types.js';
import { loadConfig } from '../../src/config/load.js';
import type { ProxyConfig } from '../../src/config/types.js';
import type { BpfStats, BpfStatsProvider, NfacctPackets, RuleModeStats } from '../../src/dataplanes/stats.js';
import type { BoundServer } from '../../src/health/http.js';
import { silentLogger } from '../../src/logger.js';
import { ignoredReasonClass, ProxyMetrics, skippedObjectCounts } from '../../src/metrics/registry.js';
import { startMetricsServer } from '../../src/metrics/server.js';
import { startStatusServers } from '../../src/metrics/status-servers.js';
import type { SourceEvent } from '../../src/model/events.js';
import type { ObjectProblem } from '../../src/model/parse.js';
import { ChangeTracker } from '../../src/model/tracker.js';
import type { ClusterState, EndpointSlice, IPFamily, Service } from '../../src/model/types.js';
import { TRIGGER_TIME_ANNOTATION } from '../../src/model/types.js';
import { freePort } from '../support/free-port.js';
import { endpoint, node, nodeEnv, service, slice } from '../support/model-fixtures.js';
import { type Exposition, parseExposition, samplesOf, sampleValue } from '../support/prom-text.js';

const NODE = 'test-node';
const brainConfig = {
  nodePortAddresses: [],
  detectLocalMode: 'ClusterCIDR' as const,
  detectLocal: { bridgeInterface: '', interfaceNamePrefix: '' },
  clusterCIDRs: ['10.244.0.0/16'],
  masqueradeBit: 14,
  masqueradeAll: false,
  localhostNodePorts: true,
  featureGates: {},
};

function state(services: Service[], slices: EndpointSlice[]): ClusterState {
  return {
    services: new Map(services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
    endpointSlices: new Map(slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
    node: node(NODE),
    serviceCIDRs: new Map(),
  };
}

function decisions(
  services: Service[],
  slices: EndpointSlice[],
  families: IPFamily[] = ['IPv4'],
  skipped: ObjectProblem[] = [],
): ProxyDecisions {
  return decide(state(services, slices), nodeEnv({ nodeName: NODE }), brainConfig, { families, skipped });
}

function report(d: ProxyDecisions, extra: Partial<SyncReport> = {}): SyncReport {
  return {
    full: true,
    reason: 'first sync',
    durationSeconds: 0.003,
    decisions: d,
    changes: {
      changedServices: new Set(),
      nodeChanged: false,
      serviceCIDRsChanged: false,
      serviceChanges: 0,
      endpointChanges: 0,
      triggerTimes: new Map(),
      families: new Set(),
    },
    programmingLatenciesSeconds: [],
    conntrack: [],
    ...extra,
  };
}

async function scrape(metrics: ProxyMetrics): Promise<Exposition> {
  return parseExposition(await metrics.render());
}

const local = { nodeName: NODE, conditions: { ready: true, serving: true, terminating: false } };
const remote = { nodeName: 'other', conditions: { ready: true, serving: true, terminating: false } };

// The cluster every observer test syncs: a plain ClusterIP, an eTP=Local NodePort and an iTP=Local
// ClusterIP whose endpoints are all on another node, and one with a local endpoint.
const cluster = {
  services: [
    service('ns', 'web', { clusterIP: '10.96.0.10' }),
    service('ns', 'ext-remote', {
      type: 'NodePort',
      clusterIP: '10.96.0.11',
      externalTrafficPolicy: 'Local',
      ports: [{ name: 'p80', protocol: 'TCP', port: 80, nodePort: 30080 }],
    }),
    service('ns', 'int-remote', { clusterIP: '10.96.0.12', internalTrafficPolicy: 'Local' }),
    service('ns', 'int-local', { clusterIP: '10.96.0.13', internalTrafficPolicy: 'Local' }),
    service('ns', 'headless', { clusterIP: 'None' }),
    service('ns', 'named', { type: 'ExternalName', clusterIP: '' }),
  ],
  slices: [
    slice('ns', 'web', 'web-1', [endpoint('10.244.1.2', local)]),
    slice('ns', 'ext-remote', 'ext-remote-1', [endpoint('10.244.2.2', remote)]),
    slice('ns', 'int-remote', 'int-remote-1', [endpoint('10.244.2.3', remote)]),
    slice('ns', 'int-local', 'int-local-1', [endpoint('10.244.1.3', local)]),
  ],
};

describe("kube-proxy's metrics: names, types, labels, buckets (reference §5.3)", () => {
  const metrics = new ProxyMetrics({ mode: 'iptables', processMetrics: false });
  metrics.syncObserver().synced?.(report(decisions(cluster.services, cluster.slices)));

  const expected: [string, string, string[]][] = [
    ['kubeproxy_sync_proxy_rules_duration_seconds', 'histogram', ['ip_family']],
    ['kubeproxy_sync_full_proxy_rules_duration_seconds', 'histogram', ['ip_family']],
    ['kubeproxy_sync_partial_proxy_rules_duration_seconds', 'histogram', ['ip_family']],
    ['kubeproxy_network_programming_duration_seconds', 'histogram', ['ip_family']],
    ['kubeproxy_sync_proxy_rules_last_timestamp_seconds', 'gauge', ['ip_family']],
    ['kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds', 'gauge', ['ip_family']],
    ['kubeproxy_sync_proxy_rules_endpoint_changes_pending', 'gauge', []],
    ['kubeproxy_sync_proxy_rules_endpoint_changes_total', 'counter', []],
    ['kubeproxy_sync_proxy_rules_service_changes_pending', 'gauge', []],
    ['kubeproxy_sync_proxy_rules_service_changes_total', 'counter', []],
    ['kubeproxy_sync_proxy_rules_iptables_total', 'gauge', ['ip_family', 'table']],
    ['kubeproxy_sync_proxy_rules_iptables_last', 'gauge', ['ip_family', 'table']],
    ['kubeproxy_sync_proxy_rules_iptables_restore_failures_total', 'counter', ['ip_family']],
    ['kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total', 'counter', ['ip_family']],
    ['kubeproxy_sync_proxy_rules_no_local_endpoints_total', 'gauge', ['ip_family', 'traffic_policy']],
    ['kubeproxy_sync_proxy_rules_nftables_sync_failures_total', 'counter', ['ip_family']],
    ['kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total', 'counter', ['ip_family']],
    ['kubeproxy_proxy_healthz_total', 'counter', ['code']],
    ['kubeproxy_proxy_livez_total', 'counter', ['code']],
    ['kubeproxy_conntrack_reconciler_sync_duration_seconds', 'histogram', ['ip_family']],
    ['kubeproxy_conntrack_reconciler_deleted_entries_total', 'counter', ['ip_family']],
  ];

  it.each(expected)('%s is a %s labelled %j', async (name, type, labelNames) => {
    const json = await metrics.registry.getMetricsAsJSON();
    const metric = json.find((m) => m.name === name);
    expect(metric?.type).toBe(type);
    // prom-client keeps the declared label names on the metric object.
    const declared = (metrics.registry.getSingleMetric(name) as unknown as { labelNames: string[] })
      .labelNames;
    expect([...declared].sort()).toEqual(labelNames);
  });

  it('sync and conntrack reconcile durations use ExponentialBuckets(0.001, 2, 15): 1 ms to 16.384 s', async () => {
    const expectedBounds = [
      0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192,
      16.384,
    ];
    metrics.kubeProxy.conntrackReconcileDuration.observe({ ip_family: 'IPv4' }, 0.01);
    const exposition = await scrape(metrics);
    for (const name of [
      'kubeproxy_sync_proxy_rules_duration_seconds',
      'kubeproxy_sync_full_proxy_rules_duration_seconds',
      'kubeproxy_conntrack_reconciler_sync_duration_seconds',
    ]) {
      const bounds = samplesOf(exposition, `${name}_bucket`, { ip_family: 'IPv4' }).map((s) => s.labels.le);
      expect(bounds).toEqual([...expectedBounds.map(String), '+Inf']);
    }
  });

  it('network programming latency has the 81 bounds: 0, 0.25, 0.5, 1…59, 60…115 by 5, 120…300 by 30', async () => {
    metrics.kubeProxy.networkProgrammingDuration.observe({ ip_family: 'IPv4' }, 0.1);
    const exposition = await scrape(metrics);
    const bounds = samplesOf(exposition, 'kubeproxy_network_programming_duration_seconds_bucket', {
      ip_family: 'IPv4',
    })
      .map((s) => s.labels.le)
      .filter((le) => le !== '+Inf')
      .map(Number);
    const expectedBounds = [0, 0.25, 0.5];
    for (let s = 1; s <= 59; s++) expectedBounds.push(s);
    for (let s = 60; s <= 115; s += 5) expectedBounds.push(s);
    for (let s = 120; s <= 300; s += 30) expectedBounds.push(s);
    expect(expectedBounds).toHaveLength(81);
    expect(bounds).toEqual(expectedBounds);
  });

  it('help texts are kube-proxy’s', async () => {
    const exposition = await scrape(metrics);
    expect(exposition.help.get('kubeproxy_sync_proxy_rules_duration_seconds')).toBe(
      'SyncProxyRules latency in seconds',
    );
    expect(exposition.help.get('kubeproxy_network_programming_duration_seconds')).toBe(
      'In Cluster Network Programming Latency in seconds',
    );
    expect(exposition.help.get('kubeproxy_sync_proxy_rules_no_local_endpoints_total')).toBe(
      'Number of services with a Local traffic policy and no endpoints',
    );
    expect(exposition.help.get('kubeproxy_conntrack_reconciler_sync_duration_seconds')).toBe(
      'ReconcileConntrackFlowsLatency latency in seconds',
    );
    expect(exposition.help.get('kubeproxy_conntrack_reconciler_deleted_entries_total')).toBe(
      'Cumulative conntrack flows deleted by conntrack reconciler',
    );
  });

  it('the Node.js process metrics are there when asked for', async () => {
    const withProcess = new ProxyMetrics({ mode: 'bpf' });
    const exposition = await scrape(withProcess);
    expect(exposition.types.get('process_cpu_user_seconds_total')).toBe('counter');
    expect(exposition.types.get('process_resident_memory_bytes')).toBe('gauge');
    expect(exposition.types.get('nodejs_heap_size_used_bytes')).toBe('gauge');
  });
});

describe('the sync observer', () => {
  it('a full sync: durations in the full histogram, last sync time, per family', async () => {
    let now = 1_700_000_000_000;
    const metrics = new ProxyMetrics({ mode: 'iptables', processMetrics: false, now: () => now });
    const observer = metrics.syncObserver();
    observer.queued?.(new Date(now - 2000), new Set(['IPv4', 'IPv6']));
    observer.synced?.(
      report(decisions(cluster.services, cluster.slices, ['IPv4', 'IPv6']), { durationSeconds: 0.003 }),
    );
    let e = await scrape(metrics);
    for (const ip_family of ['IPv4', 'IPv6']) {
      expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_duration_seconds_count', { ip_family })).toBe(1);
      expect(sampleValue(e, 'kubeproxy_sync_full_proxy_rules_duration_seconds_count', { ip_family })).toBe(1);
      expect(
        sampleValue(e, 'kubeproxy_sync_proxy_rules_duration_seconds_bucket', { ip_family, le: '0.002' }),
      ).toBe(0);
      expect(
        sampleValue(e, 'kubeproxy_sync_proxy_rules_duration_seconds_bucket', { ip_family, le: '0.004' }),
      ).toBe(1);
      expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', { ip_family })).toBe(
        now / 1000,
      );
      // Queued before the families were known: set when they appear.
      expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds', { ip_family })).toBe(
        (now - 2000) / 1000,
      );
    }
    expect(samplesOf(e, 'kubeproxy_sync_partial_proxy_rules_duration_seconds_count')).toEqual([]);

    now += 5000;
    observer.queued?.(new Date(now), new Set(['IPv4', 'IPv6']));
    observer.synced?.(report(decisions(cluster.services, cluster.slices, ['IPv4', 'IPv6']), { full: false }));
    e = await scrape(metrics);
    expect(
      sampleValue(e, 'kubeproxy_sync_partial_proxy_rules_duration_seconds_count', { ip_family: 'IPv4' }),
    ).toBe(1);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_duration_seconds_count', { ip_family: 'IPv6' })).toBe(
      2,
    );
    expect(
      sampleValue(e, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds', { ip_family: 'IPv6' }),
    ).toBe(now / 1000);

    // A change of one family queues that family's sync only, as each of kube-proxy's per-family
    // proxiers sets its own gauge.
    const before = now;
    now += 5000;
    observer.queued?.(new Date(now), new Set(['IPv6']));
    e = await scrape(metrics);
    expect(
      sampleValue(e, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds', { ip_family: 'IPv6' }),
    ).toBe(now / 1000);
    expect(
      sampleValue(e, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds', { ip_family: 'IPv4' }),
    ).toBe(before / 1000);
  });

  it('network programming latency per trigger time, for the families of the Service', async () => {
    const metrics = new ProxyMetrics({ mode: 'iptables', processMetrics: false });
    const v4only = service('ns', 'v4', { clusterIP: '10.96.0.20' });
    const d = decisions([v4only, ...cluster.services], cluster.slices, ['IPv4', 'IPv6']);
    const changes = report(d).changes;
    changes.triggerTimes.set('ns/v4', 0);
    changes.triggerTimes.set('ns/gone', 0);
    metrics.syncObserver().synced?.(report(d, { changes, programmingLatenciesSeconds: [1.5, 70] }));
    const e = await scrape(metrics);
    const count = (ip_family: string) =>
      sampleValue(e, 'kubeproxy_network_programming_duration_seconds_count', { ip_family });
    expect(count('IPv4')).toBe(2);
    expect(sampleValue(e, 'kubeproxy_network_programming_duration_seconds_sum', { ip_family: 'IPv4' })).toBe(
      71.5,
    );
    expect(
      samplesOf(e, 'kubeproxy_network_programming_duration_seconds_count', { ip_family: 'IPv6' }),
    ).toEqual([]);
    expect(
      sampleValue(e, 'kubeproxy_network_programming_duration_seconds_bucket', { ip_family: 'IPv4', le: '2' }),
    ).toBe(1);
  });

  it('no_local_endpoints_total counts Local policies whose endpoints are all elsewhere', async () => {
    const metrics = new ProxyMetrics({ mode: 'iptables', processMetrics: false });
    metrics.syncObserver().synced?.(report(decisions(cluster.services, cluster.slices)));
    const e = await scrape(metrics);
    const value = (traffic_policy: string) =>
      sampleValue(e, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total', {
        ip_family: 'IPv4',
        traffic_policy,
      });
    expect(value('internal')).toBe(1);
    expect(value('external')).toBe(1);
  });

  it('skipped objects by kind and reason class, and failed syncs by mode', async () => {
    const metrics = new ProxyMetrics({ mode: 'bpf', processMetrics: false });
    const observer = metrics.syncObserver();
    const invalid: ObjectProblem = {
      origin: 'a.yaml#1',
      kind: 'Service',
      namespace: 'ns',
      name: 'bad',
      reason: 'spec.ports[0].port: too big',
    };
    const partly: ObjectProblem = {
      origin: 'b.yaml#0',
      kind: 'EndpointSlice',
      namespace: 'ns',
      name: 'web-1',
      reason:
        'endpoints[0].addresses: must hold at least one address (left out; the rest of the EndpointSlice is used)',
      entriesLeftOut: true,
    };
    observer.synced?.(report(decisions(cluster.services, cluster.slices, ['IPv4'], [invalid, partly])));
    observer.failed?.({ full: true, error: new Error('restore failed'), durationSeconds: 0.5 });
    const e = await scrape(metrics);
    expect(sampleValue(e, 'kube_bpf_proxy_skipped_objects', { kind: 'Service', reason: 'invalid' })).toBe(1);
    expect(
      sampleValue(e, 'kube_bpf_proxy_skipped_objects', { kind: 'EndpointSlice', reason: 'partly_invalid' }),
    ).toBe(1);
    expect(sampleValue(e, 'kube_bpf_proxy_skipped_objects', { kind: 'Service', reason: 'headless' })).toBe(1);
    expect(
      sampleValue(e, 'kube_bpf_proxy_skipped_objects', { kind: 'Service', reason: 'external_name' }),
    ).toBe(1);
    expect(sampleValue(e, 'kube_bpf_proxy_sync_failures_total', { mode: 'bpf' })).toBe(1);
    // The failed sync's duration is observed, as kube-proxy's deferred observation does.
    expect(
      sampleValue(e, 'kubeproxy_sync_full_proxy_rules_duration_seconds_count', { ip_family: 'IPv4' }),
    ).toBe(2);
  });

  it('reason classes cover every reason the brain gives for objects it ignores', () => {
    const services = [
      service('ns', 'h', { clusterIP: 'None' }),
      service('ns', 'x', { type: 'ExternalName', clusterIP: '' }),
    ];
    const slices: EndpointSlice[] = [
      slice('ns', 'h', 'fqdn', [], undefined, 'FQDN'),
      { ...slice('ns', '', 'orphan', []), serviceName: '' },
    ];
    const d = decisions(services, slices);
    expect(d.ignored.map((o) => ignoredReasonClass(o.reason)).sort()).toEqual([
      'external_name',
      'fqdn_slice',
      'headless',
      'no_service_name',
    ]);
    expect(skippedObjectCounts(d).get('EndpointSlice\u0000fqdn_slice')).toBe(1);
  });

  it('pending and total changes come from the change tracker', async () => {
    const tracker = new ChangeTracker(NODE);
    const metrics = new ProxyMetrics({ mode: 'iptables', processMetrics: false, changes: tracker });
    const events: SourceEvent[] = [
      {
        kind: 'Service',
        type: 'upsert',
        origin: 'test',
        object: {
          apiVersion: 'v1',
          kind: 'Service',
          metadata: { namespace: 'ns', name: 'web', uid: 'u1', resourceVersion: '1' },
          spec: { clusterIP: '10.96.0.10', ports: [{ port: 80, protocol: 'TCP' }] },
        },
      },
      {
        kind: 'EndpointSlice',
        type: 'upsert',
        origin: 'test',
        object: {
          apiVersion: 'discovery.k8s.io/v1',
          kind: 'EndpointSlice',
          metadata: {
            namespace: 'ns',
            name: 'web-1',
            uid: 'u2',
            resourceVersion: '1',
            labels: { 'kubernetes.io/service-name': 'web' },
            annotations: { [TRIGGER_TIME_ANNOTATION]: '2025-01-01T00:00:00Z' },
          },
          addressType: 'IPv4',
          endpoints: [{ addresses: ['10.244.1.2'] }],
          ports: [{ port: 80, protocol: 'TCP' }],
        },
      },
    ];
    tracker.apply(events);
    let e = await scrape(metrics);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_service_changes_pending')).toBe(1);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_endpoint_changes_pending')).toBe(1);
    tracker.takePending();
    tracker.apply(events.slice(1));
    e = await scrape(metrics);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_service_changes_pending')).toBe(0);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_endpoint_changes_pending')).toBe(1);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_service_changes_total')).toBe(1);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_endpoint_changes_total')).toBe(2);
  });

  it('rule-mode counters are read from the data plane for every synced family', async () => {
    const stats: Record<string, RuleModeStats> = {
      IPv4: {
        restoreFailures: 2,
        partialRestoreFailures: 1,
        rulesTotal: { filter: 7, nat: 40 },
        rulesLast: { filter: 7, nat: 12 },
      },
    };
    const metrics = new ProxyMetrics({
      mode: 'iptables',
      processMetrics: false,
      ruleStats: { stats: (family) => stats[family] },
    });
    let e = await scrape(metrics);
    expect(samplesOf(e, 'kubeproxy_sync_proxy_rules_iptables_restore_failures_total')).toEqual([]);
    metrics.syncObserver().synced?.(report(decisions(cluster.services, cluster.slices, ['IPv4', 'IPv6'])));
    e = await scrape(metrics);
    const v4 = { ip_family: 'IPv4' };
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_iptables_restore_failures_total', v4)).toBe(2);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total', v4)).toBe(1);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_iptables_total', { ...v4, table: 'nat' })).toBe(40);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_iptables_last', { ...v4, table: 'nat' })).toBe(12);
    expect(samplesOf(e, 'kubeproxy_sync_proxy_rules_iptables_total', { ip_family: 'IPv6' })).toEqual([]);
    stats.IPv4 = { ...stats.IPv4, restoreFailures: 3 };
    e = await scrape(metrics);
    expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_iptables_restore_failures_total', v4)).toBe(3);
  });

  it("iptables mode reads kube-proxy's nfacct counters at scrape time; other modes have no such series", async () => {
    let packets: NfacctPackets = { ctStateInvalidDropped: 5 };
    const metrics = new ProxyMetrics({
      mode: 'iptables',
      processMetrics: false,
      ruleStats: { stats: () => undefined, nfacctPackets: async () => packets },
    });
    let e = await scrape(metrics);
    expect(sampleValue(e, 'kubeproxy_iptables_ct_state_invalid_dropped_packets_total', {})).toBe(5);
    // The agent creates both counters where the nfacct match works; one it cannot read stays 0.
    expect(sampleValue(e, 'kubeproxy_iptables_localhost_nodeports_accepted_packets_total', {})).toBe(0);
    packets = { ctStateInvalidDropped: 9, localhostNodePortsAccepted: 2 };
    e = await scrape(metrics);
    expect(sampleValue(e, 'kubeproxy_iptables_ct_state_invalid_dropped_packets_total', {})).toBe(9);
    expect(sampleValue(e, 'kubeproxy_iptables_localhost_nodeports_accepted_packets_total', {})).toBe(2);

    const nft = new ProxyMetrics({
      mode: 'nftables',
      processMetrics: false,
      ruleStats: { stats: () => undefined },
    });
    expect(samplesOf(await scrape(nft), 'kubeproxy_iptables_ct_state_invalid_dropped_packets_total')).toEqual(
      [],
    );
  });

  it('healthz and livez answers are counted by code', async () => {
    const metrics = new ProxyMetrics({ mode: 'iptables', processMetrics: false });
    metrics.served('healthz', 200);
    metrics.served('healthz', 200);
    metrics.served('healthz', 503);
    metrics.served('livez', 200);
    const e = await scrape(metrics);
    expect(sampleValue(e, 'kubeproxy_proxy_healthz_total', { code: '200' })).toBe(2);
    expect(sampleValue(e, 'kubeproxy_proxy_healthz_total', { code: '503' })).toBe(1);
    expect(sampleValue(e, 'kubeproxy_proxy_livez_total', { code: '200' })).toBe(1);
  });
});

describe('bpf data plane counters (BpfStatsProvider)', () => {
  const traffic = (n: number) => ({
    newConnections: BigInt(n),
    forwardPackets: BigInt(10 * n),
    forwardBytes: BigInt(1000 * n),
    replyPackets: 8 * n,
    replyBytes: 800 * n,
    droppedPackets: 0,
  });
  let stats: BpfStats;
  let failing = false;
  const provider: BpfStatsProvider = {
    read: async () => {
      if (failing) throw new Error('map gone');
      return stats;
    },
  };
  const base = {
    namespace: 'ns',
    name: 'web',
    portName: 'http',
    protocol: 'TCP' as const,
    family: 'IPv4' as const,
  };

  it('exports services, backends (at most metricsMaxBackends), drops, maps, conntrack and GC work', async () => {
    stats = {
      services: [
        { ...base, frontend: 'ClusterIP', ...traffic(1) },
        { ...base, frontend: 'LoadBalancer', ...traffic(2) },
        // A second LoadBalancer IP of the same port: added to the same series.
        { ...base, frontend: 'LoadBalancer', ...traffic(3), droppedPackets: 4n },
      ],
      backendsNotCounted: 4,
      backends: [
        { family: 'IPv4', backend: '10.244.2.2:8080', ...traffic(5) },
        { family: 'IPv4', backend: '10.244.1.2:8080', ...traffic(6) },
        { family: 'IPv4', backend: '10.244.3.2:8080', ...traffic(7) },
      ],
      drops: [
        { reason: 'no_endpoints', packets: 3n, bytes: 180n },
        { reason: 'source_range', packets: 1, bytes: 60 },
      ],
      fragments: [
        { event: 'first', packets: 5n },
        { event: 'later_unknown', packets: 2n },
      ],
      maps: [{ name: 'kbp_ct4tcp_v1', entries: 12, capacity: 262144 }],
      conntrackEntries: [{ family: 'IPv4', entries: 12 }],
      conntrackGC: { runs: 4n, scannedEntries: 100n, deletedEntries: 9n, seconds: 0.25 },
    };
    const metrics = new ProxyMetrics({
      mode: 'bpf',
      processMetrics: false,
      bpfStats: provider,
      maxBackends: 2,
    });
    const e = await scrape(metrics);
    const lb = { namespace: 'ns', service: 'web', port_name: 'http', protocol: 'TCP', ip_family: 'IPv4' };
    expect(
      sampleValue(e, 'kube_bpf_proxy_service_new_connections_total', { ...lb, frontend: 'LoadBalancer' }),
    ).toBe(5);
    expect(
      sampleValue(e, 'kube_bpf_proxy_service_packets_total', {
        ...lb,
        frontend: 'ClusterIP',
        direction: 'forward',
      }),
    ).toBe(10);
    expect(
      sampleValue(e, 'kube_bpf_proxy_service_bytes_total', {
        ...lb,
        frontend: 'LoadBalancer',
        direction: 'reply',
      }),
    ).toBe(4000);
    expect(sampleValue(e, 'kube_bpf_proxy_service_drops_total', { ...lb, frontend: 'LoadBalancer' })).toBe(4);
    expect(e.types.get('kube_bpf_proxy_service_packets_total')).toBe('counter');

    // Two of three backends, the first by name; the third is counted as left out.
    expect(samplesOf(e, 'kube_bpf_proxy_backend_new_connections_total').map((s) => s.labels.backend)).toEqual(
      ['10.244.1.2:8080', '10.244.2.2:8080'],
    );
    expect(
      sampleValue(e, 'kube_bpf_proxy_backend_packets_total', {
        backend: '10.244.1.2:8080',
        direction: 'reply',
      }),
    ).toBe(48);
    expect(sampleValue(e, 'kube_bpf_proxy_backends_not_exported')).toBe(1);
    // Backends past bpf.mapSizes.backendCounters: no series of their own, and said so.
    expect(sampleValue(e, 'kube_bpf_proxy_backends_not_counted')).toBe(4);

    expect(sampleValue(e, 'kube_bpf_proxy_drops_total', { reason: 'no_endpoints' })).toBe(3);
    expect(sampleValue(e, 'kube_bpf_proxy_drop_bytes_total', { reason: 'source_range' })).toBe(60);
    expect(sampleValue(e, 'kube_bpf_proxy_fragments_total', { event: 'later_unknown' })).toBe(2);
    expect(sampleValue(e, 'kube_bpf_proxy_map_entries', { map: 'kbp_ct4tcp_v1' })).toBe(12);
    expect(sampleValue(e, 'kube_bpf_proxy_map_capacity', { map: 'kbp_ct4tcp_v1' })).toBe(262144);
    expect(sampleValue(e, 'kube_bpf_proxy_conntrack_entries', { ip_family: 'IPv4' })).toBe(12);
    expect(sampleValue(e, 'kube_bpf_proxy_conntrack_gc_runs_total')).toBe(4);
    expect(sampleValue(e, 'kube_bpf_proxy_conntrack_gc_deleted_entries_total')).toBe(9);
    expect(sampleValue(e, 'kube_bpf_proxy_conntrack_gc_duration_seconds_total')).toBe(0.25);
  });

  it('metricsMaxBackends 0 exports no backend series; a failed read keeps the last values', async () => {
    const metrics = new ProxyMetrics({
      mode: 'bpf',
      processMetrics: false,
      bpfStats: provider,
      maxBackends: 0,
    });
    let e = await scrape(metrics);
    expect(samplesOf(e, 'kube_bpf_proxy_backend_packets_total')).toEqual([]);
    expect(sampleValue(e, 'kube_bpf_proxy_backends_not_exported')).toBe(3);
    failing = true;
    e = await scrape(metrics);
    expect(sampleValue(e, 'kube_bpf_proxy_drops_total', { reason: 'no_endpoints' })).toBe(3);
    failing = false;
  });

  it('label values are escaped as the text format wants', async () => {
    const odd = 'a"b\\c\nd';
    const metrics = new ProxyMetrics({
      mode: 'bpf',
      processMetrics: false,
      bpfStats: { read: () => ({ ...stats, drops: [{ reason: odd, packets: 1, bytes: 2 }] }) },
    });
    const text = await metrics.render();
    expect(text).toContain('kube_bpf_proxy_drops_total{reason="a\\"b\\\\c\\nd"} 1');
    expect(sampleValue(parseExposition(text), 'kube_bpf_proxy_drop_bytes_total', { reason: odd })).toBe(2);
  });

  it('other modes have no bpf series', async () => {
    const e = await scrape(new ProxyMetrics({ mode: 'iptables', processMetrics: false }));
    expect([...e.types.keys()].filter((name) => name.startsWith('kube_bpf_proxy_service'))).toEqual([]);
  });
});

describe('the metrics server (/metrics, /healthz, /proxyMode, /configz)', () => {
  let server: BoundServer | null = null;
  afterEach(async () => {
    await server?.close();
    server = null;
  });

  function config(): ProxyConfig {
    const loaded = loadConfig({ flags: { 'proxy-mode': 'iptables' } });
    if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
    return { ...loaded.config, metricsBindAddress: '127.0.0.1:0' };
  }

  it('serves the routes kube-proxy serves on 10249', async () => {
    const cfg = config();
    const metrics = new ProxyMetrics({ mode: cfg.mode, processMetrics: false });
    server = await startMetricsServer(metrics, cfg, silentLogger);
    const base = `http://127.0.0.1:${server.port}`;

    const scraped = await fetch(`${base}/metrics`);
    expect(scraped.status).toBe(200);
    expect(scraped.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    const exposition = parseExposition(await scraped.text());
    expect(exposition.types.get('kubeproxy_sync_proxy_rules_duration_seconds')).toBe('histogram');

    const healthz = await fetch(`${base}/healthz`);
    expect([healthz.status, await healthz.text()]).toEqual([200, 'ok']);

    const mode = await fetch(`${base}/proxyMode`);
    expect(mode.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await mode.text()).toBe('iptables');

    const configz = await fetch(`${base}/configz`);
    expect(configz.headers.get('content-type')).toBe('application/json');
    const body = (await configz.json()) as Record<string, { mode: string; metricsBindAddress: string }>;
    expect(body['kubeproxy.config.k8s.io']?.mode).toBe('iptables');
    expect(body['kubeproxy.config.k8s.io']?.metricsBindAddress).toBe('127.0.0.1:0');

    expect((await fetch(`${base}/nothing`)).status).toBe(404);
  });
});

describe('the status servers `run` starts', () => {
  function config(metricsPort: number, healthzPort: number, extra: Partial<ProxyConfig> = {}): ProxyConfig {
    const loaded = loadConfig({ flags: { 'proxy-mode': 'iptables' } });
    if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
    return {
      ...loaded.config,
      metricsBindAddress: `127.0.0.1:${metricsPort}`,
      healthzBindAddress: `127.0.0.1:${healthzPort}`,
      ...extra,
    };
  }

  it('serve metrics and health fed by the sync observers, and close', async () => {
    const [metricsPort, healthzPort] = [await freePort(), await freePort()];
    const tracker = new ChangeTracker(NODE);
    const currentNode = node(NODE);
    const status = await startStatusServers({
      config: config(metricsPort, healthzPort),
      changes: tracker,
      node: () => currentNode,
      log: silentLogger,
    });
    try {
      for (const observer of status.observers) {
        observer.queued?.(new Date(), new Set(['IPv4']));
        observer.synced?.(report(decisions(cluster.services, cluster.slices)));
      }
      const healthz = await fetch(`http://127.0.0.1:${healthzPort}/healthz`);
      expect(healthz.status).toBe(200);
      const e = parseExposition(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text());
      expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_duration_seconds_count', { ip_family: 'IPv4' })).toBe(
        1,
      );
      expect(sampleValue(e, 'kubeproxy_proxy_healthz_total', { code: '200' })).toBe(1);
    } finally {
      await status.close();
    }
    await expect(fetch(`http://127.0.0.1:${healthzPort}/healthz`)).rejects.toThrow();
  });

  it('a taken port stops start-up with bindAddressHardFail, and is only logged without it', async () => {
    const [metricsPort, healthzPort] = [await freePort(), await freePort()];
    const squatter = createServer();
    await new Promise<void>((resolve) => squatter.listen({ host: '127.0.0.1', port: healthzPort }, resolve));
    const options = { changes: new ChangeTracker(NODE), node: () => null, log: silentLogger };
    try {
      await expect(
        startStatusServers({
          ...options,
          config: config(metricsPort, healthzPort, { bindAddressHardFail: true }),
        }),
      ).rejects.toThrow(`healthz server cannot listen on 127.0.0.1:${healthzPort}`);
      // The metrics server it had started is closed again.
      await expect(fetch(`http://127.0.0.1:${metricsPort}/metrics`)).rejects.toThrow();

      const status = await startStatusServers({ ...options, config: config(metricsPort, healthzPort) });
      expect((await fetch(`http://127.0.0.1:${metricsPort}/proxyMode`)).status).toBe(200);
      await status.close();
    } finally {
      await new Promise<void>((resolve) => squatter.close(() => resolve()));
    }
  });
});

describe('conntrack reconciles (kubeproxy_conntrack_reconciler_*)', () => {
  it('observe the duration and add the deletions; a failed listing observes nothing, any failure counts', async () => {
    const metrics = new ProxyMetrics({ mode: 'iptables', processMetrics: false });
    const d = decisions(cluster.services, cluster.slices, ['IPv4', 'IPv6']);
    metrics.syncObserver().synced?.(
      report(d, {
        conntrack: [
          { family: 'IPv4', listed: true, durationSeconds: 0.003, deleted: 2, error: null },
          {
            family: 'IPv6',
            listed: false,
            durationSeconds: 0.001,
            deleted: 0,
            error: 'conntrack -L failed (1)',
          },
        ],
      }),
    );
    metrics.syncObserver().synced?.(
      report(d, {
        conntrack: [
          { family: 'IPv4', listed: true, durationSeconds: 0.02, deleted: 1, error: 'conntrack -D failed' },
        ],
      }),
    );
    const e = await scrape(metrics);
    const v4 = { ip_family: 'IPv4' };
    const v6 = { ip_family: 'IPv6' };
    expect(sampleValue(e, 'kubeproxy_conntrack_reconciler_sync_duration_seconds_count', v4)).toBe(2);
    expect(
      sampleValue(e, 'kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket', { ...v4, le: '0.004' }),
    ).toBe(1);
    expect(sampleValue(e, 'kubeproxy_conntrack_reconciler_deleted_entries_total', v4)).toBe(3);
    expect(samplesOf(e, 'kubeproxy_conntrack_reconciler_sync_duration_seconds_count', v6)).toEqual([]);
    expect(sampleValue(e, 'kube_bpf_proxy_conntrack_reconciler_failures_total', v4)).toBe(1);
    expect(sampleValue(e, 'kube_bpf_proxy_conntrack_reconciler_failures_total', v6)).toBe(1);
  });
});
