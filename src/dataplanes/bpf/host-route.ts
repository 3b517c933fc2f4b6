// BPF host routing (bpf.hostRouting; docs/bpf-datapath.md, "Host routing"): whether the programs
// deliver flows between local pods themselves (bpf/host_route.h), and to which devices.

import {
  BPF_FUNC_REDIRECT_NEIGH,
  BPF_FUNC_REDIRECT_PEER,
  BPF_PROG_TYPE_SCHED_CLS,
} from '../../../native/libbpf/constants.js';
import { helperSupported } from '../../../native/libbpf/probe.js';
import type { BpfConfig } from '../../config/types.js';
import { runCommand } from '../../host/command.js';
import type { DiscoveredInterface, IpLink } from './discover.js';
import { HOST_IF } from './layout.js';

/**
 * Netfilter chains (and nft tables) of NetworkPolicy implementations that filter pods' traffic in
 * the node's forward path: a flow that bypasses the stack would bypass its policy. Calico
 * (felix's cali-* chains), kube-router (KUBE-ROUTER-*, KUBE-NWPLCY-*, KUBE-POD-FW-*), Weave Net
 * (WEAVE-NPC*), sig-network's kube-network-policies (its nft table).
 */
export const NETWORK_POLICY_CHAIN_PREFIXES: readonly string[] = [
  'cali-',
  'KUBE-ROUTER-',
  'KUBE-NWPLCY-',
  'KUBE-POD-FW-',
  'WEAVE-NPC',
  'kube-network-policies',
];

/** What the node offers host routing: the helpers, and its netfilter chains (null: unreadable). */
export interface HostRoutingNode {
  helpers: boolean;
  chains: readonly string[] | null;
}

export interface HostRoutingDecision {
  /** Load the programs with host routing (kbp_host_routing) and list the pods' devices. */
  bpf: boolean;
  reason: string;
}

/**
 * bpf.hostRouting against the node (pure). "stack" never bypasses; "bpf" always, and refuses a
 * kernel without the helpers (null: the caller fails with the reason); "auto" bypasses only with
 * the helpers and no NetworkPolicy chain in netfilter, and not when the chains cannot be read.
 */
export function hostRoutingDecision(
  setting: BpfConfig['hostRouting'],
  node: HostRoutingNode,
): HostRoutingDecision | null {
  if (setting === 'stack') return { bpf: false, reason: 'bpf.hostRouting stack' };
  if (!node.helpers) {
    if (setting === 'bpf') return null;
    return { bpf: false, reason: 'the kernel lacks bpf_redirect_peer or bpf_redirect_neigh' };
  }
  if (setting === 'bpf') return { bpf: true, reason: 'bpf.hostRouting bpf' };
  if (node.chains === null) return { bpf: false, reason: "the node's netfilter rules could not be read" };
  const policy = node.chains.find((c) => NETWORK_POLICY_CHAIN_PREFIXES.some((p) => c.startsWith(p)));
  if (policy) return { bpf: false, reason: `NetworkPolicy enforced by netfilter (${policy})` };
  return { bpf: true, reason: 'no NetworkPolicy chain in netfilter' };
}

/** Can tc programs call bpf_redirect_peer and bpf_redirect_neigh here (libbpf's probe)? */
export function kernelHasHostRoutingHelpers(): boolean {
  return (
    helperSupported(BPF_PROG_TYPE_SCHED_CLS, BPF_FUNC_REDIRECT_PEER) &&
    helperSupported(BPF_PROG_TYPE_SCHED_CLS, BPF_FUNC_REDIRECT_NEIGH)
  );
}

/** Chain and table names in `nft list chains` (iptables-nft's chains included) (pure). */
export function nftChainNames(text: string): string[] {
  return [...text.matchAll(/^\s*(?:table\s+\S+|chain)\s+(\S+)\s*\{/gm)].map((m) => m[1]!);
}

/** Chain names in an iptables-save dump (pure). */
export function iptablesChainNames(text: string): string[] {
  return [...text.matchAll(/^:(\S+)/gm)].map((m) => m[1]!);
}

/**
 * The node's netfilter chains: nft's (native and iptables-nft) and legacy iptables' filter
 * tables of both families. Null when no command answered.
 */
export async function readNetfilterChains(): Promise<string[] | null> {
  const [nft, legacy4, legacy6] = await Promise.all([
    runCommand('nft', ['list', 'chains'], { allowFailure: true }),
    runCommand('iptables-legacy-save', ['-t', 'filter'], { allowFailure: true }),
    runCommand('ip6tables-legacy-save', ['-t', 'filter'], { allowFailure: true }),
  ]);
  if (nft.code !== 0 && legacy4.code !== 0 && legacy6.code !== 0) return null;
  return [
    ...(nft.code === 0 ? nftChainNames(nft.stdout) : []),
    ...[legacy4, legacy6].flatMap((r) => (r.code === 0 ? iptablesChainNames(r.stdout) : [])),
  ];
}

/**
 * kbp_hostif_v1's entries (pure): each pod-facing veth (its pod behind bpf_redirect_peer), and
 * each bridge one of them is a port of (the bridge CNI: the FIB names the bridge, whose
 * forwarding database finds the pod's port).
 */
export function hostRouteInterfaces(
  links: readonly Pick<IpLink, 'ifindex' | 'ifname' | 'master' | 'linkinfo'>[],
  interfaces: readonly Pick<DiscoveredInterface, 'ifname' | 'role'>[],
): Map<number, number> {
  const pods = new Set(interfaces.filter((i) => i.role === 'pod').map((i) => i.ifname));
  const podLinks = links.filter((l) => pods.has(l.ifname) && l.linkinfo?.info_kind === 'veth');
  const bridges = new Set(podLinks.flatMap((l) => (l.master ? [l.master] : [])));
  const out = new Map<number, number>();
  for (const l of podLinks) out.set(l.ifindex, HOST_IF.peer);
  for (const l of links) {
    if (bridges.has(l.ifname) && l.linkinfo?.info_kind === 'bridge') out.set(l.ifindex, HOST_IF.bridge);
  }
  return out;
}
