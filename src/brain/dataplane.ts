// The contract between the sync loop (sync-loop.ts) and every data plane: the loop hands over the
// decisions and the sync's scope (what changed, and whether all is rewritten); the data plane
// brings the kernel to them.

import type { ProxyMode } from '../config/types.js';
import type { IPFamily } from '../model/types.js';
import type { ProxyDecisions } from './types.js';

/**
 * How much one sync rewrites, decided once, by the sync loop (sync-loop.ts). A lower layer (the
 * Decider, a planner, a writer, a rule mode's family) may only widen it to full, with escalate(),
 * and says why: the reason reaches the sync's log line.
 */
export interface SyncScope {
  /** Every Service is computed and written again: the first sync, after a failure, after a node
   * label or ServiceCIDR change, every full-sync period (kube-proxy: hourly), or escalated. */
  full: boolean;
  /** "namespace/name" of every Service whose Service object or EndpointSlices changed; a partial
   * sync rewrites only these. */
  changedServices: ReadonlySet<string>;
  /** Why the sync is full, or what a partial one covers; a layer that widened it names itself. */
  reason: string;
}

/** The scope widened to full for `reason` ("layer: why"); a full scope keeps its own reason. */
export function escalate(scope: SyncScope, reason: string | null): SyncScope {
  return scope.full || reason === null ? scope : { ...scope, full: true, reason };
}

export interface SyncResult {
  /** The scope the sync ran with, as the data plane may have widened it (for the full/partial
   * duration metrics and the log). */
  scope: SyncScope;
  /** Rule modes: the conntrack reconciles that followed the sync (dataplanes/conntrack.ts). */
  conntrack?: ConntrackReconcileReport[];
}

/** One family's conntrack reconcile (kubeproxy_conntrack_reconciler_* metrics). */
export interface ConntrackReconcileReport {
  family: IPFamily;
  /** False when the entries could not be listed: kube-proxy then observes nothing. */
  listed: boolean;
  durationSeconds: number;
  deleted: number;
  /** Null when the listing and every deletion succeeded. */
  error: string | null;
}

export interface Dataplane {
  readonly mode: ProxyMode;
  /**
   * Brings the kernel to the decisions. Throws when the kernel write failed; the data plane
   * must then still hold the last good state, and the runner retries with a full sync.
   */
  sync(decisions: ProxyDecisions, scope: SyncScope): Promise<SyncResult>;
  close(): Promise<void>;
}
