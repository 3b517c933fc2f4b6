// Issue 30, item 2: a live move from the real kube-proxy (v1.37.2, iptables mode, then nftables
// mode) to kube-bpf-proxy and back, on the real-node lab's two nodes (src/lab/real-node.ts), with
// long-lived flows open across each move: TCP connections and connected UDP sockets through a
// ClusterIP from a pod and from the node itself, and through a NodePort from outside, each asking
// its backend's name every 100 ms (test/support/lab/stream-client.mjs).
//
//   kube-proxy → bpf, as the README's migration steps do it: kube-proxy stops (its DaemonSet
//   deleted: its rules stay), `kube-bpf-proxy cleanup` runs (the chart's init container with
//   cleanupKubeProxyRules=true), the agents start with what the chart renders.
//   bpf → kube-proxy, as docs/install.md's rollback does it: the agents stop (their pins and
//   programs stay), `kube-bpf-proxy cleanup` runs on each node, kube-proxy starts again.
//
// Each flow must go on answering, from the backend that answered it first: none broken (a reset,
// a close, an answer from another backend, or silence), in either direction. The flows opened
// before the first move are followed through both. Each node keeps its own mount namespace (its
// /run, and the bpffs its first agent mounts there: the lab mounts none) in a process of its own
// (nodeMounts), as a node's mounts outlive its agents.
//
// Needs `npm run build`, the CNI plugins of scripts/install-deps.sh and the control plane of
// scripts/install-control-plane.sh (kube-proxy and the API server it watches).

import type { ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BPFFS_ROOT } from '../../src/host/bpffs.js';
import { nodeMounts } from '../../src/lab/agent.js';
import { ControlPlane } from '../../src/lab/control-plane.js';
import { collectionPath, createNode, type K8sObject } from '../../src/lab/kube-objects.js';
import { iptablesBackendDir, KubeProxyProcess, kubeProxyConfig } from '../../src/lab/kube-proxy.js';
import { deleteStaleNamespaces, Lab } from '../../src/lab/netns.js';
import { RealNodeLab } from '../../src/lab/real-node.js';
import { CNI_BIN } from '../../src/lab/real-node-cni.js';
import type { LabService } from '../../src/lab/real-node-objects.js';
import { REAL_NODES } from '../../src/lab/real-node-plan.js';
import { describeControlPlane } from '../support/control-plane.js';
import { type FlowReport, type FlowSpec, LabStreams } from '../support/lab/streams.js';

const repo = (path: string) => fileURLToPath(new URL(`../../${path}`, import.meta.url));
const CLI = repo('dist/src/cli/main.js');
const MODES = ['iptables', 'nftables'] as const;
type Mode = (typeof MODES)[number];

const NODE_A = REAL_NODES[0]!;
const STREAM = 7000;
const DNS = 5353;
/** Flows of each kind (source, protocol): enough that both backends are chosen. */
const FLOWS_PER_KIND = 4;
const ASK_INTERVAL_MS = 100;
/** Time after a move before the flows are judged: TCP's retransmissions of what the move held or
 * lost (0.2, 0.6, 1.4, 3 s after it, as the backoff doubles) have arrived by then. */
const SETTLE_MS = 5000;
/** A flow silent this long when judged is broken: it asks every 100 ms. Shorter pauses are
 * reported (the longest of each move). */
const SILENCE_MS = 2000;
/** Bounds every node-mount holder and stream client (the whole file takes about two minutes). */
const LIFETIME_S = 900;

const SERVICE_IP = '10.96.1.3';
const SERVICE: LabService = {
  name: 'web',
  type: 'NodePort',
  clusterIP: SERVICE_IP,
  externalTrafficPolicy: 'Cluster',
  ports: [
    { name: 'stream', protocol: 'TCP', port: 80, targetPort: STREAM, nodePort: 30080 },
    { name: 'dns', protocol: 'UDP', port: 53, targetPort: DNS, nodePort: 30053 },
  ],
  endpoints: [{ pod: 'a2' }, { pod: 'b2' }],
};
const BACKENDS = ['a2', 'b2'];

/** Where each kind of flow starts and what it sends to. */
const SOURCES = [
  { from: 'pod', tcp: `${SERVICE_IP}:80`, udp: `${SERVICE_IP}:53` },
  { from: 'host', tcp: `${SERVICE_IP}:80`, udp: `${SERVICE_IP}:53` },
  { from: 'outside', tcp: `${NODE_A.ip}:30080`, udp: `${NODE_A.ip}:30053` },
] as const;

function flowSpecs(source: (typeof SOURCES)[number], tag: string): FlowSpec[] {
  return (['tcp', 'udp'] as const).flatMap((proto) =>
    Array.from({ length: FLOWS_PER_KIND }, (_, i) => ({
      id: `${tag} ${source.from} ${proto} ${i}`,
      proto,
      target: source[proto],
    })),
  );
}

/** Why a flow counts as broken since `before` (null: it is not). */
export function brokenBecause(before: FlowReport, after: FlowReport): string | null {
  const newErrors = after.errors.slice(before.errors.length);
  if (newErrors.length > 0) return `socket errors ${newErrors.join(', ')}`;
  if (after.backends.length > 1) return `answered by ${after.backends.join(' then ')}`;
  if (after.answers <= before.answers) return 'no answer since';
  if (after.sinceAnswerMs > SILENCE_MS) return `silent for ${after.sinceAnswerMs} ms`;
  return null;
}

/** A group of flows followed through a move: the broken ones, each with why. */
function judge(before: FlowReport[], after: FlowReport[]): { broken: string[]; figure: string } {
  const broken: string[] = [];
  let pauseMs = 0;
  for (const b of before) {
    const a = after.find((r) => r.id === b.id);
    const why = a ? brokenBecause(b, a) : 'missing from the report';
    if (why) broken.push(`${b.id} (${b.backend}): ${why}`);
    else pauseMs = Math.max(pauseMs, a?.maxGapMs ?? 0);
  }
  const figure = `${broken.length}/${before.length} broken, the others' longest pause ${pauseMs} ms`;
  return { broken, figure };
}

describeControlPlane('live migration between the real kube-proxy and kube-bpf-proxy, open flows kept', () => {
  const lab = new Lab(`kbpmig${process.pid}`);
  let nodes: RealNodeLab;
  let cp: ControlPlane;
  const holders = new Map<string, ChildProcess>();
  const kubeProxies: KubeProxyProcess[] = [];
  const streams: LabStreams[] = [];
  /** "mode direction: broken/total, longest pause", printed at the end for the figures. */
  const figures: string[] = [];

  const sourceNs = (from: string) =>
    from === 'pod' ? nodes.podNs('a1') : from === 'host' ? nodes.nodeNs(NODE_A.name) : nodes.clientNs;

  async function openFlows(tag: string): Promise<{ streams: LabStreams[]; before: FlowReport[] }> {
    const opened = await Promise.all(
      SOURCES.map((s) =>
        LabStreams.start(lab, sourceNs(s.from), flowSpecs(s, tag), {
          intervalMs: ASK_INTERVAL_MS,
          seconds: LIFETIME_S,
        }),
      ),
    );
    streams.push(...opened);
    const before = (await Promise.all(opened.map((s) => s.report()))).flat();
    // Each flow is open and answered by a backend of the Service before anything moves.
    expect(before.filter((r) => r.answers === 0 || !BACKENDS.includes(r.backend ?? ''))).toEqual([]);
    return { streams: opened, before };
  }

  const reportOf = async (group: LabStreams[]) => (await Promise.all(group.map((s) => s.report()))).flat();

  async function startKubeProxies(mode: Mode): Promise<void> {
    for (const node of REAL_NODES) {
      const ns = nodes.nodeNs(node.name);
      const kubeconfig = join(cp.workDir, `${node.name}.kubeconfig`);
      writeFileSync(kubeconfig, cp.kubeconfig(cp.adminToken));
      const configPath = join(cp.workDir, `${node.name}-${mode}.conf`);
      writeFileSync(
        configPath,
        kubeProxyConfig({ mode, hostname: node.name, clusterCIDR: '10.244.0.0/16', kubeconfig }),
      );
      const kubeProxy = KubeProxyProcess.start({
        lab,
        ns,
        binary: join(cp.binaries.k8s, 'kube-proxy'),
        configPath,
        mode,
        // The nodes' own iptables (flannel's rules) is the nf_tables backend: so is kube-proxy's.
        iptablesDir: iptablesBackendDir(join(nodes.workDir, 'iptables-nft'), 'nft'),
      });
      kubeProxies.push(kubeProxy);
      await kubeProxy.waitForSync(1, 60_000);
    }
  }

  async function stopKubeProxies(): Promise<void> {
    for (const kubeProxy of kubeProxies.splice(0)) await kubeProxy.stop();
  }

  /** What `cleanup` said on stderr (its failures), by node. */
  const cleanupErrors: string[] = [];

  /** `kube-bpf-proxy cleanup` on every node, in the node's mounts (its pins, if any). */
  async function cleanupNodes(): Promise<string[]> {
    const out: string[] = [];
    for (const node of REAL_NODES) {
      const holder = holders.get(node.name)!;
      const result = await lab.exec(
        nodes.nodeNs(node.name),
        'nsenter',
        [`--mount=/proc/${holder.pid}/ns/mnt`, '--', process.execPath, CLI, 'cleanup'],
        { allowFailure: true },
      );
      out.push(`${node.name}: ${result.stdout.trim()} ${result.stderr.trim()}`);
      if (result.stderr.trim() !== '') cleanupErrors.push(`${node.name}: ${result.stderr.trim()}`);
    }
    return out;
  }

  async function startAgents(): Promise<void> {
    await nodes.startAgents('bpf', (node) => ({ mountsOf: holders.get(node)!.pid }));
  }

  /** The filesystem at /sys/fs/bpf in each node's mounts: sysfs until an agent mounts bpffs there. */
  async function bpffsOfNodes(): Promise<string[]> {
    const types: string[] = [];
    for (const node of REAL_NODES) {
      const mounts = `--mount=/proc/${holders.get(node.name)!.pid}/ns/mnt`;
      const stat = await lab.exec(nodes.nodeNs(node.name), 'nsenter', [
        mounts,
        '--',
        'stat',
        '-f',
        '-c',
        '%T',
        BPFFS_ROOT,
      ]);
      types.push(stat.stdout.trim());
    }
    return types;
  }

  async function stopAgents(): Promise<void> {
    for (const agent of nodes.agents.values()) await agent.stop();
    nodes.agents.clear();
  }

  async function stopFlows(): Promise<void> {
    for (const s of streams.splice(0)) await s.stop();
  }

  /** What each move leaves behind goes before the next mode starts: rules, pins, conntrack. */
  async function resetNodes(): Promise<void> {
    await stopFlows();
    await stopKubeProxies();
    await stopAgents();
    await cleanupNodes();
    for (const node of REAL_NODES)
      await lab.exec(nodes.nodeNs(node.name), 'conntrack', ['-F'], { allowFailure: true });
  }

  beforeAll(async () => {
    if (!existsSync(join(CNI_BIN, 'bridge')))
      throw new Error(`no CNI plugins in ${CNI_BIN}: run bash scripts/install-deps.sh`);
    await deleteStaleNamespaces(lab.prefix);
    nodes = new RealNodeLab(lab);
    await nodes.build({
      pods: ['a1', 'a2', 'b2'].map((name) => ({
        name,
        node: name.startsWith('a') ? NODE_A.name : REAL_NODES[1]!.name,
        tcpPorts: [],
        udpPorts: [DNS],
        streamPorts: [STREAM],
      })),
      hostServers: [],
      loadBalancerRoutes: [],
    });
    nodes.writeManifests([SERVICE]);
    // The lab's Services are dual-stack, with ipv6Of() addresses (fd00:10:96::1:3).
    cp = await ControlPlane.start(lab, {
      wire: { ns: 'wire', bridge: 'br0', address: '10.10.0.200/24' },
      serviceCIDRs: ['10.96.0.0/16', 'fd00:10:96::/108'],
    });
    for (const node of REAL_NODES)
      await createNode(cp, { name: node.name, ip: node.ip, podCIDR: node.podCIDR });
    for (const object of nodes.objects([SERVICE]) as K8sObject[]) {
      if (object.kind === 'Node') continue;
      // Slices of the harness's own, which the EndpointSlice controllers leave alone.
      const { status: _status, ...body }: K8sObject = object;
      if (object.kind === 'EndpointSlice')
        body.metadata = {
          ...object.metadata,
          labels: {
            ...(object.metadata.labels as Record<string, string>),
            'endpointslice.kubernetes.io/managed-by': 'kbp-lab',
          },
        };
      const answer = await cp.request('POST', collectionPath(object), body);
      expect(answer.status, JSON.stringify(answer.body)).toBe(201);
    }
    for (const node of REAL_NODES)
      holders.set(
        node.name,
        nodeMounts(lab, nodes.nodeNs(node.name), LIFETIME_S, nodes.nodeCgroup(node.name)),
      );
  }, 240_000);

  afterAll(async () => {
    console.log(`migration figures (broken/total flows):\n  ${figures.join('\n  ')}`);
    await stopFlows();
    await stopKubeProxies();
    await stopAgents().catch(() => {});
    if (holders.size > 0 && nodes) await cleanupNodes().catch(() => {});
    for (const holder of holders.values()) holder.kill('SIGKILL');
    await nodes?.destroy();
    await cp?.stop();
  }, 120_000);

  for (const mode of MODES) {
    it(`${mode}: kube-proxy → bpf → kube-proxy keeps every open flow on its backend`, async () => {
      try {
        await startKubeProxies(mode);
        const first = await openFlows(`${mode}/kube-proxy`);

        await stopKubeProxies();
        console.log(`${mode}: cleanup before the agents\n  ${(await cleanupNodes()).join('\n  ')}`);
        const bpffsBefore = await bpffsOfNodes();
        await startAgents();
        // No bpffs until the first agent on each node mounts its own; the next ones find it there.
        const fresh = mode === MODES[0];
        expect({ before: bpffsBefore, after: await bpffsOfNodes() }).toEqual({
          before: REAL_NODES.map(() => (fresh ? 'sysfs' : 'bpf_fs')),
          after: REAL_NODES.map(() => 'bpf_fs'),
        });
        await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
        const toBpf = judge(first.before, await reportOf(first.streams));
        figures.push(`${mode} kube-proxy → bpf: ${toBpf.figure}`);

        const second = await openFlows(`${mode}/bpf`);
        const throughBpf = await reportOf(first.streams);
        await stopAgents();
        console.log(`${mode}: cleanup after the agents\n  ${(await cleanupNodes()).join('\n  ')}`);
        await startKubeProxies(mode);
        await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
        const back = judge(second.before, await reportOf(second.streams));
        const both = judge(throughBpf, await reportOf(first.streams));
        figures.push(`${mode} bpf → kube-proxy: ${back.figure}`);
        figures.push(`${mode} kube-proxy → bpf → kube-proxy (the first flows): ${both.figure}`);

        expect({ toBpf: toBpf.broken, back: back.broken, both: both.broken, cleanupErrors }).toEqual({
          toBpf: [],
          back: [],
          both: [],
          cleanupErrors: [],
        });
      } finally {
        await resetNodes();
      }
    }, 240_000);
  }
});
