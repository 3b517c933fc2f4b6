// The side effects of conntrack-takeover.ts: `conntrack -L` read and BPF conntrack entries written
// when the agent takes a node over from kube-proxy; the BPF conntrack read, netfilter's entries in
// the way deleted (ctnetlink.ts) and the flows inserted (`conntrack -R`) when `cleanup` hands the
// node back. Failures are reported, never thrown: a flow left behind breaks, the node's move goes
// on.

import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mapLookup, mapUpdate } from '../../../native/libbpf/map.js';
import { getPinned } from '../../../native/libbpf/object.js';
import { closeFd } from '../../../native/libc.js';
import { type CommandRunner, runCommand } from '../../host/command.js';
import { deleteConntrackEntries } from '../../host/ctnetlink.js';
import type { Logger } from '../../logger.js';
import type { IPFamily } from '../../model/types.js';
import { monotonicNs, readConntrack } from './conntrack-gc.js';
import {
  type BpfCtEntry,
  type Handback,
  handbackDeletes,
  handbackInsertLine,
  handbacks,
  missingHandbacks,
  type NetfilterFlow,
  parseNetfilterFlows,
  stackEntries,
} from './conntrack-takeover.js';
import { IPPROTO } from './frontend-codec.js';
import { CT_F, ct4Key, ct4Val, ct6Key, ct6Val } from './layout.js';
import { mapPinPath } from './object.js';
import type { BpfPlan } from './plan.js';

/** A family's two conntrack maps (TCP, and every other protocol) and their codecs. */
const CT_MAPS = {
  IPv4: { tcp: 'ct4Tcp', any: 'ct4Any', key: ct4Key, value: ct4Val },
  IPv6: { tcp: 'ct6Tcp', any: 'ct6Any', key: ct6Key, value: ct6Val },
} as const;

type CtFds = Record<'ct4Tcp' | 'ct4Any' | 'ct6Tcp' | 'ct6Any', number>;

const familyArg = (family: IPFamily) => (family === 'IPv4' ? 'ipv4' : 'ipv6');

function mapOf(fds: CtFds, family: IPFamily, proto: number): number {
  const maps = CT_MAPS[family];
  return fds[proto === IPPROTO.TCP ? maps.tcp : maps.any];
}

/**
 * The family's netfilter entries with destination NAT (`conntrack -L --dst-nat`: a node's table
 * holds few of them), or why they could not be listed.
 */
async function dnatFlows(exec: CommandRunner, family: IPFamily): Promise<NetfilterFlow[] | string> {
  const args = ['-L', '-f', familyArg(family), '--dst-nat'];
  const list = await exec('conntrack', args, { allowFailure: true });
  if (list.code !== 0) return `conntrack ${args.join(' ')} (${list.code}): ${list.stderr.trim()}`;
  return parseNetfilterFlows(list.stdout);
}

export interface TakeoverReport {
  /** Flows the kernel's conntrack goes on translating (pairs of entries written). */
  flows: number;
  errors: string[];
}

/**
 * kube-proxy → bpf: writes stackEntries() for each family's netfilter flows into the BPF conntrack.
 * Runs before the first sync writes the frontends, so no packet of those flows meets them first.
 */
export async function takeOverNetfilterFlows(
  plan: BpfPlan,
  families: readonly IPFamily[],
  fds: CtFds,
  log: Logger,
  exec: CommandRunner = runCommand,
): Promise<TakeoverReport> {
  const report: TakeoverReport = { flows: 0, errors: [] };
  for (const family of families) {
    const flows = await dnatFlows(exec, family);
    if (typeof flows === 'string') {
      report.errors.push(flows);
      continue;
    }
    const entries = stackEntries(flows, plan, family, monotonicNs());
    const { key, value } = CT_MAPS[family];
    for (const entry of entries) {
      try {
        mapUpdate(mapOf(fds, family, entry.key.proto), key.encode(entry.key), value.encode(entry.value));
      } catch (err) {
        report.errors.push(`BPF conntrack entry ${JSON.stringify(entry.key)}: ${(err as Error).message}`);
      }
    }
    report.flows += entries.length / 2;
  }
  if (report.errors.length > 0)
    log.error(
      { flows: report.flows, errors: report.errors },
      'taking over netfilter conntrack flows failed in part',
    );
  else log.info({ flows: report.flows }, 'netfilter conntrack flows left to the kernel until they end');
  return report;
}

export interface HandbackReport {
  /** Flows written to the kernel's conntrack. */
  flows: number;
  /** The longest time a family's flows were held (their forward packets dropped), in ms. */
  heldMs: number;
  errors: string[];
}

/** One family's entries of both conntrack maps, decoded. */
function readFamily(fds: CtFds, family: IPFamily): BpfCtEntry[] {
  const { tcp, any, key, value } = CT_MAPS[family];
  const entries: BpfCtEntry[] = [];
  for (const fd of [fds[tcp], fds[any]]) {
    for (const r of readConntrack(fd)) {
      const keyBuf = Buffer.from(r.key, 'latin1');
      const valueBuf = Buffer.alloc(value.size);
      // Read again whole: the GC record keeps only the fields its policy needs.
      if (mapLookup(fd, keyBuf, valueBuf))
        entries.push({ key: key.decode(keyBuf), value: value.decode(valueBuf) });
    }
  }
  return entries;
}

/** Sets and clears flags of a BPF entry (gone: nothing to do). */
function setFlags(fds: CtFds, family: IPFamily, entryKey: BpfCtEntry['key'], set: number, clear = 0): void {
  const { key, value } = CT_MAPS[family];
  const fd = mapOf(fds, family, entryKey.proto);
  const keyBuf = key.encode(entryKey);
  const valueBuf = Buffer.alloc(value.size);
  if (!mapLookup(fd, keyBuf, valueBuf)) return;
  const decoded = value.decode(valueBuf);
  mapUpdate(fd, keyBuf, value.encode({ ...decoded, flags: (decoded.flags & ~clear) | set }));
}

/** Rounds of one family's handbacks: a clash stops `conntrack -R` at its line, and the next round
 * takes the flows left. */
const HANDBACK_ROUNDS = 3;

/** The handbacks' inserts in one `conntrack -R`, from a file: conntrack opens -R's argument by
 * name, and a pipe's /dev/stdin (a socket) fails to open. Returns its stderr. */
async function insertBatch(hs: readonly Handback[], exec: CommandRunner): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'kbp-handback-'));
  try {
    const file = join(dir, 'batch');
    writeFileSync(file, `${hs.map(handbackInsertLine).join('\n')}\n`);
    return (await exec('conntrack', ['-R', file], { allowFailure: true })).stderr.trim();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * One family's flows into the kernel's conntrack. The programs hold the flows' forward packets
 * (KBP_CT_F_HOLD: dropped) while the rounds run, then pass them (KBP_CT_F_STACK): a packet passed
 * untranslated before netfilter has the flow's entry would go on without NAT (to a NodePort, no
 * socket: a reset), and one translated after it would meet the entry as a second flow with the same
 * reply tuple, which netfilter's source NAT moves to another port, and the backend resets. A held
 * packet is lost, which TCP retransmits. The replies go on being translated (by the programs while
 * the stack's entry of the translated tuple lasts, then by netfilter's new entry, after which no
 * reply entry of the programs matches them). Each round deletes the entries in the way by their
 * exact tuples (ctnetlink.ts: a hash lookup each, so the hold lasts milliseconds), inserts the
 * flows with one `conntrack -R`, and checks with `conntrack -L`. Counts the flows netfilter carries
 * after the last round; the programs translate the others again.
 */
async function handBackFamily(
  fds: CtFds,
  family: IPFamily,
  hs: Handback[],
  exec: CommandRunner,
): Promise<{ carried: number; errors: string[] }> {
  for (const h of hs) setFlags(fds, family, h.forwardKey, CT_F.HOLD);
  let missing = hs;
  const errors: string[] = [];
  let stderr = '';
  for (let round = 0; round < HANDBACK_ROUNDS && missing.length > 0; round++) {
    errors.push(...deleteConntrackEntries(missing.flatMap(handbackDeletes)).errors);
    stderr = await insertBatch(missing, exec);
    const flows = await dnatFlows(exec, family);
    if (typeof flows === 'string') {
      errors.push(flows);
      break;
    }
    missing = missingHandbacks(missing, flows);
  }
  for (const h of hs) setFlags(fds, family, h.forwardKey, missing.includes(h) ? 0 : CT_F.STACK, CT_F.HOLD);
  const lost = missing.map(
    (h) =>
      `${h.protocol} ${h.orig.src}:${h.orig.sport} -> ${h.orig.dst}:${h.orig.dport} not in netfilter's conntrack (conntrack -R: ${stderr})`,
  );
  return { carried: hs.length - missing.length, errors: [...errors, ...lost] };
}

/**
 * bpf → kube-proxy: each open flow of the pinned BPF conntrack under `pinDir` written to the
 * kernel's conntrack of this process's network namespace, with its NAT (handBackFamily); `exec`
 * must run `conntrack` there too. Before the programs detach.
 */
export async function handBackToNetfilter(pinDir: string, exec: CommandRunner): Promise<HandbackReport> {
  const report: HandbackReport = { flows: 0, heldMs: 0, errors: [] };
  // A pin path the agent never loaded into (or an older layout's) has no flows to hand back.
  if (!existsSync(mapPinPath(pinDir, 'ct4Tcp'))) return report;
  const fds = {} as CtFds;
  try {
    for (const name of ['ct4Tcp', 'ct4Any', 'ct6Tcp', 'ct6Any'] as const)
      fds[name] = getPinned(mapPinPath(pinDir, name));
  } catch (err) {
    for (const fd of Object.values(fds)) closeFd(fd);
    report.errors.push(`BPF conntrack maps under ${pinDir}: ${(err as Error).message}`);
    return report;
  }
  try {
    for (const family of ['IPv4', 'IPv6'] as const) {
      const hs = handbacks(readFamily(fds, family));
      if (hs.length === 0) continue;
      const started = performance.now();
      const { carried, errors } = await handBackFamily(fds, family, hs, exec);
      report.heldMs = Math.max(report.heldMs, Math.round(performance.now() - started));
      report.errors.push(...errors);
      report.flows += carried;
    }
  } finally {
    for (const fd of Object.values(fds)) closeFd(fd);
  }
  return report;
}
