// The benchmark's namespaces: one node (where the agent runs), E backend pods and one client pod
// behind it, built by the lab's cluster builder. The backends are the C server from bench/c
// (HTTP keep-alive on 8080, UDP echo on 5353), so they are not what limits the measurements.

import type { ChildProcess } from 'node:child_process';
import { type BuiltCluster, buildCluster, type PodSpec } from '../src/lab/cluster.js';
import type { Lab } from '../src/lab/netns.js';
import {
  backendPodIP,
  CLIENT_POD_IP,
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

export async function buildTopology(lab: Lab, backendPods: number, tools: Tools): Promise<BenchTopology> {
  const pod = (name: string, ip: string): PodSpec => ({
    name,
    ip,
    node: NODE_NAME,
    tcpPorts: [],
    udpPorts: [],
  });
  const backends = Array.from({ length: backendPods }, (_, i) => pod(`be${i}`, backendPodIP(i)));
  const cluster = await buildCluster(lab, {
    nodes: [{ name: NODE_NAME, ip: NODE_IP, podCIDR: POD_CIDR }],
    pods: [pod(CLIENT_POD, CLIENT_POD_IP), ...backends],
    clients: [],
    clientRoutes: [],
  });
  for (const backend of backends) {
    const child = lab.spawn(cluster.podNs(backend.name), tools.backend, [
      backend.name,
      String(TCP_TARGET_PORT),
      String(UDP_TARGET_PORT),
    ]);
    await waitForListening(child, 10_000);
  }
  return { cluster, nodeNs: cluster.nodeNs(NODE_NAME), clientNs: cluster.podNs(CLIENT_POD) };
}
