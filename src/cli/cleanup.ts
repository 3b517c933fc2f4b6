// `kube-bpf-proxy cleanup`: runs dataplanes/cleanup.ts on this node and prints what it removed;
// the exit status is 1 if any step failed.

import type { Command } from 'commander';
import { readConfigFlags, registerConfigFlags } from '../config/flags.js';
import { formatProblems, loadConfigFile } from '../config/load.js';
import { cleanupNode } from '../dataplanes/cleanup.js';

export function registerCleanupCommand(program: Command): void {
  const command = program
    .command('cleanup')
    .description(
      "Remove every rule, chain, set, table, device and BPF pin that kube-bpf-proxy's modes or kube-proxy installed on this node",
    );
  registerConfigFlags(command);
  command.action(async (opts: { config?: string }) => {
    // Only the bpf pin path matters here; the config is read so --config and --bpf-pin-path agree with run.
    const loaded = await loadConfigFile(opts.config, readConfigFlags(command));
    if (!loaded.ok) throw new Error(`invalid configuration:\n${formatProblems(loaded.problems)}`);
    const report = await cleanupNode({ pinPath: loaded.config.bpf.pinPath });
    for (const line of report.removed) process.stdout.write(`removed ${line}\n`);
    for (const line of report.errors) process.stderr.write(`failed: ${line}\n`);
    if (report.removed.length === 0 && report.errors.length === 0)
      process.stdout.write('nothing to clean up\n');
    process.exitCode = report.errors.length > 0 ? 1 : 0;
  });
}
