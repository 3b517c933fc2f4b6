// The one brain: kube-proxy's decisions for this node from the cluster state, host facts and
// config. Pure; every data plane renders its output.

import type { ProxyConfig } from '../config/types.js';
import type { SliceIndex } from '../model/tracker.js';
import {
  type ClusterState,
  type EndpointSlice,
  IP_FAMILIES,
  type IPFamily,
  type Service,
} from '../model/types.js';
import { formatCIDR, type ParsedCIDR, parseCIDR } from '../net/ip.js';
import { escalate, type SyncScope } from './dataplane.js';
import { categorizeEndpoints, mergeSlices, portKey, type TopologyContext } from './endpoints.js';
import { localDetectorFor, masqueradeMark, primaryNodeIP, resolveNodePortAddresses } from './node.js';
import { servicePortsForFamily, skipReason } from './service-ports.js';
import { lowerBound, patchSorted } from './sorted.js';
import type {
  FamilyDecisions,
  NodeEnv,
  ProxyDecisions,
  ServicePortDecision,
  SkippedObject,
} from './types.js';
import { scopeVerdicts } from './verdicts.js';

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
    const key = sliceKey(slice);
    const list = grouped.get(key);
    if (list) list.push(slice);
    else grouped.set(key, [slice]);
  }
  return grouped;
}

/**
 * The families the node serves: env.proxyFamilies when the runner decided them (the rule modes:
 * both when the kernel has IPv6, as kube-proxy), else those with a node IP, or IPv4 alone when
 * none is known.
 */
export function nodeFamilies(env: NodeEnv, state: ClusterState): IPFamily[] {
  const chosen = env.proxyFamilies;
  if (chosen && chosen.length > 0) return IP_FAMILIES.filter((family) => chosen.includes(family));
  const families = IP_FAMILIES.filter((family) => primaryNodeIP(env.nodeIPs, state.node, family) !== '');
  return families.length > 0 ? families : ['IPv4'];
}

function topologyOf(state: ClusterState, env: NodeEnv, config: BrainConfig): TopologyContext {
  const nodeLabels = state.node?.meta.labels ?? env.nodeLabels;
  return {
    nodeName: env.nodeName,
    zone: nodeLabels[ZONE_LABEL] ?? '',
    preferSameTrafficDistribution: config.featureGates[PREFER_SAME_TRAFFIC_DISTRIBUTION_GATE] === true,
  };
}

/** One Service's port decisions in one family: a function of the Service and its slices alone. */
function decideService(
  service: Service,
  slices: EndpointSlice[],
  family: IPFamily,
  topology: TopologyContext,
): ServicePortDecision[] {
  const ports = servicePortsForFamily(service, family);
  if (ports.length === 0) return [];
  const endpointsByPort = mergeSlices(slices, family, topology.nodeName);
  // Built field by field (in the order `render --output json` prints): a rest-and-spread copy of
  // the port's fields cost a tenth of a cold sync at 10,000 Services.
  return ports.map((port): ServicePortDecision => {
    const endpoints = endpointsByPort.get(portKey(port.portName, port.protocol)) ?? [];
    const categorized = categorizeEndpoints(endpoints, port, topology);
    const verdicts = scopeVerdicts(port, categorized);
    let localReadyEndpoints = 0;
    for (const ep of endpoints) if (ep.isLocal && ep.ready) localReadyEndpoints++;
    return {
      family: port.family,
      namespace: port.namespace,
      name: port.name,
      portName: port.portName,
      protocol: port.protocol,
      servicePortName: port.servicePortName,
      type: port.type,
      clusterIP: port.clusterIP,
      port: port.port,
      nodePort: port.nodePort,
      externalIPs: port.externalIPs,
      loadBalancerIPs: port.loadBalancerIPs,
      loadBalancerSourceRanges: port.loadBalancerSourceRanges,
      healthCheckNodePort: port.healthCheckNodePort,
      externallyAccessible: port.externallyAccessible,
      usesClusterEndpoints: port.usesClusterEndpoints,
      usesLocalEndpoints: port.usesLocalEndpoints,
      sessionAffinityTimeoutSeconds: port.sessionAffinityTimeoutSeconds,
      schedulerAnnotation: port.schedulerAnnotation,
      endpoints,
      clusterEndpoints: categorized.clusterEndpoints,
      localEndpoints: categorized.localEndpoints,
      allReachableEndpoints: categorized.allReachableEndpoints,
      hasAnyEndpoints: categorized.hasAnyEndpoints,
      topologyMode: categorized.topologyMode,
      localReadyEndpoints,
      internal: verdicts.internal,
      external: verdicts.external,
      externalFromCluster: verdicts.externalFromCluster,
    };
  });
}

function compareServicePorts(a: ServicePortDecision, b: ServicePortDecision): number {
  if (a.servicePortName !== b.servicePortName) return a.servicePortName < b.servicePortName ? -1 : 1;
  return a.protocol < b.protocol ? -1 : a.protocol > b.protocol ? 1 : 0;
}

/**
 * The ServiceCIDRs' CIDRs of one family, canonical, sorted by address and without duplicates: the
 * union of every object's spec.cidrs, as kube-proxy's ServiceCIDRConfig keeps it.
 */
export function serviceCIDRsOfFamily(state: ClusterState, family: IPFamily): string[] {
  const cidrs = new Map<string, ParsedCIDR>();
  for (const object of state.serviceCIDRs.values()) {
    for (const text of object.cidrs) {
      const cidr = parseCIDR(text);
      if (cidr?.family === family) cidrs.set(formatCIDR(cidr), cidr);
    }
  }
  return [...cidrs].sort(([, a], [, b]) => compareCIDRs(a, b)).map(([text]) => text);
}

/** By network address, then prefix length. */
function compareCIDRs(a: ParsedCIDR, b: ParsedCIDR): number {
  for (let i = 0; i < a.network.length; i++) {
    const diff = (a.network[i] ?? 0) - (b.network[i] ?? 0);
    if (diff !== 0) return diff;
  }
  return a.prefixLength - b.prefixLength;
}

/**
 * A family's decisions around its (sorted) service ports: the node-wide facts, computed from the
 * state on every call (the Decider keeps none of them).
 */
function familyDecisions(
  state: ClusterState,
  env: NodeEnv,
  config: BrainConfig,
  family: IPFamily,
  servicePorts: ServicePortDecision[],
): FamilyDecisions {
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
    serviceCIDRs: serviceCIDRsOfFamily(state, family),
  };
}

export function decideFamily(
  state: ClusterState,
  env: NodeEnv,
  config: BrainConfig,
  family: IPFamily,
): FamilyDecisions {
  const topology = topologyOf(state, env, config);
  const slices = slicesByService(state.endpointSlices.values());
  const servicePorts: ServicePortDecision[] = [];
  for (const [key, service] of state.services)
    servicePorts.push(...decideService(service, slices.get(key) ?? [], family, topology));
  return familyDecisions(state, env, config, family, servicePorts.sort(compareServicePorts));
}

/** Why kube-proxy leaves a Service alone, as a skipped object; null when it does not. */
function ignoredService(service: Service): SkippedObject | null {
  const reason = skipReason(service);
  return reason
    ? { kind: 'Service', namespace: service.meta.namespace, name: service.meta.name, reason, origin: '' }
    : null;
}

/** Why kube-proxy leaves an EndpointSlice alone, as a skipped object; null when it does not. */
function ignoredSlice(slice: EndpointSlice): SkippedObject | null {
  const reason =
    slice.addressType === 'FQDN'
      ? 'FQDN EndpointSlice'
      : slice.serviceName === ''
        ? 'no kubernetes.io/service-name label'
        : null;
  return reason
    ? { kind: 'EndpointSlice', namespace: slice.meta.namespace, name: slice.meta.name, reason, origin: '' }
    : null;
}

const KIND_ORDER: Record<string, number> = { Service: 0, EndpointSlice: 1 };

/** Services first, then EndpointSlices, each by namespace and name. */
function compareIgnored(a: SkippedObject, b: SkippedObject): number {
  const kind = (KIND_ORDER[a.kind] ?? 2) - (KIND_ORDER[b.kind] ?? 2);
  if (kind !== 0) return kind;
  if (a.namespace !== b.namespace) return a.namespace < b.namespace ? -1 : 1;
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

/** Objects kube-proxy deliberately leaves alone, with the reason (not errors); sorted. */
export function ignoredObjects(state: ClusterState): SkippedObject[] {
  const ignored: SkippedObject[] = [];
  for (const service of state.services.values()) {
    const object = ignoredService(service);
    if (object) ignored.push(object);
  }
  for (const slice of state.endpointSlices.values()) {
    const object = ignoredSlice(slice);
    if (object) ignored.push(object);
  }
  return ignored.sort(compareIgnored);
}

/** The slices by Service, for a caller without an index kept as the state changes: one walk. */
function scannedSliceIndex(state: ClusterState, grouped: ReadonlyMap<string, EndpointSlice[]>): SliceIndex {
  return {
    slicesOf: (key) => grouped.get(key) ?? [],
    unlabelledSlices: () => [...state.endpointSlices.values()].filter((s) => s.serviceName === ''),
  };
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

/**
 * decide() for a sync loop: each Service's port decisions are kept and only those of the Services
 * a change names are computed again, so a change costs in proportion to the change. A full sync
 * (`full`) computes everything, as does any change of what every Service's decisions depend on
 * (the node's name and zone, the feature gates, the families): the scope it returns is then
 * widened to full, with that reason. Node-wide facts such as the
 * ServiceCIDRs are not kept: familyDecisions computes them from the state on every call. The
 * sorted lists (service ports, ignored objects) are patched, not sorted again. `slices` finds a
 * Service's slices (the tracker keeps that index); without it they are found by a walk over
 * every slice. Same output as decide().
 */
export class Decider {
  /** family → its service ports, sorted, as last decided. */
  private sorted = new Map<IPFamily, ServicePortDecision[]>();
  /** family → Service key → that Service's ports in the sorted list. */
  private ports = new Map<IPFamily, Map<string, ServicePortDecision[]>>();
  /** Service key → the ignored objects it accounts for (itself, its labelled slices). */
  private ignoredOf = new Map<string, SkippedObject[]>();
  /** The slices without a Service label, as last reported. */
  private ignoredUnlabelled: SkippedObject[] = [];
  private ignored: SkippedObject[] = [];
  private context = '';

  decide(
    state: ClusterState,
    env: NodeEnv,
    config: BrainConfig,
    changes: SyncScope & { slices?: SliceIndex },
    opts: { skipped?: SkippedObject[] } = {},
  ): { decisions: ProxyDecisions; scope: SyncScope } {
    const families = nodeFamilies(env, state);
    const topology = topologyOf(state, env, config);
    const context = JSON.stringify([topology, families]);
    const scope = escalate(
      { full: changes.full, changedServices: changes.changedServices, reason: changes.reason },
      context === this.context ? null : "brain: the node's name, zone, feature gates or families changed",
    );
    const full = scope.full;
    this.context = context;
    const grouped = full || !changes.slices ? slicesByService(state.endpointSlices.values()) : null;
    const index = grouped ? scannedSliceIndex(state, grouped) : changes.slices!;
    if (full) {
      this.sorted = new Map();
      this.ports = new Map();
      this.ignoredOf = new Map();
      this.ignoredUnlabelled = [];
      this.ignored = [];
    }
    // A slice may name a Service that does not exist: its ignored entries are kept under that key.
    const changed =
      full && grouped ? new Set([...state.services.keys(), ...grouped.keys()]) : changes.changedServices;
    const decided = families.map((family) => {
      const byService = this.ports.get(family) ?? new Map<string, ServicePortDecision[]>();
      this.ports.set(family, byService);
      const removed: ServicePortDecision[] = [];
      const added: ServicePortDecision[] = [];
      for (const key of changed) {
        removed.push(...(byService.get(key) ?? []));
        const service = state.services.get(key);
        const ports = service ? decideService(service, index.slicesOf(key), family, topology) : [];
        if (ports.length > 0) byService.set(key, ports);
        else byService.delete(key);
        added.push(...ports);
      }
      const servicePorts = full
        ? added.sort(compareServicePorts)
        : patchSorted(this.sorted.get(family) ?? [], removed, added, compareServicePorts);
      this.sorted.set(family, servicePorts);
      return familyDecisions(state, env, config, family, servicePorts);
    });
    const removed: SkippedObject[] = [...this.ignoredUnlabelled];
    const added: SkippedObject[] = [];
    for (const key of changed) {
      removed.push(...(this.ignoredOf.get(key) ?? []));
      const service = state.services.get(key);
      const objects = [service ? ignoredService(service) : null, ...index.slicesOf(key).map(ignoredSlice)];
      const ignored = objects.filter((o): o is SkippedObject => o !== null);
      if (ignored.length > 0) this.ignoredOf.set(key, ignored);
      else this.ignoredOf.delete(key);
      added.push(...ignored);
    }
    this.ignoredUnlabelled = index.unlabelledSlices().flatMap((slice) => ignoredSlice(slice) ?? []);
    added.push(...this.ignoredUnlabelled);
    this.ignored = patchSorted(this.ignored, removed, added, compareIgnored);
    const decisions = {
      nodeName: env.nodeName,
      families: decided,
      skipped: opts.skipped ?? [],
      ignored: this.ignored,
    };
    return { decisions, scope };
  }
}

/**
 * A Service's ports in a family's sorted service ports, by binary search: they are named
 * "namespace/name" (a Service's one unnamed port) or "namespace/name:port", so each form is one
 * run of the sorted list.
 */
export function servicePortsOf(
  servicePorts: readonly ServicePortDecision[],
  serviceKey: string,
): ServicePortDecision[] {
  const out: ServicePortDecision[] = [];
  const byName = (sp: ServicePortDecision, name: string) =>
    sp.servicePortName < name ? -1 : sp.servicePortName > name ? 1 : 0;
  for (
    let i = lowerBound(servicePorts, serviceKey, byName);
    servicePorts[i]?.servicePortName === serviceKey;
    i++
  )
    out.push(servicePorts[i]!);
  const named = `${serviceKey}:`;
  for (
    let i = lowerBound(servicePorts, named, byName);
    servicePorts[i]?.servicePortName.startsWith(named);
    i++
  )
    out.push(servicePorts[i]!);
  return out;
}

function sliceKey(slice: EndpointSlice): string {
  return `${slice.meta.namespace}/${slice.serviceName}`;
}
