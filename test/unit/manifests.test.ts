import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { SourceEvent } from '../../src/model/events.js';
import { parseEvent } from '../../src/model/parse.js';
import {
  ManifestSource,
  ManifestTree,
  manifestChanges,
  manifestFiles,
  manifestObjects,
  readManifests,
} from '../../src/sources/manifests.js';
import { mulberry32 } from '../support/random.js';

const root = mkdtempSync(join(tmpdir(), `kbp-manifests-${process.pid}-`));
afterAll(() => rmSync(root, { recursive: true, force: true }));

let dirCount = 0;
function fixtureDir(files: Record<string, string>): string {
  const dir = join(root, `case-${dirCount++}`);
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

const svcYaml = (name: string, extra = '') =>
  `apiVersion: v1\nkind: Service\nmetadata:\n  name: ${name}\n  namespace: demo\n${extra}spec:\n  clusterIP: 10.96.0.1\n  ports:\n    - port: 80\n`;

const names = (events: readonly SourceEvent[]) =>
  events.map((e) => `${e.kind}/${(e.object as { metadata: { name: string } }).metadata.name}`);

describe('the bundled examples', () => {
  const read = readManifests(['examples/manifests']);

  it('load without problems, every object valid', () => {
    expect(read.problems).toEqual([]);
    for (const event of read.events) expect(parseEvent(event)).toMatchObject({ ok: true });
  });

  it('hold the demo Services, their slices, both nodes and the ServiceCIDR, in file order', () => {
    expect(names(read.events)).toEqual([
      'Service/dns',
      'EndpointSlice/dns-9xw2c',
      'Service/empty',
      'EndpointSlice/empty-q8r3s',
      'Service/ext',
      'EndpointSlice/ext-t5g9w',
      'Service/internal-local',
      'EndpointSlice/internal-local-h2v7n',
      'Node/node-a',
      'Node/node-b',
      'ServiceCIDR/kubernetes',
      'Service/db',
      'Service/sticky',
      'EndpointSlice/sticky-b6fjq',
      'Service/web',
      'EndpointSlice/web-7k2xq',
      'Service/web-nodeport',
      'EndpointSlice/web-nodeport-p4m8d',
      'Service/web-local',
      'EndpointSlice/web-local-zr5tb',
      'EndpointSlice/web-v6-9q4lt',
    ]);
    expect(read.events[4]?.origin).toBe('examples/manifests/ext.json#0.items[0]');
    expect(read.events[14]?.origin).toBe('examples/manifests/web.yaml#0');
  });

  it("hide what kube-proxy's label selector hides: the headless slice and the other proxy's objects", () => {
    expect(read.ignored.map((p) => `${p.origin} ${p.kind} ${p.name}: ${p.reason}`)).toEqual([
      "examples/manifests/skipped.yaml#1 EndpointSlice db-c7d4k: has label service.kubernetes.io/headless: outside kube-proxy's label selector",
      "examples/manifests/skipped.yaml#2 Service other-proxy: has label service.kubernetes.io/service-proxy-name: outside kube-proxy's label selector",
      "examples/manifests/skipped.yaml#3 EndpointSlice other-proxy-m3n6p: has label service.kubernetes.io/service-proxy-name: outside kube-proxy's label selector",
    ]);
  });

  it("deliver only this node's Node when a node name is given, as the informer's field selector does", () => {
    const forNodeA = readManifests(['examples/manifests'], { nodeName: 'node-a' });
    expect(names(forNodeA.events).filter((n) => n.startsWith('Node/'))).toEqual(['Node/node-a']);
    expect(forNodeA.ignored.map((p) => p.name)).toContain('node-b');
  });
});

describe('documents and kinds', () => {
  it('reports a YAML syntax error with its document index and still loads the other documents', () => {
    const text = `${svcYaml('a')}---\nkind: Service\nmetadata: {name: b, namespace: demo\nspec: [\n---\n${svcYaml('c')}`;
    const read = manifestObjects('f.yaml', text);
    expect(names(read.events)).toEqual(['Service/a', 'Service/c']);
    expect(read.events.map((e) => e.origin)).toEqual(['f.yaml#0', 'f.yaml#2']);
    expect(read.problems).toHaveLength(1);
    expect(read.problems[0]).toMatchObject({ origin: 'f.yaml#1', kind: '', name: '' });
    expect(read.problems[0]?.reason).toMatch(/^YAML syntax error: .+ at line \d+, column \d+:$/);
  });

  it('skips empty and comment-only documents', () => {
    const read = manifestObjects('f.yaml', `---\n# nothing\n---\n${svcYaml('a')}---\n---\n`);
    expect(read.events.map((e) => e.origin)).toEqual(['f.yaml#1']);
    expect(read.problems).toEqual([]);
  });

  it('reads List, ServiceList, EndpointSliceList and NodeList; typed list items may omit their kind', () => {
    const text = [
      'kind: List\napiVersion: v1\nitems:\n  - {kind: Node, apiVersion: v1, metadata: {name: n1}}\n  - {kind: Service, metadata: {name: s1, namespace: demo}}',
      'kind: ServiceList\napiVersion: v1\nitems:\n  - {metadata: {name: s2, namespace: demo}}',
      'kind: EndpointSliceList\napiVersion: discovery.k8s.io/v1\nitems:\n  - {metadata: {name: e1, namespace: demo}, addressType: IPv4}',
      'kind: NodeList\napiVersion: v1\nitems: []',
    ].join('\n---\n');
    const read = manifestObjects('lists.yaml', text);
    expect(read.problems).toEqual([]);
    expect(names(read.events)).toEqual(['Node/n1', 'Service/s1', 'Service/s2', 'EndpointSlice/e1']);
    expect(read.events.map((e) => e.origin)).toEqual([
      'lists.yaml#0.items[0]',
      'lists.yaml#0.items[1]',
      'lists.yaml#1.items[0]',
      'lists.yaml#2.items[0]',
    ]);
  });

  it('reports unsupported kinds, wrong API versions, missing kinds, lists in lists and non-objects', () => {
    const text = [
      'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: demo}',
      'apiVersion: discovery.k8s.io/v1beta1\nkind: EndpointSlice\nmetadata: {name: old, namespace: demo}',
      'metadata: {name: kindless}',
      'kind: List\nitems:\n  - {kind: List, items: []}\n  - 42',
      'kind: ServiceList\nitems: {a: 1}',
      'just a string',
      '- a\n- list',
      'kind: [Service]',
    ].join('\n---\n');
    const read = manifestObjects('bad.yaml', text);
    expect(read.events).toEqual([]);
    expect(read.problems.map((p) => `${p.origin}|${p.kind}|${p.namespace}/${p.name}|${p.reason}`)).toEqual([
      'bad.yaml#0|Deployment|demo/web|unsupported kind: only Service, EndpointSlice, Node, ServiceCIDR and lists of them are read',
      'bad.yaml#1|EndpointSlice|demo/old|apiVersion: EndpointSlice must be discovery.k8s.io/v1, got "discovery.k8s.io/v1beta1"',
      'bad.yaml#2||/kindless|kind: is required',
      'bad.yaml#3.items[0]|List|/|lists inside lists are not supported',
      'bad.yaml#3.items[1]||/|must be a Kubernetes object, got 42',
      'bad.yaml#4|ServiceList|/|items: must be a list, got an object',
      'bad.yaml#5||/|must be a Kubernetes object, got "just a string"',
      'bad.yaml#6||/|must be a Kubernetes object, got a list of 2 items',
      'bad.yaml#7||/|kind: must be a string, got a list of 1 items',
    ]);
  });

  it('reads ServiceCIDRs and their lists whatever their labels, cluster-scoped, and checks their apiVersion', () => {
    const text = [
      'apiVersion: networking.k8s.io/v1',
      'kind: ServiceCIDR',
      'metadata: {name: a, namespace: x, labels: {service.kubernetes.io/service-proxy-name: other}}',
      'spec: {cidrs: [10.96.0.0/16]}',
      '---',
      'apiVersion: networking.k8s.io/v1',
      'kind: ServiceCIDRList',
      'items: [{metadata: {name: b}, spec: {cidrs: ["fd00::/112"]}}]',
      '---',
      'apiVersion: networking.k8s.io/v1beta1',
      'kind: ServiceCIDR',
      'metadata: {name: c}',
      'spec: {cidrs: [10.97.0.0/16]}',
    ].join('\n');
    const read = manifestObjects('cidrs.yaml', text);
    expect(names(read.events)).toEqual(['ServiceCIDR/a', 'ServiceCIDR/b']);
    expect(
      read.events.map((e) => (e.object as { metadata: { namespace?: string } }).metadata.namespace),
    ).toEqual([undefined, undefined]);
    expect(read.events.every((e) => parseEvent(e).ok)).toBe(true);
    expect(read.ignored).toEqual([]);
    expect(read.problems.map((p) => `${p.origin} ${p.kind} ${p.name}: ${p.reason}`)).toEqual([
      'cidrs.yaml#2 ServiceCIDR c: apiVersion: ServiceCIDR must be networking.k8s.io/v1, got "networking.k8s.io/v1beta1"',
    ]);
  });

  it('gives namespaced objects without a namespace "default", as kubectl apply does, and Nodes none', () => {
    const text = `kind: Service\nmetadata: {name: a}\n---\nkind: Service\nmetadata: {name: b, namespace: ""}\n---\nkind: Node\nmetadata: {name: n, namespace: x}`;
    const read = manifestObjects('f.yaml', text);
    expect(
      read.events.map((e) => (e.object as { metadata: { namespace?: string } }).metadata.namespace),
    ).toEqual(['default', 'default', undefined]);
  });

  it('reads JSON files and reports their syntax errors', () => {
    expect(names(manifestObjects('a.json', '{"kind":"Node","metadata":{"name":"n"}}').events)).toEqual([
      'Node/n',
    ]);
    const bad = manifestObjects('b.json', '{"kind": "Node",');
    expect(bad.problems).toHaveLength(1);
    expect(bad.problems[0]?.origin).toBe('b.json#0');
    expect(bad.problems[0]?.reason).toMatch(/^JSON syntax error: /);
  });

  it('copes with a byte order mark and CRLF line ends', () => {
    const read = manifestObjects(
      'w.yaml',
      `\uFEFF${svcYaml('a')}---\n${svcYaml('b')}`.replaceAll('\n', '\r\n'),
    );
    expect(read.problems).toEqual([]);
    expect(names(read.events)).toEqual(['Service/a', 'Service/b']);
  });

  it('screens out a document nested too deep for the parser, keeping the others and their indexes', () => {
    const deep = `kind: Service\nmetadata: {name: deep, namespace: demo}\nspec: ${'['.repeat(50_000)}${']'.repeat(50_000)}\n`;
    const read = manifestObjects('deep.yaml', `${svcYaml('a')}---\n${deep}---\n${svcYaml('c')}`);
    expect(names(read.events)).toEqual(['Service/a', 'Service/c']);
    expect(read.events.map((e) => e.origin)).toEqual(['deep.yaml#0', 'deep.yaml#2']);
    expect(read.problems).toEqual([
      {
        origin: 'deep.yaml#1',
        kind: '',
        namespace: '',
        name: '',
        reason: 'document nested more than 100 levels deep',
      },
    ]);
    const indented = manifestObjects(
      'indent.yaml',
      `${svcYaml('a')}---\nkind: Node\nmetadata:\n${' '.repeat(1001)}name: n\n`,
    );
    expect(indented.problems.map((p) => `${p.origin}: ${p.reason}`)).toEqual([
      'indent.yaml#1: document indented more than 1000 columns',
    ]);
    const deepJson = manifestObjects('deep.json', `{"a": ${'['.repeat(50_000)}${']'.repeat(50_000)}}`);
    expect(deepJson.problems[0]?.reason).toBe('document nested more than 100 levels deep');
  });

  it('refuses a YAML alias bomb', () => {
    let text = 'a: &a [x, x, x, x, x, x, x, x, x, x]\n';
    for (let level = 1; level < 8; level++) {
      text += `l${level}: &l${level} [${Array(10)
        .fill(`*${level === 1 ? 'a' : `l${level - 1}`}`)
        .join(', ')}]\n`;
    }
    const read = manifestObjects('bomb.yaml', `${text}---\n${svcYaml('after')}`);
    expect(read.problems).toHaveLength(1);
    expect(read.problems[0]?.origin).toBe('bomb.yaml#0');
    expect(read.problems[0]?.reason).toMatch(/^YAML error: .*alias/i);
    expect(names(read.events)).toEqual(['Service/after']);
  });
});

describe('files and directories', () => {
  it('walks directories recursively in sorted order, skipping dot entries and other extensions', () => {
    const dir = fixtureDir({
      'b.yaml': svcYaml('b'),
      'a.yml': svcYaml('a'),
      'sub/c.json': '{"kind":"Node","metadata":{"name":"c"}}',
      'sub/deeper/d.yaml': svcYaml('d'),
      'notes.txt': 'not a manifest',
      '.hidden/e.yaml': svcYaml('e'),
      '..data/f.yaml': svcYaml('f'),
    });
    const listed = manifestFiles([dir]);
    expect(listed.problems).toEqual([]);
    expect(listed.files.map((f) => f.slice(dir.length + 1))).toEqual([
      'a.yml',
      'b.yaml',
      'sub/c.json',
      'sub/deeper/d.yaml',
    ]);
  });

  it('reads a file given explicitly whatever its extension, once even if named twice', () => {
    const dir = fixtureDir({ 'svc.manifest': svcYaml('x') });
    const file = join(dir, 'svc.manifest');
    expect(names(readManifests([file, file, dir]).events)).toEqual(['Service/x']);
  });

  it('reports a missing path and goes on', () => {
    const dir = fixtureDir({ 'a.yaml': svcYaml('a') });
    const read = readManifests([join(dir, 'missing.yaml'), dir]);
    expect(names(read.events)).toEqual(['Service/a']);
    expect(read.problems).toHaveLength(1);
    expect(read.problems[0]?.origin).toBe(join(dir, 'missing.yaml'));
    expect(read.problems[0]?.reason).toMatch(/^cannot read: ENOENT/);
  });

  it('does not loop on a symbolic link cycle', () => {
    const dir = fixtureDir({ 'sub/a.yaml': svcYaml('a') });
    symlinkSync(dir, join(dir, 'sub', 'loop'));
    expect(names(readManifests([dir]).events)).toEqual(['Service/a']);
  });

  it('keeps the later of two definitions of one object and reports the earlier', () => {
    const dir = fixtureDir({ '1.yaml': svcYaml('web'), '2.yaml': svcYaml('web', '  labels: {v: "2"}\n') });
    const read = readManifests([dir]);
    expect(read.events.map((e) => e.origin)).toEqual([join(dir, '2.yaml#0')]);
    expect(read.problems).toEqual([
      {
        origin: join(dir, '1.yaml#0'),
        kind: 'Service',
        namespace: 'demo',
        name: 'web',
        reason: `defined again at ${join(dir, '2.yaml#0')}, which is used`,
      },
    ]);
  });
});

describe('manifestChanges', () => {
  const event = (name: string, port: number, origin = `${name}.yaml#0`): SourceEvent => ({
    type: 'upsert',
    kind: 'Service',
    origin,
    object: { metadata: { name, namespace: 'demo' }, spec: { ports: [{ port }] } },
  });

  it('upserts new and changed objects, deletes vanished ones, ignores unchanged ones', () => {
    const { memory } = manifestChanges(new Map(), [event('a', 80), event('b', 80), event('c', 80)]);
    const { changes } = manifestChanges(memory, [event('a', 80), event('b', 81)]);
    expect(changes.map((c) => `${c.type} ${names([c])[0]}`)).toEqual([
      'upsert Service/b',
      'delete Service/c',
    ]);
    // What is remembered is a digest and the delete, not the object.
    expect(changes[1]).toEqual({
      type: 'delete',
      kind: 'Service',
      origin: 'c.yaml#0',
      object: { metadata: { namespace: 'demo', name: 'c' } },
    });
  });

  it('never deletes a nameless object, which the trackers cannot have stored', () => {
    const nameless: SourceEvent = {
      type: 'upsert',
      kind: 'Service',
      origin: 'x.yaml#0',
      object: { metadata: {} },
    };
    const { changes: first, memory } = manifestChanges(new Map(), [nameless]);
    expect(first).toEqual([nameless]);
    expect(manifestChanges(memory, []).changes).toEqual([]);
  });
});

describe('ManifestSource', () => {
  function waitFor<T>(register: (resolve: (value: T) => void) => void, ms = 5000): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`nothing within ${ms} ms`)), ms);
      register((value) => {
        clearTimeout(timer);
        resolve(value);
      });
    });
  }

  it('delivers everything at start, then the differences when files change', async () => {
    const dir = fixtureDir({ 'a.yaml': svcYaml('a'), 'b.yaml': svcYaml('b') });
    const batches: SourceEvent[][] = [];
    const problemReports: string[][] = [];
    let notify: ((events: SourceEvent[]) => void) | undefined;
    let notifyProblems: ((reasons: string[]) => void) | undefined;
    const source = new ManifestSource({
      paths: [dir],
      watch: true,
      debounceMs: 50,
      onProblems: (problems) => {
        const reasons = problems.map((p) => p.reason);
        problemReports.push(reasons);
        notifyProblems?.(reasons);
      },
    });
    try {
      await source.start((events) => {
        batches.push(events);
        notify?.(events);
      });
      expect(batches).toHaveLength(1);
      expect(names(batches[0] ?? [])).toEqual(['Service/a', 'Service/b']);
      expect(problemReports).toEqual([[]]);

      const changed = waitFor<SourceEvent[]>((resolve) => {
        notify = resolve;
      });
      writeFileSync(join(dir, 'a.yaml'), svcYaml('a', '  labels: {v: "2"}\n'));
      writeFileSync(join(dir, 'c.yaml'), svcYaml('c'));
      unlinkSync(join(dir, 'b.yaml'));
      const events = await changed;
      expect(events.map((e) => `${e.type} ${names([e])[0]}`).sort()).toEqual([
        'delete Service/b',
        'upsert Service/a',
        'upsert Service/c',
      ]);

      const broken = waitFor<string[]>((resolve) => {
        notifyProblems = (reasons) => {
          if (reasons.length > 0) resolve(reasons);
        };
      });
      writeFileSync(join(dir, 'c.yaml'), 'kind: Service\nmetadata: [\n');
      expect((await broken)[0]).toMatch(/^YAML syntax error/);
    } finally {
      await source.stop();
    }
  });

  it('delivers once without watching, and watches a single file through its directory', async () => {
    const dir = fixtureDir({ 'one.yaml': svcYaml('one'), 'other.yaml': svcYaml('other') });
    const once = new ManifestSource({ paths: [join(dir, 'one.yaml')] });
    const seen: SourceEvent[][] = [];
    await once.start((events) => seen.push(events));
    await once.stop();
    expect(seen.map(names)).toEqual([['Service/one']]);

    const watching = new ManifestSource({ paths: [join(dir, 'one.yaml')], watch: true, debounceMs: 50 });
    let notify: ((events: SourceEvent[]) => void) | undefined;
    try {
      await watching.start((events) => notify?.(events));
      const changed = waitFor<SourceEvent[]>((resolve) => {
        notify = resolve;
      });
      // Editors save by writing a new file and renaming it over the old one.
      writeFileSync(join(dir, 'one.yaml.tmp'), svcYaml('one', '  labels: {v: "2"}\n'));
      renameSync(join(dir, 'one.yaml.tmp'), join(dir, 'one.yaml'));
      expect(names(await changed)).toEqual(['Service/one']);
    } finally {
      await watching.stop();
    }
  });
});

describe('ManifestTree', () => {
  /** What a consumer holds after applying the events: object JSON by kind/namespace/name. */
  function applyEvents(state: Map<string, string>, events: readonly SourceEvent[]): void {
    for (const e of events) {
      const { namespace = 'default', name = '' } =
        (e.object as { metadata?: { namespace?: string; name?: string } }).metadata ?? {};
      const key = `${e.kind}/${namespace}/${name || e.origin}`;
      if (e.type === 'delete') state.delete(key);
      else state.set(key, JSON.stringify(e.object));
    }
  }

  it('after any sequence of file edits, what it delivers equals reading every file again', () => {
    const rand = mulberry32(0x6d616e69);
    const int = (n: number) => Math.floor(rand() * n);
    const dir = fixtureDir({});
    const files = ['a.yaml', 'b.yaml', 'c.json', 'sub/d.yaml', 'sub/e.yml'];
    const tree = new ManifestTree([dir]);
    const incremental = new Map<string, string>();
    let fullReads = 0;
    for (let step = 0; step < 300; step++) {
      const file = join(dir, files[int(files.length)]!);
      const op = int(10);
      if (op < 2) rmSync(file, { force: true });
      else if (op < 3)
        writeFileSync(file, 'kind: Service\nmetadata: [\n'); // malformed
      else {
        // 1-3 Services from a small pool of names (so objects move between files and collide now
        // and then), with a label that changes.
        const count = 1 + int(3);
        const docs = Array.from({ length: count }, () =>
          svcYaml(`s${int(8)}`, `  labels: {v: "${int(3)}"}\n`),
        );
        mkdirSync(join(file, '..'), { recursive: true });
        writeFileSync(
          file,
          file.endsWith('.json')
            ? JSON.stringify({
                apiVersion: 'v1',
                kind: 'Service',
                metadata: { name: `s${int(8)}`, namespace: 'demo', labels: { v: String(int(3)) } },
                spec: { clusterIP: '10.96.0.1', ports: [{ port: 80 }] },
              })
            : docs.join('---\n'),
        );
      }
      const { changes, problems } = tree.reload();
      applyEvents(incremental, changes);
      const full = readManifests([dir]);
      const fromScratch = new Map<string, string>();
      applyEvents(fromScratch, full.events);
      expect(incremental, `step ${step}`).toEqual(fromScratch);
      const reasons = (ps: readonly { origin: string; reason: string }[]) =>
        ps.map((p) => `${p.origin}: ${p.reason}`).sort();
      expect(reasons(problems), `step ${step}`).toEqual(reasons(full.problems));
      if (full.problems.some((p) => /defined again/.test(p.reason))) fullReads++;
    }
    // The sequence did exercise objects defined in two files (the full-read path) and single ones.
    expect(fullReads).toBeGreaterThan(10);
    expect(fullReads).toBeLessThan(290);
  });
});
