// `run --proxy-mode iptables`: writes the rendered rules with one iptables-restore per family,
// the way kube-proxy's syncProxyRules does (v1.37.2's pkg/proxy/iptables/proxier.go). The restore is
// atomic, so a failed one leaves the previous rules in place; it is counted and the next sync
// is full.

import { type Dataplane, escalate, type SyncResult, type SyncScope } from '../../brain/dataplane.js';
import type { FamilyDecisions, ProxyDecisions } from '../../brain/types.js';
import type { ProxyConfig } from '../../config/types.js';
import { type CommandRunner, runCommand } from '../../host/command.js';
import { ensureSysctl } from '../../host/sysctl.js';
import type { Logger } from '../../logger.js';
import type { IPFamily } from '../../model/types.js';
import { PartialSyncState } from '../partial-sync.js';
import type { NfacctPackets } from '../stats.js';
import { PerFamily, syncEachFamily } from '../types.js';
import {
  detectIptablesBackend,
  type IptablesBackend,
  type IptablesCapabilities,
  iptablesBinary,
  probeIptablesCapabilities,
  readNfacctCounters,
  waitFlags,
} from './backend.js';
import {
  isServiceChainName,
  JUMP_RULES,
  type JumpRule,
  jumpRuleArgs,
  KUBE_PROXY_CANARY,
  NFACCT_CT_STATE_INVALID_DROPPED,
  NFACCT_LOCALHOST_NODEPORTS_ACCEPTED,
} from './names.js';
import {
  activeNatChains,
  assembleRestoreInput,
  buildIptablesRuleset,
  type IptablesRenderOptions,
  nodePortsOnLoopback,
  type ServicePortNatBlock,
} from './plan.js';

const CANARY_TABLES = ['mangle', 'nat', 'filter'] as const;

/** What the metrics module exports per family (kubeproxy_sync_proxy_rules_iptables_*). */
export interface IptablesFamilyStats {
  restoreFailures: number;
  partialRestoreFailures: number;
  /** Rules owned per table after the last successful sync. */
  rulesTotal: { filter: number; nat: number };
  /** Rules written per table by the last successful sync. */
  rulesLast: { filter: number; nat: number };
  /** Service ports with a Local policy and no local endpoints, per policy. */
  noLocalEndpoints: { internal: number; external: number };
}

interface FamilyState {
  partial: PartialSyncState;
  lastStaleScan: number;
  stats: IptablesFamilyStats;
}

export interface IptablesDataplaneOptions {
  config: Pick<ProxyConfig, 'syncPeriodSeconds'> & {
    conntrack: Pick<ProxyConfig['conntrack'], 'tcpBeLiberal'>;
  };
  /** Where the commands run (default: this host's network namespace). */
  exec?: CommandRunner;
  /** Default: detected as kube-proxy's images do. */
  backend?: IptablesBackend;
  /** Default: probed (NodeEnv.iptables carries the same facts for `render`). */
  capabilities?: IptablesCapabilities;
  now?: () => number;
  log?: Logger;
}

const blockText = (block: ServicePortNatBlock) => `${block.chains.join(' ')}\n${block.rules.join('\n')}`;

export class IptablesRestoreError extends Error {
  constructor(
    readonly family: IPFamily,
    readonly partial: boolean,
    stderr: string,
  ) {
    super(`${family} ${partial ? 'partial' : 'full'} iptables-restore failed: ${stderr.trim()}`);
  }
}

export class IptablesDataplane implements Dataplane {
  readonly mode = 'iptables' as const;
  private readonly families = new PerFamily<FamilyState>(() => ({
    partial: new PartialSyncState(),
    lastStaleScan: 0,
    stats: {
      restoreFailures: 0,
      partialRestoreFailures: 0,
      rulesTotal: { filter: 0, nat: 0 },
      rulesLast: { filter: 0, nat: 0 },
      noLocalEndpoints: { internal: 0, external: 0 },
    },
  }));
  private readonly renderOptions: IptablesRenderOptions;
  private routeLocalnetTried = false;

  constructor(
    readonly backend: IptablesBackend,
    readonly capabilities: IptablesCapabilities,
    private readonly options: IptablesDataplaneOptions & { exec: CommandRunner; now: () => number },
  ) {
    this.renderOptions = { ...capabilities, tcpBeLiberal: options.config.conntrack.tcpBeLiberal };
  }

  stats(family: IPFamily): IptablesFamilyStats | undefined {
    return this.families.peek(family)?.stats;
  }

  /** Packets counted by kube-proxy's nfacct counters; none where the host has no nfacct match. */
  async nfacctPackets(): Promise<NfacctPackets> {
    if (!this.capabilities.nfacct) return {};
    const counters = await readNfacctCounters(this.options.exec);
    return {
      ctStateInvalidDropped: counters.get(NFACCT_CT_STATE_INVALID_DROPPED),
      localhostNodePortsAccepted: counters.get(NFACCT_LOCALHOST_NODEPORTS_ACCEPTED),
    };
  }

  async sync(decisions: ProxyDecisions, scope: SyncScope): Promise<SyncResult> {
    return syncEachFamily(decisions.families, scope, (family) => this.syncFamily(family, scope));
  }

  async close(): Promise<void> {
    // Rules stay in the kernel after the agent stops, as kube-proxy's do; `cleanup` removes them.
  }

  private async syncFamily(decisions: FamilyDecisions, changes: SyncScope): Promise<SyncScope> {
    const { exec, now } = this.options;
    const state = this.families.get(decisions.family);
    const startedAt = now();
    let scope = state.partial.scopeFor(changes, 'iptables');

    await this.ensureRouteLocalnet(decisions);
    const ruleset = buildIptablesRuleset(decisions, this.renderOptions);

    // iptables-save takes seconds on big hosts, so large clusters scan for stale chains at most
    // once per syncPeriod; stale chains are unreferenced and harmless meanwhile.
    let staleChains: string[] = [];
    let scanned = false;
    if (
      !ruleset.largeClusterMode ||
      startedAt - state.lastStaleScan > this.options.config.syncPeriodSeconds * 1000
    ) {
      // Without a listing the stale chains just wait for the next scan, as upstream.
      const existing = await this.natChains(decisions.family);
      if (existing) {
        scanned = true;
        // The canary vanishes when someone flushes the tables: rebuild everything, jumps included.
        if (!existing.has(KUBE_PROXY_CANARY))
          scope = escalate(scope, 'iptables: the canary chain is gone (the tables were flushed)');
        const active = activeNatChains(ruleset);
        staleChains = [...existing].filter((chain) => isServiceChainName(chain) && !active.has(chain));
      }
    }

    const { full } = scope;
    if (full) {
      state.partial.requireFull(scope.reason);
      await this.ensureJumpRules(decisions.family);
    }

    const texts = new Map(ruleset.servicePorts.map((sp) => [sp.block.key, blockText(sp.block)]));
    const input = assembleRestoreInput(ruleset, {
      writeBlock: full ? () => true : state.partial.mustWrite(changes, texts),
      staleChains,
    });

    const result = await exec(
      iptablesBinary(this.backend, decisions.family, 'restore'),
      [...waitFlags(this.backend), '--noflush', '--counters'],
      { input: input.text, allowFailure: true },
    );
    if (result.code !== 0) {
      if (full) state.stats.restoreFailures++;
      else state.stats.partialRestoreFailures++;
      state.partial.requireFull('the last iptables-restore failed');
      throw new IptablesRestoreError(decisions.family, !full, result.stderr);
    }

    state.partial.committed(texts);
    if (scanned) state.lastStaleScan = startedAt;
    state.stats.rulesTotal = input.rulesTotal;
    state.stats.rulesLast = input.rulesWritten;
    state.stats.noLocalEndpoints = ruleset.noLocalEndpoints;
    return scope;
  }

  /** Every chain of the nat table as iptables-save lists it; null when it cannot be listed. */
  private async natChains(family: IPFamily): Promise<Set<string> | null> {
    const save = await this.options.exec(iptablesBinary(this.backend, family, 'save'), ['-t', 'nat'], {
      allowFailure: true,
    });
    if (save.code !== 0) return null;
    const chains = new Set<string>();
    for (const line of save.stdout.split('\n')) {
      if (line.startsWith(':')) chains.add(line.slice(1).split(' ')[0] as string);
    }
    return chains;
  }

  /** EnsureChain + EnsureRule(Prepend) for every jump, and the canary chains. */
  private async ensureJumpRules(family: IPFamily): Promise<void> {
    const canaries = CANARY_TABLES.map((table) => ({ table, chain: KUBE_PROXY_CANARY }));
    await ensureJumps(this.options.exec, this.backend, family, JUMP_RULES, canaries);
  }

  /**
   * kube-proxy sets route_localnet when NodePorts answer on 127.0.0.0/8 (guarded by KUBE-FIREWALL),
   * and refuses to start when it cannot. Where it cannot be written (the chart's pod is not
   * privileged: its /proc/sys is read-only), the agent warns once and serves every Service but
   * those NodePorts: failing the syncs over it left the node with no Service rules at all.
   */
  private async ensureRouteLocalnet(decisions: FamilyDecisions): Promise<void> {
    if (this.routeLocalnetTried || !nodePortsOnLoopback(decisions)) return;
    this.routeLocalnetTried = true;
    try {
      await ensureSysctl(this.options.exec, 'net.ipv4.conf.all.route_localnet', '1');
    } catch (err) {
      this.options.log?.warn(
        { err: String(err) },
        'cannot set net.ipv4.conf.all.route_localnet=1: NodePorts do not answer on 127.0.0.1 (set config.localhostNodePorts=false, or run the agent privileged)',
      );
    }
  }
}

/**
 * EnsureChain for `chains` and every jump's target, then EnsureRule(Prepend) for every jump: the
 * jumps live in built-in chains, outside the restore (the ipvs mode installs its own list too).
 */
export async function ensureJumps(
  exec: CommandRunner,
  backend: IptablesBackend,
  family: IPFamily,
  rules: readonly JumpRule[],
  chains: { table: string; chain: string }[] = [],
): Promise<void> {
  const iptables = iptablesBinary(backend, family, 'iptables');
  const wait = waitFlags(backend);
  const ensureChain = async (table: string, chain: string) => {
    const created = await exec(iptables, [...wait, '-t', table, '-N', chain], { allowFailure: true });
    if (created.code !== 0 && !created.stderr.includes('already exists')) {
      throw new Error(`${iptables} -t ${table} -N ${chain} failed: ${created.stderr.trim()}`);
    }
  };
  for (const { table, chain } of chains) await ensureChain(table, chain);
  for (const rule of rules) {
    await ensureChain(rule.table, rule.to);
    const spec = jumpRuleArgs(rule);
    const check = await exec(iptables, [...wait, '-t', rule.table, '-C', rule.from, ...spec], {
      allowFailure: true,
    });
    if (check.code !== 0) await exec(iptables, [...wait, '-t', rule.table, '-I', rule.from, ...spec]);
  }
}

export async function openIptablesDataplane(options: IptablesDataplaneOptions): Promise<IptablesDataplane> {
  const exec = options.exec ?? runCommand;
  const backend = options.backend ?? (await detectIptablesBackend(exec));
  const capabilities = options.capabilities ?? (await probeIptablesCapabilities({ exec, backend }));
  return new IptablesDataplane(backend, capabilities, { ...options, exec, now: options.now ?? Date.now });
}
