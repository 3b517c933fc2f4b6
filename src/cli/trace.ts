// `kube-bpf-proxy trace SRC:PORT DST:PORT PROTO`: which service, backend and rule a packet with
// that tuple gets from the bpf data plane, and why, read from the live maps: conntrack, service
// lookup, source ranges, traffic policy, affinity, then the scheduler (saying which parts are
// decided in advance and which are chosen per flow).

import type { Command } from 'commander';
import { readConfigFlags, registerConfigFlags } from '../config/flags.js';
import { formatProblems, loadConfigFile } from '../config/load.js';
import { openPinnedMaps, readFrontendNames } from '../dataplanes/bpf/inspect.js';
import {
  kernelTraceMaps,
  type TraceInput,
  type TraceResult,
  traceFlow,
} from '../dataplanes/bpf/inspect-trace.js';
import { splitHostPort } from '../net/host-port.js';
import { canonicalIP, ipFamilyOf } from '../net/ip.js';

export interface TraceOptions {
  pinPath: string;
  source: string;
  destination: string;
  protocol: string;
  from: string;
  /** TCP: trace the connection's first packet (SYN); otherwise a packet of an existing connection. */
  syn: boolean;
  output: 'text' | 'json';
  namesFile?: string;
}

/** ADDRESS:PORT, an IPv6 address in brackets ([fd00::10]:80). */
function endpoint(text: string, what: string): { address: string; port: number } {
  const hp = splitHostPort(text);
  const address = hp ? canonicalIP(hp.host) : null;
  const port = hp ? Number(hp.port) : Number.NaN;
  if (!address || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new Error(`${what} must be ADDRESS:PORT (IPv4, or [IPv6]), not ${JSON.stringify(text)}`);
  }
  return { address, port };
}

export function parseTraceInput(
  opts: Pick<TraceOptions, 'source' | 'destination' | 'protocol' | 'from' | 'syn'>,
): TraceInput {
  const src = endpoint(opts.source, 'SRC');
  const dst = endpoint(opts.destination, 'DST');
  if (ipFamilyOf(src.address) !== ipFamilyOf(dst.address))
    throw new Error(`SRC and DST must be of one family, not ${opts.source} and ${opts.destination}`);
  const protocol = opts.protocol.toUpperCase();
  if (protocol !== 'TCP' && protocol !== 'UDP')
    throw new Error(`PROTO must be tcp or udp, not ${JSON.stringify(opts.protocol)}`);
  if (opts.from !== 'pod' && opts.from !== 'external')
    throw new Error(`--from must be pod or external, not ${JSON.stringify(opts.from)}`);
  return {
    saddr: src.address,
    sport: src.port,
    daddr: dst.address,
    dport: dst.port,
    protocol,
    from: opts.from,
    syn: opts.syn,
  };
}

export function formatTrace(input: TraceInput, result: TraceResult): string {
  const lines = [
    `${input.protocol} ${input.saddr}:${input.sport} -> ${input.daddr}:${input.dport} from ${input.from === 'pod' ? 'a pod-facing' : 'an external'} interface`,
  ];
  for (const s of result.steps) lines.push(`  ${s.step.padEnd(14)} ${s.result}`);
  const outcome =
    result.verdict === 'pass'
      ? 'not a service packet: passed untouched'
      : result.verdict === 'drop'
        ? 'dropped'
        : result.verdict === 'reject'
          ? 'rejected'
          : result.backend
            ? `to ${result.backend}${result.deterministic ? '' : ' (as things stand now)'}`
            : `to one of ${result.candidates.join(', ')}`;
  lines.push(`  => ${outcome}`);
  return `${lines.join('\n')}\n`;
}

export function traceCommand(opts: TraceOptions): string {
  const input = parseTraceInput(opts);
  const maps = openPinnedMaps(opts.pinPath);
  try {
    const result = traceFlow(input, kernelTraceMaps(maps), readFrontendNames(opts.pinPath, opts.namesFile));
    return opts.output === 'json'
      ? `${JSON.stringify({ input, ...result }, null, 2)}\n`
      : formatTrace(input, result);
  } finally {
    maps.close();
  }
}

export function registerTraceCommand(program: Command): void {
  const command = program
    .command('trace')
    .description(
      'Tell which service, backend and rule the bpf data plane gives a packet with this tuple, and why',
    )
    .argument('<src>', 'source ADDRESS:PORT (IPv4, or [IPv6]:PORT)')
    .argument('<dst>', 'destination ADDRESS:PORT (IPv4, or [IPv6]:PORT)')
    .argument('<proto>', 'tcp or udp')
    .option('--from <side>', 'the interface the packet arrives on: pod or external', 'pod')
    .option('--established', 'TCP: a packet of an existing connection rather than its SYN')
    .option('-o, --output <format>', 'text or json', 'text');
  registerConfigFlags(command);
  command.action(
    async (
      src: string,
      dst: string,
      proto: string,
      opts: { config?: string; from: string; established?: boolean; output: string },
    ) => {
      if (opts.output !== 'text' && opts.output !== 'json')
        throw new Error(`--output must be text or json, not ${opts.output}`);
      const loaded = await loadConfigFile(opts.config, readConfigFlags(command));
      if (!loaded.ok) throw new Error(`invalid configuration:\n${formatProblems(loaded.problems)}`);
      process.stdout.write(
        traceCommand({
          pinPath: loaded.config.bpf.pinPath,
          source: src,
          destination: dst,
          protocol: proto,
          from: opts.from,
          syn: !opts.established,
          output: opts.output,
        }),
      );
    },
  );
}
