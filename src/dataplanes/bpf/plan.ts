// The bpf data plane's plan: from the brain's decisions to what the BPF maps must hold, as plain
// data (bpf/maps.h describes the maps). It decides nothing about Kubernetes semantics (the brain
// did); it lays the decisions out as frontends (one per address:port/protocol/scope the datapath
// matches, each with its own service id, backend list and flags) and backends shared between
// frontends, and gives both stable numeric ids. Deterministic: the same decisions and allocator
// state give the same plan.

import type { BpfScheduler } from '../../config/types.js';
import type { IPFamily, Protocol } from '../../model/types.js';
import { cidrContains, joinHostPort, parseCIDR, parseIP } from '../../proxy/ip.js';
import type { Endpoint, FamilyDecisions, ProxyDecisions, ServicePortDecision } from '../../proxy/types.js';
import type { IdAllocator } from './ids.js';

export const SCHEDULER_ANNOTATION = 'kube-bpf-proxy.io/scheduler';
export const SCHEDULERS: readonly BpfScheduler[] = ['random', 'rr', 'maglev'];

/** The address of a NodePort frontend open on every node address (nodePortAddresses match-all). */
export const ANY_ADDRESS: Record<IPFamily, string> = { IPv4: '0.0.0.0', IPv6: '::' };

/** count and slot are 16-bit in kbp_svc_val and kbp_slot_key. */
export const MAX_BACKENDS_PER_FRONTEND = 65535;

export type FrontendKind = 'ClusterIP' | 'ExternalIP' | 'LoadBalancer' | 'NodePort';

/**
 * `all`: the entry every packet to the VIP matches. `internal`: a second entry, for traffic from
 * pods, present when that traffic must reach other endpoints than external traffic does
 * (eTP=Local: pods reaching an external VIP use the cluster endpoints, as kube-proxy's
 * "pod traffic for X external destinations" short-circuit does).
 */
export type FrontendScope = 'all' | 'internal';

/** forward: DNAT to a backend. reject: no endpoints anywhere (ICMP port unreachable, as kube-proxy's
 * REJECT). drop: endpoints exist but none the traffic policy allows ("has no local endpoints"). */
export type FrontendAction = 'forward' | 'reject' | 'drop';

export interface FrontendKey {
  family: IPFamily;
  address: string;
  port: number;
  protocol: Protocol;
  scope: FrontendScope;
}

export interface PlannedFrontend {
  key: FrontendKey;
  /** frontendName(key): the allocator key (found again in the map key after a restart) and the
   * identity the writer diffs on. */
  name: string;
  serviceId: number;
  kind: FrontendKind;
  servicePortName: string;
  namespace: string;
  serviceName: string;
  /** "" for an unnamed port. */
  portName: string;
  scheduler: BpfScheduler;
  action: FrontendAction;
  /** Backend ids in slot order: local backends first, so slots [0, localCount) are the local ones. */
  backendIds: number[];
  localCount: number;
  /** The backend list is the local-endpoints one (iTP or eTP Local for this frontend's traffic). */
  localOnly: boolean;
  /** Set on an `all` entry that has an `internal` sibling. */
  hasInternalScope: boolean;
  /** 0 without ClientIP affinity. */
  affinityTimeoutSeconds: number;
  /** Allowed source CIDRs (canonical); empty means no source filtering. */
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

export interface PlanCapacity {
  frontends: number;
  backends: number;
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
  /** Sorted by name. */
  frontends: PlannedFrontend[];
  /** Sorted by id. */
  backends: PlannedBackend[];
  problems: PlanProblem[];
  /** The allocators after this plan (the inputs are left untouched). */
  serviceIds: IdAllocator;
  backendIds: IdAllocator;
}

/** "TCP/10.96.0.10:80", with "/internal" for an internal-scope entry; "TCP/0.0.0.0:30080" for a
 * NodePort on every node address. */
export function frontendName(key: FrontendKey): string {
  const base = `${key.protocol}/${joinHostPort(key.address, key.port)}`;
  return key.scope === 'internal' ? `${base}/internal` : base;
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

/** What one service port asks for, before ids: frontends with their endpoint lists. */
interface FrontendDraft {
  key: FrontendKey;
  name: string;
  kind: FrontendKind;
  action: FrontendAction;
  endpoints: Endpoint[];
  localOnly: boolean;
  hasInternalScope: boolean;
  sourceRanges: string[];
}

function sameEndpoints(a: readonly Endpoint[], b: readonly Endpoint[]): boolean {
  return a.length === b.length && a.every((e, i) => e.endpoint === b[i]!.endpoint);
}

/** Local endpoints first; each part keeps the brain's order (sorted by endpoint). */
function slotOrder(endpoints: readonly Endpoint[]): Endpoint[] {
  return [...endpoints.filter((e) => e.isLocal), ...endpoints.filter((e) => !e.isLocal)];
}

/** kube-proxy's allowFromNode: when a source range holds the node's IP, the LB IPs themselves may
 * send too (hairpin from a node whose VIP is local). */
function lbSourceRanges(sp: ServicePortDecision, nodeIP: string): string[] {
  if (sp.loadBalancerSourceRanges.length === 0) return [];
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

function draftFrontends(sp: ServicePortDecision, fam: FamilyDecisions): FrontendDraft[] {
  const drafts: FrontendDraft[] = [];
  const noEndpoints = !sp.hasAnyEndpoints;
  const make = (
    kind: FrontendKind,
    address: string,
    port: number,
    scope: FrontendScope,
    localOnly: boolean,
    extra: Partial<FrontendDraft> = {},
  ): FrontendDraft => {
    const endpoints = noEndpoints ? [] : slotOrder(localOnly ? sp.localEndpoints : sp.clusterEndpoints);
    const key: FrontendKey = { family: sp.family, address, port, protocol: sp.protocol, scope };
    return {
      key,
      name: frontendName(key),
      kind,
      action: noEndpoints ? 'reject' : endpoints.length === 0 ? 'drop' : 'forward',
      endpoints,
      localOnly,
      hasInternalScope: false,
      sourceRanges: [],
      ...extra,
    };
  };

  drafts.push(make('ClusterIP', sp.clusterIP, sp.port, 'all', sp.internalPolicyLocal));

  // eTP=Local keeps the client's source and sends external traffic to local endpoints only; pod
  // traffic to the same external VIP is not subject to the policy and uses the cluster endpoints.
  const splitScopes =
    sp.externalPolicyLocal &&
    !noEndpoints &&
    sp.clusterEndpoints.length > 0 &&
    !sameEndpoints(slotOrder(sp.clusterEndpoints), slotOrder(sp.localEndpoints));
  const external = (kind: FrontendKind, address: string, port: number, sourceRanges: string[]) => {
    drafts.push(
      make(kind, address, port, 'all', sp.externalPolicyLocal, {
        hasInternalScope: splitScopes,
        sourceRanges,
      }),
    );
    if (splitScopes) drafts.push(make(kind, address, port, 'internal', false, { sourceRanges }));
  };
  for (const ip of sp.loadBalancerIPs) external('LoadBalancer', ip, sp.port, lbSourceRanges(sp, fam.nodeIP));
  for (const ip of sp.externalIPs) external('ExternalIP', ip, sp.port, []);
  if (sp.nodePort !== 0) {
    const addresses = fam.nodePortAddresses.matchAll ? [ANY_ADDRESS[sp.family]] : fam.nodePortAddresses.ips;
    for (const ip of addresses) external('NodePort', ip, sp.nodePort, []);
  }
  return drafts;
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

export function planBpf(
  decisions: ProxyDecisions,
  options: PlanOptions,
  allocators: { serviceIds: IdAllocator; backendIds: IdAllocator },
): BpfPlan {
  const serviceIds = allocators.serviceIds.clone();
  const backendIds = allocators.backendIds.clone();
  const problems: PlanProblem[] = [];
  const frontends = new Map<string, PlannedFrontend>();
  const owners = new Map<string, string>();
  const backends = new Map<string, PlannedBackend>();
  let slotCount = 0;
  let sourceRangeCount = 0;
  const { capacity, nowMs } = options;

  for (const fam of decisions.families) {
    for (const sp of fam.servicePorts) {
      if (!options.families.includes(sp.family)) {
        problems.push({
          servicePortName: sp.servicePortName,
          reason: `not programmed: the bpf data plane handles ${options.families.join(', ') || 'no family'}, not ${sp.family}`,
        });
        continue;
      }
      if (sp.protocol === 'SCTP') {
        problems.push({
          servicePortName: sp.servicePortName,
          reason: 'not programmed: the bpf data plane handles TCP and UDP, not SCTP',
        });
        continue;
      }
      const { scheduler, problem } = resolveScheduler(sp, options.defaultScheduler);
      if (problem) problems.push(problem);

      const drafts: FrontendDraft[] = [];
      for (const draft of draftFrontends(sp, fam)) {
        const owner = owners.get(draft.name);
        if (owner === undefined) {
          drafts.push(draft);
          owners.set(draft.name, sp.servicePortName);
        } else if (owner !== sp.servicePortName) {
          problems.push({
            servicePortName: sp.servicePortName,
            reason: `${draft.kind} frontend ${draft.name} not programmed: ${owner} already uses it`,
          });
        }
      }

      const newBackends = new Set<string>();
      for (const d of drafts)
        for (const e of d.endpoints) if (!backends.has(e.endpoint)) newBackends.add(e.endpoint);
      const slots = drafts.reduce((n, d) => n + d.endpoints.length, 0);
      const ranges = drafts.reduce((n, d) => n + d.sourceRanges.length, 0);
      const largest = Math.max(0, ...drafts.map((d) => d.endpoints.length));
      const full =
        largest > MAX_BACKENDS_PER_FRONTEND
          ? {
              servicePortName: sp.servicePortName,
              reason: `not programmed: ${largest} endpoints, more than the ${MAX_BACKENDS_PER_FRONTEND} a frontend can hold`,
            }
          : frontends.size + drafts.length > capacity.frontends
            ? capacityProblem(sp.servicePortName, 'services', capacity.frontends, 'services')
            : backends.size + newBackends.size > capacity.backends
              ? capacityProblem(sp.servicePortName, 'backends', capacity.backends, 'backends')
              : slotCount + slots > capacity.slots
                ? capacityProblem(sp.servicePortName, 'backend slots', capacity.slots, 'backendSlots')
                : sourceRangeCount + ranges > capacity.sourceRanges
                  ? capacityProblem(
                      sp.servicePortName,
                      'source ranges',
                      capacity.sourceRanges,
                      'sourceRanges',
                    )
                  : null;
      if (full) {
        for (const d of drafts) owners.delete(d.name);
        problems.push(full);
        continue;
      }

      const planned: PlannedFrontend[] = [];
      let exhausted: PlanProblem | null = null;
      for (const d of drafts) {
        const serviceId = serviceIds.allocate(d.name, nowMs);
        if (serviceId === null) {
          exhausted = {
            servicePortName: sp.servicePortName,
            reason: `not programmed: no free service id (ids ${serviceIds.min}-${serviceIds.max} in use or in quarantine); raise bpf.mapSizes.services`,
          };
          break;
        }
        const ids: number[] = [];
        for (const e of d.endpoints) {
          const id = backendIds.allocate(e.endpoint, nowMs);
          if (id === null) {
            exhausted = {
              servicePortName: sp.servicePortName,
              reason: `not programmed: no free backend id (ids ${backendIds.min}-${backendIds.max} in use or in quarantine); raise bpf.mapSizes.backends`,
            };
            break;
          }
          ids.push(id);
          const known = backends.get(e.endpoint);
          backends.set(e.endpoint, {
            id,
            family: sp.family,
            address: e.ip,
            port: e.port,
            name: e.endpoint,
            isLocal: (known?.isLocal ?? false) || e.isLocal,
            terminating: (known?.terminating ?? true) && e.terminating,
          });
        }
        if (exhausted) break;
        planned.push({
          key: d.key,
          name: d.name,
          serviceId,
          kind: d.kind,
          servicePortName: sp.servicePortName,
          namespace: sp.namespace,
          serviceName: sp.name,
          portName: sp.portName,
          scheduler,
          action: d.action,
          backendIds: ids,
          localCount: d.endpoints.filter((e) => e.isLocal).length,
          localOnly: d.localOnly,
          hasInternalScope: d.hasInternalScope,
          affinityTimeoutSeconds: sp.sessionAffinityTimeoutSeconds,
          sourceRanges: d.sourceRanges,
        });
      }
      if (exhausted) {
        // Ids handed out to this service port stay allocated until the release below, which frees
        // them again because no planned frontend or backend keeps them.
        for (const d of drafts) owners.delete(d.name);
        problems.push(exhausted);
        continue;
      }
      for (const f of planned) frontends.set(f.name, f);
      slotCount += slots;
      sourceRangeCount += ranges;
    }
  }

  // Backends only referenced by a service port that did not fit were added above; drop them.
  const referenced = new Set<number>();
  for (const f of frontends.values()) for (const id of f.backendIds) referenced.add(id);
  for (const [name, b] of [...backends]) if (!referenced.has(b.id)) backends.delete(name);

  serviceIds.releaseAllExcept(new Set(frontends.keys()), nowMs);
  backendIds.releaseAllExcept(new Set(backends.keys()), nowMs);

  return {
    frontends: [...frontends.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    backends: [...backends.values()].sort((a, b) => a.id - b.id),
    problems,
    serviceIds,
    backendIds,
  };
}
