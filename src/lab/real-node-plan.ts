// The real-node lab's address plan (src/lab/real-node.ts): two dual-stack nodes on an underlay
// behind a router, each with an IPv4 and an IPv6 pod CIDR of the cluster CIDRs, flannel's vxlan
// endpoints, the outside client, and the network namespaces' names. ipv6Of() gives each IPv4
// address of the lab its IPv6 counterpart.

import { canonicalIP } from '../net/ip.js';
import type { ReversePathFilter } from './netns.js';

/**
 * The lab's IPv6 counterpart of an IPv4 address a.b.c.d: fd00:a:b::c:d (the groups written as the
 * decimal digits read), e.g. 10.96.1.3 -> fd00:10:96::1:3, 192.0.2.100 -> fd00:192::2:100.
 */
export function ipv6Of(ipv4: string): string {
  const [a, b, c, d] = ipv4.split('.');
  const ip = canonicalIP(`fd00:${a}:${b}::${c}:${d}`);
  if (!ip) throw new Error(`no IPv6 counterpart for ${ipv4}`);
  return ip;
}

export const CLUSTER_CIDR = '10.244.0.0/16';
/** The IPv6 cluster CIDR: each node's IPv6 pod CIDR is a /64 of it, as kube-controller-manager
 * allocates them (--node-cidr-mask-size-ipv6 64). */
export const CLUSTER_CIDR6 = 'fd00:244::/48';
export const UNDERLAY_GATEWAY = '10.10.0.254';
/** The outside client, behind the router that joins it to the nodes' underlay. */
export const CLIENT_IP = '192.0.2.100';
export const CLIENT_IP6 = ipv6Of(CLIENT_IP);
export const CLIENT_GATEWAY = '192.0.2.1';
export const VXLAN_MTU = 1450;

export interface RealNode {
  name: string;
  ip: string;
  podCIDR: string;
  /** flannel.1's address: the pod CIDR's network address, as flannel assigns it. */
  vtep: string;
  /** The node's IPv6 address on the underlay (a /64), its IPv6 pod CIDR and flannel-v6.1's address. */
  ip6: string;
  podCIDR6: string;
  vtep6: string;
  cni: 'bridge' | 'ptp';
  rpFilter: ReversePathFilter;
}

export const REAL_NODES: RealNode[] = [
  {
    name: 'node-a',
    ip: '10.10.0.1',
    podCIDR: '10.244.1.0/24',
    vtep: '10.244.1.0',
    ip6: ipv6Of('10.10.0.1'),
    podCIDR6: 'fd00:244:0:1::/64',
    vtep6: 'fd00:244:0:1::',
    cni: 'bridge',
    rpFilter: 1,
  },
  {
    name: 'node-b',
    ip: '10.10.0.2',
    podCIDR: '10.244.2.0/24',
    vtep: '10.244.2.0',
    ip6: ipv6Of('10.10.0.2'),
    podCIDR6: 'fd00:244:0:2::/64',
    vtep6: 'fd00:244:0:2::',
    cni: 'ptp',
    rpFilter: 2,
  },
];

export interface RealNodeSpec {
  /** Pods by name, each on a node, serving HTTP on tcpPorts and UDP echo on udpPorts. */
  pods: { name: string; node: string; tcpPorts: number[]; udpPorts: number[]; streamPorts?: number[] }[];
  /** Servers in the nodes' own network namespaces (host network), e.g. an API server on 6443. */
  hostServers: { name: string; node: string; port: number }[];
  /** LoadBalancer IPs and the node the router sends each to (as a BGP or L2 announcement would). */
  loadBalancerRoutes: { ip: string; node: string }[];
}

export interface PodInfo {
  name: string;
  node: string;
  ip: string;
  /** Its IPv6 address, from host-local's IPv6 range. */
  ip6: string;
  /** The host side of its veth, named by the CNI plugin. */
  hostInterface: string;
}

export const nodeNs = (node: string) => `n-${node}`;
export const podNs = (pod: string) => `p-${pod}`;
export const CLIENT_NS = 'client';

export function nodeOf(name: string): RealNode {
  const node = REAL_NODES.find((n) => n.name === name);
  if (!node) throw new Error(`no node ${name}`);
  return node;
}
