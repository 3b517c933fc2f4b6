import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { type DemoCluster, startDemoCluster } from '../../src/cli/demo.js';
import { deleteStaleNamespaces, Lab, type RequestResult } from '../../src/lab/netns.js';
import { describeRoot } from '../support/privileges.js';

// The bpf data plane driven by real agents (`run --proxy-mode bpf --manifests DIR`) on the demo's
// two-node cluster: the semantics the demo does not show, an endpoint removed under traffic, and
// an agent restart under traffic (pod clients on the tc path, node clients on the socket hooks). Needs `npm run build` (agents run dist/).

const PREFIX = `kbpbpf${process.pid}`;
const POD_A = 'pod-10.244.1.30';
const POD_B = 'pod-10.244.2.30';

const backendsOf = (results: RequestResult[]) => new Set(results.map((r) => r.backend ?? `error:${r.error}`));
const failures = (results: RequestResult[]) => results.filter((r) => r.error !== null);

/** Rewrites one EndpointSlice of a manifest file in place (the agents watch the directory). */
function editSlice(
  file: string,
  sliceName: string,
  edit: (slice: { endpoints: { addresses: string[] }[] }) => void,
): void {
  const docs = parseAllDocuments(readFileSync(file, 'utf8'));
  const out = docs.map((doc) => {
    const object = doc.toJS() as { kind?: string; metadata?: { name?: string } };
    if (object?.kind === 'EndpointSlice' && object.metadata?.name === sliceName) edit(object as never);
    return JSON.stringify(object);
  });
  writeFileSync(file, out.join('\n---\n'));
}

describeRoot('bpf data plane under real agents', () => {
  const lab = new Lab(PREFIX);
  const workDir = mkdtempSync(join(tmpdir(), 'kbp-bpf-e2e-'));
  const manifests = join(workDir, 'manifests');
  const pinRoot = `/sys/fs/bpf/${PREFIX}`;
  let demo: DemoCluster;

  beforeAll(async () => {
    await deleteStaleNamespaces(PREFIX);
    cpSync('examples/manifests', manifests, { recursive: true });
    demo = await startDemoCluster(lab, { mode: 'bpf', manifests, workDir, pinRoot });
  });

  afterAll(async () => {
    for (const agent of demo?.agents.values() ?? []) await agent.stop();
    await lab.destroy();
    rmSync(pinRoot, { recursive: true, force: true });
    rmSync(workDir, { recursive: true, force: true });
  });

  it('iTP=Local: ClusterIP traffic reaches only the endpoint on the client pod node', async () => {
    const fromA = await lab.requests(demo.cluster.podNs(POD_A), '10.96.0.50:9100', {
      proto: 'tcp',
      count: 10,
    });
    expect(backendsOf(fromA)).toEqual(new Set(['pod-10.244.1.50']));
    const fromB = await lab.requests(demo.cluster.podNs(POD_B), '10.96.0.50:9100', {
      proto: 'tcp',
      count: 10,
    });
    expect(backendsOf(fromB)).toEqual(new Set(['pod-10.244.2.50']));
  });

  it('externalIP from outside reaches the endpoints on both nodes', async () => {
    const results = await lab.requests(demo.cluster.clientNs('allowed'), '192.0.2.50:80', {
      proto: 'tcp',
      count: 20,
    });
    expect(failures(results)).toEqual([]);
    expect(backendsOf(results)).toEqual(new Set(['pod-10.244.1.40', 'pod-10.244.2.40']));
  });

  it('UDP ClusterIP from a pod on the other node reaches both dns pods', async () => {
    const results = await lab.requests(demo.cluster.podNs(POD_B), '10.96.0.53:53', {
      proto: 'udp',
      count: 20,
    });
    expect(failures(results)).toEqual([]);
    expect(backendsOf(results)).toEqual(new Set(['pod-10.244.1.20', 'pod-10.244.2.20']));
  });

  it('an endpoint removed under traffic: no connection fails, and the removed one gets no new ones', async () => {
    const agentA = demo.agents.get('node-a')!;
    const syncsBefore = agentA.syncs.length;
    let trafficEnded = 0;
    const traffic = lab
      .requests(demo.cluster.podNs(POD_A), '10.96.0.11:80', { proto: 'tcp', count: 2500, timeoutMs: 3000 })
      .finally(() => {
        trafficEnded = Date.now();
      });
    await new Promise((resolve) => setTimeout(resolve, 800));
    editSlice(join(manifests, 'web.yaml'), 'web-nodeport-p4m8d', (slice) => {
      slice.endpoints = slice.endpoints.filter((ep) => ep.addresses[0] !== '10.244.2.10');
    });
    await agentA.waitForSync(syncsBefore + 1, 30_000);
    const synced = Date.now();
    const results = await traffic;
    // The change reached the kernel while traffic was flowing.
    expect(trafficEnded === 0 || trafficEnded > synced).toBe(true);
    expect(failures(results)).toEqual([]);
    expect(backendsOf(results.slice(0, 50)).has('pod-10.244.2.10')).toBe(true);
    const after = await lab.requests(demo.cluster.podNs(POD_A), '10.96.0.11:80', { proto: 'tcp', count: 30 });
    expect(failures(after)).toEqual([]);
    expect(backendsOf(after)).toEqual(new Set(['pod-10.244.1.10', 'pod-10.244.1.11']));
  });

  it('the agent restarted under continuous traffic, from a pod (tc) and from the node itself (socket hooks): zero failed requests', async () => {
    const from = demo.cluster.podNs(POD_A);
    const host = demo.cluster.nodeNs('node-a');
    let trafficEnded = 0;
    const traffic = Promise.all([
      lab.requests(from, '10.96.0.53:53', { proto: 'udp', count: 6000, timeoutMs: 3000 }),
      lab.requests(from, '10.96.0.10:80', { proto: 'tcp', count: 2500, timeoutMs: 3000 }),
      lab.requests(host, '10.96.0.10:80', { proto: 'tcp', count: 2500, timeoutMs: 3000 }),
    ]).finally(() => {
      trafficEnded = Date.now();
    });
    await new Promise((resolve) => setTimeout(resolve, 500));
    await demo.agents.get('node-a')!.stop();
    await demo.startAgent('node-a');
    const restarted = Date.now();
    const [udp, tcp, fromHost] = await traffic;
    // The restart happened while traffic was flowing.
    expect(trafficEnded === 0 || trafficEnded > restarted).toBe(true);
    expect(failures(udp)).toEqual([]);
    expect(failures(tcp)).toEqual([]);
    expect(failures(fromHost)).toEqual([]);
    expect(udp).toHaveLength(6000);
    expect(tcp).toHaveLength(2500);
    expect(fromHost).toHaveLength(2500);
  });
});
