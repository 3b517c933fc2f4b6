// Removes what kube-proxy's nftables mode (and ours) leaves behind: it owns the whole
// `kube-proxy` table of each family, so deleting the tables removes every chain, set and map.

import { type CommandRunner, runCommand } from '../../host/command.js';
import { TABLE } from './names.js';

export interface NftablesCleanupResult {
  /** "nft table ip kube-proxy", ... */
  removed: string[];
  errors: string[];
}

const TABLES = [`ip ${TABLE}`, `ip6 ${TABLE}`];

/** Deletes `table ip kube-proxy` and `table ip6 kube-proxy` where they exist. */
export async function cleanupNftables(exec: CommandRunner = runCommand): Promise<NftablesCleanupResult> {
  const result: NftablesCleanupResult = { removed: [], errors: [] };
  const listed = await exec('nft', ['list', 'tables'], { allowFailure: true });
  // Without nft (or nf_tables) there is nothing of ours to remove.
  if (listed.code !== 0) return result;
  const present = new Set(listed.stdout.split('\n').map((line) => line.trim()));
  for (const table of TABLES) {
    if (!present.has(`table ${table}`)) continue;
    const deleted = await exec('nft', ['delete', 'table', ...table.split(' ')], { allowFailure: true });
    if (deleted.code === 0) result.removed.push(`nft table ${table}`);
    else result.errors.push(`nft table ${table}: ${deleted.stderr.trim()}`);
  }
  return result;
}
