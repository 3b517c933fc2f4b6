// BPF host routing (bpf.hostRouting; docs/bpf-datapath.md, "Host routing"): whether the programs
// deliver service flows of local pods themselves (bpf/host_route.h), to which devices, and to
// which of the other nodes' pods.

import {
  BPF_FUNC_REDIRECT_NEIGH,
  BPF_FUNC_REDIRECT_PEER,
  BPF_PROG_TYPE_SCHED_CLS,
} from '../../../native/libbpf/constants.js';
import { helperSupported } from '../../../native/libbpf/probe.js';
import type { BpfConfig } from '../../config/types.js';
import { runCommand } from '../../host/command.js';
import type { IPFamily } from '../../model/types.js';
import { formatCIDR, type ParsedCIDR } from '../../net/ip.js';
import { type DiscoveredInterface, type IpLink, ipJson, OVERLAY_KINDS } from './discover.js';
import { HOST_IF } from './layout.js';
import { cidrRelation, type NatTable, neverMasqueraded, parseNatTable, prefixOf } from './masquerade.js';

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

/** One route of `ip -j route show table main` (fields used). */
export interface MainRoute {
  /** "default", an address, or a prefix. */
  dst: string;
  gateway?: string;
  dev?: string;
  /** Absent for unicast. */
  type?: string;
  nexthops?: unknown[];
}

/** What remoteBypass judges: the node's routes, devices, policy routing and nat rules. */
export interface RemoteBypassNode {
  /** The main table's routes of both families. */
  routes: readonly MainRoute[];
  /** Rules of `ip -j rule show` (both families), or null when unread. */
  rules: readonly Record<string, unknown>[] | null;
  links: readonly Pick<IpLink, 'ifindex' | 'ifname' | 'linkinfo'>[];
  interfaces: readonly Pick<DiscoveredInterface, 'ifname' | 'role' | 'l3'>[];
  /** The local pods' devices (hostRouteInterfaces): the routes out of them are the pods' sources. */
  podDevices: ReadonlyMap<number, number>;
  /** Each family's nat table (parseNatTable), null when it could not be read or judged. */
  nat: Record<IPFamily, NatTable | null>;
}

export interface RemoteBypass {
  /** Other nodes' pod prefixes flows may be carried to (kbp_hostdst4/6_v1). */
  prefixes: Record<IPFamily, string[]>;
  /** The devices they are routed out of (ifindex -> HOST_IF.remote, into kbp_hostif_v1). */
  devices: Map<number, number>;
  /** Routed prefixes kept on the stack, and why (for the log). */
  stack: { prefix: string; dev: string; reason: string }[];
}

/** The overlay kinds a bypassed packet may be redirected into: they take an Ethernet frame and
 * find the remote end by its destination MAC, the FIB's neighbour (the real-node lab's flannel). */
const BYPASS_OVERLAYS: ReadonlySet<string> = new Set(['vxlan']);

/** The default rules: local, main and default tables from any source. */
function defaultRule(r: Record<string, unknown>): boolean {
  const keys = Object.keys(r).filter((k) => k !== 'priority');
  return (
    keys.every((k) => k === 'src' || k === 'table') &&
    r.src === 'all' &&
    ['local', 'main', 'default'].includes(String(r.table))
  );
}

/** Link-local and multicast sources never reach a Service. */
function usableSource(cidr: ParsedCIDR): boolean {
  const [a = 0, b = 0] = cidr.network;
  return cidr.family === 'IPv4'
    ? !(a === 169 && b === 254)
    : !(a === 0xfe && (b & 0xc0) === 0x80) && a !== 0xff;
}

/** Why a routed device cannot carry the bypass, or null when it can. */
function deviceProblem(node: RemoteBypassNode, dev: string): string | null {
  const found = node.interfaces.find((i) => i.ifname === dev);
  if (found?.role !== 'external') return 'not an external device of the node';
  const kind = node.links.find((l) => l.ifname === dev)?.linkinfo?.info_kind ?? '';
  if (found.l3 || (OVERLAY_KINDS.has(kind) && !BYPASS_OVERLAYS.has(kind)))
    return `a tunnel (${kind || 'no Ethernet header'}) the bypass does not use`;
  return null;
}

/**
 * Which other nodes' pods host routing carries flows to (pure), per destination prefix of the main
 * table: a unicast route through a gateway (a remote pod CIDR: via the other node on the underlay,
 * or via its VTEP on a vxlan overlay) out of an external Ethernet device, holding none of this
 * node's pods and no more specific route (the FIB would send part of it elsewhere, and the
 * request and its reply would part ways), that netfilter provably never masquerades from any of
 * this node's pods (the routes out of their devices). A connected route (the underlay's subnet, where host-network backends live
 * and the CNI masquerades towards), the default route, multipath routes, other tunnels, and every
 * route of a node that routes by policy (the FIB could then pick another way than the one judged)
 * keep the stack's path.
 */
export function remoteBypass(node: RemoteBypassNode): RemoteBypass {
  const out: RemoteBypass = { prefixes: { IPv4: [], IPv6: [] }, devices: new Map(), stack: [] };
  const podDevs = new Set(node.links.filter((l) => node.podDevices.has(l.ifindex)).map((l) => l.ifname));
  const sources = node.routes
    .filter((r) => r.dev && podDevs.has(r.dev) && r.dst !== 'default')
    .map((r) => prefixOf(r.dst))
    .filter((c): c is ParsedCIDR => c !== null && usableSource(c));
  const policy =
    node.rules === null
      ? 'ip rules unread'
      : node.rules.some((r) => !defaultRule(r))
        ? 'policy routing'
        : null;
  const inner = node.routes.map((r) => prefixOf(r.dst)).filter((c): c is ParsedCIDR => c !== null);
  for (const r of node.routes) {
    const dst = prefixOf(r.dst);
    if (!dst || !r.gateway || !r.dev || (r.type ?? 'unicast') !== 'unicast' || r.nexthops) continue;
    const mine = sources.filter((s) => s.family === dst.family);
    const nat = node.nat[dst.family];
    const reason =
      policy ??
      deviceProblem(node, r.dev) ??
      (mine.length === 0 ? 'no local pod of the family' : null) ??
      (mine.some((s) => cidrRelation(dst, s) !== false) ? "holds this node's pods" : null) ??
      (inner.some((c) => c.prefixLength > dst.prefixLength && cidrRelation(dst, c) === true)
        ? 'a more specific route inside'
        : null) ??
      (nat === null ? 'nat table unread' : null) ??
      (mine.every((src) => neverMasqueraded(nat!, { src, dst, dev: r.dev! })) ? null : 'masqueraded');
    if (reason) {
      out.stack.push({ prefix: r.dst, dev: r.dev, reason });
      continue;
    }
    out.prefixes[dst.family].push(formatCIDR(dst));
    const ifindex = node.links.find((l) => l.ifname === r.dev)?.ifindex;
    if (ifindex !== undefined) out.devices.set(ifindex, HOST_IF.remote);
  }
  return out;
}

/** `nft list ruleset` has a masquerade or snat outside iptables-nft's own nat tables: the families
 * it applies to cannot be judged from iptables-save (pure). */
export function nftForeignNat(ruleset: string): Set<IPFamily> {
  const out = new Set<IPFamily>();
  for (const m of ruleset.matchAll(/^table (\S+) (\S+) \{([\s\S]*?)^\}/gm)) {
    const [, family, name, body] = m;
    if (name === 'nat' && (family === 'ip' || family === 'ip6')) continue;
    if (!/\b(masquerade|snat)\b/.test(body ?? '')) continue;
    if (family !== 'ip6') out.add('IPv4');
    if (family !== 'ip') out.add('IPv6');
  }
  return out;
}

/** Both backends' nat tables of a family (iptables-nft-save, iptables-legacy-save), and nft's
 * foreign nat; null when no backend answered or nft has a nat of its own for the family. */
async function readNatTable(family: IPFamily, foreign: Set<IPFamily> | null): Promise<NatTable | null> {
  const tool = family === 'IPv4' ? 'iptables' : 'ip6tables';
  const dumps = await Promise.all(
    [`${tool}-nft-save`, `${tool}-legacy-save`].map((c) =>
      runCommand(c, ['-t', 'nat'], { allowFailure: true }),
    ),
  );
  if (foreign === null || foreign.has(family) || dumps.every((d) => d.code !== 0)) return null;
  return parseNatTable(dumps.filter((d) => d.code === 0).map((d) => d.stdout));
}

/** What remoteBypass reads of the node besides its links: routes, rules, nat tables. */
export async function readRemoteBypassNode(): Promise<Pick<RemoteBypassNode, 'routes' | 'rules' | 'nat'>> {
  const [r4, r6, rules4, rules6, nft] = await Promise.all([
    ipJson<MainRoute>(['-4', 'route', 'show', 'table', 'main']),
    ipJson<MainRoute>(['-6', 'route', 'show', 'table', 'main']),
    ipJson<Record<string, unknown>>(['-4', 'rule', 'show']).catch(() => null),
    ipJson<Record<string, unknown>>(['-6', 'rule', 'show']).catch(() => null),
    runCommand('nft', ['list', 'ruleset'], { allowFailure: true }),
  ]);
  const foreign = nft.code === 0 ? nftForeignNat(nft.stdout) : null;
  const [nat4, nat6] = await Promise.all([readNatTable('IPv4', foreign), readNatTable('IPv6', foreign)]);
  return {
    routes: [...r4, ...r6],
    rules: rules4 && rules6 ? [...rules4, ...rules6] : null,
    nat: { IPv4: nat4, IPv6: nat6 },
  };
}
