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
import { deleteStaleNamespaces, Lab } from '../../src/lab/netns.js';
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
      }
      expect(samplesOf(e, 'kubeproxy_proxy_healthz_total', { code: '200' })).toHaveLength(1);
      expect(sampleValue(e, 'kube_bpf_proxy_sync_failures_total', { mode })).toBe(0);

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
      expect(
        sampleValue(after, 'kubeproxy_network_programming_duration_seconds_count', { ip_family: 'IPv4' }),
      ).toBeGreaterThan(
        sampleValue(before, 'kubeproxy_network_programming_duration_seconds_count', { ip_family: 'IPv4' }),
      );
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
