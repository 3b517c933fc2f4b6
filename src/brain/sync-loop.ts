// One sync, as kube-proxy's syncProxyRules frames it: take the pending changes, compute the
// decisions, hand them to the data plane with what changed, and report the outcome. Whether a sync
// is full is decided here, once (fullSyncReason): first, after any failure, after node label
// changes, after ServiceCIDR changes (kube-proxy only picks those up at its next full sync) and
// every fullSyncPeriod; the others are partial, and the layers below may only widen them to full
// (SyncScope, escalate). A failed sync puts its changes back and asks the runner for a retry.

import type { ChangeTracker, PendingChanges } from '../model/tracker.js';
import type { IPFamily } from '../model/types.js';
import type { ConntrackReconcileReport, Dataplane, SyncScope } from './dataplane.js';
import { type BrainConfig, Decider } from './decide.js';
import type { NodeEnv, ProxyDecisions } from './types.js';

export const FULL_SYNC_PERIOD_MS = 60 * 60 * 1000;

export interface SyncReport {
  full: boolean;
  /** Why the sync was full, or what a partial one covered (SyncScope.reason). */
  reason: string;
  durationSeconds: number;
  decisions: ProxyDecisions;
  changes: PendingChanges;
  /** Seconds from each changed Service's EndpointSlice trigger time to now (network programming latency). */
  programmingLatenciesSeconds: number[];
  /** Rule modes: the conntrack reconciles run after the write, per family. */
  conntrack: readonly ConntrackReconcileReport[];
}

/** Who wants to know about syncs: metrics, health, logs. */
export interface SyncObserver {
  /**
   * A sync was asked for, for the families the pending changes touch (kube-proxy's per-family
   * QueuedUpdate and last_queued_timestamp).
   */
  queued?(at: Date, families: ReadonlySet<IPFamily>): void;
  synced?(report: SyncReport): void;
  failed?(info: { full: boolean; error: unknown; durationSeconds: number }): void;
}

export interface SyncLoopOptions {
  tracker: ChangeTracker;
  /** Host facts, probed again on every sync (addresses can change). */
  nodeEnv: () => NodeEnv | Promise<NodeEnv>;
  config: BrainConfig;
  dataplane: Dataplane;
  observers: SyncObserver[];
  now?: () => number;
}

export class SyncLoop {
  private lastFullSyncAt = Number.NEGATIVE_INFINITY;
  private needFullSync = true;
  private readonly decider = new Decider();
  private readonly now: () => number;

  constructor(private readonly opts: SyncLoopOptions) {
    this.now = opts.now ?? Date.now;
  }

  /** Tells observers a sync has been requested (call when source events arrive), for the families
   * of the changes pending. */
  noteQueued(): void {
    const at = new Date(this.now());
    const { families } = this.opts.tracker.peekPending();
    for (const observer of this.opts.observers) observer.queued?.(at, families);
  }

  /** Makes the next sync a full one (the bench times both kinds of sync for the same change). */
  requestFullSync(): void {
    this.needFullSync = true;
  }

  /** Why the next sync is full, or null for a partial one: the one place that decides it. */
  private fullSyncReason(changes: PendingChanges, at: number): string | null {
    if (this.needFullSync)
      return this.lastFullSyncAt === Number.NEGATIVE_INFINITY
        ? 'first sync'
        : 'after a failure or on request';
    if (changes.nodeChanged) return 'node labels changed';
    if (changes.serviceCIDRsChanged) return 'ServiceCIDRs changed';
    if (at - this.lastFullSyncAt >= FULL_SYNC_PERIOD_MS) return 'full-sync period';
    return null;
  }

  /** Runs one sync. Returns false when the data plane failed (the caller schedules a retry). */
  async syncOnce(): Promise<boolean> {
    const { tracker, dataplane, observers } = this.opts;
    const changes = tracker.takePending();
    const started = this.now();
    const why = this.fullSyncReason(changes, started);
    const scope: SyncScope = {
      full: why !== null,
      changedServices: changes.changedServices,
      reason: why ?? 'changed Services',
    };
    try {
      const env = await this.opts.nodeEnv();
      const decided = this.decider.decide(
        tracker.state(),
        env,
        this.opts.config,
        { ...scope, slices: tracker },
        { skipped: tracker.skipped() },
      );
      const result = await dataplane.sync(decided.decisions, decided.scope);
      const finished = this.now();
      // The period counts from the last full sync this loop asked for (a layer that widened a
      // sync for its own reasons did not necessarily read the kernel back).
      if (scope.full) this.lastFullSyncAt = started;
      this.needFullSync = false;
      const report: SyncReport = {
        full: result.scope.full,
        reason: result.scope.reason,
        durationSeconds: (finished - started) / 1000,
        decisions: decided.decisions,
        changes,
        programmingLatenciesSeconds: [...changes.triggerTimes.values()].map((t) =>
          Math.max(0, (finished - t) / 1000),
        ),
        conntrack: result.conntrack ?? [],
      };
      for (const observer of observers) observer.synced?.(report);
      return true;
    } catch (error) {
      tracker.restorePending(changes);
      this.needFullSync = true;
      const durationSeconds = (this.now() - started) / 1000;
      for (const observer of observers) observer.failed?.({ full: scope.full, error, durationSeconds });
      return false;
    }
  }
}
