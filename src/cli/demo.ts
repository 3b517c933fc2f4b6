// `kube-bpf-proxy demo`: the main job. Builds a two-node cluster of network namespaces from the
// example manifests (pods serving HTTP and UDP on each node, external clients), runs one agent
// per node in standalone mode, sends traffic to services the way pods and outside clients do,
// prints which backends answered (and, in bpf mode, the live counters), then removes everything,
// also on Ctrl-C. Traffic stays inside the namespaces it creates.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { type Command, Option } from 'commander';
import type { ProxyMode } from '../config/types.js';
import { BPFFS_ROOT, ensureBpffs } from '../host/bpffs.js';
import { LabAgent } from '../lab/agent.js';
import { type BuiltCluster, buildCluster, clusterSpecFromState } from '../lab/cluster.js';
import { compiledSibling, deleteStaleNamespaces, Lab, type RequestResult } from '../lab/netns.js';
import { createLogger } from '../logger.js';
import { ChangeTracker } from '../model/tracker.js';
import { readManifests } from '../sources/manifests.js';

export const mainScript = compiledSibling(import.meta.url, 'main.js');
/** The demo's namespaces are named `<prefix>-…`; KBP_LAB_PREFIX sets another prefix, so that runs of
 * several people on one machine neither meet nor delete each other's leftovers. */
export const LAB_PREFIX = process.env.KBP_LAB_PREFIX || 'kbpdemo';

/**
 * The nodes of examples/manifests/nodes.yaml, dual-stack, and clients inside and outside the LB
 * source ranges.
 */
export const DEMO_NODES = [
  {
    name: 'node-a',
    ip: '10.10.0.1',
    podCIDR: '10.244.1.0/24',
    ip6: 'fd00:10::1',
    podCIDR6: 'fd00:244:0:1::/64',
  },
  {
    name: 'node-b',
    ip: '10.10.0.2',
    podCIDR: '10.244.2.0/24',
    ip6: 'fd00:10::2',
    podCIDR6: 'fd00:244:0:2::/64',
  },
];
export const DEMO_CLIENTS = [
  { name: 'allowed', ip: '192.0.2.100' },
  { name: 'blocked', ip: '203.0.113.100' },
];
export const DEMO_CLIENT_ROUTES = ['10.96.0.0/16', '198.51.100.10/32', '192.0.2.50/32'];

export interface DemoStep {
  title: string;
  from: string;
  target: string;
  proto: 'tcp' | 'udp';
  count: number;
  /** Per request; 1 s unless the step needs TCP's SYN retries. */
  timeoutMs?: number;
  /** What kube-proxy semantics say should happen, printed next to what did. */
  expect: string;
}

/** cgroupPath: the lab's own cgroup (Lab.ownCgroup()), where the socket hooks go. */
export function demoConfig(mode: ProxyMode, pinPath: string, cgroupPath: string): string {
  return [
    'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
    'kind: KubeProxyConfiguration',
    `mode: ${mode}`,
    'clusterCIDR: 10.244.0.0/16,fd00:244::/48',
    'iptables:',
    '  minSyncPeriod: 0s',
    'bpf:',
    `  pinPath: ${pinPath}`,
    `  cgroupPath: ${cgroupPath}`,
    '',
  ].join('\n');
}

function summarize(results: RequestResult[]): string {
  const counts = new Map<string, number>();
  for (const r of results) {
    const key = r.backend ? `${r.backend} (saw ${r.seenClient?.replace(/:\d+$/, '')})` : `error ${r.error}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([k, n]) => `${n}× ${k}`).join(', ');
}

/** The demo's cluster with one agent per node, as the demo, and the bpf e2e tests, run it. */
export interface DemoCluster {
  cluster: BuiltCluster;
  agents: Map<string, LabAgent>;
  /** Each node's pinned BPF state lives under here (removed by the caller). */
  pinRoot: string;
  /** Starts (or restarts) a node's agent and waits for its first sync. */
  startAgent(node: string): Promise<LabAgent>;
}

export async function startDemoCluster(
  lab: Lab,
  opts: { mode: ProxyMode; manifests: string; workDir: string; pinRoot: string },
): Promise<DemoCluster> {
  const tracker = new ChangeTracker('');
  tracker.apply(readManifests([opts.manifests]).events);
  // Before any process starts: every process of the cluster starts in it, and the agents' socket
  // hooks go there, not at the machine's cgroup2 root. lab.destroy() removes it.
  const cgroup = await lab.ownCgroup();
  const spec = clusterSpecFromState(tracker.state(), DEMO_NODES, DEMO_CLIENTS, DEMO_CLIENT_ROUTES);
  const cluster = await buildCluster(lab, spec);
  const agents = new Map<string, LabAgent>();
  const startAgent = async (node: string) => {
    const configPath = join(opts.workDir, `${node}.yaml`);
    writeFileSync(configPath, demoConfig(opts.mode, `${opts.pinRoot}/${node}`, cgroup));
    const agent = LabAgent.start(lab, cluster.nodeNs(node), mainScript, [
      '--config',
      configPath,
      '--manifests',
      resolve(opts.manifests),
      '--hostname-override',
      node,
    ]);
    agents.set(node, agent);
    await agent.waitForSync(1, 30_000);
    return agent;
  };
  for (const node of DEMO_NODES) await startAgent(node.name);
  return { cluster, agents, pinRoot: opts.pinRoot, startAgent };
}

export interface DemoReport {
  steps: { step: DemoStep; results: RequestResult[] }[];
  /** `kube-bpf-proxy list` on node-a (bpf mode only). */
  list: string;
}

/** What the demo sends, from where, and what each step should show (the example manifests). */
function demoSteps(cluster: DemoCluster['cluster'], mode: ProxyMode): DemoStep[] {
  const podOnA = cluster.podNs('pod-10.244.1.30');
  return [
    {
      title: 'ClusterIP demo/web from a pod on node-a',
      from: podOnA,
      target: '10.96.0.10:80',
      proto: 'tcp',
      count: 12,
      expect: 'ready endpoints of zone-a (topology hints): web-1, web-2',
    },
    {
      // demo/web is PreferDualStack: its IPv6 ClusterIP has the pods' IPv6 endpoints.
      title: 'ClusterIP demo/web over IPv6 from a pod on node-a',
      from: podOnA,
      target: '[fd00:96::a]:80',
      proto: 'tcp',
      count: 12,
      expect: 'the same pods over IPv6 (zone-a hints of the IPv6 slice): web-1, web-2; client IPv6 kept',
    },
    {
      title: 'ClusterIP demo/dns (UDP) from a pod',
      from: podOnA,
      target: '10.96.0.53:53',
      proto: 'udp',
      count: 8,
      expect: 'both dns pods',
    },
    {
      title: 'NodePort 30080 on node-a from outside',
      from: cluster.clientNs('allowed'),
      target: '10.10.0.1:30080',
      proto: 'tcp',
      count: 12,
      // kube-proxy masquerades all eTP=Cluster traffic from outside; bpf SNATs only what it sends
      // to another node, so replies come back through node-a, and local backends see the client.
      expect:
        mode === 'bpf'
          ? "ready endpoints on both nodes; node-b's backend sees node-a (SNAT), node-a's see the client"
          : 'ready endpoints on both nodes; backends see node-a (masquerade)',
    },
    {
      title: 'LB IP 198.51.100.10 (eTP=Local) from an allowed source',
      from: cluster.clientNs('allowed'),
      target: '198.51.100.10:80',
      proto: 'tcp',
      count: 8,
      expect: "node-a's local endpoints; client IP kept",
    },
    {
      title: 'LB IP 198.51.100.10 from a source outside loadBalancerSourceRanges',
      from: cluster.clientNs('blocked'),
      target: '198.51.100.10:80',
      proto: 'tcp',
      count: 2,
      expect: 'dropped (timeout)',
    },
    {
      title: 'ClientIP affinity demo/sticky',
      from: podOnA,
      target: '10.96.0.30:80',
      proto: 'tcp',
      count: 8,
      expect: 'one backend every time',
    },
    {
      title: 'demo/empty (no endpoints)',
      from: podOnA,
      target: '10.96.0.60:80',
      proto: 'tcp',
      count: 2,
      // The kernel's ICMP errors are rate-limited host-wide: leave room for a SYN retry.
      timeoutMs: 4000,
      expect: 'rejected (connection refused)',
    },
  ];
}

export async function runDemo(opts: {
  mode: ProxyMode;
  manifests: string;
  out: (line: string) => void;
}): Promise<DemoReport> {
  const { out } = opts;
  const started = Date.now();

  const pinRoot = `${BPFFS_ROOT}/${LAB_PREFIX}-${process.pid}`;
  // Before any namespace exists: a node that cannot have bpffs fails here, and the agents, which
  // share this mount namespace, find it mounted rather than each mounting its own.
  if (opts.mode === 'bpf') ensureBpffs(pinRoot, createLogger());
  await deleteStaleNamespaces(LAB_PREFIX);
  const lab = new Lab(LAB_PREFIX);
  const workDir = mkdtempSync(join(tmpdir(), 'kbp-demo-'));
  const report: DemoReport = { steps: [], list: '' };
  const onSignal = () => {
    out('interrupted: cleaning up');
    void lab.destroy().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    out('building the cluster of network namespaces and starting one agent per node');
    const { cluster } = await startDemoCluster(lab, {
      mode: opts.mode,
      manifests: opts.manifests,
      workDir,
      pinRoot,
    });
    out(`agents on ${DEMO_NODES.map((n) => n.name).join(' and ')}: ${opts.mode} mode, first sync done`);

    for (const step of demoSteps(cluster, opts.mode)) {
      const results = await lab.requests(step.from, step.target, {
        proto: step.proto,
        count: step.count,
        timeoutMs: step.timeoutMs ?? 1000,
      });
      report.steps.push({ step, results });
      out(`\n${step.title} -> ${step.target}/${step.proto}`);
      out(`  expected: ${step.expect}`);
      out(`  got:      ${summarize(results)}`);
    }
    if (opts.mode === 'bpf') {
      const list = await lab.exec(
        cluster.nodeNs('node-a'),
        process.execPath,
        [mainScript, 'list', '--bpf-pin-path', `${pinRoot}/node-a`],
        {
          allowFailure: true,
        },
      );
      report.list = list.stdout + list.stderr;
      out(`\nlive BPF maps on node-a (kube-bpf-proxy list):\n${report.list}`);
    }
    out(`\ndemo finished in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return report;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await lab.destroy();
    rmSync(workDir, { recursive: true, force: true });
    rmSync(pinRoot, { recursive: true, force: true });
  }
}

export function registerDemoCommand(program: Command): void {
  program
    .command('demo')
    .description(
      'build a two-node cluster of network namespaces from the example manifests, run the agent on it, send traffic, show what happened, clean up',
    )
    .addOption(
      new Option('--proxy-mode <mode>', 'the data plane the agents use')
        .choices(['bpf', 'iptables', 'nftables', 'ipvs'])
        .default('bpf'),
    )
    .option('--manifests <dir>', 'manifests to run on (nodes node-a and node-b)', 'examples/manifests')
    .action(async (opts: { proxyMode: ProxyMode; manifests: string }) => {
      if (process.getuid?.() !== 0)
        throw new Error('demo needs root: it creates network namespaces and loads BPF programs');
      await runDemo({
        mode: opts.proxyMode,
        manifests: opts.manifests,
        out: (line) => process.stdout.write(`${line}\n`),
      });
    });
}
