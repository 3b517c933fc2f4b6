// Which netfilter conntrack entries are stale, as kube-proxy 1.33's conntrack reconciler decides
// (pkg/proxy/conntrack/cleanup.go, run after each sync by the iptables, nftables and ipvs
// proxiers). A UDP flow keeps the endpoint its first packet was DNATed to, and a flow whose first
// packet met no DNAT (the Service had no rules yet) stays un-NATed, so both outlive the rules that
// would now send them elsewhere. TCP is left alone: its connections end by themselves.

import { joinHostPort } from '../net/ip.js';
import type { FamilyDecisions } from './types.js';

/** The part of a conntrack entry the reconciler reads. IPs are canonical. */
export interface ConntrackEntry {
  /** Layer 4 protocol of the original direction: "udp", "tcp", ... (conntrack's names). */
  protocol: string;
  origDst: string;
  origDstPort: number;
  /** Where replies come from: the endpoint the flow was DNATed to, or origDst when it was not. */
  replySrc: string;
}

/**
 * A deletion filter, as `conntrack -D -p udp` takes it: every UDP entry of the family whose
 * original destination port is `origDstPort`, whose reply source is `replySrc` and, when set,
 * whose original destination is `origDst`.
 */
export interface ConntrackFilter {
  origDst: string | null;
  origDstPort: number;
  replySrc: string;
}

/** The IPs of the serving endpoints, per "ip:port" frontend and per NodePort, of UDP ports with any. */
interface UdpFrontends {
  byServiceIP: Map<string, Set<string>>;
  byNodePort: Map<number, Set<string>>;
}

function addTo<K>(map: Map<K, Set<string>>, key: K, ips: Set<string>): void {
  const existing = map.get(key);
  if (existing) for (const ip of ips) existing.add(ip);
  else map.set(key, new Set(ips));
}

function udpFrontends(decisions: FamilyDecisions): UdpFrontends {
  const frontends: UdpFrontends = { byServiceIP: new Map(), byNodePort: new Map() };
  for (const sp of decisions.servicePorts) {
    if (sp.protocol !== 'UDP') continue;
    // Every serving endpoint, whatever the traffic policies, topology or termination say: a
    // Service change must not break flows that still reach a live pod (TCP keeps them too).
    const servingIPs = new Set(sp.endpoints.filter((ep) => ep.serving).map((ep) => ep.ip));
    // kube-proxy 1.33 leaves the entries of a port without serving endpoints alone.
    if (servingIPs.size === 0) continue;
    // Two ports claiming one frontend is a conflict kube-proxy settles by Go map order; the union
    // keeps it deterministic and never cuts a flow to a pod that serves the frontend.
    for (const ip of [sp.clusterIP, ...sp.loadBalancerIPs, ...sp.externalIPs]) {
      if (ip !== '') addTo(frontends.byServiceIP, joinHostPort(ip, sp.port), servingIPs);
    }
    if (sp.nodePort !== 0) addTo(frontends.byNodePort, sp.nodePort, servingIPs);
  }
  return frontends;
}

const filterKey = (f: ConntrackFilter) => `${f.origDst ?? '*'} ${f.origDstPort} ${f.replySrc}`;

/**
 * The filters that delete one family's stale UDP entries: an entry to a service IP:port (ClusterIP,
 * LoadBalancer IP, externalIP) or to any address on a NodePort whose reply source is not a serving
 * endpoint of that port. An un-NATed entry (reply source = the service IP) counts as stale too.
 * Both rules apply to every entry, so one entry may yield two filters. Filters are deduplicated
 * and sorted; like kube-proxy's netlink filters, each also deletes any other entry it matches.
 */
export function staleConntrackFilters(
  decisions: FamilyDecisions,
  entries: readonly ConntrackEntry[],
): ConntrackFilter[] {
  const { byServiceIP, byNodePort } = udpFrontends(decisions);
  const filters = new Map<string, ConntrackFilter>();
  const add = (filter: ConntrackFilter) => filters.set(filterKey(filter), filter);
  for (const entry of entries) {
    if (entry.protocol !== 'udp') continue;
    const { origDst, origDstPort, replySrc } = entry;
    const serviceEndpoints = byServiceIP.get(joinHostPort(origDst, origDstPort));
    if (serviceEndpoints && !serviceEndpoints.has(replySrc)) add({ origDst, origDstPort, replySrc });
    const nodePortEndpoints = byNodePort.get(origDstPort);
    if (nodePortEndpoints && !nodePortEndpoints.has(replySrc)) add({ origDst: null, origDstPort, replySrc });
  }
  return [...filters.values()].sort((a, b) => filterKey(a).localeCompare(filterKey(b)));
}
