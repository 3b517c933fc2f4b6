// The bpf data plane's plan: from the brain's decisions to what the BPF maps must hold, as plain
// data (bpf/maps.h describes the maps). It decides nothing about Kubernetes semantics (the brain
// did); it lays the decisions out as services (one per service port: the unit that owns backend
// slots, the Maglev tables, affinity and counters), their frontends (each address:port/protocol
// the datapath matches) and backends shared between services, and gives services and backends
// stable numeric ids. Deterministic: the same decisions and allocator state give the same plan.

import type { BpfScheduler } from '../../config/types.js';
import type { IPFamily, Protocol } from '../../model/types.js';
import { cidrContains, joinHostPort, parseCIDR, parseIP } from '../../proxy/ip.js';
import type { Endpoint, FamilyDecisions, ProxyDecisions, ServicePortDecision } from '../../proxy/types.js';
import type { IdAllocator } from './ids.js';

export const SCHEDULER_ANNOTATION = 'kube-bpf-proxy.io/scheduler';
export const SCHEDULERS: readonly BpfScheduler[] = ['random', 'rr', 'maglev'];

export type FrontendKind = 'ClusterIP' | 'ExternalIP' | 'LoadBalancer' | 'NodePort';

/** `address`: the exact destination. `anyNodeAddress`: a NodePort open on every address of the node
 * (nodePortAddresses empty or match-all); its address is "" and the datapath checks the
 * destination against the node's addresses. */
export type FrontendScope = 'address' | 'anyNodeAddress';

export interface FrontendKey {
  family: IPFamily;
  /** "" with scope anyNodeAddress. */
  address: string;
  port: number;
  protocol: Protocol;
  scope: FrontendScope;
}

export interface PlannedFrontend {
  key: FrontendKey;
  /** frontendName(key): the identity the writer diffs on. */
  name: string;
  kind: FrontendKind;
  /** Only LoadBalancer frontends check the service's source ranges (kube-proxy's KUBE-FW chain). */
  checksSourceRanges: boolean;
}

export interface PlannedService {
  /** One per service port and family; the ClusterIP frontend's name is its allocator key. */
  serviceId: number;
  servicePortName: string;
  family: IPFamily;
  protocol: Protocol;
  scheduler: BpfScheduler;
  /** The ClusterIP first, then the LoadBalancer IPs, external IPs and NodePorts in the brain's order. */
  frontends: PlannedFrontend[];
  /** Backend ids of the brain's clusterEndpoints, in its order (sorted by endpoint). */
  clusterBackendIds: number[];
  /** Backend ids of the brain's localEndpoints. */
  localBackendIds: number[];
  /** No endpoints anywhere: an empty chosen set rejects rather than drops. */
  noEndpoints: boolean;
  externalPolicyLocal: boolean;
  internalPolicyLocal: boolean;
  /** 0 without ClientIP affinity. */
  affinityTimeoutSeconds: number;
  /** Allowed source CIDRs (canonical, sorted) for the LoadBalancer frontends; empty: no filtering. */
  sourceRanges: string[];
}

export interface PlannedBackend {
  id: number;
  family: IPFamily;
  address: string;
  port: number;
  /** joinHostPort(address, port): the allocator key and the Maglev permutation name. */
  name: string;
  isLocal: boolean;
  terminating: boolean;
}

export interface PlanProblem {
  servicePortName: string;
  reason: string;
}

/** Entries each map can hold; a service port that would overflow one is reported and left out. */
export interface PlanCapacity {
  frontends: number;
  backends: number;
  /** Slot entries of one generation (the writer needs room for two while it switches). */
  slots: number;
  sourceRanges: number;
}

export interface PlanOptions {
  defaultScheduler: BpfScheduler;
  /** The families the loaded object has maps for; service ports of other families are reported. */
  families: readonly IPFamily[];
  capacity: PlanCapacity;
  nowMs: number;
}

export interface BpfPlan {
  /** Sorted by serviceId. */
  services: PlannedService[];
  /** Sorted by id. */
  backends: PlannedBackend[];
  problems: PlanProblem[];
  /** The allocators after this plan (the inputs are left untouched). */
  serviceIds: IdAllocator;
  backendIds: IdAllocator;
}

/** "TCP/10.96.0.10:80"; "TCP/*:30080" for a NodePort on every node address. */
export function frontendName(key: FrontendKey): string {
  const host = key.scope === 'anyNodeAddress' ? '*' : key.address;
  return `${key.protocol}/${joinHostPort(host, key.port)}`;
}

/** The scheduler a service port uses, and the problem with its annotation if it has a bad one. */
export function resolveScheduler(
  sp: Pick<ServicePortDecision, 'schedulerAnnotation' | 'servicePortName'>,
  defaultScheduler: BpfScheduler,
): { scheduler: BpfScheduler; problem: PlanProblem | null } {
  const value = sp.schedulerAnnotation;
  if (value === null) return { scheduler: defaultScheduler, problem: null };
  const wanted = value.trim() as BpfScheduler;
  if (SCHEDULERS.includes(wanted)) return { scheduler: wanted, problem: null };
  return {
    scheduler: defaultScheduler,
    problem: {
      servicePortName: sp.servicePortName,
      reason: `annotation ${SCHEDULER_ANNOTATION}=${JSON.stringify(value)} is not one of ${SCHEDULERS.join(', ')}; using the default scheduler ${defaultScheduler}`,
    },
  };
}

/** kube-proxy's allowFromNode: when a source range holds the node's IP, the LB IPs themselves may
 * send too (hairpin from a node whose VIP is local). */
function lbSourceRanges(sp: ServicePortDecision, nodeIP: string): string[] {
  if (sp.loadBalancerSourceRanges.length === 0 || sp.loadBalancerIPs.length === 0) return [];
  const ranges = new Set(sp.loadBalancerSourceRanges);
  const node = parseIP(nodeIP);
  const allowFromNode =
    node !== null &&
    sp.loadBalancerSourceRanges.some((c) => {
      const cidr = parseCIDR(c);
      return cidr !== null && cidrContains(cidr, node);
    });
  if (allowFromNode) {
    const hostBits = sp.family === 'IPv4' ? 32 : 128;
    for (const ip of sp.loadBalancerIPs) ranges.add(`${ip}/${hostBits}`);
  }
  return [...ranges].sort();
}

function frontendsOf(
  sp: ServicePortDecision,
  fam: FamilyDecisions,
  sourceRanges: string[],
): PlannedFrontend[] {
  const out: PlannedFrontend[] = [];
  const add = (kind: FrontendKind, address: string, port: number, scope: FrontendScope) => {
    const key: FrontendKey = { family: sp.family, address, port, protocol: sp.protocol, scope };
    out.push({
      key,
      name: frontendName(key),
      kind,
      checksSourceRanges: kind === 'LoadBalancer' && sourceRanges.length > 0,
    });
  };
  add('ClusterIP', sp.clusterIP, sp.port, 'address');
  for (const ip of sp.loadBalancerIPs) add('LoadBalancer', ip, sp.port, 'address');
  for (const ip of sp.externalIPs) add('ExternalIP', ip, sp.port, 'address');
  if (sp.nodePort !== 0) {
    if (fam.nodePortAddresses.matchAll) add('NodePort', '', sp.nodePort, 'anyNodeAddress');
    else for (const ip of fam.nodePortAddresses.ips) add('NodePort', ip, sp.nodePort, 'address');
  }
  return out;
}

function capacityProblem(
  servicePortName: string,
  what: string,
  capacity: number,
  setting: string,
): PlanProblem {
  return {
    servicePortName,
    reason: `not programmed: the ${what} map is full (capacity ${capacity}); raise bpf.mapSizes.${setting}`,
  };
}

function idProblem(servicePortName: string, allocator: IdAllocator, setting: string): PlanProblem {
  return {
    servicePortName,
    reason: `not programmed: no free ${allocator.what} id (ids ${allocator.min}-${allocator.max} in use or in quarantine); raise bpf.mapSizes.${setting}`,
  };
}

export function planBpf(
  decisions: ProxyDecisions,
  options: PlanOptions,
  allocators: { serviceIds: IdAllocator; backendIds: IdAllocator },
): BpfPlan {
  const serviceIds = allocators.serviceIds.clone();
  const backendIds = allocators.backendIds.clone();
  const problems: PlanProblem[] = [];
  const services: PlannedService[] = [];
  const frontendOwners = new Map<string, string>();
  const backends = new Map<string, PlannedBackend>();
  let frontendCount = 0;
  let slotCount = 0;
  let sourceRangeCount = 0;
  const { capacity, nowMs } = options;

  for (const fam of decisions.families) {
    for (const sp of fam.servicePorts) {
      const name = sp.servicePortName;
      if (!options.families.includes(sp.family)) {
        problems.push({
          servicePortName: name,
          reason: `not programmed: the bpf data plane handles ${options.families.join(', ') || 'no family'}, not ${sp.family}`,
        });
        continue;
      }
      if (sp.protocol === 'SCTP') {
        problems.push({
          servicePortName: name,
          reason: 'not programmed: the bpf data plane handles TCP and UDP, not SCTP',
        });
        continue;
      }
      const { scheduler, problem } = resolveScheduler(sp, options.defaultScheduler);
      if (problem) problems.push(problem);

      const sourceRanges = lbSourceRanges(sp, fam.nodeIP);
      const wanted = frontendsOf(sp, fam, sourceRanges);
      // The ClusterIP frontend names the service port for the allocator: it is unique, never
      // changes for the life of a Service, and is found again in the frontends map after a restart.
      const idKey = wanted[0]!.name;
      const clusterIPOwner = frontendOwners.get(idKey);
      if (clusterIPOwner !== undefined) {
        problems.push({
          servicePortName: name,
          reason: `not programmed: ${clusterIPOwner} already uses ${idKey}`,
        });
        continue;
      }
      const frontends: PlannedFrontend[] = [];
      for (const f of wanted) {
        const owner = frontendOwners.get(f.name);
        if (owner === undefined) frontends.push(f);
        else if (owner !== name) {
          problems.push({
            servicePortName: name,
            reason: `${f.kind} frontend ${f.name} not programmed: ${owner} already uses it`,
          });
        }
      }
      const cluster = sp.hasAnyEndpoints ? sp.clusterEndpoints : [];
      const local = sp.hasAnyEndpoints ? sp.localEndpoints : [];
      const newBackends = new Set<string>();
      for (const e of [...cluster, ...local]) if (!backends.has(e.endpoint)) newBackends.add(e.endpoint);
      const slots = cluster.length + local.length;
      const full =
        frontendCount + frontends.length > capacity.frontends
          ? capacityProblem(name, 'services', capacity.frontends, 'services')
          : backends.size + newBackends.size > capacity.backends
            ? capacityProblem(name, 'backends', capacity.backends, 'backends')
            : slotCount + slots > capacity.slots
              ? capacityProblem(name, 'backend slots', capacity.slots, 'backendSlots')
              : sourceRangeCount + sourceRanges.length > capacity.sourceRanges
                ? capacityProblem(name, 'source ranges', capacity.sourceRanges, 'sourceRanges')
                : null;
      if (full) {
        problems.push(full);
        continue;
      }

      const serviceId = serviceIds.allocate(idKey, nowMs);
      if (serviceId === null) {
        problems.push(idProblem(name, serviceIds, 'services'));
        continue;
      }
      const idsOf = (endpoints: readonly Endpoint[]): number[] | null => {
        const ids: number[] = [];
        for (const e of endpoints) {
          const id = backendIds.allocate(e.endpoint, nowMs);
          if (id === null) return null;
          ids.push(id);
        }
        return ids;
      };
      const clusterIds = idsOf(cluster);
      const localIds = idsOf(local);
      if (clusterIds === null || localIds === null) {
        // What this service port allocated is freed again by the release below.
        problems.push(idProblem(name, backendIds, 'backends'));
        continue;
      }
      for (const e of [...cluster, ...local]) {
        const known = backends.get(e.endpoint);
        backends.set(e.endpoint, {
          id: backendIds.idOf(e.endpoint)!,
          family: sp.family,
          address: e.ip,
          port: e.port,
          name: e.endpoint,
          isLocal: (known?.isLocal ?? false) || e.isLocal,
          terminating: (known?.terminating ?? true) && e.terminating,
        });
      }
      for (const f of frontends) frontendOwners.set(f.name, name);
      frontendCount += frontends.length;
      slotCount += slots;
      sourceRangeCount += sourceRanges.length;
      services.push({
        serviceId,
        servicePortName: name,
        family: sp.family,
        protocol: sp.protocol,
        scheduler,
        frontends,
        clusterBackendIds: clusterIds,
        localBackendIds: localIds,
        noEndpoints: !sp.hasAnyEndpoints,
        externalPolicyLocal: sp.externalPolicyLocal,
        internalPolicyLocal: sp.internalPolicyLocal,
        affinityTimeoutSeconds: sp.sessionAffinityTimeoutSeconds,
        sourceRanges,
      });
    }
  }

  serviceIds.releaseAllExcept(new Set(services.map((s) => frontendName(clusterIPKey(s)))), nowMs);
  backendIds.releaseAllExcept(new Set(backends.keys()), nowMs);

  return {
    services: services.sort((a, b) => a.serviceId - b.serviceId),
    backends: [...backends.values()].sort((a, b) => a.id - b.id),
    problems,
    serviceIds,
    backendIds,
  };
}

/** The ClusterIP frontend of a planned service (every service has exactly one). */
export function clusterIPKey(service: PlannedService): FrontendKey {
  return service.frontends.find((f) => f.kind === 'ClusterIP')!.key;
}
