// The benchmark's namespaces: one node (where the agent runs), E backend pods and one client pod
// behind it, built by the lab's cluster builder. The backends are the C server from bench/c
// (HTTP keep-alive on 8080, UDP echo on 5353, over both families), so they are not what limits the
// measurements.
//
// The builder wires IPv4; the node and every pod then get their IPv6 counterparts the same way
// (scenario.ts: inFamily), as a dual-stack CNI wires them: the pod's /128 on its eth0, a gateway
// address on the host side of its veth, a /128 route to the pod on the node, and IPv6 forwarding on
// the node (what a dual-stack node has; the product needs it and sets none).
//
// The backends run in the bench's backends cgroup (their system time is part of what a request
// costs) and, with two CPUs or more, on CPU 1, the client's commands on CPU 0 (cpu.ts: what runs
// where, and why the node's forwarding is not steered with RPS).

import type { ChildProcess } from 'node:child_process';
import { type BuiltCluster, buildCluster, type PodSpec } from '../src/lab/cluster.js';
import { inCgroup, type Lab } from '../src/lab/netns.js';
import { formatIP, parseCIDR } from '../src/net/ip.js';
import { type LoadCgroups, type Placement, pinned } from './cpu.js';
import {
  backendPodIP,
  CLIENT_POD_IP,
  cidrInFamily,
  inFamily,
  NODE_IP,
  NODE_NAME,
  POD_CIDR,
  TCP_TARGET_PORT,
  UDP_TARGET_PORT,
} from './scenario.js';
import type { Tools } from './tools.js';

export interface BenchTopology {
  cluster: BuiltCluster;
  nodeNs: string;
  clientNs: string;
  /** Where the client's commands and the backends run; null on one CPU (everything shares it). */
  placement: Placement | null;
  /** The cgroups whose system time is the load's CPU. */
  cgroups: LoadCgroups;
}

const CLIENT_POD = 'client';

function waitForListening(child: ChildProcess, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`backend did not start: ${seen}`)), timeoutMs);
    child.stdout?.on('data', (d: Buffer) => {
      seen += d.toString();
      if (seen.includes('listening')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.stderr?.on('data', (d: Buffer) => {
      seen += d.toString();
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`backend exited (${code}): ${seen}`));
    });
  });
}

/** The builder's namespace of the nodes' shared segment (its bridge br0 holds the default gateway). */
const WIRE_NS = 'wire';

/** The IPv6 counterpart of what buildCluster wired in IPv4 (the layout's addresses mapped by inFamily). */
async function addIPv6(lab: Lab, cluster: BuiltCluster, pods: readonly PodSpec[]): Promise<void> {
  const v6 = (ipv4: string) => inFamily('IPv6', ipv4);
  const nodeNs = cluster.nodeNs(NODE_NAME);
  // The pods' gateway: the pod CIDR's first host, as the builder gives it in IPv4.
  const podCIDR = parseCIDR(cidrInFamily('IPv6', POD_CIDR));
  if (!podCIDR) throw new Error(`bad pod CIDR ${POD_CIDR}`);
  const first = podCIDR.network.slice();
  first[15] = (first[15] ?? 0) + 1;
  const gateway = formatIP(first);
  // The wire's gateway, .254 of the node subnet as the builder puts it in IPv4.
  const wireGateway = v6(NODE_IP.replace(/\.\d+$/, '.254'));
  await lab.sysctl(nodeNs, 'net.ipv6.conf.all.forwarding', '1');
  await lab.addAddress(WIRE_NS, 'br0', `${wireGateway}/120`);
  await lab.addAddress(nodeNs, 'eth0', `${v6(NODE_IP)}/120`);
  await lab.exec(nodeNs, 'ip', ['-6', 'route', 'add', 'default', 'via', wireGateway]);
  for (const pod of pods) {
    const ns = cluster.podNs(pod.name);
    const hostSide = cluster.podInterface.get(pod.name);
    if (!hostSide) throw new Error(`pod ${pod.name} has no host interface`);
    await lab.addAddress(ns, 'eth0', `${v6(pod.ip)}/128`);
    await lab.exec(ns, 'ip', ['-6', 'route', 'add', gateway, 'dev', 'eth0']);
    await lab.exec(ns, 'ip', ['-6', 'route', 'add', 'default', 'via', gateway, 'dev', 'eth0']);
    await lab.addAddress(nodeNs, hostSide, `${gateway}/128`);
    await lab.exec(nodeNs, 'ip', ['-6', 'route', 'add', `${v6(pod.ip)}/128`, 'dev', hostSide]);
  }
  // Link-local addresses wait out duplicate address detection; until then neighbour discovery
  // from them stalls and the first IPv6 connections time out.
  for (const ns of [nodeNs, ...pods.map((pod) => cluster.podNs(pod.name))])
    await lab.waitForIPv6Addresses(ns);
}

export async function buildTopology(
  lab: Lab,
  backendPods: number,
  tools: Tools,
  placement: Placement | null,
  cgroups: LoadCgroups,
): Promise<BenchTopology> {
  const pod = (name: string, ip: string): PodSpec => ({
    name,
    ip,
    node: NODE_NAME,
    tcpPorts: [],
    udpPorts: [],
  });
  const backends = Array.from({ length: backendPods }, (_, i) => pod(`be${i}`, backendPodIP(i)));
  const pods = [pod(CLIENT_POD, CLIENT_POD_IP), ...backends];
  const cluster = await buildCluster(lab, {
    nodes: [{ name: NODE_NAME, ip: NODE_IP, podCIDR: POD_CIDR }],
    pods,
    clients: [],
    clientRoutes: [],
  });
  await addIPv6(lab, cluster, pods);
  const nodeNs = cluster.nodeNs(NODE_NAME);
  for (const backend of backends) {
    const child = lab.spawn(
      cluster.podNs(backend.name),
      ...inCgroup(
        cgroups.backends,
        ...pinned(placement?.backendCpu, tools.backend, [
          backend.name,
          String(TCP_TARGET_PORT),
          String(UDP_TARGET_PORT),
        ]),
      ),
    );
    await waitForListening(child, 10_000);
  }
  return {
    cluster,
    nodeNs,
    clientNs: cluster.podNs(CLIENT_POD),
    placement,
    cgroups,
  };
}
