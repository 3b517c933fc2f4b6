// Removes what any of our modes, or kube-proxy itself, left on a node (kube-proxy's --cleanup), so
// a node can switch modes or leave kube-proxy behind. Every step runs even when an earlier one
// failed. Each mode's own cleanup lives in its folder; this runs them in the order their objects
// depend on each other.

import { rm, stat } from 'node:fs/promises';
import { notOnBpffs } from '../host/bpffs.js';
import { type CommandRunner, runCommand } from '../host/command.js';
import { detachBpf } from './bpf/attach.js';
import { handBackToNetfilter } from './bpf/conntrack-handoff.js';
import { PIN_LAYOUT_VERSION } from './bpf/object.js';
import { cleanupIptables } from './iptables/cleanup.js';
import { IPVS_DUMMY_DEVICE } from './ipvs/names.js';
import { cleanupNftables } from './nftables/cleanup.js';

export interface CleanupReport {
  /** One line per object removed, e.g. "iptables nft IPv4 nat/KUBE-SERVICES", "nft table ip kube-proxy". */
  removed: string[];
  errors: string[];
}

export interface CleanupOptions {
  pinPath: string;
  /** Where the commands run (default: this host). */
  exec?: CommandRunner;
  /**
   * Detach the bpf programs (default true). Detaching works in this process's network namespace,
   * so a caller running the commands in another one through `exec` turns it off.
   */
  detachBpf?: boolean;
}

export async function cleanupNode(opts: CleanupOptions): Promise<CleanupReport> {
  const exec = opts.exec ?? runCommand;
  const report: CleanupReport = { removed: [], errors: [] };
  const attempt = async (what: string, cmd: string, args: string[]) => {
    const result = await exec(cmd, args, { allowFailure: true });
    if (result.code === 0) report.removed.push(what);
    else report.errors.push(`${what}: ${result.stderr.trim()}`);
  };

  // iptables first: ipvs mode's rules reference the ipsets, which cannot go while referenced.
  const iptables = await cleanupIptables(exec);
  // A loop, not push(...spread): 10,000 services leave over 100,000 chains.
  for (const chain of iptables.removed) report.removed.push(`iptables ${chain}`);
  report.errors.push(...iptables.errors);

  const nftables = await cleanupNftables(exec);
  report.removed.push(...nftables.removed);
  report.errors.push(...nftables.errors);

  const dummy = await exec('ip', ['link', 'show', IPVS_DUMMY_DEVICE], { allowFailure: true });
  if (dummy.code === 0) {
    // As kube-proxy's ipvs cleanup: the device is evidence ipvs mode ran here, so its virtual
    // servers go too (ipvsadm may be missing where ipvs never ran).
    const ipvsadm = await exec('ipvsadm', ['-C'], { allowFailure: true });
    if (ipvsadm.code === 0) report.removed.push('ipvs virtual servers');
    await attempt(`link ${IPVS_DUMMY_DEVICE}`, 'ip', ['link', 'del', IPVS_DUMMY_DEVICE]);
  }

  const sets = await exec('ipset', ['list', '-n'], { allowFailure: true });
  for (const set of sets.stdout.split('\n').filter((name) => name.startsWith('KUBE-'))) {
    await attempt(`ipset ${set}`, 'ipset', ['destroy', set]);
  }

  // Unpinning the maps and links under our own bpffs directory releases them (a tcx or XDP link
  // detaches when its last pin goes); tc clsact filters (kernels < 6.6) are not links and are
  // detached explicitly. Without bpffs nothing was pinned: cleanup never mounts it, and never
  // removes a directory elsewhere that a mistaken --bpf-pin-path names.
  if (await exists(opts.pinPath)) {
    const notPins = notOnBpffs(opts.pinPath);
    if (notPins) {
      report.errors.push(`bpf pins ${opts.pinPath}: left alone, ${notPins}`);
      return report;
    }
    if (opts.detachBpf ?? true) {
      // Open flows of the programs go on in the kernel's conntrack once they detach (netlink works
      // in this process's network namespace, as detaching does).
      const handback = await handBackToNetfilter(`${opts.pinPath}/${PIN_LAYOUT_VERSION}`, exec);
      if (handback.flows > 0)
        report.removed.push(
          `bpf conntrack: ${handback.flows} open flows handed to netfilter (held ${handback.heldMs} ms)`,
        );
      report.errors.push(...handback.errors);
      try {
        for (const name of await detachBpf(opts.pinPath)) report.removed.push(`bpf attachment ${name}`);
      } catch (err) {
        report.errors.push(`bpf attachments: ${(err as Error).message}`);
      }
    }
    try {
      await rm(opts.pinPath, { recursive: true, force: true });
      report.removed.push(`bpf pins ${opts.pinPath}`);
    } catch (err) {
      report.errors.push(`bpf pins ${opts.pinPath}: ${(err as Error).message}`);
    }
  }
  return report;
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}
