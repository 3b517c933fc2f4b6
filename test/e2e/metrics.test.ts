// `kube-bpf-proxy run` on the example manifests inside a network namespace, in iptables and in
// nftables mode (the rules applied for real), scraped from inside that namespace the way
// Prometheus and the kubelet would: /metrics on 10249, /healthz and /livez on 10256, and the
// healthCheckNodePort server of the example's LoadBalancer Service with externalTrafficPolicy=Local
// (demo/web-local, 32000). A manifest edit must move the kube-proxy metrics and turn the health
// check to 503.

import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DEMO_NODES } from '../../src/cli/demo.js';
import { type BuiltCluster, buildCluster, clusterSpecFromState } from '../../src/lab/cluster.js';
import { deleteStaleNamespaces, Lab } from '../../src/lab/netns.js';
import { ChangeTracker } from '../../src/model/tracker.js';
import { readManifests } from '../../src/sources/manifests.js';
import { describeRoot } from '../support/privileges.js';
import { type Exposition, parseExposition, samplesOf, sampleValue } from '../support/prom-text.js';

const repo = (path: string) => fileURLToPath(new URL(`../../${path}`, import.meta.url));
const CLI = repo('dist/src/cli/main.js');
const HEALTH_CHECK_PORT = 32000;

// Runs inside the namespace: one GET, printed as JSON.
const FETCH = `fetch(process.argv[1]).then(async (r) => process.stdout.write(JSON.stringify({
  status: r.status, headers: Object.fromEntries(r.headers), body: await r.text() })),
  (e) => process.stdout.write(JSON.stringify({ status: 0, headers: {}, body: String(e) })))`;

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** One GET from inside a lab namespace. */
async function fetchIn(lab: Lab, ns: string, url: string): Promise<Answer> {
  return JSON.parse((await lab.exec(ns, process.execPath, ['-e', FETCH, url])).stdout) as Answer;
}

/** Polls until `check` passes (bounded: 40 tries, 250 ms apart). */
async function eventually<T>(read: () => Promise<T>, check: (value: T) => boolean): Promise<T> {
  let value = await read();
  for (let attempt = 0; attempt < 40 && !check(value); attempt++) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    value = await read();
  }
  return value;
}

/** The rule-mode metrics each mode must serve, with their types (all 0 on a healthy run). */
const MODE_COUNTERS: Record<'iptables' | 'nftables', string[]> = {
  iptables: [
    'kubeproxy_sync_proxy_rules_iptables_restore_failures_total',
    'kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total',
  ],
  nftables: [
    'kubeproxy_sync_proxy_rules_nftables_sync_failures_total',
    'kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total',
  ],
};

for (const mode of ['iptables', 'nftables'] as const) describeMode(mode);

function describeMode(mode: 'iptables' | 'nftables'): void {
  describeRoot(`metrics and health of \`run --proxy-mode ${mode}\` in a network namespace`, () => {
    const PREFIX = `kbpmet${mode[0]}${process.pid}`;
    const lab = new Lab(PREFIX);
    let manifests = '';
    let agent: ChildProcess | null = null;
    let agentLog = '';
    /** When the test saw the agent's first sync: its tracker started before. */
    let firstSyncSeenAt = 0;

    const get = async (url: string): Promise<Answer> =>
      JSON.parse((await lab.exec('node', process.execPath, ['-e', FETCH, url])).stdout) as Answer;
    const scrape = async (): Promise<Exposition> => {
      const answer = await get('http://127.0.0.1:10249/metrics');
      expect(answer.status).toBe(200);
      return parseExposition(answer.body);
    };
    const syncs = (e: Exposition) =>
      sampleValue(e, 'kubeproxy_sync_proxy_rules_duration_seconds_count', { ip_family: 'IPv4' });

    beforeAll(async () => {
      if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
      await deleteStaleNamespaces(PREFIX);
      await lab.addNamespace('node');
      await lab.addNamespace('peer');
      // node-a's InternalIP in examples/manifests/nodes.yaml.
      await lab.link('node', 'eth0', 'peer', 'eth0');
      await lab.addAddress('node', 'eth0', '10.10.0.1/24');
      await lab.addAddress('peer', 'eth0', '10.10.0.2/24');
      manifests = await mkdtemp(join(tmpdir(), `${PREFIX}-`));
      await cp(repo('examples/manifests'), manifests, { recursive: true });
      agent = lab.spawn('node', process.execPath, [
        CLI,
        'run',
        '--config',
        repo('examples/config.yaml'),
        '--manifests',
        manifests,
        '--proxy-mode',
        mode,
      ]);
      agent.stderr?.on('data', (chunk: Buffer) => {
        agentLog += chunk.toString();
      });
      // /healthz is 200 from the start (kube-proxy is healthy while starting): wait for a sync.
      const first = await eventually(
        () => get('http://127.0.0.1:10249/metrics'),
        (a) => a.body.includes('kubeproxy_sync_proxy_rules_duration_seconds_count{'),
      );
      expect(first.status, agentLog).toBe(200);
      firstSyncSeenAt = Date.now();
    });

    afterAll(async () => {
      await lab.destroy();
      if (manifests) await rm(manifests, { recursive: true, force: true });
    });

    it("serves kube-proxy's metric names with their types after the first sync", async () => {
      expect((await get('http://127.0.0.1:10256/healthz')).status).toBe(200);
      const e = await scrape();
      const types: Record<string, string> = {
        kubeproxy_sync_proxy_rules_duration_seconds: 'histogram',
        kubeproxy_sync_full_proxy_rules_duration_seconds: 'histogram',
        kubeproxy_sync_partial_proxy_rules_duration_seconds: 'histogram',
        kubeproxy_network_programming_duration_seconds: 'histogram',
        kubeproxy_sync_proxy_rules_last_timestamp_seconds: 'gauge',
        kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds: 'gauge',
        kubeproxy_sync_proxy_rules_endpoint_changes_pending: 'gauge',
        kubeproxy_sync_proxy_rules_endpoint_changes_total: 'counter',
        kubeproxy_sync_proxy_rules_service_changes_pending: 'gauge',
        kubeproxy_sync_proxy_rules_service_changes_total: 'counter',
        kubeproxy_sync_proxy_rules_no_local_endpoints_total: 'gauge',
        kubeproxy_proxy_healthz_total: 'counter',
        kubeproxy_proxy_livez_total: 'counter',
        kubeproxy_conntrack_reconciler_sync_duration_seconds: 'histogram',
        kubeproxy_conntrack_reconciler_deleted_entries_total: 'counter',
        kube_bpf_proxy_skipped_objects: 'gauge',
        kube_bpf_proxy_sync_failures_total: 'counter',
        process_cpu_user_seconds_total: 'counter',
      };
      for (const [name, type] of Object.entries(types)) expect(e.types.get(name), name).toBe(type);

      expect(syncs(e)).toBeGreaterThanOrEqual(1);
      expect(
        sampleValue(e, 'kubeproxy_sync_full_proxy_rules_duration_seconds_count', { ip_family: 'IPv4' }),
      ).toBe(1);
      const lastSync = sampleValue(e, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', {
        ip_family: 'IPv4',
      });
      expect(Math.abs(lastSync - Date.now() / 1000)).toBeLessThan(60);
      expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_service_changes_total')).toBeGreaterThan(0);
      expect(sampleValue(e, 'kubeproxy_sync_proxy_rules_endpoint_changes_total')).toBeGreaterThan(0);
      for (const name of MODE_COUNTERS[mode]) {
        expect(e.types.get(name), name).toBe('counter');
        expect(sampleValue(e, name, { ip_family: 'IPv4' }), name).toBe(0);
      }
      if (mode === 'iptables') {
        // The rules really written by iptables-restore in the namespace.
        expect(e.types.get('kubeproxy_sync_proxy_rules_iptables_total')).toBe('gauge');
        expect(
          sampleValue(e, 'kubeproxy_sync_proxy_rules_iptables_total', { ip_family: 'IPv4', table: 'nat' }),
        ).toBeGreaterThan(10);
        // kube-proxy's nfacct counters, created by the agent and read from the kernel.
        expect(e.types.get('kubeproxy_iptables_ct_state_invalid_dropped_packets_total')).toBe('counter');
        expect(
          sampleValue(e, 'kubeproxy_iptables_ct_state_invalid_dropped_packets_total'),
        ).toBeGreaterThanOrEqual(0);
        expect(e.types.get('kubeproxy_iptables_localhost_nodeports_accepted_packets_total')).toBe('counter');
      } else {
        expect(e.types.get('kubeproxy_iptables_ct_state_invalid_dropped_packets_total')).toBeUndefined();
      }
      expect(samplesOf(e, 'kubeproxy_proxy_healthz_total', { code: '200' })).toHaveLength(1);
      expect(sampleValue(e, 'kube_bpf_proxy_sync_failures_total', { mode })).toBe(0);
      // The first sync changed every Service, demo/dns's UDP port among them: conntrack was reconciled.
      expect(
        sampleValue(e, 'kubeproxy_conntrack_reconciler_sync_duration_seconds_count', { ip_family: 'IPv4' }),
      ).toBeGreaterThanOrEqual(1);
      expect(samplesOf(e, 'kube_bpf_proxy_conntrack_reconciler_failures_total')).toEqual([]);

      const proxyMode = await get('http://127.0.0.1:10249/proxyMode');
      expect(proxyMode.body).toBe(mode);
      const configz = JSON.parse((await get('http://127.0.0.1:10249/configz')).body);
      expect(configz['kubeproxy.config.k8s.io'].hostnameOverride).toBe('node-a');
    });

    it('/healthz and /livez answer 200 with per-family status; the health check of demo/web-local 200 with 2 endpoints', async () => {
      const healthz = await get('http://127.0.0.1:10256/healthz');
      expect(healthz.status).toBe(200);
      expect(healthz.headers['content-type']).toBe('application/json');
      expect(JSON.parse(healthz.body)).toMatchObject({
        nodeEligible: true,
        healthy: true,
        status: { IPv4: { healthy: true } },
      });
      expect((await get('http://127.0.0.1:10256/livez')).status).toBe(200);

      const check = await get(`http://10.10.0.1:${HEALTH_CHECK_PORT}/`);
      expect(check.status).toBe(200);
      expect(check.headers['x-load-balancing-endpoint-weight']).toBe('2');
      expect(check.body).toBe(
        '{\n\t"service": {\n\t\t"namespace": "demo",\n\t\t"name": "web-local"\n\t},\n\t"localEndpoints": 2,\n\t"serviceProxyHealthy": true\n}',
      );
    });

    it('a manifest edit moves the sync, change and programming-latency metrics and drains the health check', async () => {
      const before = await scrape();
      const noLocal = (e: Exposition) =>
        sampleValue(e, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total', {
          ip_family: 'IPv4',
          traffic_policy: 'external',
        });

      // web-local's node-a pods move to node-b; its slice carries a fresh trigger time.
      const file = join(manifests, 'web.yaml');
      const docs = (await readFile(file, 'utf8')).split('\n---\n');
      const index = docs.findIndex((doc) => doc.includes('name: web-local-zr5tb'));
      expect(index).toBeGreaterThan(0);
      // As kube-proxy, the agent ignores trigger times from before its tracker started (before its
      // first sync): a second's resolution must still put this one after it.
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, firstSyncSeenAt + 2000 - Date.now())));
      const triggerTime = new Date(Date.now() - 1000).toISOString().replace(/\.\d+Z$/, 'Z');
      docs[index] = (docs[index] as string)
        .replace(
          'metadata:\n',
          `metadata:\n  annotations:\n    endpoints.kubernetes.io/last-change-trigger-time: "${triggerTime}"\n`,
        )
        .replaceAll('nodeName: node-a', 'nodeName: node-b');
      await writeFile(file, docs.join('\n---\n'));

      const after = await eventually(scrape, (e) => syncs(e) > syncs(before) && noLocal(e) > noLocal(before));
      expect(syncs(after)).toBeGreaterThan(syncs(before));
      expect(
        sampleValue(after, 'kubeproxy_sync_partial_proxy_rules_duration_seconds_count', {
          ip_family: 'IPv4',
        }),
      ).toBeGreaterThanOrEqual(1);
      expect(sampleValue(after, 'kubeproxy_sync_proxy_rules_endpoint_changes_total')).toBeGreaterThan(
        sampleValue(before, 'kubeproxy_sync_proxy_rules_endpoint_changes_total'),
      );
      expect(
        sampleValue(after, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', { ip_family: 'IPv4' }),
      ).toBeGreaterThan(
        sampleValue(before, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', { ip_family: 'IPv4' }),
      );
      // The slices listed at start carry trigger times from before the agent: none was observed
      // then, so the histogram may have no sample before this edit.
      const programmed = (e: Exposition) =>
        samplesOf(e, 'kubeproxy_network_programming_duration_seconds_count', { ip_family: 'IPv4' })[0]
          ?.value ?? 0;
      expect(programmed(after)).toBeGreaterThan(programmed(before));
      expect(noLocal(after)).toBe(noLocal(before) + 1);

      const check = await eventually(
        () => get(`http://10.10.0.1:${HEALTH_CHECK_PORT}/healthz`),
        (a) => a.status === 503,
      );
      expect(check.status).toBe(503);
      expect(check.headers['x-load-balancing-endpoint-weight']).toBe('0');
      expect(JSON.parse(check.body)).toEqual({
        service: { namespace: 'demo', name: 'web-local' },
        localEndpoints: 0,
        serviceProxyHealthy: true,
      });
    });

    it("queues per family as kube-proxy's metaproxier does: an IPv6 slice edit moves IPv6's last_queued_timestamp and sync only", async () => {
      const queued = (e: Exposition, ip_family: string) =>
        sampleValue(e, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds', { ip_family });
      const synced = (e: Exposition, ip_family: string) =>
        sampleValue(e, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', { ip_family });
      // The Node has an IPv6 InternalIP (examples/manifests/nodes.yaml): the agent runs both families.
      const healthz = JSON.parse((await get('http://127.0.0.1:10256/healthz')).body);
      expect(Object.keys(healthz.status)).toEqual(['IPv4', 'IPv6']);
      expect(healthz.status.IPv6.healthy).toBe(true);
      const before = await scrape();
      expect(queued(before, 'IPv6')).toBeGreaterThan(0);
      // Timestamps are in seconds with ms: let a distinct time pass before the edit.
      await new Promise((resolve) => setTimeout(resolve, 20));
      // demo/web's terminating IPv6 endpoint gets another address: an IPv6 EndpointSlice change.
      const file = join(manifests, 'web.yaml');
      await writeFile(file, (await readFile(file, 'utf8')).replace('"fd00:244:0:2::b"', '"fd00:244:0:2::c"'));
      const after = await eventually(scrape, (e) => synced(e, 'IPv6') > synced(before, 'IPv6'));
      expect(queued(after, 'IPv6')).toBeGreaterThan(queued(before, 'IPv6'));
      expect(queued(after, 'IPv4')).toBe(queued(before, 'IPv4'));
      const healthzAfter = JSON.parse((await get('http://127.0.0.1:10256/healthz')).body);
      expect(healthzAfter).toMatchObject({
        healthy: true,
        status: { IPv4: { healthy: true }, IPv6: { healthy: true } },
      });
    });

    it('logs one line per sync at the default level', async () => {
      const e = await scrape();
      const lines = agentLog
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { msg: string; level: number });
      expect(lines.filter((l) => l.msg === 'synced')).toHaveLength(syncs(e));
      expect(lines.every((l) => l.level >= 30)).toBe(true);
    });
  });
}

// bpf mode with real traffic: the two-node cluster of the demo (src/lab/cluster.ts) from the
// example manifests, one agent on node-a, requests from a pod on node-a. The per-service,
// per-backend and drop counters come from the BPF maps through BpfStatsProvider.
describeRoot('bpf counters of `run --proxy-mode bpf` move with real traffic', () => {
  const PREFIX = `kbpmetb${process.pid}`;
  const lab = new Lab(PREFIX);
  const pinPath = `/sys/fs/bpf/${PREFIX}`;
  let cluster: BuiltCluster;
  let workDir = '';
  let agentLog = '';
  const nodeA = () => cluster.nodeNs('node-a');
  const scrape = async (): Promise<Exposition> => {
    const answer = await fetchIn(lab, nodeA(), 'http://127.0.0.1:10249/metrics');
    expect(answer.status).toBe(200);
    return parseExposition(answer.body);
  };
  const sum = (e: Exposition, name: string, labels: Record<string, string>) =>
    samplesOf(e, name, labels).reduce((total, sample) => total + sample.value, 0);

  beforeAll(async () => {
    if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
    await deleteStaleNamespaces(PREFIX);
    const tracker = new ChangeTracker('');
    tracker.apply(readManifests([repo('examples/manifests')]).events);
    // Before any process starts: the lab's processes start in it, the agent's socket hooks go there.
    const cgroup = await lab.ownCgroup();
    // The demo's dual-stack nodes: every pod has an IPv6 address too.
    cluster = await buildCluster(lab, clusterSpecFromState(tracker.state(), DEMO_NODES, [], []));
    workDir = await mkdtemp(join(tmpdir(), `${PREFIX}-`));
    const config = join(workDir, 'config.yaml');
    await writeFile(
      config,
      [
        'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
        'kind: KubeProxyConfiguration',
        'mode: bpf',
        'hostnameOverride: node-a',
        'clusterCIDR: 10.244.0.0/16,fd00:244::/48',
        'bpf:',
        `  pinPath: ${pinPath}`,
        `  cgroupPath: ${cgroup}`,
        '  metricsMaxBackends: 100',
        '',
      ].join('\n'),
    );
    const agent = lab.spawn(nodeA(), process.execPath, [
      CLI,
      'run',
      '--config',
      config,
      '--manifests',
      repo('examples/manifests'),
    ]);
    agent.stderr?.on('data', (chunk: Buffer) => {
      agentLog += chunk.toString();
    });
    const first = await eventually(
      () => fetchIn(lab, nodeA(), 'http://127.0.0.1:10249/metrics'),
      (a) => a.body.includes('kube_bpf_proxy_service_new_connections_total{'),
    );
    expect(first.status, agentLog).toBe(200);
  });

  afterAll(async () => {
    await lab.destroy();
    await rm(pinPath, { recursive: true, force: true });
    if (workDir) await rm(workDir, { recursive: true, force: true });
  });

  it('service, backend and drop counters follow the requests', async () => {
    const web = { namespace: 'demo', service: 'web', frontend: 'ClusterIP' };
    const webBackends = ['10.244.1.10:8080', '10.244.1.11:8080'];
    const backendConnections = (e: Exposition) =>
      webBackends.reduce(
        (total, backend) => total + sum(e, 'kube_bpf_proxy_backend_new_connections_total', { backend }),
        0,
      );
    const before = await scrape();
    const pod = cluster.podNs('pod-10.244.1.30');
    const results = await lab.requests(pod, '10.96.0.10:80', { proto: 'tcp', count: 10 });
    expect(results.every((r) => r.error === null)).toBe(true);
    // demo/web is dual-stack: as many connections to its IPv6 ClusterIP.
    const results6 = await lab.requests(pod, '[fd00:96::a]:80', { proto: 'tcp', count: 10 });
    expect(results6.every((r) => r.error === null)).toBe(true);
    const refused = await lab.requests(pod, '10.96.0.60:80', { proto: 'tcp', count: 2, timeoutMs: 1000 });
    expect(refused.map((r) => r.error)).toEqual(['ECONNREFUSED', 'ECONNREFUSED']);
    const after = await scrape();

    const delta = (name: string, labels: Record<string, string>) =>
      sum(after, name, labels) - sum(before, name, labels);
    expect(delta('kube_bpf_proxy_service_new_connections_total', web)).toBe(20);
    // A connection with one HTTP request: at least SYN, request and ACKs forward; SYN-ACK and
    // the answer back.
    expect(
      delta('kube_bpf_proxy_service_packets_total', { ...web, direction: 'forward' }),
    ).toBeGreaterThanOrEqual(60);
    expect(
      delta('kube_bpf_proxy_service_packets_total', { ...web, direction: 'reply' }),
    ).toBeGreaterThanOrEqual(40);
    expect(delta('kube_bpf_proxy_service_bytes_total', { ...web, direction: 'reply' })).toBeGreaterThan(0);
    // Zone hints keep node-a's traffic on zone-a's two pods.
    expect(backendConnections(after) - backendConnections(before)).toBe(10);
    expect(delta('kube_bpf_proxy_drops_total', { reason: 'no_endpoints' })).toBeGreaterThanOrEqual(2);
    expect(
      delta('kube_bpf_proxy_service_drops_total', {
        namespace: 'demo',
        service: 'empty',
        frontend: 'ClusterIP',
      }),
    ).toBeGreaterThanOrEqual(2);

    const capacity = samplesOf(after, 'kube_bpf_proxy_map_capacity');
    expect(capacity.length).toBeGreaterThan(0);
    expect(capacity.every((sample) => sample.value > 0)).toBe(true);
    const types: Record<string, string> = {
      kube_bpf_proxy_service_new_connections_total: 'counter',
      kube_bpf_proxy_backend_packets_total: 'counter',
      kube_bpf_proxy_map_entries: 'gauge',
      kube_bpf_proxy_conntrack_gc_runs_total: 'counter',
      kubeproxy_sync_proxy_rules_duration_seconds: 'histogram',
    };
    for (const [name, type] of Object.entries(types)) expect(after.types.get(name), name).toBe(type);
  });

  it('reports each family synced and healthy, as kube-proxy does on a dual-stack node', async () => {
    const e = await scrape();
    for (const ip_family of ['IPv4', 'IPv6']) {
      expect(
        sampleValue(e, 'kubeproxy_sync_proxy_rules_duration_seconds_count', { ip_family }),
      ).toBeGreaterThan(0);
      expect(
        sampleValue(e, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds', { ip_family }),
      ).toBeGreaterThan(0);
    }
    for (const path of ['/healthz', '/livez']) {
      const answer = await fetchIn(lab, nodeA(), `http://127.0.0.1:10256${path}`);
      expect(answer.status).toBe(200);
      expect(JSON.parse(answer.body)).toMatchObject({
        healthy: true,
        status: { IPv4: { healthy: true }, IPv6: { healthy: true } },
      });
    }
  });
});
