// EndpointSlice merging (pkg/proxy/endpointslicecache.go, endpoint.go) and endpoint selection
// (pkg/proxy/topology.go CategorizeEndpoints), per IP family.

import type { EndpointSlice, IPFamily, Protocol } from '../model/types.js';
import { canonicalIPOfFamily, joinHostPort } from '../net/ip.js';
import type { Endpoint, TopologyMode } from './types.js';

/** Key of a service port inside one service: its port name and protocol. */
export function portKey(portName: string, protocol: Protocol): string {
  return `${portName}/${protocol}`;
}

/**
 * Merges a service's slices of one family into endpoint lists per service port (keyed by
 * portKey). Slices are taken in name order so duplicates resolve the same way on every run.
 */
export function mergeSlices(
  slices: EndpointSlice[],
  family: IPFamily,
  nodeName: string,
): Map<string, Endpoint[]> {
  const byPort = new Map<string, Endpoint[]>();
  const ordered = slices
    .filter((slice) => slice.addressType === family)
    .sort((a, b) => (a.meta.name < b.meta.name ? -1 : 1));
  for (const slice of ordered) {
    for (const port of slice.ports) {
      // kube-proxy ignores ports with a nil or zero port number.
      if (port.port === null || port.port === 0) continue;
      const key = portKey(port.name, port.protocol);
      let list = byPort.get(key);
      if (!list) {
        list = [];
        byPort.set(key, list);
      }
      for (const candidate of slice.endpoints) {
        const first = candidate.addresses[0];
        if (first === undefined) continue;
        const ip = canonicalIPOfFamily(first, family);
        if (ip === null) continue;
        const { conditions } = candidate;
        list.push({
          ip,
          port: port.port,
          endpoint: joinHostPort(ip, port.port),
          isLocal: candidate.nodeName !== null && candidate.nodeName === nodeName,
          ready: conditions.ready ?? true,
          serving: conditions.serving ?? true,
          terminating: conditions.terminating ?? false,
          nodeName: candidate.nodeName,
          zoneHints: candidate.zoneHints,
          nodeHints: candidate.nodeHints,
        });
      }
    }
  }
  for (const [key, list] of byPort) byPort.set(key, withoutDuplicates(sortEndpoints(list)));
  return byPort;
}

/**
 * One endpoint per "ip:port" from a list sorted by it (stably: copies in slice order): the last
 * copy that is not terminating wins, else the first (a terminating copy never replaces another).
 */
function withoutDuplicates(sorted: Endpoint[]): Endpoint[] {
  let duplicates = false;
  for (let i = 1; i < sorted.length && !duplicates; i++)
    duplicates = sorted[i]!.endpoint === sorted[i - 1]!.endpoint;
  if (!duplicates) return sorted;
  const out: Endpoint[] = [];
  for (let i = 0; i < sorted.length; ) {
    let winner = sorted[i]!;
    let j = i + 1;
    for (; j < sorted.length && sorted[j]!.endpoint === winner.endpoint; j++)
      if (!sorted[j]!.terminating) winner = sorted[j]!;
    out.push(winner);
    i = j;
  }
  return out;
}

/** Plain string order of "ip:port", as upstream sorts (so 10.0.0.10:80 < 10.0.0.2:80). */
export function sortEndpoints(endpoints: Endpoint[]): Endpoint[] {
  return endpoints.sort((a, b) => (a.endpoint < b.endpoint ? -1 : a.endpoint > b.endpoint ? 1 : 0));
}

export interface TopologyContext {
  nodeName: string;
  /** The node's topology.kubernetes.io/zone label, "" when absent. */
  zone: string;
  /** The PreferSameTrafficDistribution feature gate: node hints are honoured only with it. */
  preferSameTrafficDistribution: boolean;
}

export function topologyModeFromHints(endpoints: Endpoint[], ctx: TopologyContext): TopologyMode {
  let hasEndpointForNode = false;
  let allHaveNodeHints = true;
  let hasEndpointForZone = false;
  let allHaveZoneHints = true;
  for (const endpoint of endpoints) {
    if (!endpoint.ready) continue;
    if (endpoint.zoneHints.length === 0) allHaveZoneHints = false;
    else if (endpoint.zoneHints.includes(ctx.zone)) hasEndpointForZone = true;
    if (endpoint.nodeHints.length === 0) allHaveNodeHints = false;
    else if (endpoint.nodeHints.includes(ctx.nodeName)) hasEndpointForNode = true;
  }
  if (ctx.preferSameTrafficDistribution && allHaveNodeHints && hasEndpointForNode) return 'PreferSameNode';
  if (allHaveZoneHints && hasEndpointForZone) return 'PreferSameZone';
  return '';
}

function availableForTopology(endpoint: Endpoint, mode: TopologyMode, ctx: TopologyContext): boolean {
  if (mode === 'PreferSameNode') return endpoint.nodeHints.includes(ctx.nodeName);
  if (mode === 'PreferSameZone') return endpoint.zoneHints.includes(ctx.zone);
  return true;
}

export interface CategorizedEndpoints {
  clusterEndpoints: Endpoint[];
  localEndpoints: Endpoint[];
  allReachableEndpoints: Endpoint[];
  hasAnyEndpoints: boolean;
  topologyMode: TopologyMode;
}

/** CategorizeEndpoints: which endpoints the Cluster and Local policies use, and whether any exist. */
export function categorizeEndpoints(
  endpoints: Endpoint[],
  policy: { usesClusterEndpoints: boolean; usesLocalEndpoints: boolean },
  ctx: TopologyContext,
): CategorizedEndpoints {
  let clusterEndpoints: Endpoint[] = [];
  let localEndpoints: Endpoint[] = [];
  let hasAnyEndpoints = false;
  let topologyMode: TopologyMode = '';
  let useServingTerminating = false;

  if (policy.usesClusterEndpoints) {
    topologyMode = topologyModeFromHints(endpoints, ctx);
    clusterEndpoints = endpoints.filter((ep) => ep.ready && availableForTopology(ep, topologyMode, ctx));
    // Terminating-endpoint fallback (KEP-1669) ignores topology: it is a best effort to keep traffic flowing.
    if (clusterEndpoints.length === 0)
      clusterEndpoints = endpoints.filter((ep) => ep.serving && ep.terminating);
    if (clusterEndpoints.length > 0) hasAnyEndpoints = true;
  }

  if (!policy.usesLocalEndpoints) {
    return {
      clusterEndpoints,
      localEndpoints,
      allReachableEndpoints: clusterEndpoints,
      hasAnyEndpoints,
      topologyMode,
    };
  }

  let hasLocalReady = false;
  let hasLocalServingTerminating = false;
  for (const ep of endpoints) {
    if (ep.ready) {
      hasAnyEndpoints = true;
      if (ep.isLocal) hasLocalReady = true;
    } else if (ep.serving && ep.terminating) {
      hasAnyEndpoints = true;
      if (ep.isLocal) hasLocalServingTerminating = true;
    }
  }
  if (hasLocalReady) {
    localEndpoints = endpoints.filter((ep) => ep.isLocal && ep.ready);
  } else if (hasLocalServingTerminating) {
    useServingTerminating = true;
    localEndpoints = endpoints.filter((ep) => ep.isLocal && ep.serving && ep.terminating);
  }

  if (!policy.usesClusterEndpoints) {
    return {
      clusterEndpoints,
      localEndpoints,
      allReachableEndpoints: localEndpoints,
      hasAnyEndpoints,
      topologyMode,
    };
  }
  if (topologyMode === '' && !useServingTerminating) {
    // clusterEndpoints then holds every ready endpoint, a superset of localEndpoints.
    return {
      clusterEndpoints,
      localEndpoints,
      allReachableEndpoints: clusterEndpoints,
      hasAnyEndpoints,
      topologyMode,
    };
  }
  const union = new Map<string, Endpoint>();
  for (const ep of clusterEndpoints) union.set(ep.endpoint, ep);
  for (const ep of localEndpoints) union.set(ep.endpoint, ep);
  return {
    clusterEndpoints,
    localEndpoints,
    allReachableEndpoints: sortEndpoints([...union.values()]),
    hasAnyEndpoints,
    topologyMode,
  };
}
