// The benchmark's API server: serves the scenario's Services and EndpointSlices (and no Node,
// no ServiceCIDR) to one agent's list and watch requests, in JSON or protobuf as its Accept header
// asks, and on each SIGUSR2 sends a MODIFIED event of the measured slice with one more endpoint (a
// signal: the lab starts it without stdin, in another network namespace). Only what the agent's
// reflectors ask (collection lists, watches from a resourceVersion); selectors are not evaluated:
// every object of the scenario matches them. Run inside the agent's network namespace:
//   node dist/bench/list-server.js PORT SERVICES ENDPOINTS [--distinct] [--as-stored]
//       [--encoding json|protobuf]
// --as-stored: the objects with what an API server adds to them (scenario.ts asStored).
// It prints "listening" once it accepts connections on 127.0.0.1:PORT; with --encoding, once it has
// encoded the lists in that encoding, so that an agent's cold start does not count the encoding.

import http from 'node:http';
import type { WatchedKind } from '../src/model/events.js';
import { isProtobuf, PROTOBUF_CONTENT_TYPE } from '../src/sources/protobuf.js';
import { listBody, watchEventBytes } from './k8s-wire.js';
import { asStored, changedEndpointIP, endpointSlice, type Scenario, scenarioObjects } from './scenario.js';

type Encoding = 'json' | 'protobuf';

const PATHS: Record<string, WatchedKind> = {
  '/api/v1/services': 'Service',
  '/apis/discovery.k8s.io/v1/endpointslices': 'EndpointSlice',
  '/api/v1/nodes': 'Node',
  '/apis/networking.k8s.io/v1/servicecidrs': 'ServiceCIDR',
};

/** The encoding an Accept header asks for first: protobuf when it leads, else JSON. */
function encodingOf(accept: string | undefined): Encoding {
  return isProtobuf((accept ?? '').split(',')[0]) ? 'protobuf' : 'json';
}

export function startListServer(
  port: number,
  scenario: Scenario,
  distinctEndpoints: boolean,
  encodedAhead?: Encoding,
  stored = false,
): { server: http.Server; change: (k: number) => void } {
  const { services, slices } = scenarioObjects(scenario, { distinctEndpoints });
  const measured = scenario.services - 1;
  const stamped = (object: object, resourceVersion: number) => {
    const o = object as { metadata: object };
    return { ...o, metadata: { ...o.metadata, resourceVersion: String(resourceVersion) } };
  };
  let resourceVersion = 1;
  const served = (kind: 'Service' | 'EndpointSlice', object: object, i: number, resourceVersion: number) =>
    stamped(stored ? asStored(kind, object, i) : object, resourceVersion);
  const objects: Record<WatchedKind, object[]> = {
    Service: services.map((o, i) => served('Service', o, i, 1)),
    EndpointSlice: [...slices, endpointSlice(measured, scenario)].map((o, i) =>
      served('EndpointSlice', o, i, 1),
    ),
    Node: [],
    ServiceCIDR: [],
  };
  /** Each list body once per encoding: the agent lists again only after a lost watch. */
  const bodies = new Map<string, Buffer>();
  const watchers = new Set<{ kind: WatchedKind; encoding: Encoding; response: http.ServerResponse }>();
  const listBodyOf = (kind: WatchedKind, encoding: Encoding): Buffer => {
    const key = `${kind} ${encoding} ${resourceVersion}`;
    let body = bodies.get(key);
    if (!body) {
      body = listBody(kind, objects[kind], String(resourceVersion), encoding);
      bodies.set(key, body);
    }
    return body;
  };
  if (encodedAhead) for (const kind of Object.values(PATHS)) listBodyOf(kind, encodedAhead);

  const server = http.createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://localhost');
    const kind = PATHS[url.pathname];
    if (request.method !== 'GET' || kind === undefined) {
      response.writeHead(404, { 'Content-Type': 'application/json' });
      response.end(JSON.stringify({ kind: 'Status', code: 404, reason: 'NotFound' }));
      return;
    }
    const encoding = encodingOf(request.headers.accept);
    const contentType = encoding === 'protobuf' ? PROTOBUF_CONTENT_TYPE : 'application/json';
    if (url.searchParams.get('watch') === 'true') {
      response.writeHead(200, {
        'Content-Type': encoding === 'protobuf' ? `${contentType};stream=watch` : contentType,
      });
      response.flushHeaders();
      const watcher = { kind, encoding, response };
      watchers.add(watcher);
      response.once('close', () => watchers.delete(watcher));
      return;
    }
    const body = listBodyOf(kind, encoding);
    response.writeHead(200, { 'Content-Type': contentType, 'Content-Length': body.length });
    response.end(body);
  });
  server.listen(port, '127.0.0.1');

  const change = (k: number) => {
    resourceVersion += 1;
    bodies.clear();
    const slice = served(
      'EndpointSlice',
      endpointSlice(measured, scenario, [changedEndpointIP(k)]),
      measured,
      resourceVersion,
    );
    objects.EndpointSlice[objects.EndpointSlice.length - 1] = slice;
    for (const watcher of watchers) {
      if (watcher.kind === 'EndpointSlice')
        watcher.response.write(watchEventBytes('EndpointSlice', 'MODIFIED', slice, watcher.encoding));
    }
  };
  return { server, change };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const encodingAt = args.indexOf('--encoding');
  const encodedAhead = encodingAt >= 0 ? (args.splice(encodingAt, 2)[1] as Encoding) : undefined;
  const [port = '0', services = '1', endpoints = '10'] = args.filter((a) => !a.startsWith('--'));
  const { server, change } = startListServer(
    Number(port),
    { services: Number(services), endpoints: Number(endpoints) },
    args.includes('--distinct'),
    encodedAhead,
    args.includes('--as-stored'),
  );
  server.once('listening', () => process.stdout.write('listening\n'));
  let changes = 0;
  process.on('SIGUSR2', () => change(changes++));
  process.once('SIGTERM', () => {
    server.close();
    server.closeAllConnections();
  });
}
