// Which iptables the host uses (legacy or nft), the binaries of that backend, and what they can
// do. Rules must go where the rest of the node's rules are: a kube-proxy writing to iptables-nft
// on a node whose kubelet uses iptables-legacy splits the rules over two tables nobody reads
// together (kubernetes#71305, #82361).

import { type CommandRunner, runCommand } from '../../host/command.js';
import type { IPFamily } from '../../model/types.js';
import { NFACCT_CT_STATE_INVALID_DROPPED, NFACCT_LOCALHOST_NODEPORTS_ACCEPTED } from './names.js';

export type IptablesBackend = 'legacy' | 'nft';
export const IPTABLES_BACKENDS: readonly IptablesBackend[] = ['legacy', 'nft'];

export type IptablesTool = 'iptables' | 'restore' | 'save';

/** e.g. ip6tables-nft-restore. */
export function iptablesBinary(backend: IptablesBackend, family: IPFamily, tool: IptablesTool): string {
  const base = `${family === 'IPv4' ? 'iptables' : 'ip6tables'}-${backend}`;
  return tool === 'iptables' ? base : `${base}-${tool}`;
}

/**
 * The lock flags kube-proxy passes (iptables >= 1.6.2). iptables-nft takes no lock and prints a
 * warning for --wait-interval, so it only gets -w.
 */
export function waitFlags(backend: IptablesBackend): string[] {
  return backend === 'legacy' ? ['-w', '5', '-W', '100000'] : ['-w', '5'];
}

const KUBELET_HINT_CHAINS = ['KUBE-IPTABLES-HINT', 'KUBE-KUBELET-CANARY'];

const ruleCount = (save: string) => save.split('\n').filter((line) => line.startsWith('-')).length;
const hasKubeletHint = (save: string) => KUBELET_HINT_CHAINS.some((chain) => save.includes(`:${chain} `));

/**
 * The iptables-wrapper logic of kube-proxy's images: kubelet's hint chains name the backend;
 * otherwise the backend holding more rules wins, nft on a tie (also when both are empty).
 */
export function chooseIptablesBackend(saves: { legacy: string; nft: string }): IptablesBackend {
  if (hasKubeletHint(saves.nft)) return 'nft';
  if (hasKubeletHint(saves.legacy)) return 'legacy';
  return ruleCount(saves.legacy) > ruleCount(saves.nft) ? 'legacy' : 'nft';
}

/** Both families' save output of one backend ("" where the binary or table is missing). */
async function saveAll(exec: CommandRunner, backend: IptablesBackend): Promise<string> {
  const outputs = await Promise.all(
    (['IPv4', 'IPv6'] as const).map((family) =>
      exec(iptablesBinary(backend, family, 'save'), [], { allowFailure: true }).then((r) => r.stdout),
    ),
  );
  return outputs.join('');
}

export async function detectIptablesBackend(exec: CommandRunner = runCommand): Promise<IptablesBackend> {
  const [legacy, nft] = await Promise.all([saveAll(exec, 'legacy'), saveAll(exec, 'nft')]);
  return chooseIptablesBackend({ legacy, nft });
}

/** "iptables v1.8.9 (nf_tables)" → [1, 8, 9]. */
export function parseIptablesVersion(text: string): number[] | null {
  const match = /v(\d+)\.(\d+)\.(\d+)/.exec(text);
  return match ? match.slice(1, 4).map(Number) : null;
}

function versionAtLeast(version: number[], minimum: number[]): boolean {
  for (let i = 0; i < minimum.length; i++) {
    const have = version[i] ?? 0;
    const want = minimum[i] ?? 0;
    if (have !== want) return have > want;
  }
  return true;
}

/** MASQUERADE --random-fully appeared in iptables 1.6.2. */
const RANDOM_FULLY_MIN_VERSION = [1, 6, 2];

export interface IptablesCapabilities {
  randomFully: boolean;
  nfacct: boolean;
}

/**
 * What NodeEnv.iptables reports: --random-fully support from the binary's version, and nfacct
 * when kube-proxy's two counters exist (they are created here, as kube-proxy does at start-up)
 * and the binary has the nfacct match.
 */
export async function probeIptablesCapabilities(
  opts: { exec?: CommandRunner; backend?: IptablesBackend } = {},
): Promise<IptablesCapabilities> {
  const exec = opts.exec ?? runCommand;
  const backend = opts.backend ?? (await detectIptablesBackend(exec));
  const binary = iptablesBinary(backend, 'IPv4', 'iptables');
  const version = await exec(binary, ['--version'], { allowFailure: true });
  const parsed = parseIptablesVersion(version.stdout);
  const randomFully = parsed !== null && versionAtLeast(parsed, RANDOM_FULLY_MIN_VERSION);
  const match = await exec(binary, ['-m', 'nfacct', '--help'], { allowFailure: true });
  let nfacct = match.code === 0;
  for (const counter of [NFACCT_CT_STATE_INVALID_DROPPED, NFACCT_LOCALHOST_NODEPORTS_ACCEPTED]) {
    if (!nfacct) break;
    nfacct = await ensureNfacctCounter(exec, counter);
  }
  return { randomFully, nfacct };
}

async function ensureNfacctCounter(exec: CommandRunner, name: string): Promise<boolean> {
  const existing = await exec('nfacct', ['get', name], { allowFailure: true });
  if (existing.code === 0) return true;
  return (await exec('nfacct', ['add', name], { allowFailure: true })).code === 0;
}

/** Packet counts of kube-proxy's nfacct counters (kubeproxy_iptables_*_packets_total), absent ones left out. */
export async function readNfacctCounters(exec: CommandRunner = runCommand): Promise<Map<string, number>> {
  const { stdout } = await exec('nfacct', ['list'], { allowFailure: true });
  const counters = new Map<string, number>();
  for (const match of stdout.matchAll(/\{\s*pkts\s*=\s*(\d+),\s*bytes\s*=\s*\d+\s*\}\s*=\s*([^;\s]+);/g)) {
    counters.set(match[2] as string, Number(match[1]));
  }
  return counters;
}
