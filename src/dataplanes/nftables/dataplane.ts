// `run --proxy-mode nftables`: writes each family's rendered transaction with one `nft -f -`, the
// way kube-proxy's nftables proxier does (kube-proxy v1.37.2's pkg/proxy/nftables/proxier.go). A transaction is atomic,
// so a failed one leaves the previous ruleset in place; it is counted and the next sync is full.
// Partial syncs write only the changed services' chains and the changed map elements. Chains
// that fell out of use are flushed at once and deleted by a later transaction at least a second
// afterwards: before Linux 6.2 the kernel may still see a just-deleted map element pointing at
// a chain and refuse to delete the chain (EBUSY).

import type { Dataplane, SyncResult, SyncScope } from '../../brain/dataplane.js';
import type { FamilyDecisions, ProxyDecisions } from '../../brain/types.js';
import { type CommandRunner, runCommand } from '../../host/command.js';
import type { IPFamily } from '../../model/types.js';
import { PartialSyncState } from '../partial-sync.js';
import { PerFamily, syncEachFamily } from '../types.js';
import { isAffinitySetName, isServiceChainName, LEGACY_CHAINS, nftFamily, TABLE } from './names.js';
import { buildNftRuleset, type NftElement, type NftServicePortBlock } from './plan.js';
import {
  activeObjects,
  assembleTransaction,
  deleteChainsTransaction,
  desiredElements,
  diffElements,
} from './transaction.js';

/** How long a flushed chain waits before it is deleted. */
export const STALE_CHAIN_DELAY_MS = 1000;

/** What the metrics module exports per family. */
export interface NftablesFamilyStats {
  /** kubeproxy_sync_proxy_rules_nftables_sync_failures_total */
  nftablesSyncFailures: number;
  /** kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total (stale chain deletions) */
  nftablesCleanupFailures: number;
  /** kubeproxy_sync_proxy_rules_no_local_endpoints_total, per policy. */
  noLocalEndpoints: { internal: number; external: number };
  /** Service port blocks and element lines the last successful transaction wrote. */
  lastWritten: { blocks: number; elements: number };
}

interface FamilyState {
  /** The base chains were re-created by this process's first sync. */
  initialized: boolean;
  partial: PartialSyncState;
  appliedElements: Map<string, NftElement>;
  /** Service chains in the kernel: the active ones and the flushed ones awaiting deletion. */
  chains: Set<string>;
  affinitySets: Set<string>;
  /** Flushed chain → when it was flushed. */
  staleChains: Map<string, number>;
  /** The ServiceCIDRs cluster-ips-check was last written with (only full syncs write it). */
  serviceCIDRs: string;
  stats: NftablesFamilyStats;
}

export interface NftablesDataplaneOptions {
  /** Where `nft` runs (default: this host's network namespace). */
  exec?: CommandRunner;
  now?: () => number;
}

export class NftablesSyncError extends Error {
  constructor(
    readonly family: IPFamily,
    readonly partial: boolean,
    stderr: string,
  ) {
    super(`${family} ${partial ? 'partial' : 'full'} nft transaction failed: ${stderr.trim()}`);
  }
}

const blockText = (block: NftServicePortBlock) => block.lines.join('\n');

export class NftablesDataplane implements Dataplane {
  readonly mode = 'nftables' as const;
  private readonly families = new PerFamily<FamilyState>(() => ({
    initialized: false,
    partial: new PartialSyncState(),
    appliedElements: new Map(),
    chains: new Set(),
    affinitySets: new Set(),
    staleChains: new Map(),
    serviceCIDRs: '',
    stats: {
      nftablesSyncFailures: 0,
      nftablesCleanupFailures: 0,
      noLocalEndpoints: { internal: 0, external: 0 },
      lastWritten: { blocks: 0, elements: 0 },
    },
  }));
  private readonly exec: CommandRunner;
  private readonly now: () => number;

  constructor(options: NftablesDataplaneOptions = {}) {
    this.exec = options.exec ?? runCommand;
    this.now = options.now ?? Date.now;
  }

  stats(family: IPFamily): NftablesFamilyStats | undefined {
    return this.families.peek(family)?.stats;
  }

  /** Flushed chains still waiting for their deletion. */
  pendingStaleChains(family: IPFamily): string[] {
    return [...(this.families.peek(family)?.staleChains.keys() ?? [])];
  }

  async sync(decisions: ProxyDecisions, scope: SyncScope): Promise<SyncResult> {
    return syncEachFamily(decisions.families, scope, (family) => this.syncFamily(family, scope));
  }

  async close(): Promise<void> {
    // The ruleset stays in the kernel after the agent stops, as kube-proxy's does; `cleanup` removes it.
  }

  private async syncFamily(decisions: FamilyDecisions, changes: SyncScope): Promise<SyncScope> {
    const state = this.families.get(decisions.family);
    const startedAt = this.now();
    await this.deleteStaleChains(decisions.family, state, startedAt);
    // cluster-ips-check is written by full syncs only: other ServiceCIDRs make this one full.
    const serviceCIDRs = decisions.serviceCIDRs.join(',');
    if (state.initialized && serviceCIDRs !== state.serviceCIDRs)
      state.partial.requireFull('the ServiceCIDRs changed (cluster-ips-check is written by full syncs)');
    const scope = state.partial.scopeFor(changes, 'nftables');
    const { full } = scope;

    const ruleset = buildNftRuleset(decisions);
    const active = activeObjects(ruleset);
    // A full sync trusts only the kernel: it also finds what an earlier process left behind.
    const existing = full ? await this.listServiceObjects(decisions.family) : { ...state, legacyChains: [] };
    // A flushed chain someone else deleted meanwhile needs no deletion (which would fail).
    for (const chain of state.staleChains.keys())
      if (!existing.chains.has(chain)) state.staleChains.delete(chain);
    const newlyStale = [...existing.chains].filter(
      (chain) => !active.chains.has(chain) && !state.staleChains.has(chain),
    );
    const staleSets = [...existing.affinitySets].filter((set) => !active.affinitySets.has(set));
    const desired = desiredElements(ruleset);
    const blockTexts = new Map(ruleset.servicePorts.map((block) => [block.key, blockText(block)]));

    const tx = assembleTransaction(ruleset, {
      full,
      recreateBaseChains: !state.initialized,
      writeBlock: state.partial.mustWrite(changes, blockTexts),
      elementChanges: full ? { remove: [], add: [] } : diffElements(state.appliedElements, desired),
      staleChains: newlyStale,
      staleAffinitySets: staleSets,
      legacyChains: existing.legacyChains,
    });

    if (tx.text !== '') {
      const result = await this.exec('nft', ['-f', '-'], { input: tx.text, allowFailure: true });
      if (result.code !== 0) {
        state.stats.nftablesSyncFailures++;
        state.partial.requireFull('the last transaction failed');
        throw new NftablesSyncError(decisions.family, !full, result.stderr);
      }
    }

    state.initialized = true;
    state.serviceCIDRs = serviceCIDRs;
    state.partial.committed(blockTexts);
    state.appliedElements = desired;
    for (const chain of active.chains) state.staleChains.delete(chain);
    for (const chain of newlyStale) state.staleChains.set(chain, startedAt);
    state.chains = new Set([...active.chains, ...state.staleChains.keys()]);
    state.affinitySets = active.affinitySets;
    state.stats.noLocalEndpoints = ruleset.noLocalEndpoints;
    state.stats.lastWritten = { blocks: tx.blocksWritten, elements: tx.elementsWritten };
    return scope;
  }

  /** Deletes the chains flushed at least STALE_CHAIN_DELAY_MS ago, in a transaction of their own. */
  private async deleteStaleChains(family: IPFamily, state: FamilyState, startedAt: number): Promise<void> {
    const due = [...state.staleChains]
      .filter(([, at]) => startedAt - at >= STALE_CHAIN_DELAY_MS)
      .map(([c]) => c);
    if (due.length === 0) return;
    // Forgotten either way: if a deletion failed, the full sync this forces finds them again.
    for (const chain of due) {
      state.staleChains.delete(chain);
      state.chains.delete(chain);
    }
    const result = await this.exec('nft', ['-f', '-'], {
      input: deleteChainsTransaction(family, due),
      allowFailure: true,
    });
    if (result.code !== 0) {
      state.stats.nftablesCleanupFailures++;
      state.partial.requireFull('deleting stale chains failed');
    }
  }

  /** The per-service chains and affinity sets the kernel holds in our table. */
  private async listServiceObjects(
    family: IPFamily,
  ): Promise<{ chains: Set<string>; affinitySets: Set<string>; legacyChains: string[] }> {
    const fam = nftFamily(family);
    const chains = await this.listNames(['list', 'chains', fam], 'chain');
    const sets = await this.listNames(['-t', 'list', 'sets', fam], 'set');
    return {
      chains: new Set(chains.filter(isServiceChainName)),
      affinitySets: new Set(sets.filter(isAffinitySetName)),
      legacyChains: chains.filter((chain) => LEGACY_CHAINS.includes(chain)),
    };
  }

  private async listNames(args: string[], kind: 'chain' | 'set'): Promise<string[]> {
    const { stdout } = await this.exec('nft', ['-j', ...args]);
    const parsed = JSON.parse(stdout) as { nftables: Record<string, { table?: string; name?: string }>[] };
    const names: string[] = [];
    for (const entry of parsed.nftables) {
      const object = entry[kind];
      if (object?.table === TABLE && object.name !== undefined) names.push(object.name);
    }
    return names;
  }
}

export async function openNftablesDataplane(
  options: NftablesDataplaneOptions = {},
): Promise<NftablesDataplane> {
  return new NftablesDataplane(options);
}
