// What the data planes share: the per-family sync of kube-proxy's metaproxier and the service key.
// The Dataplane contract itself is the brain's (brain/dataplane.ts): the sync loop drives it.

import { escalate, type SyncResult, type SyncScope } from '../brain/dataplane.js';
import type { FamilyDecisions } from '../brain/types.js';
import type { IPFamily } from '../model/types.js';

/**
 * The node IP a rule mode tests loadBalancerSourceRanges against: kube-proxy's detectNodeIPs falls
 * back to the family's loopback address when the node has no IP of that family.
 */
export function ruleModeNodeIP(decisions: Pick<FamilyDecisions, 'family' | 'nodeIP'>): string {
  if (decisions.nodeIP !== '') return decisions.nodeIP;
  return decisions.family === 'IPv4' ? '127.0.0.1' : '::1';
}

/** "namespace/name" of the Service a decision belongs to. */
export function serviceKey(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

/**
 * kube-proxy's metaproxier: each family is its own proxier, so one family failing does not hold
 * back the other. Runs every family, then throws one error naming every failure.
 * `syncFamily` returns the scope it synced with: the one given, or widened to full with its reason.
 */
export async function syncEachFamily(
  families: readonly FamilyDecisions[],
  scope: SyncScope,
  syncFamily: (family: FamilyDecisions) => Promise<SyncScope>,
): Promise<SyncResult> {
  let widened = scope;
  const failures: Error[] = [];
  for (const family of families) {
    try {
      const own = await syncFamily(family);
      if (own.full) widened = escalate(widened, `${family.family}: ${own.reason}`);
    } catch (err) {
      failures.push(err as Error);
    }
  }
  if (failures.length > 0) throw new AggregateError(failures, failures.map((e) => e.message).join('; '));
  return { scope: widened };
}

/** One state per family, made on first use: each family is synced as a proxier of its own. */
export class PerFamily<T> {
  private readonly states = new Map<IPFamily, T>();

  constructor(private readonly create: () => T) {}

  /** The family's state; undefined before its first sync. */
  peek(family: IPFamily): T | undefined {
    return this.states.get(family);
  }

  get(family: IPFamily): T {
    let state = this.states.get(family);
    if (state === undefined) {
      state = this.create();
      this.states.set(family, state);
    }
    return state;
  }
}
