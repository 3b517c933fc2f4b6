import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { decide } from '../../src/brain/decide.js';
import { nodeEligible } from '../../src/brain/node.js';
import type { SyncReport } from '../../src/brain/sync-loop.js';
import type { ProxyDecisions } from '../../src/brain/types.js';
import type { BoundServer } from '../../src/health/http.js';
import { decideHealth, formatGoTime, ProxyHealth } from '../../src/health/proxy-health.js';
import { startHealthServer } from '../../src/health/server.js';
import {
  healthCheckAddresses,
  healthCheckServices,
  ServiceHealthServers,
  serviceHealthBody,
} from '../../src/health/service-health.js';
import { silentLogger } from '../../src/logger.js';
import { ProxyMetrics } from '../../src/metrics/registry.js';
import type { EndpointSlice, IPFamily, Node, Service } from '../../src/model/types.js';
import { freePort } from '../support/free-port.js';
import { brainConfig, endpoint, node, nodeEnv, service, slice } from '../support/model-fixtures.js';
import { parseExposition, sampleValue } from '../support/prom-text.js';

const NODE = 'test-node';
const SYNC_PERIOD_MS = 30_000;
const TIMEOUT_MS = 2 * SYNC_PERIOD_MS;
const T0 = Date.parse('2026-11-30T01:00:00Z');
const BOTH: ReadonlySet<IPFamily> = new Set(['IPv4', 'IPv6']);

// Only loopback: the healthCheckNodePort servers of these tests listen on 127.0.0.1.
const brain = brainConfig({ nodePortAddresses: ['127.0.0.0/8'] });

function decisions(
  services: Service[],
  slices: EndpointSlice[],
  families: IPFamily[] = ['IPv4'],
): ProxyDecisions {
  return decide(
    {
      services: new Map(services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      endpointSlices: new Map(slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      node: node(NODE),
      serviceCIDRs: new Map(),
    },
    nodeEnv({ nodeName: NODE }),
    brain,
    { families },
  );
}

function report(d: ProxyDecisions): SyncReport {
  return {
    full: true,
    reason: 'first sync',
    durationSeconds: 0.001,
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
  };
}

class Clock {
  constructor(public ms: number) {}
  readonly now = () => this.ms;
}

describe('proxy health state (kube-proxy 1.33 proxy_health.go)', () => {
  it('is healthy while starting, and turns unhealthy when the first queued sync waits 2 × syncPeriod', () => {
    const clock = new Clock(T0);
    const health = new ProxyHealth({ healthTimeoutMs: TIMEOUT_MS, now: clock.now });
    expect(health.health()).toEqual({ healthy: true, lastUpdated: null, status: new Map() });
    health.syncObserver().queued?.(new Date(T0), BOTH);
    clock.ms = T0 + TIMEOUT_MS - 1;
    expect(health.isHealthy()).toBe(true);
    clock.ms = T0 + TIMEOUT_MS;
    expect(health.isHealthy()).toBe(false);
  });

  it('a sync marks every family updated; a pending update older than the timeout makes it unhealthy', () => {
    const clock = new Clock(T0);
    const health = new ProxyHealth({ healthTimeoutMs: TIMEOUT_MS, now: clock.now });
    const observer = health.syncObserver();
    observer.queued?.(new Date(T0), BOTH);
    clock.ms = T0 + 100;
    observer.synced?.(report(decisions([], [], ['IPv4', 'IPv6'])));
    expect(health.health()).toEqual({
      healthy: true,
      lastUpdated: T0 + 100,
      status: new Map([
        ['IPv4', { lastUpdated: T0 + 100, healthy: true }],
        ['IPv6', { lastUpdated: T0 + 100, healthy: true }],
      ]),
    });

    // Two queued updates: the oldest one counts.
    observer.queued?.(new Date(T0 + 1000), BOTH);
    observer.queued?.(new Date(T0 + 50_000), BOTH);
    clock.ms = T0 + 1000 + TIMEOUT_MS;
    expect(health.isHealthy()).toBe(false);

    // One family catching up is not enough.
    health.updated('IPv4');
    const report1 = health.health();
    expect(report1.healthy).toBe(false);
    expect(report1.status.get('IPv4')).toEqual({ lastUpdated: clock.ms, healthy: true });
    expect(report1.status.get('IPv6')).toEqual({ lastUpdated: T0 + 100, healthy: false });
    expect(report1.lastUpdated).toBe(clock.ms);

    health.updated('IPv6');
    expect(health.isHealthy()).toBe(true);
  });

  it("queues per family: a change of one family's objects makes only that family stale (metaproxier)", () => {
    const clock = new Clock(T0);
    const health = new ProxyHealth({ healthTimeoutMs: TIMEOUT_MS, now: clock.now });
    const observer = health.syncObserver();
    observer.synced?.(report(decisions([], [], ['IPv4', 'IPv6'])));
    // An IPv6 EndpointSlice changed; the IPv6 sync does not happen.
    clock.ms = T0 + 10;
    observer.queued?.(new Date(clock.ms), new Set(['IPv6']));
    clock.ms = T0 + 10 + TIMEOUT_MS;
    const stale = health.health();
    expect(stale.healthy).toBe(false);
    expect(stale.status).toEqual(
      new Map([
        ['IPv4', { lastUpdated: T0, healthy: true }],
        ['IPv6', { lastUpdated: T0, healthy: false }],
      ]),
    );
    // A family the node does not run is not queued: a single-stack node has no IPv6 proxier.
    const single = new ProxyHealth({ healthTimeoutMs: TIMEOUT_MS, now: clock.now });
    single.updated('IPv4');
    single.syncObserver().queued?.(new Date(clock.ms), new Set(['IPv6']));
    clock.ms += 2 * TIMEOUT_MS;
    expect(single.health().status).toEqual(
      new Map([['IPv4', { lastUpdated: T0 + 10 + TIMEOUT_MS, healthy: true }]]),
    );
    expect(single.isHealthy()).toBe(true);
    // Changes that touch no family (another node's Node object) queue nothing.
    health.updated('IPv6');
    observer.queued?.(new Date(clock.ms), new Set());
    clock.ms += 2 * TIMEOUT_MS;
    expect(health.isHealthy()).toBe(true);
  });

  it('decides from the state alone (decideHealth): the timeout boundary per family, the latest lastUpdated', () => {
    const state = {
      lastUpdated: new Map<IPFamily, number>([
        ['IPv6', T0 + 500],
        ['IPv4', T0 + 200],
      ]),
      oldestPendingQueued: new Map<IPFamily, number>([['IPv4', T0 + 1000]]),
      pendingBeforeFirstSync: null,
    };
    const before = decideHealth(state, T0 + 1000 + TIMEOUT_MS - 1, TIMEOUT_MS);
    expect(before.healthy).toBe(true);
    expect(before.lastUpdated).toBe(T0 + 500);
    expect([...before.status.keys()]).toEqual(['IPv4', 'IPv6']);
    const at = decideHealth(state, T0 + 1000 + TIMEOUT_MS, TIMEOUT_MS);
    expect(at).toEqual({
      healthy: false,
      lastUpdated: T0 + 500,
      status: new Map([
        ['IPv4', { lastUpdated: T0 + 200, healthy: false }],
        ['IPv6', { lastUpdated: T0 + 500, healthy: true }],
      ]),
    });
    // Before any family synced: only the first request's age counts.
    const starting = { lastUpdated: new Map(), oldestPendingQueued: new Map(), pendingBeforeFirstSync: T0 };
    expect(decideHealth(starting, T0 + TIMEOUT_MS - 1, TIMEOUT_MS).healthy).toBe(true);
    expect(decideHealth(starting, T0 + TIMEOUT_MS, TIMEOUT_MS)).toEqual({
      healthy: false,
      lastUpdated: null,
      status: new Map(),
    });
  });

  it('without anything queued, an old lastUpdated stays healthy (periodic syncs are not required)', () => {
    const clock = new Clock(T0);
    const health = new ProxyHealth({ healthTimeoutMs: TIMEOUT_MS, now: clock.now });
    health.updated('IPv4');
    clock.ms = T0 + 10 * TIMEOUT_MS;
    expect(health.isHealthy()).toBe(true);
  });

  it("formats times as Go's time.Time JSON does", () => {
    expect(formatGoTime(null)).toBe('0001-01-01T00:00:00Z');
    expect(formatGoTime(Date.parse('2026-11-30T01:02:03Z'))).toBe('2026-11-30T01:02:03Z');
    expect(formatGoTime(Date.parse('2026-11-30T01:02:03.120Z'))).toBe('2026-11-30T01:02:03.12Z');
    expect(formatGoTime(Date.parse('2026-11-30T01:02:03.007Z'))).toBe('2026-11-30T01:02:03.007Z');
  });
});

describe('/healthz and /livez', () => {
  let server: BoundServer | null = null;
  afterEach(async () => {
    await server?.close();
    server = null;
  });

  async function start(currentNode: () => Node | null) {
    const clock = new Clock(T0);
    const health = new ProxyHealth({ healthTimeoutMs: TIMEOUT_MS, now: clock.now });
    const metrics = new ProxyMetrics({ mode: 'iptables', processMetrics: false });
    server = await startHealthServer('127.0.0.1:0', {
      health,
      nodeEligible: () => nodeEligible(currentNode()),
      counter: metrics,
      now: clock.now,
    });
    const get = async (path: string) => {
      const response = await fetch(`http://127.0.0.1:${server?.port}${path}`);
      return { status: response.status, headers: response.headers, body: await response.text() };
    };
    return { clock, health, metrics, get };
  }

  it('healthy and eligible: 200, kube-proxy headers, lastUpdated is now', async () => {
    const { clock, health, get } = await start(() => node(NODE));
    health.updated('IPv4');
    clock.ms = T0 + 5000;
    const answer = await get('/healthz');
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toBe('application/json');
    expect(answer.headers.get('x-content-type-options')).toBe('nosniff');
    expect(answer.body).toBe(
      '{"lastUpdated":"2026-11-30T01:00:05Z","currentTime":"2026-11-30T01:00:05Z","nodeEligible":true,' +
        '"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-11-30T01:00:00Z","healthy":true}}}',
    );
    const livez = await get('/livez');
    expect(livez.status).toBe(200);
    expect(JSON.parse(livez.body)).toEqual({
      lastUpdated: '2026-11-30T01:00:05Z',
      currentTime: '2026-11-30T01:00:05Z',
      healthy: true,
      status: { IPv4: { lastUpdated: '2026-11-30T01:00:00Z', healthy: true } },
    });
  });

  it('stale: 503 on both, with the real lastUpdated; counted by code', async () => {
    const { clock, health, metrics, get } = await start(() => node(NODE));
    health.updated('IPv4');
    health.queuedUpdate(['IPv4'], T0 + 1000);
    clock.ms = T0 + 1000 + TIMEOUT_MS;
    const healthz = await get('/healthz');
    expect(healthz.status).toBe(503);
    expect(JSON.parse(healthz.body)).toEqual({
      lastUpdated: '2026-11-30T01:00:00Z',
      currentTime: '2026-11-30T01:01:01Z',
      nodeEligible: true,
      healthy: false,
      status: { IPv4: { lastUpdated: '2026-11-30T01:00:00Z', healthy: false } },
    });
    expect((await get('/livez')).status).toBe(503);
    health.updated('IPv4');
    expect((await get('/healthz')).status).toBe(200);
    const e = parseExposition(await metrics.render());
    expect(sampleValue(e, 'kubeproxy_proxy_healthz_total', { code: '503' })).toBe(1);
    expect(sampleValue(e, 'kubeproxy_proxy_healthz_total', { code: '200' })).toBe(1);
    expect(sampleValue(e, 'kubeproxy_proxy_livez_total', { code: '503' })).toBe(1);
  });

  it.each<[string, Node | null]>([
    ['missing', null],
    ['being deleted', node(NODE, { deletionTimestamp: '2026-11-30T00:59:00Z' })],
    [
      'tainted by the cluster autoscaler',
      node(NODE, {
        taints: [{ key: 'ToBeDeletedByClusterAutoscaler', value: '1700000000', effect: 'NoSchedule' }],
      }),
    ],
  ])('a node %s is not eligible: /healthz 503, /livez 200', async (_, current) => {
    const { health, get } = await start(() => current);
    health.updated('IPv4');
    const healthz = await get('/healthz');
    expect(healthz.status).toBe(503);
    expect(JSON.parse(healthz.body)).toMatchObject({ nodeEligible: false, healthy: true });
    const livez = await get('/livez');
    expect(livez.status).toBe(200);
    expect(JSON.parse(livez.body)).not.toHaveProperty('nodeEligible');
  });

  it('other paths are 404', async () => {
    const { get } = await start(() => node(NODE));
    expect((await get('/metrics')).status).toBe(404);
  });
});

// ---- healthCheckNodePort servers ----

const ready = { nodeName: NODE, conditions: { ready: true, serving: true, terminating: false } };
const terminating = { nodeName: NODE, conditions: { ready: false, serving: true, terminating: true } };
const remote = { nodeName: 'other', conditions: { ready: true, serving: true, terminating: false } };

function lbLocal(name: string, healthCheckNodePort: number, extra: Partial<Service> = {}): Service {
  return service('ns', name, {
    type: 'LoadBalancer',
    clusterIP: '10.96.0.50',
    externalTrafficPolicy: 'Local',
    healthCheckNodePort,
    ports: [
      { name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 },
      { name: 'https', protocol: 'TCP', port: 443, nodePort: 30443 },
    ],
    loadBalancerIngress: [{ ip: '192.168.80.10', hostname: '', ipMode: 'VIP' }],
    ...extra,
  });
}

const lbPorts: EndpointSlice['ports'] = [
  { name: 'http', port: 8080, protocol: 'TCP' },
  { name: 'https', port: 8443, protocol: 'TCP' },
];

describe('which Services get a healthCheckNodePort server (pure)', () => {
  it('LoadBalancer + eTP=Local only; local ready endpoints counted once per ip:port over all ports', () => {
    const d = decisions(
      [
        lbLocal('lb', 32001),
        // eTP=Cluster: kube-proxy ignores a stray healthCheckNodePort.
        lbLocal('cluster', 32002, { externalTrafficPolicy: 'Cluster' }),
      ],
      [
        slice(
          'ns',
          'lb',
          'lb-1',
          [
            endpoint('10.244.1.2', ready),
            endpoint('10.244.1.3', terminating),
            endpoint('10.244.2.2', remote),
          ],
          lbPorts,
        ),
        // The same pod listed again in a second slice is not counted twice.
        slice('ns', 'lb', 'lb-2', [endpoint('10.244.1.2', ready)], lbPorts),
      ],
    );
    // 10.244.1.2 serves two ports: kube-proxy counts ip:port strings, so 2.
    expect(healthCheckServices(d)).toEqual([{ namespace: 'ns', name: 'lb', port: 32001, localEndpoints: 2 }]);
    expect(healthCheckAddresses(d)).toEqual(['127.0.0.1']);
  });

  it('listens on every address when nodePortAddresses matches all', () => {
    const d = decide(
      { services: new Map(), endpointSlices: new Map(), node: node(NODE), serviceCIDRs: new Map() },
      nodeEnv({ nodeName: NODE }),
      { ...brain, nodePortAddresses: [] },
      { families: ['IPv4'] },
    );
    expect(healthCheckAddresses(d)).toBeNull();
  });

  it("the body is kube-proxy's tab-indented JSON without a trailing newline", () => {
    expect(serviceHealthBody('ns', 'lb', 2, true)).toBe(
      '{\n\t"service": {\n\t\t"namespace": "ns",\n\t\t"name": "lb"\n\t},\n\t"localEndpoints": 2,\n\t"serviceProxyHealthy": true\n}',
    );
  });
});

async function probe(port: number, path = '/') {
  const response = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: response.status, headers: response.headers, body: await response.text() };
}

describe('healthCheckNodePort servers', () => {
  let servers: ServiceHealthServers | null = null;
  afterEach(async () => {
    await servers?.close();
    servers = null;
  });

  it('answer 200 with local endpoints and 503 without, and follow the Services sync by sync', async () => {
    let proxyHealthy = true;
    servers = new ServiceHealthServers({ proxyHealthy: () => proxyHealthy, log: silentLogger });
    const observer = servers.syncObserver();
    const [portA, portB, portA2] = [await freePort(), await freePort(), await freePort()];

    observer.synced?.(
      report(
        decisions(
          [lbLocal('a', portA), lbLocal('b', portB)],
          [slice('ns', 'a', 'a-1', [endpoint('10.244.1.2', ready)], lbPorts)],
        ),
      ),
    );
    await servers.settled();
    expect(servers.listening().map((s) => [s.name, s.port])).toEqual([
      ['a', portA],
      ['b', portB],
    ]);

    const a = await probe(portA, '/any/path?x=1');
    expect(a.status).toBe(200);
    expect(a.headers.get('content-type')).toBe('application/json');
    expect(a.headers.get('x-content-type-options')).toBe('nosniff');
    expect(a.headers.get('x-load-balancing-endpoint-weight')).toBe('2');
    expect(a.body).toBe(serviceHealthBody('ns', 'a', 2, true));
    expect(a.body.endsWith('}')).toBe(true);

    const b = await probe(portB);
    expect(b.status).toBe(503);
    expect(b.headers.get('x-load-balancing-endpoint-weight')).toBe('0');
    expect(JSON.parse(b.body)).toEqual({
      service: { namespace: 'ns', name: 'b' },
      localEndpoints: 0,
      serviceProxyHealthy: true,
    });

    // The proxy turning unhealthy fails every server, endpoints or not.
    proxyHealthy = false;
    const unhealthy = await probe(portA);
    expect(unhealthy.status).toBe(503);
    expect(JSON.parse(unhealthy.body)).toMatchObject({ localEndpoints: 2, serviceProxyHealthy: false });
    proxyHealthy = true;

    // Next sync: a loses its local endpoint (now terminating), b is gone, a moves to another port.
    observer.synced?.(
      report(
        decisions(
          [lbLocal('a', portA2)],
          [slice('ns', 'a', 'a-1', [endpoint('10.244.1.2', terminating)], lbPorts)],
        ),
      ),
    );
    await servers.settled();
    expect(servers.listening().map((s) => [s.name, s.port, s.localEndpoints])).toEqual([['a', portA2, 0]]);
    await expect(probe(portB)).rejects.toThrow();
    await expect(probe(portA)).rejects.toThrow();
    expect((await probe(portA2)).status).toBe(503);

    // The endpoint is ready again: same server, now 200.
    observer.synced?.(
      report(
        decisions(
          [lbLocal('a', portA2)],
          [slice('ns', 'a', 'a-1', [endpoint('10.244.1.2', ready)], lbPorts)],
        ),
      ),
    );
    await servers.settled();
    expect((await probe(portA2)).status).toBe(200);

    observer.synced?.(report(decisions([], [])));
    await servers.settled();
    expect(servers.listening()).toEqual([]);
    await expect(probe(portA2)).rejects.toThrow();
  });

  it('a port in use is retried on the next sync', async () => {
    servers = new ServiceHealthServers({ proxyHealthy: () => true, log: silentLogger });
    const port = await freePort();
    const squatter = createServer();
    await new Promise<void>((resolve) => squatter.listen({ host: '127.0.0.1', port }, resolve));
    const d = decisions(
      [lbLocal('a', port)],
      [slice('ns', 'a', 'a-1', [endpoint('10.244.1.2', ready)], lbPorts)],
    );
    try {
      servers.syncObserver().synced?.(report(d));
      await servers.settled();
      expect(servers.listening()).toEqual([]);
    } finally {
      await new Promise<void>((resolve) => squatter.close(() => resolve()));
    }
    servers.syncObserver().synced?.(report(d));
    await servers.settled();
    expect(servers.listening().map((s) => s.port)).toEqual([port]);
    expect((await probe(port)).status).toBe(200);
  });
});
