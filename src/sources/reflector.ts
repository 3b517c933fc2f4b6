// One resource's list/watch loop (client-go calls it a reflector): list, then watch from the list's
// resourceVersion, and keep the last known state across every failure. The API server being gone
// never deletes anything; only a relist (after 410 Gone) says what really disappeared, and only the
// difference is delivered.

import type http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { SourceEvent, WatchedKind } from '../model/events.js';
import { ApiError, type ApiStatus, type ApiTransport } from './api-transport.js';
import { type BackoffPolicy, backoffDelayMs } from './flow-control.js';
import { decodeList, decodeWatchEvent, isProtobuf, WatchFrameReader } from './protobuf.js';

export interface WatchedResource {
  kind: WatchedKind;
  /** Collection path across all namespaces, e.g. /api/v1/services. */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  /**
   * A resource older API servers do not serve (ServiceCIDRs before Kubernetes 1.33): a 404 on its
   * list counts as an empty collection, synced, and the list is asked again every
   * `notServedRetryMs` instead of blocking the initial sync or retrying in a tight backoff. A 403
   * (RBAC without the resource) is taken the same way, keeping what was known.
   */
  mayBeUnserved?: boolean;
}

/** How often a resource the API server does not serve is asked for again (it appears on an upgrade). */
export const NOT_SERVED_RETRY_MS = 10 * 60 * 1000;

/** Why a resource that may be unserved could not be listed: 404 (not served) or 403 (not allowed). */
type Unavailable = 404 | 403;

/** client-go's minWatchTimeout: each watch asks the server to end it after 5 to 10 minutes, spread so that clients do not all re-watch at once. */
const MIN_WATCH_TIMEOUT_SECONDS = 300;
/** If the server has not ended a watch this long after its own timeout, the connection is dead. */
const WATCH_DEADLINE_GRACE_SECONDS = 30;
/** A watch that ends sooner than this without delivering anything counts as a failed attempt (backoff), not as a normal end. */
const HEALTHY_WATCH_MS = 1000;

type WatchOutcome = 'healthy' | 'failed' | 'expired';

export class Reflector {
  /**
   * The resourceVersion of each known object, by namespace/name: enough to tell a change from a
   * repeat and to delete what a relist no longer has. Not the objects: the change tracker keeps
   * them parsed, and a second copy of every API object here was most of the agent's memory.
   */
  private known = new Map<string, string>();
  private resourceVersion = '';
  private failures = 0;
  /** The last list was answered 404 or 403 (only for resources that may be unserved), else null. */
  private unavailable: Unavailable | null = null;
  private readonly log: Logger;

  constructor(
    private readonly resource: WatchedResource,
    private readonly transport: ApiTransport,
    private readonly emit: (events: SourceEvent[]) => void,
    log: Logger,
    private readonly backoff: BackoffPolicy,
    private readonly notServedRetryMs = NOT_SERVED_RETRY_MS,
  ) {
    this.log = log.child({ kind: resource.kind });
  }

  /** Loops until `signal` aborts; `onSynced` is called after the first list has been delivered. */
  async run(signal: AbortSignal, onSynced: () => void): Promise<void> {
    while (!signal.aborted) {
      let failure: string;
      try {
        const fromFreshList = this.resourceVersion === '';
        if (fromFreshList) {
          const served = await this.relist(signal);
          onSynced();
          this.failures = 0;
          if (!served) {
            await sleep(this.notServedRetryMs, undefined, { signal }).catch(() => undefined);
            continue;
          }
        }
        const outcome = await this.watch(signal);
        if (outcome === 'healthy') {
          this.failures = 0;
          continue;
        }
        // A watch that expires right after a fresh list means the server is confused: back off.
        if (outcome === 'expired' && !fromFreshList) continue;
        failure = `watch ${outcome === 'expired' ? 'expired at once' : 'failed'}`;
      } catch (error) {
        if (signal.aborted) break;
        if (error instanceof ApiError && isExpired({ code: error.statusCode, ...error.status })) {
          this.log.info(
            { resourceVersion: this.resourceVersion },
            'resourceVersion expired (410); relisting',
          );
          this.resourceVersion = '';
          continue;
        }
        // A watch refused with 404 or 403 after a good list: the relist says what holds now.
        if (this.unavailableAnswer(error) !== null) {
          this.resourceVersion = '';
          continue;
        }
        failure = error instanceof Error ? error.message : String(error);
      }
      const delayMs = backoffDelayMs(this.backoff, this.failures, Math.random());
      this.failures += 1;
      this.log.warn(
        { error: failure, attempt: this.failures, delayMs, server: this.transport.server },
        'list/watch failed; keeping the last known state and retrying',
      );
      await sleep(delayMs, undefined, { signal }).catch(() => undefined);
    }
  }

  private selectors(): Record<string, string> {
    const { labelSelector, fieldSelector } = this.resource;
    return { ...(labelSelector ? { labelSelector } : {}), ...(fieldSelector ? { fieldSelector } : {}) };
  }

  /** Lists and delivers the difference; false when the resource cannot be listed (404, 403). */
  private async relist(signal: AbortSignal): Promise<boolean> {
    let response: Awaited<ReturnType<ApiTransport['get']>>;
    try {
      response = await this.transport.get(this.resource.path, this.selectors(), signal);
    } catch (error) {
      const code = this.unavailableAnswer(error);
      if (code === null) throw error;
      this.noteUnavailable(code);
      return false;
    }
    if (this.unavailable !== null) {
      this.unavailable = null;
      this.log.info({ path: this.resource.path }, 'this resource can be listed now');
    }
    const { contentType, body } = response;
    const { items, resourceVersion } = decodeListBody(this.resource.kind, contentType, body);
    const diff = diffRelist(this.known, items);
    this.known = diff.next;
    this.resourceVersion = resourceVersion;
    this.deliver([
      ...diff.deletedKeys.map((key) => this.event('delete', goneObject(key))),
      ...diff.upserts.map((object) => this.event('upsert', object)),
    ]);
    this.log.info(
      {
        objects: items.length,
        upserts: diff.upserts.length,
        deletes: diff.deletedKeys.length,
        resourceVersion,
        contentType,
      },
      'listed',
    );
    return true;
  }

  /** 404 or 403 for a resource that may be unserved; null for anything else. */
  private unavailableAnswer(error: unknown): Unavailable | null {
    if (!this.resource.mayBeUnserved || !(error instanceof ApiError)) return null;
    return error.statusCode === 404 || error.statusCode === 403 ? error.statusCode : null;
  }

  /**
   * A resource that may be unserved could not be listed: logged once per reason. 404: the API server
   * has no such resource, so none exist (what was known is deleted). 403: we may not read it; what
   * was known is kept, as after any failure.
   */
  private noteUnavailable(code: Unavailable): void {
    if (this.unavailable !== code) {
      const fields = { path: this.resource.path, retryInMs: this.notServedRetryMs };
      if (code === 404)
        this.log.info(fields, 'the API server does not serve this resource (404): none; asking again later');
      else
        this.log.warn(
          fields,
          'not allowed to list this resource (403): going on with what is known; grant list and watch on it (asking again later)',
        );
    }
    this.unavailable = code;
    this.resourceVersion = '';
    if (code === 403) return;
    const deletedKeys = [...this.known.keys()];
    this.known = new Map();
    this.deliver(deletedKeys.map((key) => this.event('delete', goneObject(key))));
  }

  private async watch(signal: AbortSignal): Promise<WatchOutcome> {
    const timeoutSeconds = MIN_WATCH_TIMEOUT_SECONDS + Math.floor(Math.random() * MIN_WATCH_TIMEOUT_SECONDS);
    const connection = new AbortController();
    const abortConnection = () => connection.abort();
    signal.addEventListener('abort', abortConnection, { once: true });
    const deadline = setTimeout(abortConnection, (timeoutSeconds + WATCH_DEADLINE_GRACE_SECONDS) * 1000);
    try {
      const query = {
        ...this.selectors(),
        watch: 'true',
        resourceVersion: this.resourceVersion,
        allowWatchBookmarks: 'true',
        timeoutSeconds: String(timeoutSeconds),
      };
      const response = await this.transport.open(this.resource.path, query, connection.signal);
      if (this.failures > 0) {
        this.log.info(
          { afterFailures: this.failures, resourceVersion: this.resourceVersion },
          'watching again',
        );
      }
      const startedAt = performance.now();
      const { outcome, received } = await this.consume(response);
      if (outcome !== 'healthy') return outcome;
      return received || performance.now() - startedAt >= HEALTHY_WATCH_MS ? 'healthy' : 'failed';
    } finally {
      clearTimeout(deadline);
      signal.removeEventListener('abort', abortConnection);
    }
  }

  /**
   * Reads watch events until the stream closes: newline-delimited JSON, or length-delimited protobuf
   * frames. Each chunk's events are delivered together.
   */
  private consume(response: http.IncomingMessage): Promise<{ outcome: WatchOutcome; received: boolean }> {
    const decode = isProtobuf(response.headers['content-type'])
      ? protobufEvents(this.resource.kind)
      : jsonEvents();
    return new Promise((resolve) => {
      let received = false;
      let outcome: WatchOutcome = 'healthy';
      response.on('data', (chunk: Buffer) => {
        const events: SourceEvent[] = [];
        for (const event of decode(chunk)) {
          received = true;
          outcome = this.apply(event, events);
          if (outcome !== 'healthy') break;
        }
        this.deliver(events);
        if (outcome !== 'healthy') response.destroy();
      });
      // A connection lost mid-watch ends it like a close; the next watch resumes from the last resourceVersion.
      response.on('error', (error) => this.log.debug({ error: error.message }, 'watch connection lost'));
      response.on('close', () => resolve({ outcome, received }));
    });
  }

  /** Applies one watch event to the known state, appending what consumers must hear to `events`. */
  private apply(decoded: DecodedWatchEvent, events: SourceEvent[]): WatchOutcome {
    if ('undecodable' in decoded) {
      // Skipping it could lose an update for good; re-watching from the last good resourceVersion replays it.
      this.log.warn({ event: decoded.undecodable }, 'undecodable watch event; re-watching');
      return 'failed';
    }
    const event = decoded;
    const { key, resourceVersion } = identityOf(event.object);
    switch (event.type) {
      case 'ADDED':
      case 'MODIFIED': {
        const previous = this.known.get(key);
        if (previous === undefined || previous !== resourceVersion) {
          this.known.set(key, resourceVersion);
          events.push(this.event('upsert', event.object));
        }
        break;
      }
      case 'DELETED':
        if (this.known.delete(key)) events.push(this.event('delete', event.object));
        break;
      case 'BOOKMARK':
        this.log.trace({ resourceVersion }, 'bookmark');
        break;
      case 'ERROR': {
        const status = (event.object ?? {}) as ApiStatus;
        if (isExpired(status)) {
          this.log.info(
            { resourceVersion: this.resourceVersion, message: status.message },
            'watch expired; relisting',
          );
          this.resourceVersion = '';
          return 'expired';
        }
        this.log.warn({ status }, 'watch ERROR event');
        return 'failed';
      }
      default:
        this.log.warn({ type: event.type }, 'unknown watch event type ignored');
        return 'healthy';
    }
    if (resourceVersion !== '') this.resourceVersion = resourceVersion;
    return 'healthy';
  }

  private event(type: SourceEvent['type'], object: unknown): SourceEvent {
    return { type, kind: this.resource.kind, object, origin: 'api' };
  }

  private deliver(events: SourceEvent[]): void {
    if (events.length === 0) return;
    try {
      this.emit(events);
    } catch (error) {
      this.log.error(
        { error: error instanceof Error ? error.message : String(error) },
        'event consumer threw',
      );
    }
  }
}

/** Objects are tracked by namespace/name, the key kube-proxy's change trackers use; resourceVersion says whether one changed. */
export function identityOf(object: unknown): { key: string; resourceVersion: string } {
  const meta = (object as { metadata?: Record<string, unknown> } | null)?.metadata ?? {};
  const text = (value: unknown) => (typeof value === 'string' ? value : '');
  return {
    key: `${text(meta.namespace)}/${text(meta.name)}`,
    resourceVersion: text(meta.resourceVersion),
  };
}

/** A known object that is gone, as a delete event carries it: its namespace and name are all a delete reads. */
export function goneObject(key: string): { metadata: { namespace: string; name: string } } {
  const slash = key.indexOf('/');
  return { metadata: { namespace: key.slice(0, slash), name: key.slice(slash + 1) } };
}

/**
 * What a relist changes, given the resourceVersion of each known object by key: objects that are
 * new or have another resourceVersion, and the keys of known objects that are gone.
 */
export function diffRelist(
  known: ReadonlyMap<string, string>,
  items: readonly unknown[],
): { upserts: unknown[]; deletedKeys: string[]; next: Map<string, string> } {
  const next = new Map<string, string>();
  const upserts: unknown[] = [];
  for (const item of items) {
    const { key, resourceVersion } = identityOf(item);
    next.set(key, resourceVersion);
    const previous = known.get(key);
    if (previous === undefined || resourceVersion === '' || previous !== resourceVersion) upserts.push(item);
  }
  const deletedKeys = [...known.keys()].filter((key) => !next.has(key));
  return { upserts, deletedKeys, next };
}

/** 410 Gone / reason Expired, or the older "too old resource version" wording: the resourceVersion is compacted away and only a relist helps. */
export function isExpired(status: ApiStatus): boolean {
  return (
    status.code === 410 ||
    status.reason === 'Expired' ||
    status.reason === 'Gone' ||
    /too old resource ?version|resource ?version .*too old/i.test(status.message ?? '')
  );
}

export function parseWatchLine(line: string): { type: string; object: unknown } | null {
  try {
    const value: unknown = JSON.parse(line);
    if (typeof value !== 'object' || value === null) return null;
    const { type, object } = value as Record<string, unknown>;
    return typeof type === 'string' ? { type, object } : null;
  } catch {
    return null;
  }
}

/** A watch event, or what could not be decoded (its start, for the log). */
type DecodedWatchEvent = { type: string; object: unknown } | { undecodable: string };

/** Newline-delimited JSON events; a line split over chunks waits for its end. */
function jsonEvents(): (chunk: Buffer) => DecodedWatchEvent[] {
  let partialLine = '';
  const decoder = new TextDecoder();
  return (chunk) => {
    const lines = (partialLine + decoder.decode(chunk, { stream: true })).split('\n');
    partialLine = lines.pop() ?? '';
    return lines
      .filter((line) => line.trim() !== '')
      .map((line) => parseWatchLine(line) ?? { undecodable: line.slice(0, 200) });
  };
}

/** Length-delimited protobuf WatchEvents; a frame split over chunks waits for its end. */
function protobufEvents(kind: WatchedResource['kind']): (chunk: Buffer) => DecodedWatchEvent[] {
  const reader = new WatchFrameReader();
  return (chunk) => {
    let frames: Buffer[];
    try {
      frames = reader.push(chunk);
    } catch (error) {
      return [{ undecodable: (error as Error).message }];
    }
    return frames.map((frame) => {
      try {
        return decodeWatchEvent(kind, frame);
      } catch (error) {
        return { undecodable: `protobuf frame of ${frame.length} bytes: ${(error as Error).message}` };
      }
    });
  };
}

/** A list response body, in the encoding its content type names, as its items and resourceVersion. */
export function decodeListBody(
  kind: WatchedKind,
  contentType: string,
  body: Buffer,
): { items: unknown[]; resourceVersion: string } {
  const decoded: unknown = isProtobuf(contentType)
    ? decodeList(kind, body)
    : JSON.parse(body.toString('utf8'));
  const list = (decoded ?? {}) as { items?: unknown; metadata?: { resourceVersion?: unknown } };
  const resourceVersion = list.metadata?.resourceVersion;
  if (!Array.isArray(list.items) || typeof resourceVersion !== 'string' || resourceVersion === '') {
    throw new Error('list response has no items or no metadata.resourceVersion');
  }
  return { items: list.items, resourceVersion };
}
