// A small cluster of network namespaces built from Node and EndpointSlice objects: one namespace
// per node on a shared L2 segment (a bridge in a "wire" namespace), one per pod behind its node
// (a veth whose host side is named vethp<N>, routed /32 as many CNIs do), pod-CIDR routes between
// nodes, and external clients on the wire whose traffic to service addresses enters at the first
// node. Each pod runs a backend answering on the ports its EndpointSlices name. The nodes carry a
// distribution's defaults, not settings the product would like: rp_filter strict or loose, the
// conntrack INVALID drop in FORWARD, a default route. A node with an IPv6 address and pod CIDR is
// dual-stack, as a dual-stack cluster's CNI and node setup make it: IPv6 forwarding on, and each of
// its pods gets an IPv6 address too (the IPv4 address's host offset in the node's IPv6 pod CIDR).

import type { ClusterState } from '../model/types.js';
import { canonicalIP, formatIP, parseCIDR, parseIP } from '../net/ip.js';
import type { Lab, ReversePathFilter } from './netns.js';

export interface NodeSpec {
  name: string;
  ip: string;
  podCIDR: string;
  /** Dual-stack: the node's IPv6 address (on the nodes' segment, a /64) and IPv6 pod CIDR. */
  ip6?: string;
  podCIDR6?: string;
  /** Default: strict (1) on the first node, as RHEL ships it, loose (2) on the others, as Ubuntu does. */
  rpFilter?: ReversePathFilter;
}

export interface PodSpec {
  /** The pod's name (targetRef), or its IP when the slice does not say. */
  name: string;
  ip: string;
  /** On a dual-stack node: the pod's IPv6 address (podIPv6()). */
  ip6?: string;
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

/**
 * A pod's IPv6 address on a dual-stack node: its IPv4 address's offset in the node's IPv4 pod CIDR,
 * in the node's IPv6 pod CIDR (10.244.1.10 in 10.244.1.0/24 -> fd00:244:0:1::a in fd00:244:0:1::/64).
 */
export function podIPv6(node: Pick<NodeSpec, 'podCIDR' | 'podCIDR6'>, ipv4: string): string | null {
  const v4 = parseCIDR(node.podCIDR);
  const v6 = node.podCIDR6 ? parseCIDR(node.podCIDR6) : null;
  const ip = parseIP(ipv4);
  if (!v4 || !v6 || !ip || ip.bytes.length !== 4) return null;
  let offset = 0;
  for (let i = 0; i < 4; i++) offset = offset * 256 + ((ip.bytes[i] ?? 0) - (v4.network[i] ?? 0));
  const bytes = v6.network.slice();
  for (let i = bytes.length - 1; i >= 0 && offset > 0; i--) {
    const sum = (bytes[i] ?? 0) + (offset % 256);
    bytes[i] = sum % 256;
    offset = Math.floor(offset / 256) + Math.floor(sum / 256);
  }
  return canonicalIP(formatIP(bytes));
}

/**
 * Pods from the EndpointSlices: one per IPv4 endpoint address (named pod-<IPv4>), with its IPv6
 * address on a dual-stack node. IPv6 endpoints name those pods' IPv6 addresses (podIPv6()); one
 * that names no pod's is left out, as is every IPv6 endpoint on a node that is not dual-stack.
 */
export function clusterSpecFromState(
  state: Pick<ClusterState, 'endpointSlices'>,
  nodes: NodeSpec[],
  clients: ClientSpec[],
  clientRoutes: string[],
): ClusterSpec {
  const pods = new Map<string, PodSpec>();
  const byIPv6 = new Map<string, PodSpec>();
  const slices = [...state.endpointSlices.values()];
  // IPv4 first, so IPv6 endpoints find the pods they belong to.
  for (const family of ['IPv4', 'IPv6'] as const) {
    for (const slice of slices) {
      if (slice.addressType !== family) continue;
      for (const endpoint of slice.endpoints) {
        const address = endpoint.addresses[0];
        const ip = address ? canonicalIP(address) : null;
        if (!ip || !endpoint.nodeName) continue;
        let pod = family === 'IPv4' ? pods.get(ip) : byIPv6.get(ip);
        if (!pod && family === 'IPv4') {
          const node = nodes.find((n) => n.name === endpoint.nodeName);
          const ip6 = node ? podIPv6(node, ip) : null;
          pod = {
            name: `pod-${ip}`,
            ip,
            ...(ip6 ? { ip6 } : {}),
            node: endpoint.nodeName,
            tcpPorts: [],
            udpPorts: [],
          };
          pods.set(ip, pod);
          if (ip6) byIPv6.set(ip6, pod);
        }
        if (!pod) continue;
        for (const port of slice.ports) {
          if (port.port === null) continue;
          const list = port.protocol === 'UDP' ? pod.udpPorts : pod.tcpPorts;
          if (!list.includes(port.port)) list.push(port.port);
        }
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
  /** Namespaces with IPv6 addresses, whose link-local addresses must pass DAD before traffic. */
  const dualStack: string[] = [];

  await lab.addNamespace('wire');
  await lab.exec('wire', 'ip', ['link', 'add', 'br0', 'type', 'bridge']);
  await lab.exec('wire', 'ip', ['link', 'set', 'br0', 'up']);
  // A default gateway that does not forward: traffic for unknown destinations leaves the nodes
  // through their FORWARD chain, as on a real node, instead of failing the route lookup first.
  const firstNode = spec.nodes[0];
  const gatewayIP = firstNode ? firstNode.ip.replace(/\.\d+$/, '.254') : '';
  if (firstNode) await lab.addAddress('wire', 'br0', `${gatewayIP}/24`);
  const gatewayIP6 = firstNode?.ip6 ? firstNode.ip6.replace(/:[0-9a-f]*$/, ':fe') : '';
  if (gatewayIP6) await lab.addAddress('wire', 'br0', `${gatewayIP6}/64`);
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
    if (node.ip6 && node.podCIDR6) {
      // What a dual-stack node has: IPv6 forwarding on (the node setup, as for ip_forward), an
      // address on the nodes' segment, routes to the other nodes' IPv6 pod CIDRs.
      dualStack.push(ns);
      await lab.sysctl(ns, 'net.ipv6.conf.all.forwarding', '1');
      await lab.addAddress(ns, 'eth0', `${node.ip6}/64`);
      for (const other of spec.nodes) {
        if (other !== node && other.ip6 && other.podCIDR6)
          await lab.addRoute(ns, other.podCIDR6, 'via', other.ip6);
      }
      if (gatewayIP6) await lab.addRoute(ns, 'default', 'via', gatewayIP6);
    }
  }

  let podIndex = 0;
  for (const pod of spec.pods) {
    const node = spec.nodes.find((n) => n.name === pod.node);
    if (!node) continue;
    const ns = podNs(pod.name);
    const hostSide = `vethp${podIndex++}`;
    await lab.addNamespace(ns);
    await lab.link(ns, 'eth0', nodeNs(node.name), hostSide);
    podInterface.set(pod.name, hostSide);
    const families: [string, string, string][] = [[pod.ip, gatewayOf(node.podCIDR), '32']];
    if (pod.ip6 && node.podCIDR6) families.push([pod.ip6, gatewayOf(node.podCIDR6), '128']);
    for (const [ip, gateway, bits] of families) {
      await lab.addAddress(ns, 'eth0', `${ip}/${bits}`);
      await lab.addRoute(ns, gateway, 'dev', 'eth0', 'scope', 'link');
      await lab.addRoute(ns, 'default', 'via', gateway, 'dev', 'eth0');
      await lab.addAddress(nodeNs(node.name), hostSide, `${gateway}/${bits}`);
      await lab.addRoute(nodeNs(node.name), `${ip}/${bits}`, 'dev', hostSide);
    }
    if (pod.ip6) dualStack.push(ns);
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
  for (const ns of dualStack) await lab.waitForIPv6Addresses(ns);
  return { spec, nodeNs, podNs, clientNs, podInterface };
}
