// Host routing across nodes, measured (issue 26; docs/benchmark.md, "Host routing across nodes"):
// bench/topology.ts is one node, so this runs on the real-node lab's two (src/lab/real-node.ts:
// flannel's vxlan overlay, the bridge CNI on node-a, rp_filter 1, the INVALID drop, agents as the
// chart renders them). A pod on node-a opens new connections (bench/c/loadgen.c crr) to a ClusterIP
// whose one backend, bench/c/backend.c, is a pod on node-b; the agents run with bpf.hostRouting
// bpf, then stack, alternating (bpf, stack, stack, bpf, ...) so that drift in the machine falls on
// both alike, in one run. The lab is built twice: nodes joined by flannel's vxlan overlay, then by
// its host-gw routes over the underlay (RealNodeSpec.flannelBackend). Each run also counts the
// flow's connections in node-a's netfilter conntrack: none under the bypass, all of them on the
// stack's path.

import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deleteStaleNamespaces, Lab, waitForLine } from '../src/lab/netns.js';
import { tcpConntrackEntries } from '../src/lab/node-conntrack.js';
import { RealNodeLab } from '../src/lab/real-node.js';
import { ipv6Of, REAL_NODES } from '../src/lab/real-node-plan.js';
import type { IPFamily } from '../src/net/ip.js';
import { median, type Summary, summarize } from './stats.js';
import { compileTools, parseColumns, parseLoadgen, type Tools } from './tools.js';

export interface CrossNodeOptions {
  reps: number;
  seconds: number;
  families: IPFamily[];
  /** Results root: <out>/<timestamp>-cross-node/. */
  out: string;
  progress: (line: string) => void;
}

type Setting = 'bpf' | 'stack';
type FlannelBackend = 'vxlan' | 'host-gw';
const BACKENDS: readonly FlannelBackend[] = ['vxlan', 'host-gw'];

/** One timed load: its new connections per second, connect times, and node-a's conntrack count. */
export interface CrossNodeRun {
  flannel: FlannelBackend;
  setting: Setting;
  family: IPFamily;
  rep: number;
  connPerSec: number;
  connectUs: Summary;
  requestUs: Summary;
  errors: number;
  /** node-a's netfilter conntrack entries of the client's connections to the backend, after it. */
  nodeAConntrack: number;
}

const CLUSTER_IP = '10.96.1.2';
const BACKEND_PORT = 8080;
const UDP_PORT = 5353;

/** The order of the settings in repetition `rep`: bpf first in even ones, stack first in odd ones. */
export function settingsOrder(rep: number): Setting[] {
  return rep % 2 === 0 ? ['bpf', 'stack'] : ['stack', 'bpf'];
}

/** Each family's medians over the repetitions, and host routing ÷ the stack (pure). */
export function crossNodeTable(runs: readonly CrossNodeRun[]): string {
  const lines = [
    '| between the nodes | family | measure (median of the runs) | bpf.hostRouting bpf | bpf.hostRouting stack | bpf ÷ stack |',
    '| --- | --- | --- | --- | --- | --- |',
  ];
  const groups = [...new Set(runs.map((r) => `${r.flannel} ${r.family}`))];
  for (const [flannel, family] of groups.map((g) => g.split(' '))) {
    const of = (setting: Setting, pick: (r: CrossNodeRun) => number) =>
      median(
        runs.filter((r) => r.flannel === flannel && r.family === family && r.setting === setting).map(pick),
      );
    for (const [name, pick, digits] of [
      ['new connections per second', (r: CrossNodeRun) => r.connPerSec, 0],
      ['TCP connect time, median (µs)', (r: CrossNodeRun) => r.connectUs.median, 1],
      ['TCP connect time, p99 (µs)', (r: CrossNodeRun) => r.connectUs.p99, 1],
      ['request on a new connection, median (µs)', (r: CrossNodeRun) => r.requestUs.median, 1],
      ["node-a's conntrack entries of the flow", (r: CrossNodeRun) => r.nodeAConntrack, 0],
    ] as const) {
      const [bpf, stack] = [of('bpf', pick), of('stack', pick)];
      const ratio = stack > 0 ? `${(bpf / stack).toFixed(2)}×` : '-';
      lines.push(
        `| ${flannel} | ${family} | ${name} | ${bpf.toFixed(digits)} | ${stack.toFixed(digits)} | ${ratio} |`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

async function timedRun(
  nodes: RealNodeLab,
  tools: Tools,
  workDir: string,
  run: Pick<CrossNodeRun, 'flannel' | 'setting' | 'family' | 'rep'>,
  seconds: number,
): Promise<CrossNodeRun> {
  const { lab } = nodes;
  const v4 = run.family === 'IPv4';
  const [client, backend] = [nodes.pod('a1'), nodes.pod('b2')];
  const [clientIP, backendIP] = v4 ? [client.ip, backend.ip] : [client.ip6, backend.ip6];
  const nodeA = nodes.nodeNs(REAL_NODES[0]!.name);
  await lab.exec(nodeA, 'conntrack', ['-F']);
  const ip = v4 ? CLUSTER_IP : ipv6Of(CLUSTER_IP);
  const file = join(workDir, `${run.flannel}-${run.setting}-${run.family}-${run.rep}.txt`);
  // Warm-up (neighbours, the backend's first accept), then the timed load.
  await lab.exec(nodes.podNs('a1'), tools.loadgen, ['crr', ip, '80', '0.3', '100000', file]);
  const { stdout } = await lab.exec(nodes.podNs('a1'), tools.loadgen, [
    'crr',
    ip,
    '80',
    String(seconds),
    '2000000',
    file,
  ]);
  const summary = parseLoadgen(stdout);
  const [connectUs = [], totalUs = []] = parseColumns(readFileSync(file, 'utf8'), 2);
  rmSync(file, { force: true });
  if (totalUs.length === 0) throw new Error(`no connection succeeded: ${stdout}`);
  return {
    ...run,
    connPerSec: totalUs.length / (summary.elapsedUs / 1e6),
    connectUs: summarize(connectUs),
    requestUs: summarize(totalUs),
    errors: summary.errors,
    nodeAConntrack: await tcpConntrackEntries(lab, nodeA, run.family, clientIP, backendIP),
  };
}

/** One lab with the nodes joined by `flannel`: every repetition of both settings, both families. */
async function measureOn(flannel: FlannelBackend, tools: Tools, workDir: string, opts: CrossNodeOptions) {
  const lab = new Lab(`kbpxn${flannel[0]}${process.pid}`);
  const nodes = new RealNodeLab(lab);
  const runs: CrossNodeRun[] = [];
  try {
    await deleteStaleNamespaces(lab.prefix);
    const pods = [
      { name: 'a1', node: REAL_NODES[0]!.name, tcpPorts: [], udpPorts: [] },
      { name: 'b2', node: REAL_NODES[1]!.name, tcpPorts: [], udpPorts: [] },
    ];
    await nodes.build({ pods, hostServers: [], loadBalancerRoutes: [], flannelBackend: flannel });
    const server = lab.spawn(nodes.podNs('b2'), tools.backend, [
      'b2',
      String(BACKEND_PORT),
      String(UDP_PORT),
    ]);
    await waitForLine(server, 'listening', 10_000);
    const http = { name: 'http', protocol: 'TCP' as const, port: 80, targetPort: BACKEND_PORT };
    nodes.writeManifests([
      { name: 'cross', type: 'ClusterIP', clusterIP: CLUSTER_IP, ports: [http], endpoints: [{ pod: 'b2' }] },
    ]);
    for (let rep = 0; rep < opts.reps; rep++) {
      for (const setting of settingsOrder(rep)) {
        await nodes.startAgents('bpf', { bpffs: 'own' }, [`bpf.hostRouting=${setting}`]);
        for (const family of opts.families) {
          const run = await timedRun(nodes, tools, workDir, { flannel, setting, family, rep }, opts.seconds);
          opts.progress(
            `${flannel} rep ${rep + 1}/${opts.reps} ${setting} ${family}: ${run.connPerSec.toFixed(0)} conn/s, connect ${run.connectUs.median.toFixed(1)} µs, node-a conntrack ${run.nodeAConntrack}`,
          );
          runs.push(run);
        }
        for (const agent of nodes.agents.values()) await agent.stop();
        nodes.agents.clear();
      }
    }
  } finally {
    await nodes.destroy();
  }
  return runs;
}

/** Runs every repetition on both labs, writes results.json and results.md; returns the folder. */
export async function runCrossNode(opts: CrossNodeOptions): Promise<string> {
  const workDir = mkdtempSync(join(tmpdir(), 'kbp-cross-node-'));
  const runs: CrossNodeRun[] = [];
  try {
    const tools = await compileTools(workDir);
    for (const flannel of BACKENDS) runs.push(...(await measureOn(flannel, tools, workDir, opts)));
  } finally {
    rmSync(workDir, { recursive: true, force: true });
  }
  const dir = join(opts.out, `${new Date().toISOString().replace(/[:.]/g, '-')}-cross-node`);
  mkdirSync(dir, { recursive: true });
  const options = { reps: opts.reps, seconds: opts.seconds, families: opts.families, backends: BACKENDS };
  writeFileSync(join(dir, 'results.json'), `${JSON.stringify({ options, runs }, null, 2)}\n`);
  writeFileSync(join(dir, 'results.md'), crossNodeTable(runs));
  return dir;
}
