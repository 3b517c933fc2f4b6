// The standalone source: Services, EndpointSlices, Nodes and ServiceCIDRs from YAML or JSON files
// instead of the API server (demo, offline `render`, tests). It emulates kube-proxy's informers: the
// same label selector, only this node's Node, every ServiceCIDR, namespace "default" when a manifest
// names none (as kubectl apply does).
// Objects are delivered raw; model/parse.ts validates them like objects from the API.

import { createHash } from 'node:crypto';
import { type FSWatcher, readdirSync, readFileSync, realpathSync, statSync, watch } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { SourceEvent, WatchedKind } from '../model/events.js';
import { describeObject, type ObjectProblem } from '../model/parse.js';
import { describeValue } from '../model/schema.js';
import { matchesKubeProxySelector } from '../model/selector.js';
import { HEADLESS_LABEL, SERVICE_PROXY_NAME_LABEL } from '../model/types.js';
import type { Source } from './types.js';

export interface ManifestOptions {
  /** Only the Node of this name is delivered (kube-proxy watches its own Node only). Unset: every Node. */
  nodeName?: string;
}

export interface ManifestRead {
  /** One upsert per object, in file order; a later definition of the same object replaces an earlier one. */
  events: SourceEvent[];
  /** Unreadable files, syntax errors, unsupported kinds, replaced duplicates. */
  problems: ObjectProblem[];
  /** Objects kube-proxy's informers would not see (label selector, other nodes): not problems. */
  ignored: ObjectProblem[];
}

const MANIFEST_EXTENSIONS = new Set(['.yaml', '.yml', '.json']);
const DEFAULT_NAMESPACE = 'default';

const SUPPORTED: Record<WatchedKind, string> = {
  Service: 'v1',
  EndpointSlice: 'discovery.k8s.io/v1',
  Node: 'v1',
  ServiceCIDR: 'networking.k8s.io/v1',
};
/** List kinds and the kind their items have when they do not say (typed lists from the API omit it). */
const LIST_KINDS: Record<string, WatchedKind | null> = {
  List: null,
  ServiceList: 'Service',
  EndpointSliceList: 'EndpointSlice',
  NodeList: 'Node',
  ServiceCIDRList: 'ServiceCIDR',
};

// The yaml parser recurses per nesting level, and near the stack limit V8 can abort the whole process
// (seen: "RegExpCompiler Allocation failed") instead of throwing. Documents are screened before parsing.
// Kubernetes objects nest about ten levels; brackets inside quoted strings are counted too, to stay simple.
const MAX_FLOW_NESTING = 100;
const MAX_INDENTATION = 1000;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function tooDeep(text: string): string | null {
  let depth = 0;
  let indentation = 0;
  let lineStart = true;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x0a) {
      lineStart = true;
      indentation = 0;
      continue;
    }
    if (lineStart && c === 0x20) {
      if (++indentation > MAX_INDENTATION) return `indented more than ${MAX_INDENTATION} columns`;
      continue;
    }
    lineStart = false;
    if (c === 0x5b || c === 0x7b) {
      if (++depth > MAX_FLOW_NESTING) return `nested more than ${MAX_FLOW_NESTING} levels deep`;
    } else if ((c === 0x5d || c === 0x7d) && depth > 0) depth--;
  }
  return null;
}

const DOCUMENT_START = /^---(?:[ \t\r]|$)/;
const TOO_DEEP_SENTINEL = 'kube-bpf-proxy: document screened out as too deep';

/** Replaces each too-deep document by a sentinel scalar, so the parser never sees it and document indexes stay. */
function screenDocuments(text: string): { text: string; reasons: string[] } {
  const segments: string[][] = [];
  for (const line of text.split('\n')) {
    if (segments.length === 0 || DOCUMENT_START.test(line)) segments.push([]);
    segments[segments.length - 1]!.push(line);
  }
  const reasons: string[] = [];
  const screened = segments.map((lines) => {
    const reason = tooDeep(lines.join('\n'));
    if (reason === null) return lines.join('\n');
    const sentinel = `${JSON.stringify(`${TOO_DEEP_SENTINEL} #${reasons.length}`)}`;
    reasons.push(reason);
    return DOCUMENT_START.test(lines[0] ?? '') ? `--- ${sentinel}` : sentinel;
  });
  return { text: screened.join('\n'), reasons };
}

interface Document {
  index: number;
  value?: unknown;
  error?: string;
}

function yamlDocuments(text: string): Document[] {
  const screened = screenDocuments(text);
  return parseAllDocuments(screened.text).map((doc, index) => {
    const firstError = doc.errors[0];
    if (firstError) return { index, error: `YAML syntax error: ${firstError.message.split('\n')[0]}` };
    try {
      const value: unknown = doc.toJS({ maxAliasCount: 100 });
      if (typeof value === 'string' && value.startsWith(TOO_DEEP_SENTINEL)) {
        const which = Number(value.slice(TOO_DEEP_SENTINEL.length + 2));
        return { index, error: `document ${screened.reasons[which]}` };
      }
      return { index, value };
    } catch (err) {
      return { index, error: `YAML error: ${(err as Error).message.split('\n')[0]}` };
    }
  });
}

function jsonDocument(text: string): Document {
  const deep = tooDeep(text);
  if (deep !== null) return { index: 0, error: `document ${deep}` };
  try {
    return { index: 0, value: JSON.parse(text) as unknown };
  } catch (err) {
    return { index: 0, error: `JSON syntax error: ${(err as Error).message}` };
  }
}

function problem(origin: string, reason: string, kind = '', raw?: unknown): ObjectProblem {
  return { origin, kind, ...describeObject(raw), reason };
}

function shortKind(kind: string): string {
  return kind.length <= 63 ? kind : `${kind.slice(0, 63)}…`;
}

/** Routes one object of a document (or of a list's items) to an event, a problem or the ignored list. */
function collectObject(
  out: ManifestRead,
  raw: unknown,
  origin: string,
  options: ManifestOptions,
  list: { itemKind: WatchedKind | null } | null,
): void {
  if (!isObject(raw)) {
    out.problems.push(problem(origin, `must be a Kubernetes object, got ${describeValue(raw)}`));
    return;
  }
  const kind = raw.kind ?? list?.itemKind;
  if (typeof kind !== 'string') {
    const got =
      kind === undefined || kind === null ? 'is required' : `must be a string, got ${describeValue(kind)}`;
    out.problems.push(problem(origin, `kind: ${got}`, '', raw));
    return;
  }
  if (kind in LIST_KINDS) {
    if (list !== null) {
      out.problems.push(problem(origin, 'lists inside lists are not supported', kind, raw));
      return;
    }
    collectList(out, raw, kind, origin, options);
    return;
  }
  if (!Object.hasOwn(SUPPORTED, kind)) {
    out.problems.push(
      problem(
        origin,
        'unsupported kind: only Service, EndpointSlice, Node, ServiceCIDR and lists of them are read',
        shortKind(kind),
        raw,
      ),
    );
    return;
  }
  const watched = kind as WatchedKind;
  const apiVersion = raw.apiVersion;
  if (apiVersion !== undefined && apiVersion !== SUPPORTED[watched]) {
    const reason = `apiVersion: ${watched} must be ${SUPPORTED[watched]}, got ${describeValue(apiVersion)}`;
    out.problems.push(problem(origin, reason, watched, raw));
    return;
  }
  const metadata = raw.metadata;
  if (watched === 'ServiceCIDR') {
    // Cluster-scoped, and kube-proxy watches every one of them (no label selector).
    if (isObject(metadata)) delete metadata.namespace;
  } else if (watched === 'Node') {
    const name = isObject(metadata) ? metadata.name : undefined;
    if (options.nodeName !== undefined && typeof name === 'string' && name !== options.nodeName) {
      out.ignored.push(problem(origin, `not this node (${options.nodeName})`, watched, raw));
      return;
    }
    // Nodes are cluster-scoped: the API server stores no namespace for them, so neither do we.
    if (isObject(metadata)) delete metadata.namespace;
  } else {
    const labels = isObject(metadata) ? metadata.labels : undefined;
    if (!matchesKubeProxySelector(labels)) {
      const label = Object.hasOwn(labels as object, SERVICE_PROXY_NAME_LABEL)
        ? SERVICE_PROXY_NAME_LABEL
        : HEADLESS_LABEL;
      out.ignored.push(
        problem(origin, `has label ${label}: outside kube-proxy's label selector`, watched, raw),
      );
      return;
    }
    if (
      isObject(metadata) &&
      (metadata.namespace === undefined || metadata.namespace === null || metadata.namespace === '')
    ) {
      metadata.namespace = DEFAULT_NAMESPACE;
    }
  }
  out.events.push({ type: 'upsert', kind: watched, object: raw, origin });
}

function collectList(
  out: ManifestRead,
  raw: Record<string, unknown>,
  kind: string,
  origin: string,
  options: ManifestOptions,
): void {
  const items = raw.items ?? [];
  if (!Array.isArray(items)) {
    out.problems.push(problem(origin, `items: must be a list, got ${describeValue(items)}`, kind));
    return;
  }
  const list = { itemKind: LIST_KINDS[kind] ?? null };
  items.forEach((item, i) => {
    collectObject(out, item, `${origin}.items[${i}]`, options, list);
  });
}

/** The objects of one file's text. Pure: `file` only names the origin and picks JSON or YAML by extension. */
export function manifestObjects(file: string, text: string, options: ManifestOptions = {}): ManifestRead {
  const out: ManifestRead = { events: [], problems: [], ignored: [] };
  const body = text.startsWith('\uFEFF') ? text.slice(1) : text;
  const documents = extname(file).toLowerCase() === '.json' ? [jsonDocument(body)] : yamlDocuments(body);
  for (const doc of documents) {
    const origin = `${file}#${doc.index}`;
    if (doc.error !== undefined) out.problems.push(problem(origin, doc.error));
    // An empty document (a trailing "---", only comments) holds nothing.
    else if (doc.value !== null && doc.value !== undefined)
      collectObject(out, doc.value, origin, options, null);
  }
  return out;
}

/** The manifest files under `paths`: files as given, directories walked recursively (dot entries skipped), sorted. */
export function manifestFiles(paths: readonly string[]): { files: string[]; problems: ObjectProblem[] } {
  const files: string[] = [];
  const problems: ObjectProblem[] = [];
  const seen = new Set<string>();
  const visit = (path: string, explicit: boolean): void => {
    let real: string;
    let isDirectory: boolean;
    try {
      real = realpathSync(path);
      isDirectory = statSync(real).isDirectory();
    } catch (err) {
      problems.push(problem(path, `cannot read: ${(err as Error).message}`));
      return;
    }
    if (seen.has(real)) return;
    seen.add(real);
    if (!isDirectory) {
      if (explicit || MANIFEST_EXTENSIONS.has(extname(path).toLowerCase())) files.push(path);
      return;
    }
    let names: string[];
    try {
      names = readdirSync(path).filter((name) => !name.startsWith('.'));
    } catch (err) {
      problems.push(problem(path, `cannot read: ${(err as Error).message}`));
      return;
    }
    for (const name of names.sort()) visit(join(path, name), false);
  };
  for (const path of paths) visit(path, true);
  return { files, problems };
}

function identity(event: SourceEvent): string | null {
  const { namespace, name } = describeObject(event.object);
  return name === '' ? null : `${event.kind}/${namespace}/${name}`;
}

/** One manifest file's objects; an unreadable file is a problem. */
function readManifestFile(file: string, options: ManifestOptions): ManifestRead {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    return { events: [], problems: [problem(file, `cannot read: ${(err as Error).message}`)], ignored: [] };
  }
  return manifestObjects(file, text, options);
}

/** The same object defined twice: the later definition wins, as with successive `kubectl apply`. */
function keepLastDefinitions(all: ManifestRead): ManifestRead {
  const last = new Map<string, SourceEvent>();
  for (const event of all.events) {
    const key = identity(event);
    if (key !== null) last.set(key, event);
  }
  const problems = [...all.problems];
  const events = all.events.filter((event) => {
    const key = identity(event);
    const winner = key === null ? event : last.get(key);
    if (winner === event) return true;
    problems.push(
      problem(event.origin, `defined again at ${winner?.origin}, which is used`, event.kind, event.object),
    );
    return false;
  });
  return { events, problems, ignored: all.ignored };
}

/** Reads every manifest under `paths` once. Never throws on bad input: everything wrong is a problem. */
export function readManifests(paths: readonly string[], options: ManifestOptions = {}): ManifestRead {
  const listed = manifestFiles(paths);
  const all: ManifestRead = { events: [], problems: [...listed.problems], ignored: [] };
  for (const file of listed.files) {
    const read = readManifestFile(file, options);
    all.events.push(...read.events);
    all.problems.push(...read.problems);
    all.ignored.push(...read.ignored);
  }
  return keepLastDefinitions(all);
}

export interface ManifestSourceOptions extends ManifestOptions {
  paths: string[];
  /** Re-read on file changes and deliver the differences (upserts and deletes). */
  watch?: boolean;
  /** Quiet time after the last file change before re-reading. */
  debounceMs?: number;
  /** Every problem of each read (the initial one and each after a change), and watch failures. */
  onProblems?: (problems: ObjectProblem[]) => void;
}

/**
 * What the source remembers of each object it delivered, by key: a digest of its JSON, to tell a
 * change from a re-read of the same text, and the delete that would remove it (namespace and name
 * are all a delete reads). Not the object: the change tracker keeps it parsed, and a second copy
 * of every object here doubled the agent's memory after each re-read.
 */
export type ManifestMemory = ReadonlyMap<string, { digest: string | null; deletion: SourceEvent | null }>;

function changeKey(event: SourceEvent): string {
  return identity(event) ?? `@${event.origin}`;
}

/** null for an object JSON cannot print (never equal to anything: it is delivered again). */
function digestOf(object: unknown): string | null {
  try {
    return createHash('sha1').update(JSON.stringify(object)).digest('base64');
  } catch {
    return null;
  }
}

/** Objects without a name cannot be deleted by key: they get no deletion. */
function remembered(event: SourceEvent): { digest: string | null; deletion: SourceEvent | null } {
  const { namespace, name } = describeObject(event.object);
  const deletion: SourceEvent | null =
    identity(event) === null
      ? null
      : { type: 'delete', kind: event.kind, origin: event.origin, object: { metadata: { namespace, name } } };
  return { digest: digestOf(event.object), deletion };
}

/** Events that turn what `before` remembers into the objects of `after`, and what to remember of `after`. */
export function manifestChanges(
  before: ManifestMemory,
  after: readonly SourceEvent[],
): { changes: SourceEvent[]; memory: ManifestMemory } {
  const memory = new Map<string, { digest: string | null; deletion: SourceEvent | null }>();
  const changes: SourceEvent[] = [];
  for (const event of after) {
    const key = changeKey(event);
    const now = remembered(event);
    memory.set(key, now);
    const old = before.get(key);
    if (old === undefined || now.digest === null || now.digest !== old.digest) changes.push(event);
  }
  for (const [key, { deletion }] of before) {
    if (!memory.has(key) && deletion) changes.push(deletion);
  }
  return { changes, memory };
}

/** A file as the last read saw it: what tells a changed file, the objects it defined, its problems. */
interface FileRecord {
  stamp: string | null;
  keys: string[];
  problems: ObjectProblem[];
}

/** Inode, size and change times: a rewrite changes at least one (null: it could not be read). */
function fileStamp(file: string): string | null {
  try {
    const st = statSync(file, { bigint: true });
    return `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  } catch {
    return null;
  }
}

/**
 * The manifests under `paths`, read again file by file: `reload()` parses only the files whose
 * stamp changed, and gives the same changes and problems as reading everything again would. Where
 * that could differ — an object defined in more than one file, where the later file wins — it
 * reads everything.
 */
export class ManifestTree {
  private memory = new Map<string, { digest: string | null; deletion: SourceEvent | null }>();
  private files = new Map<string, FileRecord>();
  /** Some object is defined in more than one file: every reload reads every file. */
  private shared = false;

  constructor(
    private readonly paths: readonly string[],
    private readonly options: ManifestOptions = {},
  ) {}

  /** The events that bring a consumer of the earlier reloads to what the files hold now. */
  reload(): { changes: SourceEvent[]; problems: ObjectProblem[] } {
    const listed = manifestFiles(this.paths);
    const stamps = new Map(listed.files.map((f) => [f, fileStamp(f)]));
    const touched = [
      ...listed.files.filter((f) => stamps.get(f) === null || this.files.get(f)?.stamp !== stamps.get(f)),
      ...[...this.files.keys()].filter((f) => !stamps.has(f)),
    ];
    const changes = this.shared
      ? this.readAll(listed.files, stamps)
      : (this.readTouched(touched, stamps) ?? this.readAll(listed.files, stamps));
    const problems = [...listed.problems, ...listed.files.flatMap((f) => this.files.get(f)?.problems ?? [])];
    return { changes, problems };
  }

  private readAll(files: string[], stamps: Map<string, string | null>): SourceEvent[] {
    const reads = files.map((file) => ({ file, read: readManifestFile(file, this.options) }));
    const merged = keepLastDefinitions({
      events: reads.flatMap((r) => r.read.events),
      problems: [],
      ignored: [],
    });
    const definedIn = new Map<string, number>();
    for (const { read } of reads)
      for (const key of new Set(read.events.map(changeKey)))
        definedIn.set(key, (definedIn.get(key) ?? 0) + 1);
    this.shared = [...definedIn.values()].some((n) => n > 1);
    const { changes, memory } = manifestChanges(this.memory, merged.events);
    this.memory = new Map(memory);
    const winners = new Set(merged.events);
    this.files = new Map(
      reads.map(({ file, read }) => [
        file,
        {
          stamp: stamps.get(file) ?? null,
          keys: read.events.filter((e) => winners.has(e)).map(changeKey),
          // The replaced definitions are reported where they stand.
          problems: [...read.problems, ...merged.problems.filter((p) => p.origin.startsWith(`${file}#`))],
        },
      ]),
    );
    return changes;
  }

  /** The changes from the touched files alone; null when another file defines one of their objects. */
  private readTouched(touched: string[], stamps: Map<string, string | null>): SourceEvent[] | null {
    const before = new Map(
      touched.flatMap((f) => (this.files.get(f)?.keys ?? []).map((k) => [k, this.memory.get(k)!] as const)),
    );
    const reads: { file: string; read: ManifestRead; keys: string[] }[] = [];
    const claimed = new Set<string>();
    for (const file of touched) {
      if (!stamps.has(file)) continue; // gone: its objects are deleted below
      const read = keepLastDefinitions(readManifestFile(file, this.options));
      const keys = read.events.map(changeKey);
      for (const key of keys) {
        if (claimed.has(key) || (this.memory.has(key) && !before.has(key))) return null;
        claimed.add(key);
      }
      reads.push({ file, read, keys });
    }
    const { changes, memory } = manifestChanges(
      before,
      reads.flatMap((r) => r.read.events),
    );
    for (const key of before.keys()) this.memory.delete(key);
    for (const [key, value] of memory) this.memory.set(key, value);
    for (const file of touched) this.files.delete(file);
    for (const { file, read, keys } of reads)
      this.files.set(file, { stamp: stamps.get(file) ?? null, keys, problems: read.problems });
    return changes;
  }
}

export class ManifestSource implements Source {
  private readonly tree: ManifestTree;
  private watchers: FSWatcher[] = [];
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly options: ManifestSourceOptions) {
    this.tree = new ManifestTree(options.paths, options);
  }

  async start(onEvent: (events: SourceEvent[]) => void): Promise<void> {
    const { changes, problems } = this.tree.reload();
    this.options.onProblems?.(problems);
    onEvent(changes);
    if (this.options.watch) this.watchPaths(onEvent);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    for (const watcher of this.watchers) watcher.close();
    this.watchers = [];
  }

  private watchPaths(onEvent: (events: SourceEvent[]) => void): void {
    const reload = () => {
      if (this.stopped) return;
      const { changes, problems } = this.tree.reload();
      this.options.onProblems?.(problems);
      if (changes.length > 0) onEvent(changes);
    };
    const schedule = () => {
      clearTimeout(this.timer);
      this.timer = setTimeout(reload, this.options.debounceMs ?? 200);
    };
    for (const path of this.options.paths) {
      // Editors replace files by renaming, which ends a watch on the file itself: watch its directory.
      let target: string;
      let isDirectory = false;
      try {
        isDirectory = statSync(path).isDirectory();
        target = isDirectory ? path : dirname(path);
      } catch {
        target = dirname(path);
      }
      const file = basename(path);
      try {
        const watcher = watch(target, { recursive: isDirectory }, (_event, changed) => {
          if (isDirectory || changed === null || changed === file) schedule();
        });
        watcher.on('error', (err) => {
          this.options.onProblems?.([problem(path, `stopped watching: ${err.message}`)]);
        });
        this.watchers.push(watcher);
      } catch (err) {
        this.options.onProblems?.([problem(path, `cannot watch: ${(err as Error).message}`)]);
      }
    }
  }
}
