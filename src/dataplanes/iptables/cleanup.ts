// Removes what kube-proxy's iptables and ipvs modes (and ours) leave in iptables: the jumps into
// KUBE-* chains, then the chains. Kubelet's own chains stay: its iptables hint names the backend
// for everyone (backend.ts), and its KUBE-FIREWALL copy guards route_localnet.

import { type CommandRunner, runCommand } from '../../host/command.js';
import { IPTABLES_BACKENDS, type IptablesBackend, iptablesBinary, waitFlags } from './backend.js';

const KUBELET_CHAINS = new Set(['KUBE-IPTABLES-HINT', 'KUBE-KUBELET-CANARY']);
const KUBELET_FIREWALL = 'KUBE-FIREWALL';

interface SavedTable {
  name: string;
  chains: string[];
  /** Rule lines as printed, "-A CHAIN ...". */
  rules: string[];
}

function parseSave(save: string): SavedTable[] {
  const tables: SavedTable[] = [];
  let current: SavedTable | null = null;
  for (const line of save.split('\n')) {
    if (line.startsWith('*')) {
      current = { name: line.slice(1).trim(), chains: [], rules: [] };
      tables.push(current);
    } else if (current && line.startsWith(':')) {
      current.chains.push(line.slice(1).split(' ')[0] as string);
    } else if (current && line.startsWith('-A ')) {
      current.rules.push(line);
    }
  }
  return tables;
}

/** The jump target of a saved rule (-j or -g), if any. */
function ruleTarget(rule: string): string | null {
  const match = / -[jg] (\S+)/.exec(rule);
  return match ? (match[1] as string) : null;
}

export interface CleanupPlan {
  /** iptables-restore --noflush input, or null when nothing is left to remove. */
  restoreInput: string | null;
  removedChains: string[];
}

/** From `iptables-save` output: the restore input that removes every KUBE-* chain and every jump to one. */
export function planIptablesCleanup(save: string): CleanupPlan {
  const sections: string[] = [];
  const removedChains: string[] = [];
  for (const table of parseSave(save)) {
    // Where kubelet manages the table, KUBE-FIREWALL is its copy (kube-proxy's cleanup keeps it too).
    const kubeletPresent = table.chains.includes('KUBE-KUBELET-CANARY');
    const removed = new Set(
      table.chains.filter(
        (chain) =>
          chain.startsWith('KUBE-') &&
          !KUBELET_CHAINS.has(chain) &&
          !(kubeletPresent && chain === KUBELET_FIREWALL),
      ),
    );
    if (removed.size === 0) continue;
    const jumpsIn = table.rules.filter((rule) => {
      const chain = rule.split(' ')[1] as string;
      const target = ruleTarget(rule);
      return !removed.has(chain) && target !== null && removed.has(target);
    });
    // Loops, not push(...spread): a node with 10,000 services has over 100,000 chains, more
    // arguments than one call can take.
    sections.push(`*${table.name}`);
    for (const chain of removed) sections.push(`:${chain} - [0:0]`);
    for (const rule of jumpsIn) sections.push(`-D ${rule.slice(3)}`);
    for (const chain of removed) sections.push(`-X ${chain}`);
    sections.push('COMMIT');
    for (const chain of removed) removedChains.push(`${table.name}/${chain}`);
  }
  return { restoreInput: sections.length > 0 ? `${sections.join('\n')}\n` : null, removedChains };
}

export interface IptablesCleanupResult {
  /** "nft IPv4 nat/KUBE-SERVICES" etc. */
  removed: string[];
  errors: string[];
}

/** Both backends, both families: whatever any iptables-based proxy mode installed goes. */
export async function cleanupIptables(exec: CommandRunner = runCommand): Promise<IptablesCleanupResult> {
  const result: IptablesCleanupResult = { removed: [], errors: [] };
  for (const backend of IPTABLES_BACKENDS) {
    for (const family of ['IPv4', 'IPv6'] as const) {
      await cleanupOne(exec, backend, family, result);
    }
  }
  return result;
}

async function cleanupOne(
  exec: CommandRunner,
  backend: IptablesBackend,
  family: 'IPv4' | 'IPv6',
  result: IptablesCleanupResult,
): Promise<void> {
  const save = await exec(iptablesBinary(backend, family, 'save'), [], { allowFailure: true });
  // A missing binary or module means there is nothing of ours in this backend.
  if (save.code !== 0) return;
  const plan = planIptablesCleanup(save.stdout);
  if (!plan.restoreInput) return;
  const restore = await exec(
    iptablesBinary(backend, family, 'restore'),
    [...waitFlags(backend), '--noflush'],
    {
      input: plan.restoreInput,
      allowFailure: true,
    },
  );
  if (restore.code !== 0) {
    result.errors.push(`${backend} ${family}: ${restore.stderr.trim()}`);
    return;
  }
  for (const chain of plan.removedChains) result.removed.push(`${backend} ${family} ${chain}`);
}
