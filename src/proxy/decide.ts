// The one brain: kube-proxy's decisions for this node from the cluster state, host facts and
// config. Pure; every data plane renders its output.

import type { ProxyConfig } from '../config/types.js';
import { type ClusterState, type EndpointSlice, IP_FAMILIES, type IPFamily } from '../model/types.js';
import { categorizeEndpoints, mergeSlices, portKey, type TopologyContext } from './endpoints.js';
import { localDetectorFor, masqueradeMark, primaryNodeIP, resolveNodePortAddresses } from './node.js';
import { servicePortsForFamily, skipReason } from './service-ports.js';
import type {
  FamilyDecisions,
  NodeEnv,
  ProxyDecisions,
  ServicePortDecision,
  SkippedObject,
} from './types.js';

export const ZONE_LABEL = 'topology.kubernetes.io/zone';
export const PREFER_SAME_TRAFFIC_DISTRIBUTION_GATE = 'PreferSameTrafficDistribution';

/** The config fields the brain reads; tests can pass just these. */
export type BrainConfig = Pick<
  ProxyConfig,
  | 'nodePortAddresses'
  | 'detectLocalMode'
  | 'detectLocal'
  | 'clusterCIDRs'
  | 'masqueradeBit'
  | 'masqueradeAll'
  | 'localhostNodePorts'
  | 'featureGates'
>;

/** EndpointSlices grouped by the "namespace/name" of their Service. */
export function slicesByService(slices: Iterable<EndpointSlice>): Map<string, EndpointSlice[]> {
  const grouped = new Map<string, EndpointSlice[]>();
  for (const slice of slices) {
    if (slice.serviceName === '') continue;
    const key = `${slice.meta.namespace}/${slice.serviceName}`;
    const list = grouped.get(key);
    if (list) list.push(slice);
    else grouped.set(key, [slice]);
  }
  return grouped;
}

/** The families the node serves: those with a node IP, or IPv4 alone when none is known. */
export function nodeFamilies(env: NodeEnv, state: ClusterState): IPFamily[] {
  const families = IP_FAMILIES.filter((family) => primaryNodeIP(env.nodeIPs, state.node, family) !== '');
  return families.length > 0 ? families : ['IPv4'];
}

export function decideFamily(
  state: ClusterState,
  env: NodeEnv,
  config: BrainConfig,
  family: IPFamily,
): FamilyDecisions {
  const nodeLabels = state.node?.meta.labels ?? env.nodeLabels;
  const topology: TopologyContext = {
    nodeName: env.nodeName,
    zone: nodeLabels[ZONE_LABEL] ?? '',
    preferSameTrafficDistribution: config.featureGates[PREFER_SAME_TRAFFIC_DISTRIBUTION_GATE] === true,
  };
  const slices = slicesByService(state.endpointSlices.values());
  const servicePorts: ServicePortDecision[] = [];
  for (const [key, service] of state.services) {
    const ports = servicePortsForFamily(service, family);
    if (ports.length === 0) continue;
    const endpointsByPort = mergeSlices(slices.get(key) ?? [], family, env.nodeName);
    for (const info of ports) {
      const endpoints = endpointsByPort.get(portKey(info.portName, info.protocol)) ?? [];
      const categorized = categorizeEndpoints(endpoints, info, topology);
      servicePorts.push({
        ...info,
        endpoints,
        ...categorized,
        localReadyEndpoints: endpoints.filter((ep) => ep.isLocal && ep.ready).length,
      });
    }
  }
  servicePorts.sort((a, b) =>
    a.servicePortName !== b.servicePortName
      ? a.servicePortName < b.servicePortName
        ? -1
        : 1
      : a.protocol < b.protocol
        ? -1
        : a.protocol > b.protocol
          ? 1
          : 0,
  );
  const nodeIP = primaryNodeIP(env.nodeIPs, state.node, family);
  const localhostNodePorts = family === 'IPv4' && config.localhostNodePorts;
  return {
    family,
    nodeIP,
    servicePorts,
    nodePortAddresses: resolveNodePortAddresses(
      config.nodePortAddresses,
      family,
      nodeIP,
      env.interfaces,
      localhostNodePorts,
    ),
    localDetector: localDetectorFor(
      config.detectLocalMode,
      family,
      config.clusterCIDRs,
      state.node,
      config.detectLocal,
    ),
    masqueradeMark: masqueradeMark(config.masqueradeBit),
    masqueradeAll: config.masqueradeAll,
    localhostNodePorts,
  };
}

/** Objects kube-proxy deliberately leaves alone, with the reason (not errors). */
export function ignoredObjects(state: ClusterState): SkippedObject[] {
  const ignored: SkippedObject[] = [];
  for (const service of state.services.values()) {
    const reason = skipReason(service);
    if (reason)
      ignored.push({
        kind: 'Service',
        namespace: service.meta.namespace,
        name: service.meta.name,
        reason,
        origin: '',
      });
  }
  for (const slice of state.endpointSlices.values()) {
    const reason =
      slice.addressType === 'FQDN'
        ? 'FQDN EndpointSlice'
        : slice.serviceName === ''
          ? 'no kubernetes.io/service-name label'
          : null;
    if (reason)
      ignored.push({
        kind: 'EndpointSlice',
        namespace: slice.meta.namespace,
        name: slice.meta.name,
        reason,
        origin: '',
      });
  }
  return ignored;
}

export function decide(
  state: ClusterState,
  env: NodeEnv,
  config: BrainConfig,
  opts: { families?: IPFamily[]; skipped?: SkippedObject[] } = {},
): ProxyDecisions {
  const families = opts.families ?? nodeFamilies(env, state);
  return {
    nodeName: env.nodeName,
    families: families.map((family) => decideFamily(state, env, config, family)),
    skipped: opts.skipped ?? [],
    ignored: ignoredObjects(state),
  };
}
