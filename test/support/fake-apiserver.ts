// A Kubernetes API server for tests, speaking the real HTTP list/watch protocol on 127.0.0.1:
// lists carry metadata.resourceVersion, watches stream newline-delimited JSON events in chunked
// encoding from a resourceVersion, with bookmarks on request and 410 Gone once history is
// compacted. Objects live in memory under one global resourceVersion counter and survive
// stop()/start(), like etcd behind a restarted API server.

import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export type FakeResource = 'services' | 'endpointslices' | 'nodes' | 'servicecidrs';

interface ResourceInfo {
  kind: string;
  apiVersion: string;
  path: string;
}

const RESOURCES: Record<FakeResource, ResourceInfo> = {
  services: { kind: 'Service', apiVersion: 'v1', path: '/api/v1/services' },
  endpointslices: {
    kind: 'EndpointSlice',
    apiVersion: 'discovery.k8s.io/v1',
    path: '/apis/discovery.k8s.io/v1/endpointslices',
  },
  nodes: { kind: 'Node', apiVersion: 'v1', path: '/api/v1/nodes' },
  servicecidrs: {
    kind: 'ServiceCIDR',
    apiVersion: 'networking.k8s.io/v1',
    path: '/apis/networking.k8s.io/v1/servicecidrs',
  },
};

export interface FakeObject {
  metadata: {
    name: string;
    namespace?: string;
    labels?: Record<string, string>;
    uid?: string;
    resourceVersion?: string;
    [field: string]: unknown;
  };
  [field: string]: unknown;
}

type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

interface Change {
  resourceVersion: number;
  resource: FakeResource;
  type: EventType;
  object: FakeObject;
  /** The object before this change (MODIFIED, DELETED): decides what a selector-filtered watch sees. */
  previous: FakeObject | null;
}

interface Watcher {
  resource: FakeResource;
  selects: (object: FakeObject) => boolean;
  bookmarks: boolean;
  response: http.ServerResponse;
}

export interface RecordedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: http.IncomingHttpHeaders;
}

class BadRequest extends Error {}

export class FakeApiServer {
  /** How a watch from a compacted resourceVersion is refused: an ERROR event in a 200 stream (what kube-apiserver does), or an HTTP 410. */
  expiredAs: 'event' | 'http' = 'event';
  readonly requests: RecordedRequest[] = [];
  /** Resources this server answers 404 for, as an API server too old to know them (ServiceCIDRs before 1.33). */
  readonly notServed = new Set<FakeResource>();
  /** Resources this server answers 403 for, as RBAC without them does. */
  readonly forbidden = new Set<FakeResource>();

  private server: http.Server | null = null;
  private port = 0;
  private resourceVersion = 1;
  /** Watches from a resourceVersion below this get 410 Gone. */
  private compactedBelow = 0;
  private history: Change[] = [];
  private readonly store = new Map<FakeResource, Map<string, FakeObject>>(
    (Object.keys(RESOURCES) as FakeResource[]).map((resource) => [resource, new Map()]),
  );
  private readonly watchers = new Set<Watcher>();

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Listens on a random loopback port the first time, on the same port after stop(). */
  async start(): Promise<void> {
    const server = http.createServer((request, response) => this.handle(request, response));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  /** Closes the listener and every connection, watches included (clients see the connection drop). */
  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = null;
    this.watchers.clear();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    await closed;
  }

  create(resource: FakeResource, object: FakeObject): FakeObject {
    const key = keyOf(object);
    if (this.collection(resource).has(key)) throw new Error(`${resource} ${key} already exists`);
    const created = structuredClone(object);
    created.metadata.uid = randomUUID();
    created.metadata.creationTimestamp = new Date().toISOString();
    return this.record(resource, 'ADDED', created, null);
  }

  /** Replaces an existing object (uid and creationTimestamp kept). */
  update(resource: FakeResource, object: FakeObject): FakeObject {
    const previous = this.collection(resource).get(keyOf(object));
    if (!previous) throw new Error(`${resource} ${keyOf(object)} does not exist`);
    const updated = structuredClone(object);
    updated.metadata.uid = previous.metadata.uid;
    updated.metadata.creationTimestamp = previous.metadata.creationTimestamp;
    return this.record(resource, 'MODIFIED', updated, previous);
  }

  delete(resource: FakeResource, name: string, namespace?: string): void {
    const previous = this.collection(resource).get(keyOf({ metadata: { name, namespace } }));
    if (!previous) throw new Error(`${resource} ${namespace ?? ''}/${name} does not exist`);
    this.record(resource, 'DELETED', structuredClone(previous), previous);
  }

  get(resource: FakeResource, name: string, namespace?: string): FakeObject | undefined {
    const object = this.collection(resource).get(keyOf({ metadata: { name, namespace } }));
    return object && structuredClone(object);
  }

  get currentResourceVersion(): string {
    return String(this.resourceVersion);
  }

  /** Forgets the history so far: a watch from any older resourceVersion gets 410 Gone. */
  compact(): void {
    this.compactedBelow = this.resourceVersion;
    this.history = [];
  }

  /** Sends a BOOKMARK with the current resourceVersion to every watch that allowed bookmarks. */
  bookmark(): void {
    for (const watcher of this.watchers) {
      if (!watcher.bookmarks) continue;
      const { kind, apiVersion } = RESOURCES[watcher.resource];
      writeEvent(watcher.response, 'BOOKMARK', {
        kind,
        apiVersion,
        metadata: { resourceVersion: String(this.resourceVersion) },
      });
    }
  }

  /** Ends every watch cleanly (as the API server does at a watch's timeoutSeconds). */
  dropWatches(): void {
    for (const watcher of this.watchers) watcher.response.end();
    this.watchers.clear();
  }

  get watchCount(): number {
    return this.watchers.size;
  }

  private collection(resource: FakeResource): Map<string, FakeObject> {
    return this.store.get(resource)!;
  }

  private record(resource: FakeResource, type: EventType, object: FakeObject, previous: FakeObject | null) {
    this.resourceVersion += 1;
    object.metadata.resourceVersion = String(this.resourceVersion);
    if (type === 'DELETED') this.collection(resource).delete(keyOf(object));
    else this.collection(resource).set(keyOf(object), object);
    const change: Change = { resourceVersion: this.resourceVersion, resource, type, object, previous };
    this.history.push(change);
    for (const watcher of this.watchers) this.send(watcher, change);
    return structuredClone(object);
  }

  /** What a selector-filtered watch sees of a change: an object entering the selection is ADDED, one leaving it DELETED. */
  private send(watcher: Watcher, change: Change): void {
    if (change.resource !== watcher.resource) return;
    const now = change.type !== 'DELETED' && watcher.selects(change.object);
    const before = change.previous !== null && watcher.selects(change.previous);
    let type: EventType | null = null;
    if (now) type = before ? 'MODIFIED' : 'ADDED';
    else if (before) type = 'DELETED';
    if (type) writeEvent(watcher.response, type, this.typed(watcher.resource, change.object));
  }

  private typed(resource: FakeResource, object: FakeObject): object {
    const { kind, apiVersion } = RESOURCES[resource];
    return { kind, apiVersion, ...object };
  }

  private handle(request: http.IncomingMessage, response: http.ServerResponse): void {
    const url = new URL(request.url ?? '/', 'http://fake');
    this.requests.push({
      method: request.method ?? '',
      path: url.pathname,
      query: url.searchParams,
      headers: request.headers,
    });
    const resource = (Object.keys(RESOURCES) as FakeResource[]).find(
      (name) => RESOURCES[name].path === url.pathname && !this.notServed.has(name),
    );
    if (request.method !== 'GET' || !resource) {
      sendStatus(
        response,
        404,
        'NotFound',
        `the server could not find the requested resource ${url.pathname}`,
      );
      return;
    }
    if (this.forbidden.has(resource)) {
      sendStatus(response, 403, 'Forbidden', `${resource} is forbidden: cannot list resource "${resource}"`);
      return;
    }
    let selects: (object: FakeObject) => boolean;
    try {
      const byLabels = labelSelectorMatcher(url.searchParams.get('labelSelector') ?? '');
      const byFields = fieldSelectorMatcher(url.searchParams.get('fieldSelector') ?? '');
      selects = (object) => byLabels(object) && byFields(object);
    } catch (error) {
      sendStatus(response, 400, 'BadRequest', (error as Error).message);
      return;
    }
    if (url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1') {
      this.watch(resource, selects, url.searchParams, response);
    } else {
      this.list(resource, selects, response);
    }
  }

  private list(
    resource: FakeResource,
    selects: (object: FakeObject) => boolean,
    response: http.ServerResponse,
  ) {
    const { kind, apiVersion } = RESOURCES[resource];
    // Like the real API's JSON, list items carry no kind/apiVersion; the list does.
    const items = [...this.collection(resource).values()].filter(selects);
    const body = JSON.stringify({
      kind: `${kind}List`,
      apiVersion,
      metadata: { resourceVersion: String(this.resourceVersion) },
      items,
    });
    response.writeHead(200, { 'Content-Type': 'application/json' });
    response.end(body);
  }

  private watch(
    resource: FakeResource,
    selects: (object: FakeObject) => boolean,
    query: URLSearchParams,
    response: http.ServerResponse,
  ): void {
    const from = query.get('resourceVersion') ?? '';
    const fromNumber = Number(from);
    if (from !== '' && from !== '0' && !Number.isInteger(fromNumber)) {
      sendStatus(response, 400, 'BadRequest', `invalid resourceVersion ${from}`);
      return;
    }
    const expired = from !== '' && from !== '0' && fromNumber < this.compactedBelow;
    if (expired && this.expiredAs === 'http') {
      sendStatus(response, 410, 'Expired', `too old resource version: ${from} (${this.compactedBelow})`);
      return;
    }
    response.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
    response.flushHeaders();
    if (expired) {
      writeEvent(
        response,
        'ERROR',
        status(410, 'Expired', `too old resource version: ${from} (${this.compactedBelow})`),
      );
      response.end();
      return;
    }
    const watcher: Watcher = {
      resource,
      selects,
      bookmarks: query.get('allowWatchBookmarks') === 'true',
      response,
    };
    if (from === '' || from === '0') {
      // "Start at most recent" and "any": synthetic ADDED events for the current state first.
      for (const object of this.collection(resource).values()) {
        if (selects(object)) writeEvent(response, 'ADDED', this.typed(resource, object));
      }
    } else {
      for (const change of this.history) if (change.resourceVersion > fromNumber) this.send(watcher, change);
    }
    this.watchers.add(watcher);
    const timeoutSeconds = Number(query.get('timeoutSeconds') ?? '0');
    const timer = timeoutSeconds > 0 ? setTimeout(() => response.end(), timeoutSeconds * 1000) : null;
    response.on('close', () => {
      if (timer) clearTimeout(timer);
      this.watchers.delete(watcher);
    });
  }
}

function keyOf(object: { metadata: { name: string; namespace?: string | undefined } }): string {
  return `${object.metadata.namespace ?? ''}/${object.metadata.name}`;
}

function writeEvent(response: http.ServerResponse, type: string, object: object): void {
  if (!response.writableEnded) response.write(`${JSON.stringify({ type, object })}\n`);
}

function status(code: number, reason: string, message: string) {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
}

function sendStatus(response: http.ServerResponse, code: number, reason: string, message: string): void {
  response.writeHead(code, { 'Content-Type': 'application/json' });
  response.end(JSON.stringify(status(code, reason, message)));
}

/** Equality-based label selectors: `key`, `!key`, `key=value`, `key==value`, `key!=value`, comma-joined (AND). */
export function labelSelectorMatcher(selector: string): (object: FakeObject) => boolean {
  const requirements = selector
    .split(',')
    .map((term) => term.trim())
    .filter((term) => term !== '')
    .map((term): ((labels: Record<string, string>) => boolean) => {
      const match = /^(!?)([\w./-]+)(?:\s*(==|=|!=)\s*([\w.-]*))?$/.exec(term);
      if (!match) throw new BadRequest(`unable to parse requirement: ${term}`);
      const [, negated, key = '', operator, value = ''] = match;
      if (negated && operator) throw new BadRequest(`unable to parse requirement: ${term}`);
      if (negated) return (labels) => !(key in labels);
      if (!operator) return (labels) => key in labels;
      if (operator === '!=') return (labels) => labels[key] !== value;
      return (labels) => labels[key] === value;
    });
  return (object) => requirements.every((matches) => matches(object.metadata.labels ?? {}));
}

/** The field selectors the API server supports for every resource: metadata.name and metadata.namespace, with =, == or !=. */
export function fieldSelectorMatcher(selector: string): (object: FakeObject) => boolean {
  const requirements = selector
    .split(',')
    .map((term) => term.trim())
    .filter((term) => term !== '')
    .map((term): ((object: FakeObject) => boolean) => {
      const match = /^(metadata\.name|metadata\.namespace)\s*(==|=|!=)\s*(.*)$/.exec(term);
      if (!match) throw new BadRequest(`field label not supported: ${term}`);
      const [, field, operator, value] = match;
      const read = (object: FakeObject) =>
        field === 'metadata.name' ? object.metadata.name : (object.metadata.namespace ?? '');
      return operator === '!=' ? (object) => read(object) !== value : (object) => read(object) === value;
    });
  return (object) => requirements.every((matches) => matches(object));
}
