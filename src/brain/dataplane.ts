// The contract between the sync loop (sync-loop.ts) and every data plane: the loop hands over the
// decisions and what changed; the data plane brings the kernel to them.

import type { ProxyMode } from '../config/types.js';
import type { IPFamily } from '../model/types.js';
import type { ProxyDecisions } from './types.js';

/** What changed since the last successful sync; partial syncs rewrite only these services. */
export interface ChangeSet {
  /** "namespace/name" of every Service whose Service object or EndpointSlices changed. */
  changedServices: ReadonlySet<string>;
  /** First sync, after a failure, after a node label change, or periodically (kube-proxy: hourly). */
  fullSyncRequired: boolean;
}

export interface SyncResult {
  /** True when this sync rewrote everything (for the full/partial duration metrics). */
  full: boolean;
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
  sync(decisions: ProxyDecisions, changes: ChangeSet): Promise<SyncResult>;
  close(): Promise<void>;
}
