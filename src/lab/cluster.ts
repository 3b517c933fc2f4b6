// A small cluster of network namespaces built from Node and EndpointSlice objects: one namespace
// per node on a shared L2 segment (a bridge in a "wire" namespace), one per pod behind its node
// (a veth whose host side is named vethp<N>, routed /32 as many CNIs do), pod-CIDR routes between
// nodes, and external clients on the wire whose traffic to service addresses enters at the first
// node. Each pod runs a backend answering on the ports its EndpointSlices name. The nodes carry a
// distribution's defaults, not settings the product would like: rp_filter strict or loose, the
// conntrack INVALID drop in FORWARD, a default route.

import type { ClusterState } from '../model/types.js';
import { formatIP, parseCIDR } from '../net/ip.js';
import type { Lab, ReversePathFilter } from './netns.js';

export interface NodeSpec {
  name: string;
  ip: string;
  podCIDR: string;
  /** Default: strict (1) on the first node, as RHEL ships it, loose (2) on the others, as Ubuntu does. */
  rpFilter?: ReversePathFilter;
}

export interface PodSpec {
  /** The pod's name (targetRef), or its IP when the slice does not say. */
  name: string;
  ip: string;
  node: string;
  tcpPorts: number[];
  udpPorts: number[];
}

export interface ClientSpec {
  name: string;
  /** The client's own address (outside the node subnet, e.g. to test source ranges). */
  ip: string;
}

export interface ClusterSpec {
  nodes: NodeSpec[];
  pods: PodSpec[];
  clients: ClientSpec[];
  /** Addresses (VIPs, LB IPs, externalIPs) the clients route to the first node, as CIDRs. */
  clientRoutes: string[];
}

export interface BuiltCluster {
  spec: ClusterSpec;
  /** Namespace name (inside the lab) of each node, pod and client, by spec name. */
  nodeNs: (name: string) => string;
  podNs: (name: string) => string;
  clientNs: (name: string) => string;
  /** The pod-facing host interface of each pod, by pod name. */
  podInterface: Map<string, string>;
}

/** Nodes from the Node objects (first InternalIP, first podCIDR), pods from the EndpointSlices. */
export function clusterSpecFromState(
  state: Pick<ClusterState, 'endpointSlices'>,
  nodes: { name: string; ip: string; podCIDR: string }[],
  clients: ClientSpec[],
  clientRoutes: string[],
): ClusterSpec {
  const pods = new Map<string, PodSpec>();
  for (const slice of state.endpointSlices.values()) {
    if (slice.addressType !== 'IPv4') continue;
    for (const endpoint of slice.endpoints) {
      const ip = endpoint.addresses[0];
      if (!ip || !endpoint.nodeName) continue;
      let pod = pods.get(ip);
      if (!pod) {
        pod = { name: `pod-${ip}`, ip, node: endpoint.nodeName, tcpPorts: [], udpPorts: [] };
        pods.set(ip, pod);
      }
      for (const port of slice.ports) {
        if (port.port === null) continue;
        const list = port.protocol === 'UDP' ? pod.udpPorts : pod.tcpPorts;
        if (!list.includes(port.port)) list.push(port.port);
      }
    }
  }
  return { nodes, pods: [...pods.values()].sort((a, b) => (a.ip < b.ip ? -1 : 1)), clients, clientRoutes };
}

/** The first host address of a CIDR: the pods' gateway on their node. */
function gatewayOf(podCIDR: string): string {
  const cidr = parseCIDR(podCIDR);
  if (!cidr) throw new Error(`bad pod CIDR ${podCIDR}`);
  const bytes = cidr.network.slice();
  bytes[bytes.length - 1] = (bytes[bytes.length - 1] ?? 0) + 1;
  return formatIP(bytes);
}

export async function buildCluster(lab: Lab, spec: ClusterSpec): Promise<BuiltCluster> {
  const nodeNs = (name: string) => `n-${name}`;
  const podNs = (name: string) => `p-${name}`;
  const clientNs = (name: string) => `c-${name}`;
  const podInterface = new Map<string, string>();

  await lab.addNamespace('wire');
  await lab.exec('wire', 'ip', ['link', 'add', 'br0', 'type', 'bridge']);
  await lab.exec('wire', 'ip', ['link', 'set', 'br0', 'up']);
  // A default gateway that does not forward: traffic for unknown destinations leaves the nodes
  // through their FORWARD chain, as on a real node, instead of failing the route lookup first.
  const firstNode = spec.nodes[0];
  const gatewayIP = firstNode ? firstNode.ip.replace(/\.\d+$/, '.254') : '';
  if (firstNode) await lab.addAddress('wire', 'br0', `${gatewayIP}/24`);
  let port = 0;
  const attachToWire = async (ns: string) => {
    const wireSide = `w${port++}`;
    await lab.link(ns, 'eth0', 'wire', wireSide);
    await lab.exec('wire', 'ip', ['link', 'set', wireSide, 'master', 'br0']);
  };

  for (const [index, node] of spec.nodes.entries()) {
    const ns = nodeNs(node.name);
    await lab.addNamespace(ns);
    await lab.reversePathFilter(ns, node.rpFilter ?? (index === 0 ? 1 : 2));
    await lab.dropInvalidForwards(ns);
    await attachToWire(ns);
    await lab.addAddress(ns, 'eth0', `${node.ip}/24`);
    await lab.sysctl(ns, 'net.ipv4.ip_forward', '1');
    for (const other of spec.nodes) {
      if (other !== node) await lab.addRoute(ns, other.podCIDR, 'via', other.ip);
    }
    await lab.addRoute(ns, 'default', 'via', gatewayIP);
    for (const client of spec.clients) await lab.addRoute(ns, `${client.ip}/32`, 'dev', 'eth0');
  }

  let podIndex = 0;
  for (const pod of spec.pods) {
    const node = spec.nodes.find((n) => n.name === pod.node);
    if (!node) continue;
    const ns = podNs(pod.name);
    const hostSide = `vethp${podIndex++}`;
    const gateway = gatewayOf(node.podCIDR);
    await lab.addNamespace(ns);
    await lab.link(ns, 'eth0', nodeNs(node.name), hostSide);
    podInterface.set(pod.name, hostSide);
    await lab.addAddress(ns, 'eth0', `${pod.ip}/32`);
    await lab.addRoute(ns, gateway, 'dev', 'eth0', 'scope', 'link');
    await lab.addRoute(ns, 'default', 'via', gateway, 'dev', 'eth0');
    await lab.addAddress(nodeNs(node.name), hostSide, `${gateway}/32`);
    await lab.addRoute(nodeNs(node.name), `${pod.ip}/32`, 'dev', hostSide);
    await lab.startBackend(ns, { name: pod.name, tcpPorts: pod.tcpPorts, udpPorts: pod.udpPorts });
  }

  const entry = spec.nodes[0];
  for (const client of spec.clients) {
    const ns = clientNs(client.name);
    await lab.addNamespace(ns);
    await attachToWire(ns);
    await lab.addAddress(ns, 'eth0', `${client.ip}/32`);
    for (const node of spec.nodes) await lab.addRoute(ns, `${node.ip}/32`, 'dev', 'eth0', 'scope', 'link');
    if (entry) {
      for (const route of spec.clientRoutes) await lab.addRoute(ns, route, 'via', entry.ip, 'dev', 'eth0');
    }
  }
  return { spec, nodeNs, podNs, clientNs, podInterface };
}
