// Differential test against kube-proxy itself: the real kube-proxy binary (built by
// scripts/install-control-plane.sh from the same Kubernetes release as the API server) and our
// agent, each in its own network namespace with the same node facts (eth0 10.10.0.1/24, a default
// route, node-a's Node object), both fed by the same real API server, in iptables mode and in
// nftables mode. For a corpus of Services and EndpointSlices (examples/manifests and a seeded
// random generator) what each programs is compared: `iptables-save` / `ip6tables-save` and
// `nft list table`, normalised only for order and counters. Then again after a sequence of changes
// (partial syncs).
//
// Needs `npm run build` and the control plane.

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { LabAgent } from '../../src/lab/agent.js';
import { ControlPlane } from '../../src/lab/control-plane.js';
import { collectionPath, create, createNode, mergePatch, objectPath } from '../../src/lab/kube-objects.js';
import { KubeProxyProcess, kubeProxyConfig } from '../../src/lab/kube-proxy.js';
import { deleteStaleNamespaces, Lab } from '../../src/lab/netns.js';
import { describeControlPlane } from '../support/control-plane.js';
import { type K8sObject, parseObjects } from '../support/helm.js';
import { mulberry32 } from '../support/random.js';

// KBP_LAB_PREFIX (e.g. "hnf") keeps runs of several people on one machine apart.
const PREFIX = `${process.env.KBP_LAB_PREFIX ?? 'hcp'}-diff${process.pid}`;
const repo = (path: string) => fileURLToPath(new URL(`../../${path}`, import.meta.url));
const CLI = repo('dist/src/cli/main.js');
const SEED = Number(process.env.KBP_DIFF_SEED ?? 15);
const RANDOM_SERVICES = 40;
const MODES = ['iptables', 'nftables'] as const;
type Mode = (typeof MODES)[number];

const NODES = [
  { name: 'node-a', ip: '10.10.0.1', podCIDR: '10.244.1.0/24', zone: 'zone-a' },
  { name: 'node-b', ip: '10.10.0.2', podCIDR: '10.244.2.0/24', zone: 'zone-b' },
];

/**
 * The same KubeProxyConfiguration for kube-proxy and for us. A short syncPeriod: chains flushed by
 * a partial sync are deleted by the next sync (either implementation), so after changes both reach
 * their steady state within the comparison's wait. minSyncPeriod stays at its 1s default (a 0s
 * would be the zero value, which v1alpha1 defaulting turns into 1s anyway).
 */
function proxyConfig(mode: Mode, kubeconfig: string): string {
  return kubeProxyConfig({
    mode,
    hostname: 'node-a',
    clusterCIDR: '10.244.0.0/16',
    kubeconfig,
    contentType: 'application/json',
    syncPeriod: '5s',
  });
}

/** Rules as a multiset of lines: comments, counters and handles dropped, lines sorted. */
export function normaliseIptables(save: string): string[] {
  const out: string[] = [];
  let table = '';
  for (const raw of save.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    if (line.startsWith('*')) table = line;
    out.push(`${table} ${line.replace(/\s\[\d+:\d+\]$/, '').replace(/^\[\d+:\d+\]\s/, '')}`);
  }
  return out.sort();
}

export function normaliseNft(list: string): string[] {
  const out: string[] = [];
  // Each line is prefixed with the table, chain, set or map it is in (tracked by brace depth).
  const stack: string[] = [];
  for (const raw of list.split('\n')) {
    const line = raw
      .replace(/\s*# handle \d+/, '')
      .replace(/counter packets \d+ bytes \d+/g, 'counter')
      .trim();
    if (line === '') continue;
    const context = stack.filter((h) => h !== '').at(-1) ?? '';
    out.push(`${context} | ${line}`);
    const net = (line.match(/\{/g)?.length ?? 0) - (line.match(/\}/g)?.length ?? 0);
    const header = /^(table|chain|set|map|flowtable) /.test(line) ? line.replace(/\s*\{$/, '') : '';
    for (let i = 0; i < net; i++) stack.push(i === 0 ? header : '');
    for (let i = 0; i < -net; i++) stack.pop();
  }
  return out.sort();
}

/**
 * The differences this test has found between kube-proxy v1.37.2 and our rule modes, by kind, that
 * are not fixed yet (none now: every kind found so far was a bug in ours and is fixed). A line that
 * matches none of them is a new difference and fails the test.
 */
export const KNOWN_DIFFERENCES: {
  id: string;
  mode: Mode;
  side: 'kube-proxy' | 'ours';
  what: string;
  match: RegExp;
}[] = [];

/** Splits differences into known kinds (counted) and unknown lines. */
export function classify(
  mode: Mode,
  side: 'kube-proxy' | 'ours',
  lines: string[],
): { known: Map<string, number>; unknown: string[] } {
  const known = new Map<string, number>();
  const unknown: string[] = [];
  for (const line of lines) {
    const kind = KNOWN_DIFFERENCES.find((k) => k.mode === mode && k.side === side && k.match.test(line));
    if (kind) known.set(kind.id, (known.get(kind.id) ?? 0) + 1);
    else unknown.push(line);
  }
  return { known, unknown };
}

/** Lines only in a, only in b (multiset difference). */
export function diffLines(a: string[], b: string[]): { onlyA: string[]; onlyB: string[] } {
  const count = new Map<string, number>();
  for (const l of a) count.set(l, (count.get(l) ?? 0) + 1);
  const onlyB: string[] = [];
  for (const l of b) {
    const n = count.get(l) ?? 0;
    if (n > 0) count.set(l, n - 1);
    else onlyB.push(l);
  }
  const onlyA = [...count].flatMap(([l, n]) => Array.from({ length: n }, () => l));
  return { onlyA, onlyB };
}

/** examples/manifests as a user would create them: Services without selectors, slices as given. */
function exampleObjects(): K8sObject[] {
  const dir = repo('examples/manifests');
  const objects: K8sObject[] = [];
  for (const file of [
    'dns.yaml',
    'empty.yaml',
    'ext.json',
    'internal-local.yaml',
    'sticky.yaml',
    'web.yaml',
  ]) {
    const text = readFileSync(join(dir, file), 'utf8');
    const parsed = file.endsWith('.json') ? (JSON.parse(text).items as K8sObject[]) : parseObjects(text);
    objects.push(...parsed);
  }
  return objects;
}

/** Seeded Services and EndpointSlices over every field the brain reads. */
function randomObjects(seed: number, count: number): K8sObject[] {
  const rand = mulberry32(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)] as T;
  const objects: K8sObject[] = [];
  for (let i = 0; i < count; i++) {
    const name = `r${i}`;
    const type = pick(['ClusterIP', 'ClusterIP', 'NodePort', 'LoadBalancer'] as const);
    const portCount = 1 + Math.floor(rand() * 2);
    const ports = Array.from({ length: portCount }, (_, p) => ({
      name: `p${p}`,
      protocol: pick(['TCP', 'TCP', 'UDP', 'SCTP'] as const),
      port: 80 + p,
      targetPort: 8080 + p,
    }));
    const external = type !== 'ClusterIP';
    const spec: Record<string, unknown> = {
      type,
      ports,
      ...(rand() < 0.2
        ? {
            sessionAffinity: 'ClientIP',
            sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 + Math.floor(rand() * 1000) } },
          }
        : {}),
      ...(rand() < 0.3 ? { internalTrafficPolicy: 'Local' } : {}),
      ...(external && rand() < 0.4 ? { externalTrafficPolicy: 'Local' } : {}),
      ...(rand() < 0.15 ? { externalIPs: [`192.0.2.${100 + i}`] } : {}),
      ...(type === 'LoadBalancer' && rand() < 0.4
        ? { loadBalancerSourceRanges: ['203.0.113.0/24', `198.18.${i}.0/24`] }
        : {}),
      ...(rand() < 0.15 ? { trafficDistribution: 'PreferClose' } : {}),
    };
    const lbIngress =
      type === 'LoadBalancer' && rand() < 0.8 ? [{ ip: `198.51.100.${i + 1}`, ipMode: 'VIP' }] : null;
    objects.push({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: {
        name,
        namespace: 'diff',
        ...(lbIngress ? { annotations: { 'hcp/lb-ingress': JSON.stringify(lbIngress) } } : {}),
      },
      spec,
    });
    const endpointCount = Math.floor(rand() * 5);
    if (rand() < 0.1) continue; // no slice at all
    const endpoints = Array.from({ length: endpointCount }, (_, e) => {
      const node = pick(NODES);
      const state = pick([
        'ready',
        'ready',
        'ready',
        'unready',
        'terminating-serving',
        'terminating',
      ] as const);
      const conditions =
        state === 'ready'
          ? { ready: true, serving: true, terminating: false }
          : state === 'unready'
            ? { ready: false, serving: false, terminating: false }
            : { ready: false, serving: state === 'terminating-serving', terminating: true };
      return {
        addresses: [`10.244.${node.name === 'node-a' ? 1 : 2}.${((i * 5 + e) % 250) + 2}`],
        conditions,
        nodeName: node.name,
        zone: node.zone,
        ...(spec.trafficDistribution && rand() < 0.8 ? { hints: { forZones: [{ name: node.zone }] } } : {}),
      };
    });
    objects.push({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: `${name}-s`, namespace: 'diff', labels: { 'kubernetes.io/service-name': name } },
      addressType: 'IPv4',
      ports: ports.map((p) => ({ name: p.name, protocol: p.protocol, port: p.targetPort })),
      endpoints,
    });
  }
  return objects;
}

describeControlPlane('kube-proxy itself vs our agent, same API server, same node facts', () => {
  const lab = new Lab(PREFIX);
  let cp: ControlPlane;
  const processes: { stop(): Promise<void>; tail(): string; name: string }[] = [];
  const kubeProxies = new Map<Mode, KubeProxyProcess>();
  const corpus = { examples: 0, random: 0, rejected: [] as string[] };

  /** Creates an object through the API (LB ingress via the status subresource); the server's rejections are recorded. */
  async function apply(object: K8sObject): Promise<void> {
    const annotations = (object.metadata.annotations ?? {}) as Record<string, string>;
    const lbIngress = annotations['hcp/lb-ingress'];
    const { selector: _selector, ...spec } = (object.spec ?? {}) as Record<string, unknown>;
    const labels: Record<string, string> = { ...((object.metadata.labels ?? {}) as Record<string, string>) };
    if (object.kind === 'EndpointSlice') labels['endpointslice.kubernetes.io/managed-by'] = 'hcp-harness';
    const body: K8sObject = {
      ...object,
      metadata: { ...object.metadata, labels },
      ...(object.spec ? { spec } : {}),
    };
    delete body.status;
    const answer = await cp.request('POST', collectionPath(object), body);
    if (answer.status !== 201) {
      corpus.rejected.push(
        `${object.kind} ${object.metadata.name}: ${JSON.stringify(answer.body).slice(0, 200)}`,
      );
      return;
    }
    const ingress = lbIngress ? JSON.parse(lbIngress) : object.status?.loadBalancer?.ingress;
    if (object.kind === 'Service' && ingress) {
      await mergePatch(cp, `${objectPath(object)}/status`, { status: { loadBalancer: { ingress } } });
    }
  }

  async function nodeNamespace(name: string, index: number): Promise<string> {
    await lab.addNamespace(name);
    // eth0 leads to a namespace of its own that answers nothing (this kernel has no dummy links).
    await lab.link(name, 'eth0', 'sink', `s${index}`);
    await lab.addAddress(name, 'eth0', '10.10.0.1/24');
    await lab.addRoute(name, 'default', 'via', '10.10.0.254', 'dev', 'eth0');
    await lab.sysctl(name, 'net.ipv4.ip_forward', '1');
    return cp.linkNamespace(name, index);
  }

  async function startKubeProxy(ns: string, mode: Mode, server: string): Promise<void> {
    const kubeconfig = join(cp.workDir, `${ns}.kubeconfig`);
    writeFileSync(kubeconfig, cp.kubeconfig(cp.adminToken, server));
    const configPath = join(cp.workDir, `${ns}.conf`);
    writeFileSync(configPath, proxyConfig(mode, kubeconfig));
    const start = () =>
      KubeProxyProcess.start({ lab, ns, binary: join(cp.binaries.k8s, 'kube-proxy'), configPath, mode });
    let kubeProxy = start();
    // kube-proxy v1.37.2 can run its first sync before its node handler has the Node's labels
    // (it logs "... since node is missing label"), and in nftables mode its partial syncs never
    // revisit topology after they arrive: its rules then depend on that race, not on the objects.
    // Started again, it reads the Node from its cache before syncing. Bounded: three starts.
    const raced = () => kubeProxy.lines.some((l) => /node is missing label/.test(String(l.msg)));
    for (let attempt = 1; ; attempt++) {
      await kubeProxy.waitForSync(1, 60_000);
      if (!raced() || attempt === 3) break;
      console.log(
        `kube-proxy ${mode}: its first sync ran before it had the Node's labels; starting it again`,
      );
      await kubeProxy.stop();
      kubeProxy = start();
    }
    const started = kubeProxy;
    kubeProxies.set(mode, started);
    processes.push({
      name: `kube-proxy ${mode}`,
      tail: () => started.tail(),
      stop: () => started.stop(),
    });
  }

  async function startAgent(ns: string, mode: Mode, server: string): Promise<void> {
    const kubeconfig = join(cp.workDir, `${ns}.kubeconfig`);
    writeFileSync(kubeconfig, cp.kubeconfig(cp.adminToken, server));
    const config = join(cp.workDir, `${ns}.conf`);
    writeFileSync(config, proxyConfig(mode, kubeconfig));
    const agent = LabAgent.start(lab, ns, CLI, ['--config', config]);
    processes.push({ name: `agent ${mode}`, tail: () => agent.tail(), stop: () => agent.stop() });
    await agent.waitForSync(1, 60_000);
  }

  async function programmed(ns: string, mode: Mode): Promise<string[]> {
    if (mode === 'iptables') {
      const v4 = await lab.exec(ns, 'iptables-save', []);
      const v6 = await lab.exec(ns, 'ip6tables-save', []);
      return [
        ...normaliseIptables(v4.stdout).map((l) => `v4 ${l}`),
        ...normaliseIptables(v6.stdout).map((l) => `v6 ${l}`),
      ];
    }
    const lines: string[] = [];
    for (const family of ['ip', 'ip6']) {
      const listed = await lab.exec(ns, 'nft', ['list', 'table', family, 'kube-proxy'], {
        allowFailure: true,
      });
      lines.push(
        ...normaliseNft(listed.code === 0 ? listed.stdout : `(no table: ${listed.stderr.trim()})`).map(
          (l) => `${family} ${l}`,
        ),
      );
    }
    return lines;
  }

  /** Polls both until they agree but for known differences (each converges at its own pace), bounded; returns the last difference. */
  async function compare(
    mode: Mode,
    settled: (lines: string[]) => boolean = () => true,
  ): Promise<{ onlyKubeProxy: string[]; onlyOurs: string[]; lines: number; settled: boolean }> {
    let last = { onlyKubeProxy: [] as string[], onlyOurs: [] as string[], lines: 0, settled: false };
    const deadline = Date.now() + 20_000;
    do {
      const theirs = await programmed(`kp-${mode}`, mode);
      const ours = await programmed(`us-${mode}`, mode);
      const { onlyA, onlyB } = diffLines(theirs, ours);
      last = {
        onlyKubeProxy: onlyA,
        onlyOurs: onlyB,
        lines: theirs.length,
        settled: settled(theirs) && settled(ours),
      };
      if (
        settled(theirs) &&
        settled(ours) &&
        classify(mode, 'kube-proxy', onlyA).unknown.length === 0 &&
        classify(mode, 'ours', onlyB).unknown.length === 0
      )
        break;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    } while (Date.now() < deadline);
    return last;
  }

  beforeAll(async () => {
    await deleteStaleNamespaces(PREFIX);
    cp = await ControlPlane.start(lab);
    for (const node of NODES) await createNode(cp, node);
    await create(cp, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'demo' } });
    await create(cp, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'diff' } });
    const examples = exampleObjects();
    for (const object of examples) await apply(object);
    corpus.examples = examples.length;
    // Every example is valid: a rejection would shrink the corpus without a word.
    expect(corpus.rejected).toEqual([]);
    const random = randomObjects(SEED, RANDOM_SERVICES);
    for (const object of random) await apply(object);
    corpus.random = random.length;
    await lab.addNamespace('sink');
    let index = 1;
    for (const mode of MODES) {
      const theirs = await nodeNamespace(`kp-${mode}`, index++);
      const ours = await nodeNamespace(`us-${mode}`, index++);
      await startKubeProxy(`kp-${mode}`, mode, theirs);
      await startAgent(`us-${mode}`, mode, ours);
    }
  });

  afterEach((context) => {
    if (context.task.result?.state === 'fail') {
      cp?.printLogs();
      for (const p of processes) console.log(`----- ${p.name} (last lines) -----\n${p.tail().slice(-6000)}`);
    }
  });

  afterAll(async () => {
    for (const p of processes) await p.stop();
    await cp?.stop();
    await lab.destroy();
  });

  /** Compares, prints every difference and its kind, and fails on any difference of no known kind. */
  async function check(mode: Mode, stage: string, settled?: (lines: string[]) => boolean): Promise<void> {
    const result = await compare(mode, settled);
    const theirs = classify(mode, 'kube-proxy', result.onlyKubeProxy);
    const ours = classify(mode, 'ours', result.onlyOurs);
    const kinds = [...new Set([...theirs.known.keys(), ...ours.known.keys()])];
    console.log(
      `differential ${mode} (${stage}): corpus ${corpus.examples} example + ${corpus.random} random objects (seed ${SEED}), ` +
        `${corpus.rejected.length} rejected by the API server; kube-proxy programmed ${result.lines} lines; ` +
        `${result.onlyKubeProxy.length} only in kube-proxy's, ${result.onlyOurs.length} only in ours; known kinds: ` +
        (kinds.map((k) => `${k} (${theirs.known.get(k) ?? 0}/${ours.known.get(k) ?? 0})`).join(', ') ||
          'none'),
    );
    for (const line of theirs.unknown) console.log(`  only kube-proxy: ${line}`);
    for (const line of ours.unknown) console.log(`  only ours:       ${line}`);
    expect(result.settled, 'both applied the changes').toBe(true);
    expect({ onlyKubeProxy: theirs.unknown, onlyOurs: ours.unknown }).toEqual({
      onlyKubeProxy: [],
      onlyOurs: [],
    });
  }

  for (const mode of MODES) {
    it(`${mode}: the same rules as kube-proxy for the corpus, but for the known differences`, async () => {
      await check(mode, 'full sync');
      // The periods of proxyConfig, as kube-proxy reads them (0s minSyncPeriod defaults to 1s).
      const params = kubeProxies.get(mode)?.syncParams();
      console.log(`kube-proxy ${mode}: ${JSON.stringify(params ?? '(no sync params line)')}`);
      expect(params).toMatchObject({ minSyncPeriod: '1s', syncPeriod: '5s' });
    });
  }

  it('after a sequence of changes (partial syncs), still the same but for the known differences', async () => {
    const rand = mulberry32(SEED + 1);
    const services = (await cp.api<{ items: K8sObject[] }>('GET', '/api/v1/namespaces/diff/services')).items;
    const deleted = services.filter(() => rand() < 0.2).map((svc) => svc.metadata.name);
    for (const name of deleted) {
      await cp.api('DELETE', `/api/v1/namespaces/diff/services/${name}`);
    }
    const slices = (
      await cp.api<{ items: K8sObject[] }>('GET', '/apis/discovery.k8s.io/v1/namespaces/diff/endpointslices')
    ).items;
    for (const slice of slices.filter(() => rand() < 0.3)) {
      const endpoints = (slice.endpoints ?? []).map((e: { conditions: { ready: boolean } }) => ({
        ...e,
        conditions: {
          ...e.conditions,
          ready: !e.conditions.ready,
          serving: !e.conditions.ready,
          terminating: false,
        },
      }));
      const object = { ...slice, apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', endpoints };
      await cp.api('PUT', objectPath(object), object);
    }
    // New Services (and their slices) under new names.
    for (const object of randomObjects(SEED + 2, 8)) {
      const labels = { ...((object.metadata.labels ?? {}) as Record<string, string>) };
      const owner = labels['kubernetes.io/service-name'];
      if (owner) labels['kubernetes.io/service-name'] = `n${owner}`;
      await apply({ ...object, metadata: { ...object.metadata, name: `n${object.metadata.name}`, labels } });
    }
    // Chains a sync flushes are deleted by the first sync a second later (both implementations):
    // one more change after that second, so that what is compared is the steady state.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await apply({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'last', namespace: 'diff' },
      spec: { ports: [{ name: 'http', protocol: 'TCP', port: 80, targetPort: 8080 }] },
    });
    // Both have caught up once the last Service is in and the deleted ones gone from their rules.
    const settled = (lines: string[]) =>
      lines.some((l) => l.includes('diff/last')) &&
      !lines.some((l) => deleted.some((name) => l.includes(`diff/${name}:`) || l.includes(`diff/${name}/`)));
    expect(deleted.length).toBeGreaterThan(0);
    for (const mode of MODES)
      await check(
        mode,
        `after changes: ${deleted.length} Services deleted, 8 added, slices flipped`,
        settled,
      );
  });
});
