// `kube-bpf-proxy list`: the services the bpf data plane serves right now, read from the live
// pinned maps: each frontend (VIP:port/protocol, scheduler, flags) with its backends and their
// packet, byte and connection counters, like `ipvsadm -Ln --stats` or `cilium service list`;
// then which program is attached where (interface, hook, program, tcx / clsact / XDP mode).

import type { Command } from 'commander';
import { readConfigFlags, registerConfigFlags } from '../config/flags.js';
import { formatProblems, loadConfigFile } from '../config/load.js';
import { openPinnedMaps, readFrontendNames } from '../dataplanes/bpf/inspect.js';
import {
  type AttachmentView,
  type Counters,
  type FrontendView,
  listAttachments,
  listFrontends,
} from '../dataplanes/bpf/inspect-list.js';
import { joinHostPort } from '../net/ip.js';

export interface ListOptions {
  pinPath: string;
  output: 'table' | 'json';
  /** Where the agent wrote the frontend names (default: next to its pin path under /run). */
  namesFile?: string;
}

function bytes(n: number): string {
  if (n < 1024) return `${n}B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(1)}${units[u]}`;
}

/** A backend without counters of its own (id past bpf.mapSizes.backendCounters) shows dashes. */
function counterColumns(c: Counters | null): string[] {
  if (!c) return ['-', '-', '-', '-', '-', '-'];
  return [
    String(c.connections),
    String(c.inPackets),
    bytes(c.inBytes),
    String(c.outPackets),
    bytes(c.outBytes),
    String(c.drops),
  ];
}

/** Fixed-width columns, left-aligned, two spaces apart. */
function table(rows: string[][]): string {
  const widths: number[] = [];
  for (const r of rows) {
    for (const [i, cell] of r.entries()) widths[i] = Math.max(widths[i] ?? 0, cell.length);
  }
  return rows
    .map((r) =>
      r
        .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

export function formatFrontends(views: readonly FrontendView[]): string {
  const rows: string[][] = [
    [
      'FRONTEND',
      'KIND',
      'SERVICE',
      'SCHEDULER',
      'CONNS',
      'INPKTS',
      'INBYTES',
      'OUTPKTS',
      'OUTBYTES',
      'DROPS',
    ],
  ];
  for (const v of views) {
    const extra = [v.action === 'forward' ? '' : v.action, ...v.flags].filter(Boolean).join(',');
    rows.push([
      v.frontend,
      v.kind,
      v.servicePort ?? `id ${v.serviceId}`,
      extra ? `${v.scheduler} [${extra}]` : v.scheduler,
      ...counterColumns(v.stats),
    ]);
    for (const b of v.backends) {
      const state = [b.local ? 'local' : '', b.terminating ? 'terminating' : ''].filter(Boolean).join(',');
      rows.push([`  -> ${joinHostPort(b.address, b.port)}`, state, '', '', ...counterColumns(b.stats)]);
    }
  }
  return `${table(rows)}\n`;
}

export function formatAttachments(views: readonly AttachmentView[]): string {
  const rows = [['INTERFACE', 'HOOK', 'PROGRAM', 'MECHANISM']];
  for (const v of views) rows.push([v.interface, v.hook, v.program, v.mechanism]);
  return `${table(rows)}\n`;
}

export async function listCommand(opts: ListOptions): Promise<string> {
  const maps = openPinnedMaps(opts.pinPath);
  let frontends: FrontendView[];
  try {
    frontends = listFrontends(maps, readFrontendNames(opts.pinPath, opts.namesFile));
  } finally {
    maps.close();
  }
  const attachments = await listAttachments(opts.pinPath);
  if (opts.output === 'json') return `${JSON.stringify({ frontends, attachments }, null, 2)}\n`;
  return `${formatFrontends(frontends)}\n${formatAttachments(attachments)}`;
}

export function registerListCommand(program: Command): void {
  const command = program
    .command('list')
    .description(
      'List the services the bpf data plane serves, from the live maps, with their backends and packet, byte and connection counters, and which program is attached to which interface',
    )
    .option('-o, --output <format>', 'table or json', 'table');
  registerConfigFlags(command);
  command.action(async (opts: { config?: string; output: string }) => {
    if (opts.output !== 'table' && opts.output !== 'json')
      throw new Error(`--output must be table or json, not ${opts.output}`);
    const loaded = await loadConfigFile(opts.config, readConfigFlags(command));
    if (!loaded.ok) throw new Error(`invalid configuration:\n${formatProblems(loaded.problems)}`);
    process.stdout.write(await listCommand({ pinPath: loaded.config.bpf.pinPath, output: opts.output }));
  });
}
