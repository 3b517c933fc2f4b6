// Change tracking (kube-proxy's ServiceChangeTracker / EndpointsChangeTracker in one): applies
// source events to the cluster state, remembers which Services changed since the last sync
// (partial syncs rewrite only those), counts pending changes for the metrics, and keeps the
// EndpointSlice trigger times that network-programming latency is measured from. ServiceCIDRs are
// node-wide context (cluster-ips-check): a change of their CIDRs asks for a full sync.
// A malformed object is skipped and reported; the last good version of it is kept. Entries left
// out of a valid object are reported too, for as long as that version is current.

import { ipFamilyOf } from '../net/ip.js';
import type { SourceEvent } from './events.js';
import { describeObject, type ObjectProblem, parseEvent } from './parse.js';
import {
  type ClusterState,
  type EndpointSlice,
  IP_FAMILIES,
  type IPFamily,
  type Node,
  type Service,
  type ServiceCIDR,
  TRIGGER_TIME_ANNOTATION,
} from './types.js';

export interface PendingChanges {
  /** "namespace/name" of each Service whose object or EndpointSlices changed. */
  changedServices: Set<string>;
  /** Node labels or podCIDRs changed (kube-proxy then resyncs fully). */
  nodeChanged: boolean;
  /** The union of the ServiceCIDRs' CIDRs changed (a full sync rewrites cluster-ips-check). */
  serviceCIDRsChanged: boolean;
  serviceChanges: number;
  endpointChanges: number;
  /** Earliest last-change-trigger-time (ms since epoch) per changed Service, when its slices carried one. */
  triggerTimes: Map<string, number>;
  /**
   * The IP families the changes touch, as kube-proxy's per-family proxiers each see them: a Service
   * the families of its ClusterIPs (before and after), an EndpointSlice its address type, a Node or
   * ServiceCIDR change both. Each of these families has a sync queued (QueuedUpdate).
   */
  families: Set<IPFamily>;
}

function emptyChanges(): PendingChanges {
  return {
    changedServices: new Set(),
    nodeChanged: false,
    serviceCIDRsChanged: false,
    serviceChanges: 0,
    endpointChanges: 0,
    triggerTimes: new Map(),
    families: new Set(),
  };
}

/** The families of a Service's ClusterIPs (none for headless and ExternalName Services). */
function serviceFamilies(service: Service | undefined): IPFamily[] {
  if (!service) return [];
  const ips = service.clusterIPs.length > 0 ? service.clusterIPs : [service.clusterIP];
  return ips.flatMap((ip) => {
    const family = ipFamilyOf(ip);
    return family ? [family] : [];
  });
}

function objectKey(namespace: string, name: string): string {
  return namespace === '' ? name : `${namespace}/${name}`;
}

function sliceServiceKey(slice: EndpointSlice): string | null {
  return slice.serviceName === '' ? null : `${slice.meta.namespace}/${slice.serviceName}`;
}

function sameStrings(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((value, i) => value === b[i]);
}

function nodeFactsDiffer(a: Node | null, b: Node | null): boolean {
  if (a === null || b === null) return a !== b;
  const labelsA = Object.entries(a.meta.labels).sort().flat();
  const labelsB = Object.entries(b.meta.labels).sort().flat();
  return !sameStrings(labelsA, labelsB) || !sameStrings(a.podCIDRs, b.podCIDRs);
}

/** The cluster state's EndpointSlices by the Service they belong to, kept as the state changes: the
 * brain finds a changed Service's slices without a walk over every slice. */
export interface SliceIndex {
  /** The slices labelled with this Service ("namespace/name"). */
  slicesOf(serviceKey: string): EndpointSlice[];
  /** The slices with no kubernetes.io/service-name label (the brain reports them as ignored). */
  unlabelledSlices(): EndpointSlice[];
}

export class ChangeTracker implements SliceIndex {
  private readonly services = new Map<string, Service>();
  private readonly endpointSlices = new Map<string, EndpointSlice>();
  /** Service key ("" for none) → its slices by slice key. */
  private readonly slicesByService = new Map<string, Map<string, EndpointSlice>>();
  private node: Node | null = null;
  private readonly serviceCIDRs = new Map<string, ServiceCIDR>();
  /** Current problems keyed by kind and object key; cleared when a clean version arrives or it is deleted. */
  private readonly problems = new Map<string, ObjectProblem>();
  private pending = emptyChanges();
  /** Every change ever applied, for the *_changes_total counters. */
  readonly totals = { serviceChanges: 0, endpointChanges: 0 };

  /**
   * startedAt (ms since epoch): trigger times before it are not the tracker's to measure. A slice
   * listed at the start (or after an agent restart) carries the time of its last change, maybe
   * hours ago; kube-proxy records only trigger times after its tracker started
   * (`pkg/proxy/endpointschangetracker.go` at v1.37.2, trackerStartTime).
   */
  constructor(
    private readonly nodeName: string,
    private readonly startedAt = Date.now(),
  ) {}

  /** Applies a batch; returns the problems it raised that were not already current, to log once. */
  apply(events: readonly SourceEvent[]): ObjectProblem[] {
    const raised: ObjectProblem[] = [];
    for (const event of events) {
      const problem = this.applyOne(event);
      if (problem) raised.push(problem);
    }
    return raised;
  }

  private applyOne(event: SourceEvent): ObjectProblem | null {
    const identity = describeObject(event.object);
    const key = objectKey(identity.namespace, identity.name);
    // Objects without a name cannot be told apart by key: their problems are kept per origin.
    const problemKey = identity.name === '' ? `@${event.origin}` : `${event.kind}/${key}`;
    if (event.type === 'delete') {
      this.problems.delete(problemKey);
      this.remove(event.kind, key);
      return null;
    }
    const parsed = parseEvent(event);
    const known = this.problems.get(problemKey);
    const raised = parsed.problem && parsed.problem.reason !== known?.reason ? parsed.problem : null;
    if (parsed.problem) this.problems.set(problemKey, parsed.problem);
    else this.problems.delete(problemKey);
    if (!parsed.ok) return raised;
    const { object } = parsed;
    switch (object.kind) {
      case 'Service': {
        const previous = this.services.get(key);
        this.services.set(key, object.value);
        this.noteServiceChange(key, previous, object.value);
        break;
      }
      case 'EndpointSlice': {
        const previous = this.endpointSlices.get(key);
        this.endpointSlices.set(key, object.value);
        this.index(key, previous, object.value);
        this.noteSliceChange(previous, object.value);
        break;
      }
      case 'Node':
        if (object.value.meta.name !== this.nodeName) break;
        if (nodeFactsDiffer(this.node, object.value)) this.noteNodeWideChange('nodeChanged');
        this.node = object.value;
        break;
      case 'ServiceCIDR': {
        const previous = this.serviceCIDRs.get(key);
        this.serviceCIDRs.set(key, object.value);
        if (!previous || !sameStrings(previous.cidrs, object.value.cidrs))
          this.noteNodeWideChange('serviceCIDRsChanged');
        break;
      }
    }
    return raised;
  }

  private remove(kind: SourceEvent['kind'], key: string): void {
    if (kind === 'Service') {
      const previous = this.services.get(key);
      if (this.services.delete(key)) this.noteServiceChange(key, previous, undefined);
    } else if (kind === 'EndpointSlice') {
      const previous = this.endpointSlices.get(key);
      if (previous) {
        this.endpointSlices.delete(key);
        this.index(key, previous, undefined);
        this.noteSliceChange(previous, undefined);
      }
    } else if (kind === 'ServiceCIDR') {
      if (this.serviceCIDRs.delete(key)) this.noteNodeWideChange('serviceCIDRsChanged');
    } else if (this.node?.meta.name === key) {
      this.node = null;
      this.noteNodeWideChange('nodeChanged');
    }
  }

  private index(key: string, previous: EndpointSlice | undefined, current: EndpointSlice | undefined): void {
    if (previous) {
      const owner = sliceServiceKey(previous) ?? '';
      const slices = this.slicesByService.get(owner);
      slices?.delete(key);
      if (slices?.size === 0) this.slicesByService.delete(owner);
    }
    if (current) {
      const owner = sliceServiceKey(current) ?? '';
      const slices = this.slicesByService.get(owner) ?? new Map<string, EndpointSlice>();
      slices.set(key, current);
      this.slicesByService.set(owner, slices);
    }
  }

  slicesOf(serviceKey: string): EndpointSlice[] {
    return serviceKey === '' ? [] : [...(this.slicesByService.get(serviceKey)?.values() ?? [])];
  }

  unlabelledSlices(): EndpointSlice[] {
    return [...(this.slicesByService.get('')?.values() ?? [])];
  }

  /** A Node or ServiceCIDR change: every family's proxier resyncs. */
  private noteNodeWideChange(flag: 'nodeChanged' | 'serviceCIDRsChanged'): void {
    this.pending[flag] = true;
    for (const family of IP_FAMILIES) this.pending.families.add(family);
  }

  private noteServiceChange(key: string, previous: Service | undefined, current: Service | undefined): void {
    for (const family of [...serviceFamilies(previous), ...serviceFamilies(current)])
      this.pending.families.add(family);
    this.pending.changedServices.add(key);
    this.pending.serviceChanges++;
    this.totals.serviceChanges++;
  }

  private noteSliceChange(previous: EndpointSlice | undefined, current: EndpointSlice | undefined): void {
    for (const slice of [previous, current]) {
      if (!slice) continue;
      if (slice.addressType !== 'FQDN') this.pending.families.add(slice.addressType);
      const serviceKey = sliceServiceKey(slice);
      if (serviceKey) this.pending.changedServices.add(serviceKey);
    }
    this.pending.endpointChanges++;
    this.totals.endpointChanges++;
    const triggerText = current?.meta.annotations[TRIGGER_TIME_ANNOTATION];
    const serviceKey = current ? sliceServiceKey(current) : null;
    if (triggerText && serviceKey) {
      const time = Date.parse(triggerText);
      const known = this.pending.triggerTimes.get(serviceKey);
      if (Number.isFinite(time) && time > this.startedAt && (known === undefined || time < known))
        this.pending.triggerTimes.set(serviceKey, time);
    }
  }

  /**
   * The state as it is now: the tracker's own maps, read-only, not copies (a copy of every object
   * on each sync would cost in proportion to the cluster, not to the change). Read it before the
   * next apply(): later events change it.
   */
  state(): ClusterState {
    return {
      services: this.services,
      endpointSlices: this.endpointSlices,
      node: this.node,
      serviceCIDRs: this.serviceCIDRs,
    };
  }

  /** This node's Node object, or null while it is unknown (for /healthz node eligibility). */
  currentNode(): Node | null {
    return this.node;
  }

  /** Objects currently skipped as malformed, and objects currently used without some of their entries. */
  skipped(): ObjectProblem[] {
    return [...this.problems.values()];
  }

  peekPending(): Readonly<PendingChanges> {
    return this.pending;
  }

  /** Hands the changes since the last call to the sync about to run, and starts a new batch. */
  takePending(): PendingChanges {
    const taken = this.pending;
    this.pending = emptyChanges();
    return taken;
  }

  /** Puts back changes a failed sync could not apply, so the retry covers them too. */
  restorePending(changes: PendingChanges): void {
    for (const key of changes.changedServices) this.pending.changedServices.add(key);
    this.pending.nodeChanged ||= changes.nodeChanged;
    this.pending.serviceCIDRsChanged ||= changes.serviceCIDRsChanged;
    this.pending.serviceChanges += changes.serviceChanges;
    this.pending.endpointChanges += changes.endpointChanges;
    for (const family of changes.families) this.pending.families.add(family);
    for (const [key, time] of changes.triggerTimes) {
      const known = this.pending.triggerTimes.get(key);
      if (known === undefined || time < known) this.pending.triggerTimes.set(key, time);
    }
  }
}
