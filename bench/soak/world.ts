// The soak's cluster: the real-node lab (src/lab/real-node.ts: two dual-stack nodes, flannel's
// overlay, the CNI plugins, an outside client behind a router) watched by a real control plane
// (src/lab/control-plane.ts: etcd, kube-apiserver, kube-controller-manager's EndpointSlice
// controllers) on the nodes' wire at 10.10.0.200, with one agent per node started as the chart
// renders it, pointed at that API server. Every Service, Pod and Node goes through the API; the
// soak plays the kubelet (a pod's backend process is its container) and the controller writes the
// EndpointSlices. In bpf mode each node's bpffs is a directory of the host's, so pins outlive an
// agent that is killed, as on a node whose bpffs the chart mounts from the host.
//
//   ca (client), sa (stable), wa1..wa4 (churn pool) ── node-a ──┐
//                                                                ├── wire ── cp 10.10.0.200
//   cb (client), sb (stable), wb1..wb4 (churn pool) ── node-b ──┘      └── router ── outside client

import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ProxyMode } from '../../src/config/types.js';
import { ensureBpffs } from '../../src/host/bpffs.js';
import { ControlPlane } from '../../src/lab/control-plane.js';
import {
  create,
  createNamespace,
  createNode,
  createPod,
  mergePatch,
  type PodFacts,
} from '../../src/lab/kube-objects.js';
import { deleteStaleNamespaces, Lab } from '../../src/lab/netns.js';
import { RealNodeLab } from '../../src/lab/real-node.js';
import { ipv6Of, REAL_NODES } from '../../src/lab/real-node-plan.js';
import { createLogger } from '../../src/logger.js';

export const NAMESPACE = 'soak';
/** The churned pods' terminationGracePeriodSeconds: the kubelet's SIGKILL comes this long after deletion. */
export const GRACE_SECONDS = 20;
/** The agents' conntrack GC interval (bpf mode). */
export const GC_INTERVAL_S = 5;
export const HTTP_PORT = 8080;
export const UDP_PORT = 5353;
export const LB_IP = '198.51.100.10';
export const NODE_PORTS = { stableTcp: 30080, stableUdp: 30053, churnTcp: 30180, churnUdp: 30153 };
/** The churn pool: pod namespaces wired at the start, a Pod in the API only while "scheduled". */
export const POOL = REAL_NODES.flatMap((node) =>
  [1, 2, 3, 4].map((i) => ({ slot: `w${node.name.slice(-1)}${i}`, node: node.name })),
);
export const CLIENT_PODS = REAL_NODES.map((node) => ({ name: `c${node.name.slice(-1)}`, node: node.name }));
export const STABLE_PODS = REAL_NODES.map((node) => ({ name: `s${node.name.slice(-1)}`, node: node.name }));
const CONTROL_PLANE_ADDRESS = '10.10.0.200';

export interface ServiceAddresses {
  clusterIPs: { IPv4: string; IPv6: string };
}

export class SoakWorld {
  readonly lab: Lab;
  readonly nodes: RealNodeLab;
  cp: ControlPlane | null = null;
  /** Each node's bpffs directory (bpf mode) under here. */
  readonly pinRoot: string;
  readonly services = new Map<string, ServiceAddresses>();

  constructor(
    readonly mode: ProxyMode,
    prefix: string,
  ) {
    this.lab = new Lab(prefix);
    this.nodes = new RealNodeLab(this.lab);
    this.pinRoot = `/sys/fs/bpf/${prefix}`;
  }

  get controlPlane(): ControlPlane {
    if (!this.cp) throw new Error('the control plane is not running');
    return this.cp;
  }

  async build(): Promise<void> {
    await deleteStaleNamespaces(this.lab.prefix);
    const port = { tcpPorts: [HTTP_PORT], udpPorts: [UDP_PORT] };
    await this.nodes.build({
      pods: [
        ...CLIENT_PODS.map((p) => ({ ...p, tcpPorts: [], udpPorts: [] })),
        ...STABLE_PODS.map((p) => ({ ...p, ...port })),
        ...POOL.map((p) => ({ name: p.slot, node: p.node, ...port })),
      ],
      hostServers: [],
      loadBalancerRoutes: [{ ip: LB_IP, node: REAL_NODES[0]!.name }],
    });
    this.cp = await ControlPlane.start(this.lab, {
      wire: { ns: 'wire', bridge: 'br0', address: `${CONTROL_PLANE_ADDRESS}/24` },
    });
    await this.createObjects();
    const kubeconfig = join(this.cp.workDir, 'agent.kubeconfig');
    writeFileSync(kubeconfig, this.cp.kubeconfig(this.cp.adminToken));
    const bpf = this.mode === 'bpf';
    // As the demo does: the host's bpffs, mounted by the product's own function when missing.
    if (bpf) ensureBpffs(this.pinRoot, createLogger());
    await this.nodes.startAgents(
      this.mode,
      bpf ? { bpffs: 'node', nodeBpffs: this.pinRoot } : { bpffs: 'own' },
      // Conntrack GC every 5 s rather than 30 s: more passes under churn, a shorter drain at the end.
      bpf ? [`bpf.conntrackGCIntervalSeconds=${GC_INTERVAL_S}`] : [],
      ['--kubeconfig', kubeconfig],
    );
  }

  /** The facts the soak's kubelet reports for a pod of the lab (its addresses come from CNI). */
  podFacts(name: string, labels: Record<string, string>, podName = name): PodFacts {
    const pod = this.nodes.pod(name);
    const node = REAL_NODES.find((n) => n.name === pod.node)!;
    return {
      name: podName,
      namespace: NAMESPACE,
      node: pod.node,
      nodeIP: node.ip,
      nodeIP6: node.ip6,
      ip: pod.ip,
      ip6: pod.ip6,
      labels,
      graceSeconds: GRACE_SECONDS,
    };
  }

  private async createObjects(): Promise<void> {
    const cp = this.controlPlane;
    await createNamespace(cp, NAMESPACE);
    for (const node of REAL_NODES) await createNode(cp, node);
    for (const pod of STABLE_PODS) await createPod(cp, this.podFacts(pod.name, { app: 'stable' }));
    await this.createService('stable', 'LoadBalancer', { app: 'stable' }, [
      NODE_PORTS.stableTcp,
      NODE_PORTS.stableUdp,
    ]);
    await mergePatch(cp, `/api/v1/namespaces/${NAMESPACE}/services/stable/status`, {
      status: {
        loadBalancer: { ingress: [LB_IP, ipv6Of(LB_IP)].map((ip) => ({ ip, ipMode: 'VIP' })) },
      },
    });
    await this.createService('churn', 'NodePort', { app: 'churn' }, [
      NODE_PORTS.churnTcp,
      NODE_PORTS.churnUdp,
    ]);
  }

  /** A RequireDualStack Service with an HTTP and a UDP port; records its ClusterIPs. */
  async createService(
    name: string,
    type: 'ClusterIP' | 'NodePort' | 'LoadBalancer',
    selector: Record<string, string>,
    nodePorts: [number, number] | null = null,
  ): Promise<void> {
    const created = await create(this.controlPlane, serviceObject(name, type, selector, nodePorts));
    const [v4, v6] = created.spec.clusterIPs as string[];
    this.services.set(name, { clusterIPs: { IPv4: v4 ?? '', IPv6: v6 ?? '' } });
  }

  /** Stops the control plane and the agents, deletes every namespace and each node's pins. */
  async destroy(): Promise<void> {
    await this.cp?.stop();
    await this.nodes.destroy();
    rmSync(this.pinRoot, { recursive: true, force: true });
  }
}

export function serviceObject(
  name: string,
  type: 'ClusterIP' | 'NodePort' | 'LoadBalancer',
  selector: Record<string, string>,
  nodePorts: [number, number] | null,
) {
  const port = (portName: string, protocol: 'TCP' | 'UDP', port: number, targetPort: number, i: 0 | 1) => ({
    name: portName,
    protocol,
    port,
    targetPort,
    ...(nodePorts ? { nodePort: nodePorts[i] } : {}),
  });
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: NAMESPACE },
    spec: {
      type,
      selector,
      ipFamilyPolicy: 'RequireDualStack',
      ipFamilies: ['IPv4', 'IPv6'],
      ports: [port('http', 'TCP', 80, HTTP_PORT, 0), port('dns', 'UDP', 53, UDP_PORT, 1)],
      ...(type === 'ClusterIP' ? {} : { externalTrafficPolicy: 'Cluster' }),
    },
  };
}
