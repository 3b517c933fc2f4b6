import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { type Logger, pino } from 'pino';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { SourceEvent } from '../../src/model/events.js';
import { parseEvent } from '../../src/model/parse.js';
import { KUBE_PROXY_LABEL_SELECTOR } from '../../src/model/types.js';
import { type ApiCredentials, tlsAndAuthOf } from '../../src/sources/credentials.js';
import { backoffDelayMs, RequestRateLimiter } from '../../src/sources/flow-control.js';
import { KubeSource, loadCredentials } from '../../src/sources/kube.js';
import { diffRelist, goneObject, isExpired, parseWatchLine } from '../../src/sources/reflector.js';
import { FakeApiServer, type FakeObject } from '../support/fake-apiserver.js';

const NODE = 'node-a';
const TEST_BACKOFF = { initialMs: 50, maxMs: 400 };
const WAIT = { timeout: 5000, interval: 20 };

const service = (name: string, labels: Record<string, string> = {}, port = 80): FakeObject => ({
  metadata: { name, namespace: 'default', labels },
  spec: { type: 'ClusterIP', clusterIP: '10.96.0.10', ports: [{ port, protocol: 'TCP' }] },
});
const slice = (name: string, serviceName: string, labels: Record<string, string> = {}): FakeObject => ({
  metadata: { name, namespace: 'default', labels: { 'kubernetes.io/service-name': serviceName, ...labels } },
  addressType: 'IPv4',
  ports: [{ name: '', port: 8080, protocol: 'TCP' }],
  endpoints: [{ addresses: ['10.0.0.1'], conditions: { ready: true } }],
});
const node = (name: string, zone = 'zone-1'): FakeObject => ({
  metadata: { name, labels: { 'topology.kubernetes.io/zone': zone } },
  spec: { podCIDRs: ['10.244.0.0/24'] },
});
const serviceCIDR = (name: string, cidrs: string[], labels: Record<string, string> = {}): FakeObject => ({
  metadata: { name, labels },
  spec: { cidrs },
});

/** "upsert Service default/web": what a test compares. */
function describeEvent(event: SourceEvent): string {
  const meta = (event.object as FakeObject).metadata;
  return `${event.type} ${event.kind} ${meta.namespace ? `${meta.namespace}/` : ''}${meta.name}`;
}

class Collector {
  readonly batches: SourceEvent[][] = [];
  readonly onEvent = (events: SourceEvent[]) => {
    this.batches.push(events);
  };
  get events(): string[] {
    return this.batches.flat().map(describeEvent);
  }
  /** Events delivered after the first `from` ones. */
  since(from: number): string[] {
    return this.events.slice(from);
  }
}

/** A pino logger whose JSON lines the test can read. */
function capturingLogger(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'debug' }, { write: (line: string) => lines.push(JSON.parse(line)) });
  return { logger, lines };
}

function sourceFor(
  server: FakeApiServer,
  options: { nodeName?: string; logger?: Logger; master?: string; notServedRetryMs?: number } = {},
) {
  return new KubeSource({
    clientConnection: {
      kubeconfig: '',
      qps: 100,
      burst: 100,
      contentType: 'application/vnd.kubernetes.protobuf',
    },
    master: options.master ?? server.url,
    nodeName: options.nodeName ?? NODE,
    backoff: TEST_BACKOFF,
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.notServedRetryMs ? { notServedRetryMs: options.notServedRetryMs } : {}),
  });
}

function requestsFor(server: FakeApiServer, pathname: string, watch: boolean) {
  return server.requests.filter(
    (request) => request.path === pathname && (request.query.get('watch') === 'true') === watch,
  );
}

describe('kube source against a fake API server', () => {
  let server: FakeApiServer;
  let source: KubeSource | null;

  beforeEach(async () => {
    server = new FakeApiServer();
    await server.start();
    source = null;
  });

  afterEach(async () => {
    await source?.stop();
    await server.stop();
  });

  it('delivers the initial lists of services, endpoint slices, this node and the service CIDRs before start() resolves', async () => {
    server.create('services', service('web'));
    server.create('services', service('db', {}, 5432));
    server.create('endpointslices', slice('web-abc', 'web'));
    server.create('nodes', node(NODE));
    server.create('nodes', node('node-b'));
    // Every ServiceCIDR, whatever its labels: kube-proxy's informer has no selector.
    server.create('servicecidrs', serviceCIDR('kubernetes', ['10.96.0.0/16', 'fd00:96::/112']));
    server.create(
      'servicecidrs',
      serviceCIDR('extra', ['10.97.0.0/16'], { 'service.kubernetes.io/service-proxy-name': 'x' }),
    );
    const collector = new Collector();
    source = sourceFor(server);

    await source.start(collector.onEvent);

    expect(collector.events.sort()).toEqual([
      'upsert EndpointSlice default/web-abc',
      'upsert Node node-a',
      'upsert Service default/db',
      'upsert Service default/web',
      'upsert ServiceCIDR extra',
      'upsert ServiceCIDR kubernetes',
    ]);
    expect(collector.batches.flat().every((event) => event.origin === 'api')).toBe(true);
    // What the API serves (list items carry no kind) is what model/parse.ts accepts.
    expect(collector.batches.flat().every((event) => parseEvent(event).ok)).toBe(true);
    for (const pathname of ['/api/v1/services', '/apis/discovery.k8s.io/v1/endpointslices']) {
      const [list] = requestsFor(server, pathname, false);
      expect(list?.query.get('labelSelector')).toBe(KUBE_PROXY_LABEL_SELECTOR);
    }
    const [nodeList] = requestsFor(server, '/api/v1/nodes', false);
    expect(nodeList?.query.get('fieldSelector')).toBe(`metadata.name=${NODE}`);
    const [cidrList] = requestsFor(server, '/apis/networking.k8s.io/v1/servicecidrs', false);
    expect([...(cidrList?.query.keys() ?? [])]).toEqual([]);
    // Protobuf is asked for, as the configuration says, with JSON as the fallback this server takes.
    expect(
      server.requests.every(
        (request) => request.headers.accept === 'application/vnd.kubernetes.protobuf, application/json',
      ),
    ).toBe(true);

    await vi.waitFor(() => expect(server.watchCount).toBe(4), WAIT);
    for (const watch of server.requests.filter((request) => request.query.get('watch') === 'true')) {
      expect(watch.query.get('allowWatchBookmarks')).toBe('true');
      expect(watch.query.get('resourceVersion')).toMatch(/^\d+$/);
      expect(Number(watch.query.get('timeoutSeconds'))).toBeGreaterThanOrEqual(300);
    }
  });

  it('resolves start() when this node does not exist, and picks the node up when it appears', async () => {
    server.create('services', service('web'));
    server.create('nodes', node('node-b'));
    const collector = new Collector();
    source = sourceFor(server);

    await source.start(collector.onEvent);
    expect(collector.events).toEqual(['upsert Service default/web']);

    server.update('nodes', node('node-b', 'zone-2'));
    server.create('nodes', node(NODE));
    server.update('nodes', node(NODE, 'zone-2'));
    await vi.waitFor(
      () => expect(collector.since(1)).toEqual(['upsert Node node-a', 'upsert Node node-a']),
      WAIT,
    );
    const last = collector.batches.flat().at(-1)?.object as FakeObject;
    expect(last.metadata.labels).toEqual({ 'topology.kubernetes.io/zone': 'zone-2' });
  });

  it('does not see services and slices claimed by another proxy or belonging to headless services', async () => {
    server.create('services', service('web'));
    server.create(
      'services',
      service('other-proxy', { 'service.kubernetes.io/service-proxy-name': 'cilium' }),
    );
    server.create('endpointslices', slice('web-abc', 'web'));
    server.create(
      'endpointslices',
      slice('headless-abc', 'headless', { 'service.kubernetes.io/headless': '' }),
    );
    const collector = new Collector();
    source = sourceFor(server);
    await source.start(collector.onEvent);
    expect(collector.events.sort()).toEqual([
      'upsert EndpointSlice default/web-abc',
      'upsert Service default/web',
    ]);

    server.create('services', service('later-claimed', { 'service.kubernetes.io/service-proxy-name': 'x' }));
    // Claiming a service we already serve makes it leave the selection: the watch reports a delete.
    server.update('services', service('web', { 'service.kubernetes.io/service-proxy-name': 'x' }));
    server.create('services', service('visible'));
    await vi.waitFor(
      () =>
        expect(collector.since(2)).toEqual(['delete Service default/web', 'upsert Service default/visible']),
      WAIT,
    );
  });

  it('streams adds, updates and deletes as they happen', async () => {
    server.create('nodes', node(NODE));
    const collector = new Collector();
    source = sourceFor(server);
    await source.start(collector.onEvent);
    expect(collector.events).toEqual(['upsert Node node-a']);

    server.create('services', service('web'));
    server.create('endpointslices', slice('web-abc', 'web'));
    server.update('services', service('web', {}, 8080));
    server.update('nodes', node(NODE, 'zone-9'));
    server.delete('endpointslices', 'web-abc', 'default');
    server.delete('services', 'web', 'default');
    server.delete('nodes', NODE);

    await vi.waitFor(() => expect(collector.events).toHaveLength(8), WAIT);
    const byKind = (kind: string) => collector.since(1).filter((event) => event.includes(` ${kind} `));
    expect(byKind('Service')).toEqual([
      'upsert Service default/web',
      'upsert Service default/web',
      'delete Service default/web',
    ]);
    expect(byKind('EndpointSlice')).toEqual([
      'upsert EndpointSlice default/web-abc',
      'delete EndpointSlice default/web-abc',
    ]);
    expect(byKind('Node')).toEqual(['upsert Node node-a', 'delete Node node-a']);
    const updated = collector.batches.flat().find((event) => {
      const spec = (event.object as { spec?: { ports?: { port: number }[] } }).spec;
      return event.kind === 'Service' && spec?.ports?.[0]?.port === 8080;
    });
    expect(updated?.type).toBe('upsert');
  });

  it('streams ServiceCIDR adds, updates and deletes', async () => {
    const collector = new Collector();
    source = sourceFor(server);
    await source.start(collector.onEvent);
    expect(collector.events).toEqual([]);
    server.create('servicecidrs', serviceCIDR('kubernetes', ['10.96.0.0/16']));
    server.update('servicecidrs', serviceCIDR('kubernetes', ['10.96.0.0/16', 'fd00:96::/112']));
    server.delete('servicecidrs', 'kubernetes');
    await vi.waitFor(
      () =>
        expect(collector.events).toEqual([
          'upsert ServiceCIDR kubernetes',
          'upsert ServiceCIDR kubernetes',
          'delete ServiceCIDR kubernetes',
        ]),
      WAIT,
    );
    const updated = collector.batches.flat()[1]?.object as { spec: { cidrs: string[] } };
    expect(updated.spec.cidrs).toEqual(['10.96.0.0/16', 'fd00:96::/112']);
  });

  it('an API server without ServiceCIDRs (404) does not hold the initial sync back: none, logged once, asked again rarely, used once served', async () => {
    server.notServed.add('servicecidrs');
    server.create('services', service('web'));
    const { logger, lines } = capturingLogger();
    const collector = new Collector();
    source = sourceFor(server, { logger, notServedRetryMs: 100 });
    await source.start(collector.onEvent);
    expect(collector.events).toEqual(['upsert Service default/web']);
    const cidrLists = () => requestsFor(server, '/apis/networking.k8s.io/v1/servicecidrs', false).length;
    await vi.waitFor(() => expect(cidrLists()).toBeGreaterThanOrEqual(3), WAIT);
    // No watch of what is not served, no backoff warnings: one line says so.
    expect(requestsFor(server, '/apis/networking.k8s.io/v1/servicecidrs', true)).toEqual([]);
    const notServed = lines.filter((line) => String(line.msg).includes('does not serve'));
    expect(notServed).toHaveLength(1);
    expect(notServed[0]).toMatchObject({ kind: 'ServiceCIDR', level: 30 });
    expect(lines.filter((line) => line.kind === 'ServiceCIDR' && Number(line.level) >= 40)).toEqual([]);

    // The API server is upgraded: the next list finds the resource, and its watch streams changes.
    server.notServed.delete('servicecidrs');
    server.create('servicecidrs', serviceCIDR('kubernetes', ['10.96.0.0/16']));
    await vi.waitFor(() => expect(collector.since(1)).toEqual(['upsert ServiceCIDR kubernetes']), WAIT);
    expect(lines.some((line) => String(line.msg).includes('can be listed now'))).toBe(true);
    await vi.waitFor(() => expect(server.watchCount).toBe(4), WAIT);
    server.delete('servicecidrs', 'kubernetes');
    await vi.waitFor(() => expect(collector.since(2)).toEqual(['delete ServiceCIDR kubernetes']), WAIT);

    // And downgraded again: what was known is gone.
    server.create('servicecidrs', serviceCIDR('again', ['10.98.0.0/16']));
    await vi.waitFor(() => expect(collector.since(3)).toEqual(['upsert ServiceCIDR again']), WAIT);
    server.notServed.add('servicecidrs');
    server.dropWatches();
    await vi.waitFor(() => expect(collector.since(4)).toEqual(['delete ServiceCIDR again']), WAIT);
  });

  it('RBAC without ServiceCIDRs (403) does not hold the initial sync back either: one warning, what is known kept', async () => {
    server.create('servicecidrs', serviceCIDR('kubernetes', ['10.96.0.0/16']));
    server.forbidden.add('servicecidrs');
    const { logger, lines } = capturingLogger();
    const collector = new Collector();
    source = sourceFor(server, { logger, notServedRetryMs: 100 });
    await source.start(collector.onEvent);
    expect(collector.events).toEqual([]);
    await vi.waitFor(
      () =>
        expect(
          requestsFor(server, '/apis/networking.k8s.io/v1/servicecidrs', false).length,
        ).toBeGreaterThanOrEqual(3),
      WAIT,
    );
    const warnings = lines.filter((line) => line.kind === 'ServiceCIDR' && Number(line.level) >= 40);
    expect(warnings.map((line) => line.msg)).toEqual([
      'not allowed to list this resource (403): going on with what is known; grant list and watch on it (asking again later)',
    ]);
    server.forbidden.delete('servicecidrs');
    await vi.waitFor(() => expect(collector.events).toEqual(['upsert ServiceCIDR kubernetes']), WAIT);
    // Forbidden again: nothing is deleted on that account.
    server.forbidden.add('servicecidrs');
    server.dropWatches();
    const forbidden = () => lines.filter((line) => String(line.msg).startsWith('not allowed to list'));
    await vi.waitFor(() => expect(forbidden()).toHaveLength(2), WAIT);
    expect(collector.events).toEqual(['upsert ServiceCIDR kubernetes']);
  });

  it('takes the resourceVersion from bookmarks without producing events', async () => {
    server.create('services', service('web'));
    const collector = new Collector();
    source = sourceFor(server);
    await source.start(collector.onEvent);
    await vi.waitFor(() => expect(server.watchCount).toBe(4), WAIT);

    // Changes nobody selects move the global resourceVersion past what the watches have seen.
    server.create('nodes', node('node-b'));
    for (let i = 0; i < 5; i++) server.update('nodes', node('node-b', `zone-${i}`));
    server.bookmark();
    // Anything older than the bookmark is now gone: only a client that took the bookmark resumes without a relist.
    server.compact();
    const bookmarked = server.currentResourceVersion;
    const listsBefore = server.requests.filter((request) => request.query.get('watch') !== 'true').length;
    const watchesBefore = server.requests.length - listsBefore;
    server.dropWatches();

    await vi.waitFor(() => expect(server.watchCount).toBe(4), WAIT);
    const rewatches = server.requests
      .filter((request) => request.query.get('watch') === 'true')
      .slice(watchesBefore);
    expect(rewatches.map((request) => request.query.get('resourceVersion'))).toEqual([
      bookmarked,
      bookmarked,
      bookmarked,
      bookmarked,
    ]);
    expect(server.requests.filter((request) => request.query.get('watch') !== 'true')).toHaveLength(
      listsBefore,
    );
    expect(collector.events).toEqual(['upsert Service default/web']);
  });

  for (const expiredAs of ['event', 'http'] as const) {
    it(`relists after 410 Gone (${expiredAs}) and delivers only what changed while away`, async () => {
      server.expiredAs = expiredAs;
      for (const name of ['keep', 'gone', 'changed']) server.create('services', service(name));
      server.create('endpointslices', slice('gone-abc', 'gone'));
      const collector = new Collector();
      source = sourceFor(server);
      await source.start(collector.onEvent);
      expect(collector.events).toHaveLength(4);

      await server.stop();
      server.delete('services', 'gone', 'default');
      server.delete('endpointslices', 'gone-abc', 'default');
      server.update('services', service('changed', {}, 9090));
      server.create('services', service('new'));
      server.compact();
      const listsBefore = requestsFor(server, '/api/v1/services', false).length;
      await server.start();

      await vi.waitFor(() => expect(collector.since(4)).toHaveLength(4), WAIT);
      expect(collector.since(4).sort()).toEqual([
        'delete EndpointSlice default/gone-abc',
        'delete Service default/gone',
        'upsert Service default/changed',
        'upsert Service default/new',
      ]);
      expect(requestsFor(server, '/api/v1/services', false).length).toBe(listsBefore + 1);
      // Once relisted, the watch continues from the new list.
      server.delete('services', 'keep', 'default');
      await vi.waitFor(() => expect(collector.since(8)).toEqual(['delete Service default/keep']), WAIT);
    });
  }

  it('survives an API server restart: backs off, keeps its state, resumes the watch and catches up', async () => {
    server.create('services', service('web'));
    server.create('nodes', node(NODE));
    const { logger, lines } = capturingLogger();
    const collector = new Collector();
    source = sourceFor(server, { logger });
    await source.start(collector.onEvent);
    await vi.waitFor(() => expect(server.watchCount).toBe(4), WAIT);
    const listsBefore = server.requests.filter((request) => request.query.get('watch') !== 'true').length;

    const outageStarted = performance.now();
    await server.stop();
    const retries = () =>
      lines.filter((line) => line.msg === 'list/watch failed; keeping the last known state and retrying');
    await vi.waitFor(() => expect(retries().length).toBeGreaterThanOrEqual(12), WAIT);
    server.create('services', service('added-during-outage'));
    server.update('nodes', node(NODE, 'zone-7'));
    // Nothing is deleted (or delivered at all) just because the server is gone.
    expect(collector.events.sort()).toEqual(['upsert Node node-a', 'upsert Service default/web']);
    await server.start();
    const outageMs = performance.now() - outageStarted;

    await vi.waitFor(
      () =>
        expect(collector.since(2).sort()).toEqual([
          'upsert Node node-a',
          'upsert Service default/added-during-outage',
        ]),
      WAIT,
    );
    // The watch resumed from the last resourceVersion: no relist was needed.
    expect(server.requests.filter((request) => request.query.get('watch') !== 'true')).toHaveLength(
      listsBefore,
    );

    // Per resource, the delays grow from the initial value towards the cap, within the jitter bounds.
    const serviceDelays = retries()
      .filter((line) => line.kind === 'Service')
      .map((line) => ({ attempt: line.attempt as number, delayMs: line.delayMs as number }));
    expect(serviceDelays.length).toBeGreaterThanOrEqual(3);
    for (const { attempt, delayMs } of serviceDelays) {
      const ceiling = Math.min(TEST_BACKOFF.maxMs, TEST_BACKOFF.initialMs * 2 ** (attempt - 1));
      expect(delayMs).toBeGreaterThanOrEqual(ceiling / 2);
      expect(delayMs).toBeLessThanOrEqual(ceiling);
    }
    expect(lines.some((line) => line.msg === 'watching again')).toBe(true);
    expect(outageMs).toBeLessThan(WAIT.timeout);
  });

  it('stop() closes every connection and timer, also while backing off', async () => {
    // Handles closed by the previous test's teardown may still be on their way out.
    await new Promise((resolve) => setTimeout(resolve, 100));
    const baseline = handleCounts();
    server.create('services', service('web'));
    source = sourceFor(server);
    await source.start(() => {});
    await vi.waitFor(() => expect(server.watchCount).toBe(4), WAIT);
    await source.stop();
    await vi.waitFor(() => expect(server.watchCount).toBe(0), WAIT);
    await expectHandlesBackTo(baseline);

    const { logger, lines } = capturingLogger();
    source = sourceFor(server, { logger });
    await source.start(() => {});
    await server.stop();
    await vi.waitFor(() => expect(lines.some((line) => line.attempt === 2)).toBe(true), WAIT);
    await source.stop();
    await server.start();
    await expectHandlesBackTo(baseline);
  });

  it('start() rejects when stopped before the initial lists complete', async () => {
    await server.stop();
    source = sourceFor(server);
    const started = source.start(() => {});
    await new Promise((resolve) => setTimeout(resolve, 100));
    await source.stop();
    await expect(started).rejects.toThrow(/stopped before its initial lists/);
    source = null;
    await server.start();
  });

  it('uses the kubeconfig file credentials, with --master overriding its server', async () => {
    server.create('services', service('web'));
    const directory = mkdtempSync(path.join(tmpdir(), `kbp-kubeconfig-${process.pid}-`));
    try {
      const kubeconfig = path.join(directory, 'kubeconfig');
      const writeKubeconfig = (serverUrl: string) =>
        writeFileSync(
          kubeconfig,
          [
            'apiVersion: v1',
            'kind: Config',
            'clusters: [{name: fake, cluster: {server: "SERVER"}}]'.replace('SERVER', serverUrl),
            'users: [{name: tester, user: {token: secret-token}}]',
            'contexts: [{name: test, context: {cluster: fake, user: tester}}]',
            'current-context: test',
          ].join('\n'),
        );
      const connect = async (master: string) => {
        const collector = new Collector();
        const fromFile = new KubeSource({
          clientConnection: { kubeconfig, qps: 5, burst: 10, contentType: 'application/json' },
          master,
          nodeName: NODE,
          backoff: TEST_BACKOFF,
        });
        try {
          await fromFile.start(collector.onEvent);
        } finally {
          await fromFile.stop();
        }
        return collector.events;
      };

      writeKubeconfig(server.url);
      expect(await connect('')).toEqual(['upsert Service default/web']);
      // Port 9 (discard) on loopback refuses connections: only the --master override reaches the server.
      writeKubeconfig('http://127.0.0.1:9');
      expect(await connect(server.url)).toEqual(['upsert Service default/web']);
      expect(
        server.requests.every((request) => request.headers.authorization === 'Bearer secret-token'),
      ).toBe(true);
      expect(server.requests.every((request) => request.headers['user-agent'] === 'kube-bpf-proxy')).toBe(
        true,
      );
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });
});

/** Open sockets, servers and timers of this process, by type. */
function handleCounts(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const type of process.getActiveResourcesInfo()) counts[type] = (counts[type] ?? 0) + 1;
  return counts;
}

/** Polls without a pending timer of its own at the moment it counts (vi.waitFor keeps two). */
async function expectHandlesBackTo(baseline: Record<string, number>): Promise<void> {
  for (let attempt = 0; attempt < 100 && !isDeepStrictEqual(handleCounts(), baseline); attempt++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  expect(handleCounts()).toEqual(baseline);
}

describe('kube source configuration', () => {
  const folder = mkdtempSync(path.join(tmpdir(), `kbp-credentials-${process.pid}-`));
  afterAll(() => rmSync(folder, { recursive: true, force: true }));
  const kubeconfigWith = (cluster: object, user: object) => {
    const file = path.join(folder, `kubeconfig-${Math.random().toString(36).slice(2)}`);
    writeFileSync(
      file,
      JSON.stringify({
        clusters: [{ name: 'c', cluster }],
        users: [{ name: 'u', user }],
        contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
        'current-context': 'x',
      }),
    );
    return file;
  };
  const requestOptions = async (credentials: ApiCredentials) => {
    const options: https.RequestOptions = {};
    await credentials.applyToHTTPSOptions(options);
    return options;
  };

  it('needs a kubeconfig, --master or a service account', async () => {
    await expect(loadCredentials('', '', null)).rejects.toThrow(/no API server/);
  });

  it('--master alone talks to that server, plain http included, verifying TLS', async () => {
    const plain = await loadCredentials('', 'http://127.0.0.1:8080', null);
    expect(plain.server).toBe('http://127.0.0.1:8080');
    expect(await requestOptions(plain)).toEqual({});
    const secure = await requestOptions(await loadCredentials('', 'https://10.0.0.1:6443', null));
    expect(secure.agent).toBeInstanceOf(https.Agent);
    expect((secure.agent as https.Agent).options.rejectUnauthorized).toBe(true);
  });

  it("reads a kubeconfig's CA, client certificate and key, files relative to its folder", async () => {
    writeFileSync(path.join(folder, 'ca.pem'), 'CA');
    const file = kubeconfigWith(
      { server: 'https://api:6443', 'certificate-authority': 'ca.pem', 'tls-server-name': 'kubernetes' },
      {
        'client-certificate-data': Buffer.from('CERT').toString('base64'),
        'client-key-data': Buffer.from('KEY').toString('base64'),
      },
    );
    const credentials = await loadCredentials(file, '', null);
    expect(credentials.server).toBe('https://api:6443');
    const agent = (await requestOptions(credentials)).agent as https.Agent;
    expect(agent.options).toMatchObject({ servername: 'kubernetes', rejectUnauthorized: true });
    expect(String(agent.options.ca)).toBe('CA');
    expect([String(agent.options.cert), String(agent.options.key)]).toEqual(['CERT', 'KEY']);
  });

  it('reads a token file again for each request, as a projected token rotates', async () => {
    const tokenFile = path.join(folder, 'token');
    writeFileSync(tokenFile, 'first\n');
    const credentials = await loadCredentials(
      kubeconfigWith({ server: 'https://api:6443', 'insecure-skip-tls-verify': true }, { tokenFile }),
      '',
      null,
    );
    const options = await requestOptions(credentials);
    expect(options.headers).toEqual({ Authorization: 'Bearer first' });
    expect((options.agent as https.Agent).options.rejectUnauthorized).toBe(false);
    writeFileSync(tokenFile, 'second');
    expect((await requestOptions(credentials)).headers).toEqual({ Authorization: 'Bearer second' });
  });

  it("takes a pod's service account: the Service's address, its CA, its rotating token", async () => {
    const tokenFile = path.join(folder, 'sa-token');
    const caFile = path.join(folder, 'sa-ca.crt');
    writeFileSync(tokenFile, 'sa');
    writeFileSync(caFile, 'SA-CA');
    const files = { host: 'fd00:96::1', port: '443', tokenFile, caFile };
    const credentials = await loadCredentials('', '', files);
    expect(credentials.server).toBe('https://[fd00:96::1]:443');
    const options = await requestOptions(credentials);
    expect(options.headers).toEqual({ Authorization: 'Bearer sa' });
    expect(String((options.agent as https.Agent).options.ca)).toBe('SA-CA');
    expect((await loadCredentials('', 'https://10.0.0.1:6443', files)).server).toBe('https://10.0.0.1:6443');
  });

  it('leaves exec plugins, auth providers and unknown fields to client-node', () => {
    const cluster = { server: 'https://api:6443' };
    const parsed = (user: object, extra: object = {}) =>
      JSON.parse(readFileSync(kubeconfigWith({ ...cluster, ...extra }, user), 'utf8')) as unknown;
    expect(tlsAndAuthOf(parsed({ token: 't' }), '/k')).toMatchObject({
      server: 'https://api:6443',
      token: 't',
    });
    expect(tlsAndAuthOf(parsed({ exec: { command: 'aws' } }), '/k')).toBeNull();
    expect(tlsAndAuthOf(parsed({ 'auth-provider': { name: 'oidc' } }), '/k')).toBeNull();
    expect(tlsAndAuthOf(parsed({ as: 'someone' }), '/k')).toBeNull();
    expect(tlsAndAuthOf(parsed({}, { 'proxy-url': 'http://proxy:3128' }), '/k')).toBeNull();
    expect(tlsAndAuthOf({ clusters: [], 'current-context': 'x' }, '/k')).toBeNull();
  });

  it('reads a kubeconfig with an exec plugin through client-node, --master overriding its server', async () => {
    const file = kubeconfigWith(
      { server: 'https://api:6443' },
      { exec: { command: 'true', apiVersion: 'v1' } },
    );
    expect((await loadCredentials(file, '', null)).server).toBe('https://api:6443');
    expect((await loadCredentials(file, 'http://127.0.0.1:8080', null)).server).toBe('http://127.0.0.1:8080');
  });
});

describe('retry pacing', () => {
  it('doubles the backoff ceiling up to the cap and jitters within [ceiling/2, ceiling]', () => {
    const policy = { initialMs: 200, maxMs: 30_000 };
    expect([0, 1, 2, 3].map((attempt) => backoffDelayMs(policy, attempt, 0.999999))).toEqual([
      200, 400, 800, 1600,
    ]);
    expect([0, 1, 2, 3].map((attempt) => backoffDelayMs(policy, attempt, 0))).toEqual([100, 200, 400, 800]);
    expect(backoffDelayMs(policy, 10, 0.999999)).toBe(30_000);
    expect(backoffDelayMs(policy, 1000, 0)).toBe(15_000);
  });

  it('rate-limits requests with a token bucket of `burst` tokens refilled at `qps`', () => {
    let now = 0;
    const limiter = new RequestRateLimiter(5, 3, () => now);
    expect([limiter.reserve(), limiter.reserve(), limiter.reserve()]).toEqual([0, 0, 0]);
    expect(limiter.reserve()).toBe(200);
    expect(limiter.reserve()).toBe(400);
    now = 1000; // five tokens refilled, two of them already promised
    expect([limiter.reserve(), limiter.reserve(), limiter.reserve()]).toEqual([0, 0, 0]);
    expect(limiter.reserve()).toBe(200);
    const unlimited = new RequestRateLimiter(0, 0, () => 0);
    expect(Array.from({ length: 100 }, () => unlimited.reserve()).every((wait) => wait === 0)).toBe(true);
  });
});

describe('relist and watch decisions', () => {
  const object = (name: string, resourceVersion: string) => ({
    metadata: { namespace: 'default', name, resourceVersion },
  });

  it('a relist delivers new and changed objects and deletes the missing ones', () => {
    const known = new Map([
      ['default/same', '5'],
      ['default/changed', '6'],
      ['default/gone', '7'],
      ['/cluster-wide', '8'],
    ]);
    const diff = diffRelist(known, [object('same', '5'), object('changed', '9'), object('new', '10')]);
    expect(diff.upserts).toEqual([object('changed', '9'), object('new', '10')]);
    expect(diff.deletedKeys).toEqual(['default/gone', '/cluster-wide']);
    expect([...diff.next]).toEqual([
      ['default/same', '5'],
      ['default/changed', '9'],
      ['default/new', '10'],
    ]);
    // A delete reads only the identity; a cluster-scoped object has no namespace.
    expect(diff.deletedKeys.map(goneObject)).toEqual([
      { metadata: { namespace: 'default', name: 'gone' } },
      { metadata: { namespace: '', name: 'cluster-wide' } },
    ]);
  });

  it('recognises an expired resourceVersion by code, reason or the older message', () => {
    expect(isExpired({ code: 410, reason: 'Expired', message: 'too old resource version: 1 (5)' })).toBe(
      true,
    );
    expect(isExpired({ code: 500, reason: 'Gone' })).toBe(true);
    expect(isExpired({ code: 500, message: 'The resourceVersion for the provided watch is too old.' })).toBe(
      true,
    );
    expect(isExpired({ code: 500, message: 'too old resource version: 3 (9)' })).toBe(true);
    expect(isExpired({ code: 500, reason: 'InternalError', message: 'etcd down' })).toBe(false);
  });

  it('decodes watch lines and rejects anything that is not an event', () => {
    expect(parseWatchLine('{"type":"ADDED","object":{"metadata":{"name":"a"}}}')).toEqual({
      type: 'ADDED',
      object: { metadata: { name: 'a' } },
    });
    expect(parseWatchLine('{"type":"ADDED","obj')).toBeNull();
    expect(parseWatchLine('[1,2]')).toBeNull();
    expect(parseWatchLine('"ADDED"')).toBeNull();
  });
});
