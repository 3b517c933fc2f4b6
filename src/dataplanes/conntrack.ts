// The side effects of kube-proxy's conntrack reconciler for the rule modes (iptables, nftables,
// ipvs; bpf keeps its own conntrack in BPF maps): after a successful sync, list the family's UDP
// entries with the conntrack CLI, let the brain pick the stale ones (brain/conntrack.ts) and
// delete them with one `conntrack -D` per filter. A failure is logged and reported, never thrown:
// the rules are already in place, and the next sync tries again.

import { type ConntrackEntry, type ConntrackFilter, staleConntrackFilters } from '../brain/conntrack.js';
import type { ConntrackReconcileReport, Dataplane, SyncResult, SyncScope } from '../brain/dataplane.js';
import type { FamilyDecisions } from '../brain/types.js';
import type { CommandRunner } from '../host/command.js';
import type { Logger } from '../logger.js';
import type { IPFamily } from '../model/types.js';
import { canonicalIP } from '../net/ip.js';
import { serviceKey } from './types.js';

const familyArg = (family: IPFamily) => (family === 'IPv4' ? 'ipv4' : 'ipv6');

/**
 * The entries `conntrack -L` prints, one a line: "udp 17 29 src=A dst=B sport=P dport=Q [UNREPLIED]
 * src=C dst=D sport=R dport=S mark=0 use=1". The first src/dst/sport/dport are the original
 * direction, the second the reply. Lines that do not parse are left out.
 */
export function parseConntrackList(stdout: string): ConntrackEntry[] {
  const entries: ConntrackEntry[] = [];
  for (const line of stdout.split('\n')) {
    const [protocol, ...fields] = line.trim().split(/\s+/);
    if (!protocol) continue;
    const seen = new Map<string, string[]>();
    for (const field of fields) {
      const eq = field.indexOf('=');
      if (eq <= 0) continue;
      const key = field.slice(0, eq);
      seen.set(key, [...(seen.get(key) ?? []), field.slice(eq + 1)]);
    }
    const origDst = canonicalIP(seen.get('dst')?.[0] ?? '');
    const replySrc = canonicalIP(seen.get('src')?.[1] ?? '');
    const origDstPort = Number(seen.get('dport')?.[0]);
    if (origDst === null || replySrc === null || !Number.isInteger(origDstPort)) continue;
    entries.push({ protocol, origDst, origDstPort, replySrc });
  }
  return entries;
}

/** `conntrack -D` arguments for one filter. */
export function conntrackDeleteArgs(family: IPFamily, filter: ConntrackFilter): string[] {
  return [
    '-D',
    '-f',
    familyArg(family),
    '-p',
    'udp',
    ...(filter.origDst === null ? [] : ['--orig-dst', filter.origDst]),
    '--orig-port-dst',
    String(filter.origDstPort),
    '--reply-src',
    filter.replySrc,
  ];
}

/** conntrack's "N flow entries have been deleted." on stderr; null when it is missing. */
export function deletedCount(stderr: string): number | null {
  const match = /(\d+) flow entries have been deleted/.exec(stderr);
  return match ? Number(match[1]) : null;
}

/** "namespace/name" of the Services with a UDP port in this family. */
export function udpServices(decisions: FamilyDecisions): Set<string> {
  return new Set(
    decisions.servicePorts
      .filter((sp) => sp.protocol === 'UDP')
      .map((sp) => serviceKey(sp.namespace, sp.name)),
  );
}

/**
 * kube-proxy reconciles after a sync in which a Service with a UDP port, before or after the
 * change, had its endpoints changed. Our change set names the Services whose Service object or
 * EndpointSlices changed, a superset: an extra run deletes nothing that is not stale.
 */
export function conntrackCleanupRequired(
  changedServices: ReadonlySet<string>,
  udpBefore: ReadonlySet<string>,
  udpNow: ReadonlySet<string>,
): boolean {
  for (const key of changedServices) if (udpBefore.has(key) || udpNow.has(key)) return true;
  return false;
}

export interface ConntrackReconcilerOptions {
  /** Where `conntrack` runs (default in open.ts: this host's network namespace). */
  exec: CommandRunner;
  log: Logger;
  now?: () => number;
}

export class ConntrackReconciler {
  /** Per family: the Services that had a UDP port at the last successful sync. */
  private readonly udpBefore = new Map<IPFamily, Set<string>>();
  /** Families whose last reconcile failed: they run again after the next sync, changes or not. */
  private readonly retry = new Set<IPFamily>();
  private readonly now: () => number;

  constructor(private readonly options: ConntrackReconcilerOptions) {
    this.now = options.now ?? Date.now;
  }

  /** Call after a successful sync of `decisions`' family; null when nothing asked for a run. */
  async afterSync(decisions: FamilyDecisions, changes: SyncScope): Promise<ConntrackReconcileReport | null> {
    const { family } = decisions;
    const udpNow = udpServices(decisions);
    const before = this.udpBefore.get(family) ?? new Set();
    this.udpBefore.set(family, udpNow);
    if (!this.retry.has(family) && !conntrackCleanupRequired(changes.changedServices, before, udpNow))
      return null;
    const report = await this.reconcile(decisions);
    if (report.error === null) this.retry.delete(family);
    else this.retry.add(family);
    return report;
  }

  /** One reconcile of one family: list, decide, delete. */
  async reconcile(decisions: FamilyDecisions): Promise<ConntrackReconcileReport> {
    const { exec, log } = this.options;
    const { family } = decisions;
    const started = this.now();
    const seconds = () => (this.now() - started) / 1000;
    const list = await exec('conntrack', ['-L', '-f', familyArg(family), '-p', 'udp'], {
      allowFailure: true,
    });
    if (list.code !== 0) {
      const error = `conntrack -L failed (${list.code}): ${list.stderr.trim()}`;
      log.error({ family, err: error }, 'conntrack reconcile: listing the entries failed');
      return { family, listed: false, durationSeconds: seconds(), deleted: 0, error };
    }
    const filters = staleConntrackFilters(decisions, parseConntrackList(list.stdout));
    let deleted = 0;
    const failures: string[] = [];
    for (const filter of filters) {
      const args = conntrackDeleteArgs(family, filter);
      const result = await exec('conntrack', args, { allowFailure: true });
      const count = deletedCount(result.stderr);
      // conntrack exits 1 when nothing matched: an earlier filter or the timeout took the entry.
      if (count !== null) deleted += count;
      else failures.push(`conntrack ${args.join(' ')} failed (${result.code}): ${result.stderr.trim()}`);
    }
    const error = failures.length > 0 ? failures.join('; ') : null;
    const durationSeconds = seconds();
    if (error !== null)
      log.error({ family, deleted, err: error }, 'conntrack reconcile: deleting entries failed');
    else log.debug({ family, deleted, durationSeconds }, 'conntrack reconciled');
    return { family, listed: true, durationSeconds, deleted, error };
  }
}

/**
 * A rule-mode data plane whose successful syncs are followed by the conntrack reconcile of each
 * family, inside the sync as kube-proxy runs it (so its time counts in the sync duration).
 */
export function withConntrackCleanup(inner: Dataplane, reconciler: ConntrackReconciler): Dataplane {
  return {
    mode: inner.mode,
    async sync(decisions, changes): Promise<SyncResult> {
      const result = await inner.sync(decisions, changes);
      const conntrack: ConntrackReconcileReport[] = [];
      for (const family of decisions.families) {
        const report = await reconciler.afterSync(family, changes);
        if (report) conntrack.push(report);
      }
      return { ...result, conntrack };
    },
    close: () => inner.close(),
  };
}
