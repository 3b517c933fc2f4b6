// The machine a run happened on, recorded next to every result: figures from different machines
// are not comparable, ratios from the same run are.

import { existsSync, readFileSync } from 'node:fs';
import { cpus, release, totalmem, version } from 'node:os';
import { fileURLToPath } from 'node:url';
import { runCommand } from '../src/host/command.js';
import { parseWrkVersion } from './tools.js';

export interface MachineInfo {
  cpuModel: string;
  cores: number;
  memoryGiB: number;
  kernel: string;
  kernelVersion: string;
  node: string;
  iptables: string;
  nft: string;
  wrk: string;
  clang: string;
  gitCommit: string;
  /** Files that differ from that commit in the tree that ran (`git status --porcelain`). */
  gitChanges: string[];
  /** Whether this kernel can run kube-proxy's ipvs mode. */
  ipvs: { available: boolean; reason: string };
}

async function firstLine(cmd: string, args: string[]): Promise<string> {
  const result = await runCommand(cmd, args, { allowFailure: true });
  return (result.stdout || result.stderr).split('\n')[0]?.trim() || 'unknown';
}

/** IPVS needs CONFIG_IP_VS: built in (/proc/net/ip_vs exists) or loadable (modprobe ip_vs). */
export async function probeIpvs(): Promise<{ available: boolean; reason: string }> {
  if (existsSync('/proc/net/ip_vs')) return { available: true, reason: 'IPVS present (/proc/net/ip_vs)' };
  const modprobe = await runCommand('modprobe', ['ip_vs'], { allowFailure: true });
  if (modprobe.code === 0 && existsSync('/proc/net/ip_vs'))
    return { available: true, reason: 'IPVS loaded (modprobe ip_vs)' };
  return {
    available: false,
    reason: `this kernel (${release()}) has no IPVS: /proc/net/ip_vs is missing and \`modprobe ip_vs\` failed (${
      modprobe.stderr.trim().split('\n')[0] || `exit ${modprobe.code}`
    }); run \`kube-bpf-proxy bench --ipvs-lab\` to compare IPVS in a Debian kernel under QEMU`,
  };
}

/** The checkout the benchmark runs from (bench/ or dist/bench/ is inside it). */
const repoRoot = fileURLToPath(new URL('..', import.meta.url));

export async function machineInfo(): Promise<MachineInfo> {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  return {
    cpuModel: /model name\s*:\s*(.+)/.exec(cpuinfo)?.[1]?.trim() ?? cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Number((totalmem() / 2 ** 30).toFixed(1)),
    kernel: release(),
    kernelVersion: version(),
    node: process.version,
    iptables: await firstLine('iptables', ['--version']),
    nft: await firstLine('nft', ['--version']),
    wrk: parseWrkVersion(await firstLine('wrk', ['-v'])),
    clang: await firstLine('clang', ['--version']),
    gitCommit: await firstLine('git', ['-C', repoRoot, 'rev-parse', '--short=12', 'HEAD']),
    gitChanges: (
      await runCommand('git', ['-C', repoRoot, 'status', '--porcelain', '--untracked-files=no'], {
        allowFailure: true,
      })
    ).stdout
      .split('\n')
      .filter((line) => line.trim() !== ''),
    ipvs: await probeIpvs(),
  };
}
