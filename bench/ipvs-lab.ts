// --ipvs-lab: the benchmark inside the IPVS lab (scripts/build-ipvs-lab.sh): Debian's own kernel,
// which has IPVS, booted by QEMU (software emulation: this machine's KVM cannot run an unmodified
// kernel) into an initramfs that chroots into this machine's root over 9p. So the guest runs this
// very checkout's `kube-bpf-proxy bench`, every mode in one kernel (the real kube-proxy's too, with
// etcd and kube-apiserver run inside the guest); its results land in <out>/ipvs-lab/<timestamp>/
// and <out>/ipvs-lab/latest/ on the host. Emulation makes everything about 10x slower than native:
// compare the lab's ratios, not its absolute figures.

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCommand } from '../src/host/command.js';
import type { BenchOptions } from './harness.js';
import { cliEntryPoint } from './tools.js';

function repoRoot(): string {
  for (const up of ['..', '../..']) {
    const root = fileURLToPath(new URL(up, import.meta.url));
    if (existsSync(join(root, 'scripts', 'build-ipvs-lab.sh'))) return root;
  }
  throw new Error('scripts/build-ipvs-lab.sh not found: the IPVS lab is not part of this checkout');
}

/**
 * The guest's bounds on waits are this many times the native ones. Emulation is about 10x slower
 * overall, some steps more: the control plane took 81 s from start to /readyz in the guest (key
 * generation, etcd, kube-apiserver) against 2-3 s natively, so its 90 s bound becomes 15 min;
 * the real kube-proxy's ipvs mode took 65 s for one endpoint change to reach the kernel at N = 1
 * on a busy host, against a 120 s bound.
 */
export const LAB_TIMEOUT_SCALE = 10;

/**
 * The guest's command line: the same matrix (the real kube-proxy's modes too: the guest runs the
 * control plane itself), results written to the shared io folder.
 */
export function guestBenchArgs(options: BenchOptions): string[] {
  return [
    'bench',
    '--modes',
    options.modes.join(','),
    '--services',
    options.serviceCounts.join(','),
    '--families',
    options.families.join(','),
    '--endpoints',
    String(options.endpoints),
    '--reps',
    String(options.reps),
    '--seconds',
    String(options.cell.seconds),
    '--offered-rate',
    String(options.cell.offeredRate),
    '--udp-probes',
    String(options.cell.udpProbes),
    '--endpoint-changes',
    String(options.cell.endpointChanges),
    '--bpf-cost-services',
    options.bpfCost.services.join(','),
    '--iptables-backend',
    options.cell.iptablesBackend,
    '--timeout-scale',
    String(options.cell.timeoutScale * LAB_TIMEOUT_SCALE),
    '--out',
    '/run/lab',
    ...(options.quick ? ['--quick'] : []),
  ];
}

/**
 * What the guest's bench inherits from this process: the guest's PID 1 starts it with a bare
 * PATH=/bin:/sbin and HOME=/, and the control-plane binaries are found under the cache that
 * HOME (or XDG_CACHE_HOME, KBP_CACHE_DIR) names on the host, whose root the guest mounts.
 */
export function guestEnvironment(env: NodeJS.ProcessEnv): Record<string, string> {
  const names = ['PATH', 'HOME', 'XDG_CACHE_HOME', 'KBP_CACHE_DIR'];
  return Object.fromEntries(names.flatMap((name) => (env[name] ? [[name, env[name]]] : [])));
}

const shellQuote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;

export async function runIpvsLab(options: BenchOptions): Promise<string> {
  const say = options.progress;
  const root = repoRoot();
  say("IPVS lab: building (cached in .cache/ipvs-lab; the first build downloads Debian's kernel package)");
  await runCommand('bash', [join(root, 'scripts', 'build-ipvs-lab.sh')]);
  const io = resolve(options.out, 'ipvs-lab');
  mkdirSync(io, { recursive: true });
  const exports = Object.entries(guestEnvironment(process.env)).map(
    ([name, value]) => `export ${name}=${shellQuote(value)}\n`,
  );
  const command = [process.execPath, cliEntryPoint(), ...guestBenchArgs(options)].map(shellQuote).join(' ');
  writeFileSync(join(io, 'bench.sh'), `#!/bin/sh\n${exports.join('')}exec ${command}\n`);
  say('IPVS lab: booting the guest (QEMU TCG); its progress follows');
  const guest = spawn(join(root, '.cache', 'ipvs-lab', 'run-guest.sh'), [io, 'lab.run=sh,bench.sh'], {
    env: { ...process.env, SMP: '2', MEM: '4096', TMO: String(6 * 3600) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let done = '';
  // The serial console delivers output in small pieces: relay whole lines.
  let partial = '';
  const relay = (d: Buffer) => {
    const lines = (partial + d.toString()).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      if (line.trim() === '') continue;
      // The kernel's power-off message may follow on the same console line.
      const guestDone = /GUEST-DONE rc=\d+/.exec(line);
      if (guestDone) done = guestDone[0];
      say(`  [ipvs-lab] ${line.trimEnd()}`);
    }
  };
  guest.stdout.on('data', relay);
  guest.stderr.on('data', relay);
  const code = await new Promise<number | null>((resolvePromise) => guest.once('exit', resolvePromise));
  if (done !== 'GUEST-DONE rc=0')
    throw new Error(`IPVS lab: the guest's bench did not finish (${done || `qemu exit ${code}`})`);
  const results = join(io, 'latest');
  say(`IPVS lab results: ${results}`);
  return results;
}
