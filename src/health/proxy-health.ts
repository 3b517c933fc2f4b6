// The proxy's own health, as kube-proxy v1.37.2 keeps it (pkg/proxy/healthcheck/proxy_health.go): per IP family, when rules were last synced and since when an
// update has been waiting. A family is unhealthy once a queued update has waited 2 × syncPeriod.
// Updates are queued per family, for the families a change touches (kube-proxy's metaproxier hands
// each event to the proxier of its family), so on a dual-stack node one family can turn stale alone.
// /healthz adds node eligibility; /livez and the healthCheckNodePort servers do not.

import type { SyncObserver } from '../brain/sync-loop.js';
import type { IPFamily } from '../model/types.js';

export interface FamilyHealth {
  /** ms since the epoch. */
  lastUpdated: number;
  healthy: boolean;
}

export interface HealthReport {
  healthy: boolean;
  /** The latest lastUpdated over the families; null before the first sync. */
  lastUpdated: number | null;
  status: Map<IPFamily, FamilyHealth>;
}

export interface ProxyHealthOptions {
  /** kube-proxy's healthTimeout: 2 × syncPeriod. */
  healthTimeoutMs: number;
  now?: () => number;
}

/** What the health is decided from: kube-proxy's lastUpdatedMap and oldestPendingQueuedMap. */
export interface ProxyHealthState {
  /** ms since the epoch of each family's last successful sync. */
  lastUpdated: ReadonlyMap<IPFamily, number>;
  /** ms since the epoch of each family's oldest sync request still waiting. */
  oldestPendingQueued: ReadonlyMap<IPFamily, number>;
  /** The oldest request from before the first sync, when no family is known yet. */
  pendingBeforeFirstSync: number | null;
}

/**
 * kube-proxy's Health(), pure: each family the node runs is healthy unless its oldest queued
 * update has waited at least healthTimeoutMs; the proxy is healthy when every family is (so one
 * stale family makes /livez and /healthz fail, and its own status entry says which). The top-level
 * lastUpdated is the latest over the families.
 */
export function decideHealth(state: ProxyHealthState, now: number, healthTimeoutMs: number): HealthReport {
  const late = (queuedAt: number | undefined | null) =>
    queuedAt !== undefined && queuedAt !== null && now - queuedAt >= healthTimeoutMs;
  const report: HealthReport = {
    healthy: !late(state.pendingBeforeFirstSync),
    lastUpdated: null,
    status: new Map(),
  };
  for (const [family, lastUpdated] of [...state.lastUpdated].sort(([a], [b]) => a.localeCompare(b))) {
    const healthy = !late(state.oldestPendingQueued.get(family));
    report.status.set(family, { lastUpdated, healthy });
    report.healthy &&= healthy;
    if (report.lastUpdated === null || lastUpdated > report.lastUpdated) report.lastUpdated = lastUpdated;
  }
  return report;
}

export class ProxyHealth {
  private readonly lastUpdated = new Map<IPFamily, number>();
  private readonly oldestPendingQueued = new Map<IPFamily, number>();
  /**
   * A queued update from before the first sync, when the node's families are not known yet:
   * kube-proxy marks its families updated when its loop starts, so an agent whose first sync
   * never succeeds turns unhealthy after the timeout there too.
   */
  private pendingBeforeFirstSync: number | null = null;
  private readonly now: () => number;

  constructor(private readonly options: ProxyHealthOptions) {
    this.now = options.now ?? Date.now;
  }

  /**
   * QueuedUpdate(family) for each family the changes touch and the node runs (a single-stack
   * node has no proxier for the other family); keeps each family's oldest pending time.
   */
  queuedUpdate(families: Iterable<IPFamily>, at: number = this.now()): void {
    if (this.lastUpdated.size === 0) {
      this.pendingBeforeFirstSync ??= at;
      return;
    }
    for (const family of families) {
      if (this.lastUpdated.has(family) && !this.oldestPendingQueued.has(family))
        this.oldestPendingQueued.set(family, at);
    }
  }

  /** Updated: the family's rules were synced. */
  updated(family: IPFamily, at: number = this.now()): void {
    this.lastUpdated.set(family, at);
    this.oldestPendingQueued.delete(family);
    this.pendingBeforeFirstSync = null;
  }

  health(): HealthReport {
    return decideHealth(
      {
        lastUpdated: this.lastUpdated,
        oldestPendingQueued: this.oldestPendingQueued,
        pendingBeforeFirstSync: this.pendingBeforeFirstSync,
      },
      this.now(),
      this.options.healthTimeoutMs,
    );
  }

  /** Health().Healthy: what /livez and the healthCheckNodePort servers report. */
  isHealthy(): boolean {
    return this.health().healthy;
  }

  /** Feeds the state from the sync loop: queued → QueuedUpdate, synced → Updated per family. */
  syncObserver(): SyncObserver {
    return {
      queued: (at, families) => this.queuedUpdate(families, at.getTime()),
      synced: (report) => {
        const at = this.now();
        for (const { family } of report.decisions.families) this.updated(family, at);
      },
    };
  }
}

const GO_ZERO_TIME = '0001-01-01T00:00:00Z';

/** Go's time.Time JSON form (RFC 3339 with the fraction's trailing zeros dropped), in UTC. */
export function formatGoTime(ms: number | null): string {
  if (ms === null) return GO_ZERO_TIME;
  const iso = new Date(ms).toISOString();
  return iso.replace(/\.(\d*?)0*Z$/, (_, digits: string) => (digits === '' ? 'Z' : `.${digits}Z`));
}

/**
 * The /healthz (with nodeEligible) or /livez (without) body: kube-proxy's fields, in the order
 * reference §5.2 lists them. On 200 lastUpdated is the current time, as kube-proxy reports it
 * (older clients read a recent lastUpdated as "healthy").
 */
export function healthBody(
  report: HealthReport,
  now: number,
  opts: { ok: boolean; nodeEligible?: boolean },
): string {
  const status: Record<string, { lastUpdated: string; healthy: boolean }> = {};
  for (const [family, s] of report.status)
    status[family] = { lastUpdated: formatGoTime(s.lastUpdated), healthy: s.healthy };
  return JSON.stringify({
    lastUpdated: formatGoTime(opts.ok ? now : report.lastUpdated),
    currentTime: formatGoTime(now),
    ...(opts.nodeEligible === undefined ? {} : { nodeEligible: opts.nodeEligible }),
    healthy: report.healthy,
    status,
  });
}
