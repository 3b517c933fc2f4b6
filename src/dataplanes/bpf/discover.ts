// Which of the host's interfaces the programs go on, found from what the host reports rather than
// from names (docs/config.md, "Interfaces"):
//   external    the devices holding one of the node's IPs, the devices of the default routes
//               (IPv4 and IPv6) and overlay devices; or, when bpf.externalInterfaces is set, the
//               devices it names
//   pod-facing  host ends of veths (the peer in another namespace) that are not external (a
//               node's uplink can itself be a veth); or, when bpf.podInterfaces is set, the
//               devices it names
// A device without an Ethernet header (wireguard, ipip, gre, tun) is "l3": it takes the L3
// program variants and never XDP.

import type { BpfConfig } from '../../config/types.js';
import { runCommand } from '../../host/command.js';
import { canonicalIP } from '../../net/ip.js';

/** One entry of `ip -j -d addr show`: the link's details and its addresses (fields used here). */
export interface IpLink {
  ifindex: number;
  ifname: string;
  /** ether, none (wireguard, tun), ipip, gre, sit, tunnel6, loopback, ... */
  link_type?: string;
  /** Only with -d; absent for devices without a driver kind (a physical NIC, lo). */
  linkinfo?: { info_kind?: string };
  /** The bridge (or bond) the device is a port of. */
  master?: string;
  /** Set when the peer of a veth lives in another network namespace (a pod's). */
  link_netnsid?: number;
  /** `ip -j` prints an address's flags as booleans (IPv6: tentative while in duplicate address
   * detection, dadfailed, deprecated once its preferred lifetime is over). */
  addr_info?: {
    family?: string;
    local?: string;
    prefixlen?: number;
    scope?: string;
    tentative?: boolean;
    dadfailed?: boolean;
    deprecated?: boolean;
  }[];
}

/** One entry of `ip -j route show default`: multipath routes name their devices per next hop. */
export interface IpRoute {
  dev?: string;
  nexthops?: { dev?: string }[];
}

export interface HostNetwork {
  links: IpLink[];
  /** IPv4 and IPv6 default routes. */
  defaultRoutes: IpRoute[];
}

export type InterfaceRole = 'external' | 'pod';

export interface DiscoveredInterface {
  ifname: string;
  ifindex: number;
  role: InterfaceRole;
  /** No Ethernet header: the L3 program variants, never XDP. */
  l3: boolean;
  /** A tunnel device: never XDP (its packets were already through the stack once). */
  overlay: boolean;
  /** Why it has its role, for the attach log line. */
  reason: string;
}

/** Tunnel and overlay drivers (linkinfo.info_kind) whose devices carry traffic between nodes. */
export const OVERLAY_KINDS: ReadonlySet<string> = new Set([
  'vxlan',
  'geneve',
  'ipip',
  'sit',
  'ip6tnl',
  'gre',
  'gretap',
  'ip6gre',
  'ip6gretap',
  'wireguard',
]);

/** A trailing "*" matches a prefix; anything else matches the whole name. */
export function matchesPattern(name: string, patterns: readonly string[]): boolean {
  return patterns.some((p) => (p.endsWith('*') ? name.startsWith(p.slice(0, -1)) : name === p));
}

function externalReason(
  link: IpLink,
  nodeIPs: ReadonlySet<string>,
  defaultRouteDevices: ReadonlySet<string>,
  patterns: readonly string[],
): string | null {
  if (patterns.length > 0) return matchesPattern(link.ifname, patterns) ? 'bpf.externalInterfaces' : null;
  const nodeIP = (link.addr_info ?? [])
    .map((a) => (a.local ? canonicalIP(a.local) : null))
    .find((ip) => ip !== null && nodeIPs.has(ip));
  if (nodeIP) return `holds node IP ${nodeIP}`;
  if (defaultRouteDevices.has(link.ifname)) return 'default route';
  const kind = link.linkinfo?.info_kind ?? '';
  if (OVERLAY_KINDS.has(kind)) return `overlay (${kind})`;
  return null;
}

/** The interfaces to hook and their roles (pure), sorted by name. */
export function discoverInterfaces(
  host: HostNetwork,
  nodeIPs: readonly string[],
  config: Pick<BpfConfig, 'podInterfaces' | 'externalInterfaces'>,
): DiscoveredInterface[] {
  const ips = new Set(nodeIPs.map(canonicalIP).filter((ip): ip is string => ip !== null));
  const routeDevices = new Set(
    host.defaultRoutes.flatMap((r) => [r.dev, ...(r.nexthops ?? []).map((h) => h.dev)]).filter(Boolean),
  ) as Set<string>;
  const out: DiscoveredInterface[] = [];
  for (const link of [...host.links].sort((a, b) => a.ifname.localeCompare(b.ifname))) {
    if (link.link_type === 'loopback') continue;
    const kind = link.linkinfo?.info_kind ?? '';
    const base = {
      ifname: link.ifname,
      ifindex: link.ifindex,
      l3: (link.link_type ?? 'ether') !== 'ether',
      overlay: OVERLAY_KINDS.has(kind),
    };
    const external = externalReason(link, ips, routeDevices, config.externalInterfaces);
    if (external) {
      out.push({ ...base, role: 'external', reason: external });
      continue;
    }
    // There is no L3 variant of the pod program: pods sit behind Ethernet devices.
    if (base.l3) continue;
    if (config.podInterfaces.length > 0) {
      if (matchesPattern(link.ifname, config.podInterfaces))
        out.push({ ...base, role: 'pod', reason: 'bpf.podInterfaces' });
    } else if (kind === 'veth' && link.link_netnsid !== undefined) {
      // A veth pair inside the host namespace (cilium_host/cilium_net, a lab's wiring) faces no pod.
      out.push({ ...base, role: 'pod', reason: 'veth' });
    }
  }
  return out;
}

/** `ip -j ARGS`, parsed. */
export async function ipJson<T>(args: string[]): Promise<T[]> {
  const { stdout } = await runCommand('ip', ['-j', ...args]);
  return JSON.parse(stdout) as T[];
}

/**
 * The host's links with their addresses, and its default routes, in the current network
 * namespace. `ip -d addr` gives link details and addresses in one consistent snapshot.
 */
export async function probeHostNetwork(): Promise<HostNetwork> {
  const [links, v4, v6] = await Promise.all([
    ipJson<IpLink>(['-d', 'addr', 'show']),
    ipJson<IpRoute>(['-4', 'route', 'show', 'default']),
    ipJson<IpRoute>(['-6', 'route', 'show', 'default']),
  ]);
  return { links, defaultRoutes: [...v4, ...v6] };
}
