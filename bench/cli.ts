// The bench command: every mode on this machine, side by side, in one run (bench/harness.ts). Run
// by the bench's own entry point (bench/main.ts) and, from a checkout, as `kube-bpf-proxy bench`.
// Needs root (network namespaces, BPF) and a built tree (the agent runs as dist/src/cli/main.js).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command, Option } from 'commander';
import type { BpfConfig } from '../src/config/types.js';
import { IP_FAMILIES, type IPFamily } from '../src/net/ip.js';
import { runCrossNode } from './cross-node.js';
import { ALL_MODES, type BenchOptions, type BenchResults, runBench, writeReport } from './harness.js';
import { runIpvsLab } from './ipvs-lab.js';
import type { BenchMode } from './kernel-probe.js';
import { SETTLED_AFTER_FIRST_SYNC_MS } from './measures.js';

interface BenchFlags {
  quick?: boolean;
  modes: string;
  services?: string;
  families?: string;
  controlPlaneServices?: string;
  endpoints: string;
  reps?: string;
  seconds?: string;
  offeredRate?: string;
  udpProbes?: string;
  endpointChanges?: string;
  settleSeconds?: string;
  bpfCostServices?: string;
  out: string;
  iptablesBackend: 'auto' | 'legacy' | 'nft';
  bpfHostRouting?: BpfConfig['hostRouting'];
  timeoutScale?: string;
  ipvsLab?: boolean;
  crossNode?: boolean;
  render?: string;
}

const FULL = {
  services: '1,1000,10000,30000',
  families: 'IPv4,IPv6',
  reps: '3',
  seconds: '3',
  offeredRate: '1000',
  udpProbes: '300',
  endpointChanges: '3',
  bpfCost: '1,100000',
  controlPlaneServices: '100000',
};
const QUICK = {
  services: '1,100',
  families: 'IPv4,IPv6',
  reps: '2',
  seconds: '1',
  offeredRate: '500',
  udpProbes: '100',
  endpointChanges: '2',
  bpfCost: '1,1000',
  controlPlaneServices: '',
};

function numbers(flag: string, text: string): number[] {
  if (text.trim() === '') return [];
  const values = text.split(',').map((s) => Number(s.trim()));
  if (values.some((v) => !Number.isInteger(v) || v < 1))
    throw new Error(`${flag}: expected positive integers, got "${text}"`);
  return values;
}

/** "IPv4,IPv6" → the families, IPv4 first, each once. */
function families(flag: string, text: string): IPFamily[] {
  const named = text.split(',').map((s) => s.trim());
  for (const f of named)
    if (!(IP_FAMILIES as readonly string[]).includes(f))
      throw new Error(`${flag}: expected IPv4 and/or IPv6, got "${f}"`);
  return IP_FAMILIES.filter((f) => named.includes(f));
}

function notNegative(flag: string, text: string): number {
  const v = Number(text);
  if (!(v >= 0)) throw new Error(`${flag}: expected a number of at least 0, got "${text}"`);
  return v;
}

function positive(flag: string, text: string): number {
  const v = Number(text);
  if (!(v > 0)) throw new Error(`${flag}: expected a positive number, got "${text}"`);
  return v;
}

export function benchOptions(flags: BenchFlags, progress: (line: string) => void): BenchOptions {
  const d = flags.quick ? QUICK : FULL;
  const modes = flags.modes.split(',').map((m) => m.trim()) as BenchMode[];
  for (const m of modes) if (!ALL_MODES.includes(m)) throw new Error(`--modes: unknown mode "${m}"`);
  return {
    modes,
    serviceCounts: [...new Set(numbers('--services', flags.services ?? d.services))].sort((a, b) => a - b),
    families: families('--families', flags.families ?? d.families),
    controlPlaneServiceCounts: [
      ...new Set(numbers('--control-plane-services', flags.controlPlaneServices ?? d.controlPlaneServices)),
    ].sort((a, b) => a - b),
    endpoints: positive('--endpoints', flags.endpoints),
    reps: positive('--reps', flags.reps ?? d.reps),
    cell: {
      seconds: positive('--seconds', flags.seconds ?? d.seconds),
      offeredRate: positive('--offered-rate', flags.offeredRate ?? d.offeredRate),
      udpProbes: positive('--udp-probes', flags.udpProbes ?? d.udpProbes),
      endpointChanges: positive('--endpoint-changes', flags.endpointChanges ?? d.endpointChanges),
      settleMs:
        flags.settleSeconds === undefined
          ? SETTLED_AFTER_FIRST_SYNC_MS
          : notNegative('--settle-seconds', flags.settleSeconds) * 1000,
      coldStartTimeoutMs: 20 * 60_000,
      timeoutScale: positive('--timeout-scale', flags.timeoutScale ?? '1'),
      iptablesBackend: flags.iptablesBackend,
      ...(flags.bpfHostRouting ? { hostRouting: flags.bpfHostRouting } : {}),
    },
    bpfCost: {
      services: numbers('--bpf-cost-services', flags.bpfCostServices ?? d.bpfCost),
      rounds: flags.quick ? 3 : 7,
      repeat: flags.quick ? 100_000 : 1_000_000,
    },
    out: flags.out,
    quick: flags.quick ?? false,
    progress,
  };
}

/** `kube-bpf-proxy bench` from a checkout: the same command under the agent's executable. */
export function registerBenchCommand(program: Command): void {
  program.addCommand(benchCommand('bench'));
}

/** The bench command, named `name`: its options (a declarative table); runBenchCommand runs it. */
export function benchCommand(name: string): Command {
  return new Command(name)
    .description(
      'benchmark every proxy mode on this machine (N services × E endpoints in network namespaces): control-plane and data-plane measures, a results JSON, a ratio table and plots',
    )
    .option(
      '--quick',
      `a reduced matrix in a few minutes (N ${QUICK.services}, ${QUICK.reps} repetitions, ${QUICK.seconds} s loads)`,
    )
    .option(
      '--modes <list>',
      'modes to measure (direct: no Service and no proxy, the client connects to the backend pods themselves, data plane only; ipvs and kube-proxy-ipvs need a kernel with IPVS; kube-proxy-iptables, kube-proxy-nftables and kube-proxy-ipvs run the real kube-proxy, built by scripts/install-control-plane.sh, and feed every mode from a real API server)',
      ALL_MODES.join(','),
    )
    .option(
      '--services <list>',
      `numbers of services N (default ${FULL.services}; --quick ${QUICK.services})`,
    )
    .option(
      '--families <list>',
      `the Services' IP families of the data-plane cells, each a scenario of single-stack Services on the same dual-stack node (default ${FULL.families}); the control-plane cells are IPv4`,
    )
    .option(
      '--control-plane-services <list>',
      `larger N measured in bpf mode for the control plane alone: cold programming, change syncs, change to kernel, memory (default ${FULL.controlPlaneServices}; --quick none)`,
    )
    .option('--endpoints <n>', 'endpoints per service E (one real backend pod each, at most 32)', '10')
    .option('--reps <n>', `repetitions (default ${FULL.reps}; --quick ${QUICK.reps})`)
    .option(
      '--seconds <s>',
      `duration of each timed load (default ${FULL.seconds}; --quick ${QUICK.seconds})`,
    )
    .option('--udp-probes <n>', `UDP request/responses per run (default ${FULL.udpProbes})`)
    .option('--endpoint-changes <n>', `EndpointSlice changes timed per run (default ${FULL.endpointChanges})`)
    .option(
      '--settle-seconds <s>',
      `seconds after the first sync at which a cell reads the settled memory (default ${SETTLED_AFTER_FIRST_SYNC_MS / 1000}: past the agent's quiet-time collection)`,
    )
    .option(
      '--bpf-cost-services <list>',
      `services in the map for BPF_PROG_TEST_RUN (default ${FULL.bpfCost})`,
    )
    .addOption(
      new Option(
        '--iptables-backend <backend>',
        "iptables mode's backend: auto detects it as kube-proxy's iptables-wrapper does (nft on a clean node)",
      )
        .choices(['auto', 'legacy', 'nft'])
        .default('auto'),
    )
    .addOption(
      new Option(
        '--bpf-host-routing <value>',
        "the bpf modes' bpf.hostRouting (default: the agent's, auto)",
      ).choices(['auto', 'bpf', 'stack']),
    )
    .option(
      '--offered-rate <conn/s>',
      `new connections per second of the paced load that CPU per connection is measured at, below every mode's saturation (default ${FULL.offeredRate}; --quick ${QUICK.offeredRate})`,
    )
    .option(
      '--timeout-scale <x>',
      "multiply the bounds on waits (the API server's readiness, an endpoint change reaching the kernel) by x; the IPVS lab's guest runs with 10",
    )
    .option('--out <dir>', 'results root: <dir>/<timestamp>/ and <dir>/latest/', 'bench/results')
    .addOption(
      new Option(
        '--ipvs-lab',
        'run the matrix inside the IPVS lab instead (Debian kernel with IPVS under QEMU, every mode in that kernel; see docs/benchmark.md)',
      ),
    )
    .addOption(
      new Option(
        '--cross-node',
        "instead of the matrix: new connections from a pod to a ClusterIP whose backend is a pod of another node, on the real-node lab's two nodes, bpf.hostRouting bpf against stack in one run (--reps, --seconds, --families; see docs/benchmark.md)",
      ),
    )
    .option(
      '--render <dir>',
      "redraw a saved run's results.md and plots from its results.json, measure nothing",
    )
    .action(runBenchCommand);
}

/** What `bench` runs: a saved run redrawn, the cross-node comparison, or the matrix (here or in the IPVS lab). */
async function runBenchCommand(flags: BenchFlags): Promise<void> {
  if (flags.render) {
    const results = JSON.parse(readFileSync(join(flags.render, 'results.json'), 'utf8')) as BenchResults;
    await writeReport(flags.render, results);
    process.stdout.write(`${flags.render}\n`);
    return;
  }
  if (process.getuid?.() !== 0)
    throw new Error('bench needs root: it creates network namespaces and loads BPF programs');
  const progress = (line: string) => process.stderr.write(`${line}\n`);
  const options = benchOptions(flags, progress);
  if (flags.crossNode) {
    const { reps, families, out } = options;
    process.stdout.write(
      `${await runCrossNode({ reps, seconds: options.cell.seconds, families, out, progress })}\n`,
    );
    return;
  }
  // This kernel has no IPVS: the lab runs the same matrix, every mode, in a kernel that has.
  const dir = flags.ipvsLab ? await runIpvsLab(options) : (await runBench(options)).dir;
  process.stdout.write(`${dir}\n`);
}
