// The bpf data plane's plan: from the brain's decisions to what the BPF maps must hold, as plain
// data (bpf/maps.h describes the maps). It decides nothing about Kubernetes semantics (the brain
// did); it lays the decisions out as frontends (one per address:port/protocol/scope the datapath
// matches, each with its own service id, backend list and flags) and backends shared between
// frontends, and gives both stable numeric ids. Deterministic: the same decisions and allocator
// state give the same plan. frontend-drafts.ts says which frontends one service port asks for.

import { servicePortsOf } from '../../brain/decide.js';
import { lowerBound, patchSorted } from '../../brain/sorted.js';
import type { Endpoint, FamilyDecisions, ProxyDecisions, ServicePortDecision } from '../../brain/types.js';
import type { BpfScheduler, MaglevFrontends } from '../../config/types.js';
import type { IPFamily } from '../../model/types.js';
import { draftFrontends, type FrontendDraft, resolveScheduler } from './frontend-drafts.js';
import type { IdAllocator } from './ids.js';
import {
  ANY_ADDRESS,
  type FrontendAction,
  type FrontendKey,
  type FrontendKind,
  type PlanProblem,
} from './types.js';

/** count and slot are 16-bit in kbp_svc_val and kbp_slot_key. */
export const MAX_BACKENDS_PER_FRONTEND = 65535;

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

export interface PlanCapacity {
  frontends: number;
  backends: number;
  slots: number;
  sourceRanges: number;
}

export interface PlanOptions {
  defaultScheduler: BpfScheduler;
  /** The frontends a default scheduler of maglev applies to (bpf.maglevFrontends). */
  maglevFrontends: MaglevFrontends;
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
  /** The lowest and highest port of the NodePort frontends (either family) open on every node
   * address (kbp_config's NodePort range), null when there is none. */
  anyAddressNodePorts: { min: number; max: number } | null;
  /** The allocators after this plan. */
  serviceIds: IdAllocator;
  backendIds: IdAllocator;
}

function mapFullProblem(
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

/** A backend with the endpoints that name it: shared by frontends, dropped when none does. */
interface BackendUse {
  backend: PlannedBackend;
  refs: number;
  /** References from a local endpoint, and from one that is not terminating. */
  localRefs: number;
  liveRefs: number;
}

/** What one Service's ports put in the plan, so an incremental plan can take it out again. */
interface ServiceContribution {
  frontends: PlannedFrontend[];
  /** One entry per backend reference (slot): the endpoint behind it (the decision's own object, so
   * that 10^5 references cost no copies). */
  refs: Pick<Endpoint, 'endpoint' | 'isLocal' | 'terminating'>[];
  slots: number;
  ranges: number;
  problems: PlanProblem[];
  /** A problem whose outcome depends on the other Services (a shared frontend, a full map). */
  orderDependent: boolean;
}

/** The plan under construction, held between syncs by BpfPlanner. */
interface PlanState {
  serviceIds: IdAllocator;
  backendIds: IdAllocator;
  frontends: Map<string, PlannedFrontend>;
  /** Frontend name → the service port that holds it. */
  owners: Map<string, string>;
  backends: Map<string, BackendUse>;
  /** By Service key, in the order the Services were planned. */
  services: Map<string, ServiceContribution>;
  slotCount: number;
  sourceRangeCount: number;
  orderDependent: number;
  /** The Services with a problem, so a plan's problems are found without a walk over every one. */
  withProblems: Set<string>;
  /** Port → how many NodePort frontends on every node address (either family) use it. */
  anyAddressNodePorts: Map<number, number>;
}

function emptyState(allocators: { serviceIds: IdAllocator; backendIds: IdAllocator }): PlanState {
  return {
    serviceIds: allocators.serviceIds,
    backendIds: allocators.backendIds,
    frontends: new Map(),
    owners: new Map(),
    backends: new Map(),
    services: new Map(),
    slotCount: 0,
    sourceRangeCount: 0,
    orderDependent: 0,
    withProblems: new Set(),
    anyAddressNodePorts: new Map(),
  };
}

const serviceKeyOf = (sp: Pick<ServicePortDecision, 'namespace' | 'name'>) => `${sp.namespace}/${sp.name}`;

function contributionOf(state: PlanState, key: string): ServiceContribution {
  const known = state.services.get(key);
  if (known) return known;
  const fresh: ServiceContribution = {
    frontends: [],
    refs: [],
    slots: 0,
    ranges: 0,
    problems: [],
    orderDependent: false,
  };
  state.services.set(key, fresh);
  return fresh;
}

function addBackendRef(state: PlanState, id: number, family: IPFamily, e: Endpoint): void {
  const use = state.backends.get(e.endpoint) ?? {
    backend: { id, family, address: e.ip, port: e.port, name: e.endpoint, isLocal: false, terminating: true },
    refs: 0,
    localRefs: 0,
    liveRefs: 0,
  };
  use.refs++;
  if (e.isLocal) use.localRefs++;
  if (!e.terminating) use.liveRefs++;
  refreshBackendFlags(use);
  state.backends.set(e.endpoint, use);
}

/** A backend's flags sum up its references; a new object only when they change (the writer and
 * earlier plans may hold the old one). */
function refreshBackendFlags(use: BackendUse): void {
  const isLocal = use.localRefs > 0;
  const terminating = use.liveRefs === 0;
  if (use.backend.isLocal !== isLocal || use.backend.terminating !== terminating)
    use.backend = { ...use.backend, isLocal, terminating };
}

function countAnyAddressNodePort(state: PlanState, f: PlannedFrontend, by: 1 | -1): void {
  if (f.kind !== 'NodePort' || f.key.address !== ANY_ADDRESS[f.key.family]) return;
  const n = (state.anyAddressNodePorts.get(f.key.port) ?? 0) + by;
  if (n > 0) state.anyAddressNodePorts.set(f.key.port, n);
  else state.anyAddressNodePorts.delete(f.key.port);
}

/** Takes a Service's frontends and backend references out of the plan; returns them, the backends
 * as they were (some of them may now have no reference left). */
function removeService(
  state: PlanState,
  key: string,
): { frontends: PlannedFrontend[]; backends: PlannedBackend[] } {
  const c = state.services.get(key);
  if (!c) return { frontends: [], backends: [] };
  state.services.delete(key);
  state.withProblems.delete(key);
  const backends: PlannedBackend[] = [];
  for (const f of c.frontends) {
    state.frontends.delete(f.name);
    state.owners.delete(f.name);
    countAnyAddressNodePort(state, f, -1);
  }
  for (const r of c.refs) {
    const use = state.backends.get(r.endpoint)!;
    backends.push(use.backend);
    use.refs--;
    if (r.isLocal) use.localRefs--;
    if (!r.terminating) use.liveRefs--;
    if (use.refs === 0) state.backends.delete(r.endpoint);
    else refreshBackendFlags(use);
  }
  state.slotCount -= c.slots;
  state.sourceRangeCount -= c.ranges;
  if (c.orderDependent) state.orderDependent--;
  return { frontends: c.frontends, backends };
}

/** Adds one service port's frontends to the plan, or the problem that keeps them out. */
function planServicePort(
  state: PlanState,
  sp: ServicePortDecision,
  fam: FamilyDecisions,
  options: PlanOptions,
): void {
  const key = serviceKeyOf(sp);
  const c = contributionOf(state, key);
  const problem = (p: PlanProblem) => {
    c.problems.push(p);
    state.withProblems.add(key);
  };
  const orderDependent = (p: PlanProblem) => {
    problem(p);
    if (!c.orderDependent) state.orderDependent++;
    c.orderDependent = true;
  };
  const unsupported = unsupportedProblem(sp, options.families);
  if (unsupported) {
    problem(unsupported);
    return;
  }
  const resolved = resolveScheduler(sp, options.defaultScheduler, options.maglevFrontends);
  if (resolved.problem) problem(resolved.problem);
  const drafts = claimFrontends(state, sp, fam, orderDependent);
  const slots = drafts.reduce((n, d) => n + d.endpoints.length, 0);
  const ranges = drafts.reduce((n, d) => n + d.sourceRanges.length, 0);
  const allocated =
    capacityProblem(state, sp, drafts, options.capacity, { slots, ranges }) ??
    allocateIds(state, sp, drafts, resolved.scheduler, options.nowMs);
  if ('reason' in allocated) {
    // The frontends are given back; ids handed out to this service port stay allocated until
    // released as unused.
    for (const d of drafts) state.owners.delete(d.name);
    orderDependent(allocated);
    return;
  }
  for (const f of allocated.planned) {
    state.frontends.set(f.name, f);
    c.frontends.push(f);
    countAnyAddressNodePort(state, f, 1);
  }
  for (const { id, e } of allocated.refs) {
    addBackendRef(state, id, sp.family, e);
    c.refs.push(e);
  }
  c.slots += slots;
  c.ranges += ranges;
  state.slotCount += slots;
  state.sourceRangeCount += ranges;
}

/** A service port the datapath cannot serve at all: another family, or SCTP. */
function unsupportedProblem(sp: ServicePortDecision, families: readonly IPFamily[]): PlanProblem | null {
  if (!families.includes(sp.family)) {
    return {
      servicePortName: sp.servicePortName,
      reason: `not programmed: the bpf data plane handles ${families.join(', ') || 'no family'}, not ${sp.family}`,
    };
  }
  if (sp.protocol === 'SCTP') {
    return {
      servicePortName: sp.servicePortName,
      reason: 'not programmed: the bpf data plane handles TCP and UDP, not SCTP',
    };
  }
  return null;
}

/** The service port's frontends that no other service port has claimed first, now claimed. */
function claimFrontends(
  state: PlanState,
  sp: ServicePortDecision,
  fam: FamilyDecisions,
  orderDependent: (p: PlanProblem) => void,
): FrontendDraft[] {
  const drafts: FrontendDraft[] = [];
  for (const draft of draftFrontends(sp, fam)) {
    const owner = state.owners.get(draft.name);
    if (owner === undefined) {
      drafts.push(draft);
      state.owners.set(draft.name, sp.servicePortName);
    } else if (owner !== sp.servicePortName) {
      orderDependent({
        servicePortName: sp.servicePortName,
        reason: `${draft.kind} frontend ${draft.name} not programmed: ${owner} already uses it`,
      });
    }
  }
  return drafts;
}

/** The first limit the drafts would break (a frontend's slots, then each map's capacity), or null. */
function capacityProblem(
  state: PlanState,
  sp: ServicePortDecision,
  drafts: readonly FrontendDraft[],
  capacity: PlanCapacity,
  { slots, ranges }: { slots: number; ranges: number },
): PlanProblem | null {
  const newBackends = new Set<string>();
  for (const d of drafts)
    for (const e of d.endpoints) if (!state.backends.has(e.endpoint)) newBackends.add(e.endpoint);
  const largest = Math.max(0, ...drafts.map((d) => d.endpoints.length));
  const name = sp.servicePortName;
  if (largest > MAX_BACKENDS_PER_FRONTEND)
    return {
      servicePortName: name,
      reason: `not programmed: ${largest} endpoints, more than the ${MAX_BACKENDS_PER_FRONTEND} a frontend can hold`,
    };
  if (state.frontends.size + drafts.length > capacity.frontends)
    return mapFullProblem(name, 'services', capacity.frontends, 'services');
  if (state.backends.size + newBackends.size > capacity.backends)
    return mapFullProblem(name, 'backends', capacity.backends, 'backends');
  if (state.slotCount + slots > capacity.slots)
    return mapFullProblem(name, 'backend slots', capacity.slots, 'backendSlots');
  if (state.sourceRangeCount + ranges > capacity.sourceRanges)
    return mapFullProblem(name, 'source ranges', capacity.sourceRanges, 'sourceRanges');
  return null;
}

/** Service and backend ids for every draft; the problem when an allocator has none free. */
function allocateIds(
  state: PlanState,
  sp: ServicePortDecision,
  drafts: readonly FrontendDraft[],
  scheduler: (kind: FrontendKind) => BpfScheduler,
  nowMs: number,
): { planned: PlannedFrontend[]; refs: { id: number; e: Endpoint }[] } | PlanProblem {
  const { serviceIds, backendIds } = state;
  const exhausted = (what: string, ids: IdAllocator, setting: string): PlanProblem => ({
    servicePortName: sp.servicePortName,
    reason: `not programmed: no free ${what} id (ids ${ids.min}-${ids.max} in use or in quarantine); raise bpf.mapSizes.${setting}`,
  });
  const planned: PlannedFrontend[] = [];
  const refs: { id: number; e: Endpoint }[] = [];
  for (const d of drafts) {
    const serviceId = serviceIds.allocate(d.name, nowMs);
    if (serviceId === null) return exhausted('service', serviceIds, 'services');
    const ids: number[] = [];
    for (const e of d.endpoints) {
      const id = backendIds.allocate(e.endpoint, nowMs);
      if (id === null) return exhausted('backend', backendIds, 'backends');
      ids.push(id);
      refs.push({ id, e });
    }
    planned.push({
      key: d.key,
      name: d.name,
      serviceId,
      kind: d.kind,
      servicePortName: sp.servicePortName,
      namespace: sp.namespace,
      serviceName: sp.name,
      portName: sp.portName,
      scheduler: scheduler(d.kind),
      action: d.action,
      backendIds: ids,
      localCount: d.endpoints.filter((e) => e.isLocal).length,
      localOnly: d.localOnly,
      hasInternalScope: d.hasInternalScope,
      affinityTimeoutSeconds: sp.sessionAffinityTimeoutSeconds,
      sourceRanges: d.sourceRanges,
    });
  }
  return { planned, refs };
}

const byName = (a: PlannedFrontend, b: PlannedFrontend) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
const byId = (a: PlannedBackend, b: PlannedBackend) => a.id - b.id;

/** The plan's lists, sorted; with `patch`, the last plan's lists with the entries that changed
 * replaced (a change costs a few binary searches, not a sort of every frontend and backend). */
function planOf(
  state: PlanState,
  patch?: {
    last: BpfPlan;
    frontends: { removed: PlannedFrontend[]; added: PlannedFrontend[] };
    backends: { removed: PlannedBackend[]; added: PlannedBackend[] };
  },
): BpfPlan {
  const frontends = patch
    ? patchSorted(patch.last.frontends, patch.frontends.removed, patch.frontends.added, byName)
    : [...state.frontends.values()].sort(byName);
  const backends = patch
    ? patchSorted(patch.last.backends, patch.backends.removed, patch.backends.added, byId)
    : [...state.backends.values()].map((u) => u.backend).sort(byId);
  const ports = [...state.anyAddressNodePorts.keys()];
  return {
    frontends,
    backends,
    // In planning order; a patched plan only visits the Services that have problems.
    problems: [...(patch ? state.withProblems : state.services.keys())].flatMap(
      (key) => state.services.get(key)?.problems ?? [],
    ),
    anyAddressNodePorts:
      ports.length > 0
        ? { min: ports.reduce((a, b) => Math.min(a, b)), max: ports.reduce((a, b) => Math.max(a, b)) }
        : null,
    serviceIds: state.serviceIds,
    backendIds: state.backendIds,
  };
}

function planAll(decisions: ProxyDecisions, options: PlanOptions, state: PlanState): void {
  for (const fam of decisions.families)
    for (const sp of fam.servicePorts) planServicePort(state, sp, fam, options);
  // Ids handed out to a service port that then did not fit are released here too.
  state.serviceIds.releaseAllExcept(new Set(state.frontends.keys()), options.nowMs);
  state.backendIds.releaseAllExcept(new Set(state.backends.keys()), options.nowMs);
}

/** The whole plan from scratch. Pure: the allocators given are left untouched. */
export function planBpf(
  decisions: ProxyDecisions,
  options: PlanOptions,
  allocators: { serviceIds: IdAllocator; backendIds: IdAllocator },
): BpfPlan {
  const state = emptyState({
    serviceIds: allocators.serviceIds.clone(),
    backendIds: allocators.backendIds.clone(),
  });
  planAll(decisions, options, state);
  return planOf(state);
}

/**
 * The plan kept between syncs, changed in proportion to a change: the frontends and backend
 * references of the changed Services are taken out and planned again, with the allocators of the
 * data plane itself (no copies). Whole plans are made when asked (full syncs), and whenever a
 * problem depends on the order Services are planned in (two Services on one frontend, a full map),
 * since only planning everything in order gives the same answer.
 */
export interface PlannerResult {
  plan: BpfPlan;
  /** The frontend names the plan may have changed; null: any of them. */
  scope: Set<string> | null;
  /** Why every Service was planned though only some changed; null when none did or all were asked. */
  widened: string | null;
}

const ORDER_DEPENDENT = 'bpf plan: two service ports claim one frontend, and the first planned keeps it';

export class BpfPlanner {
  private state: PlanState | null = null;
  private last: BpfPlan | null = null;
  /** What every Service's frontends depend on besides the Service (node IPs, NodePort addresses,
   * the options): when it changes, every frontend is planned again. */
  private context = '';

  constructor(private readonly allocators: { serviceIds: IdAllocator; backendIds: IdAllocator }) {}

  /**
   * `changed`: the Service keys whose decisions changed, or null for a whole plan. Returns the plan
   * and the frontend names it may have changed (null: any of them); `widened` says why it planned
   * everything when `changed` named only some Services.
   */
  plan(decisions: ProxyDecisions, options: PlanOptions, changed: ReadonlySet<string> | null): PlannerResult {
    const context = JSON.stringify([
      decisions.families.map((f) => [f.family, f.nodeIP, f.nodePortAddresses]),
      { ...options, nowMs: 0 },
    ]);
    const state = this.state;
    const sameContext = context === this.context;
    this.context = context;
    const last = this.last;
    if (changed === null) return this.planWhole(decisions, options, null);
    if (state === null || last === null)
      return this.planWhole(decisions, options, 'bpf plan: no earlier plan');
    if (state.orderDependent > 0) return this.planWhole(decisions, options, ORDER_DEPENDENT);
    if (!sameContext)
      return this.planWhole(
        decisions,
        options,
        'bpf plan: the node IPs, NodePort addresses or plan options changed',
      );
    const scope = new Set<string>();
    const removed = { frontends: [] as PlannedFrontend[], backends: new Map<number, PlannedBackend>() };
    for (const key of changed) {
      const out = removeService(state, key);
      for (const f of out.frontends) scope.add(f.name);
      removed.frontends.push(...out.frontends);
      for (const b of out.backends) removed.backends.set(b.id, b);
    }
    for (const fam of decisions.families)
      for (const key of changed)
        for (const sp of servicePortsOf(fam.servicePorts, key)) planServicePort(state, sp, fam, options);
    if (state.orderDependent > 0) return this.planWhole(decisions, options, ORDER_DEPENDENT);
    const added = { frontends: [] as PlannedFrontend[], backends: new Set<string>() };
    for (const key of changed) {
      const c = state.services.get(key);
      for (const f of c?.frontends ?? []) scope.add(f.name);
      added.frontends.push(...(c?.frontends ?? []));
      for (const r of c?.refs ?? []) added.backends.add(r.endpoint);
    }
    // A backend still named elsewhere comes back with its flags as they are now.
    for (const b of removed.backends.values()) if (state.backends.has(b.name)) added.backends.add(b.name);
    for (const name of scope) if (!state.frontends.has(name)) state.serviceIds.release(name, options.nowMs);
    for (const b of removed.backends.values())
      if (!state.backends.has(b.name)) state.backendIds.release(b.name, options.nowMs);
    const addedBackends = [...added.backends].map((name) => state.backends.get(name)!.backend);
    this.last = planOf(state, {
      last,
      frontends: { removed: removed.frontends, added: added.frontends },
      // A backend the changed Services now name may be in the last plan already (others name it).
      backends: { removed: [...removed.backends.values(), ...addedBackends], added: addedBackends },
    });
    return { plan: this.last, scope, widened: null };
  }

  private planWhole(decisions: ProxyDecisions, options: PlanOptions, widened: string | null): PlannerResult {
    const state = emptyState(this.allocators);
    planAll(decisions, options, state);
    this.state = state;
    this.last = planOf(state);
    return { plan: this.last, scope: null, widened };
  }
}

/** The plan's frontend of that name, by binary search. */
export function plannedFrontend(plan: BpfPlan, name: string): PlannedFrontend | undefined {
  const f =
    plan.frontends[lowerBound(plan.frontends, name, (a, n) => (a.name < n ? -1 : a.name > n ? 1 : 0))];
  return f?.name === name ? f : undefined;
}

/** The plan's backend with that id, by binary search. */
export function plannedBackend(plan: BpfPlan, id: number): PlannedBackend | undefined {
  const b = plan.backends[lowerBound(plan.backends, id, (a, x) => a.id - x)];
  return b?.id === id ? b : undefined;
}
