// Userspace garbage collection of the conntrack maps. The datapath only stamps each entry with
// last_seen_ns and the TCP flags seen in its direction; the policy (how long a flow in a given
// state lives) is here, so it changes without reloading programs. The LRU maps would evict old
// flows anyway, but only under pressure and without regard to state: GC keeps room for new flows
// and forgets closed ones quickly.
//
// Timeouts follow Cilium's defaults (bpf-ct-timeout-*): TCP SYN 60 s, TCP established 6 h (which
// conntrack.tcpEstablishedTimeout replaces, bpfConntrackTimeouts),
// TCP closing (RST seen, or FIN seen in both directions) 10 s, everything else 60 s. A half-closed
// stream (FIN one way only) keeps the established timeout. They are idle timeouts: each packet
// refreshes last_seen_ns (at most once a second, KBP_CT_REFRESH_NS).
//
// Entries are handled as raw bytes (a walk reads hundreds of thousands of them): a record keeps
// the key's bytes as a latin1 string and the few value fields the policy needs. Both families'
// maps are collected alike; a map's key size tells which layout it has.

import { mapDelete, mapDeleteBatch, mapInfo, mapLookup, mapLookupBatch } from '../../../native/libbpf/map.js';
import { NativeError } from '../../../native/libc.js';
import { IPPROTO } from './frontend-codec.js';
import { CT_F, ct4Key, ct4Val, ct6Key, ct6Val, TCP_FLAG } from './layout.js';

/** A family's conntrack key and value layout. */
interface CtLayout {
  key: typeof ct4Key | typeof ct6Key;
  value: typeof ct4Val | typeof ct6Val;
  addrBytes: number;
}

export const CT4_LAYOUT: CtLayout = { key: ct4Key, value: ct4Val, addrBytes: 4 };
export const CT6_LAYOUT: CtLayout = { key: ct6Key, value: ct6Val, addrBytes: 16 };

/** The layout of the conntrack map behind fd (kbp_ct4* or kbp_ct6*). */
function layoutOf(fd: number): CtLayout {
  return mapInfo(fd).keySize === ct6Key.size ? CT6_LAYOUT : CT4_LAYOUT;
}

export interface ConntrackTimeouts {
  tcpSynSeconds: number;
  tcpEstablishedSeconds: number;
  tcpClosingSeconds: number;
  otherSeconds: number;
}

export const DEFAULT_CONNTRACK_TIMEOUTS: ConntrackTimeouts = {
  tcpSynSeconds: 60,
  tcpEstablishedSeconds: 6 * 3600,
  tcpClosingSeconds: 10,
  otherSeconds: 60,
};

/**
 * The timeouts for `conntrack.*` (docs/config.md, "conntrack in bpf mode"): tcpEstablishedTimeout
 * means here what it means to netfilter, the idle time of an established TCP flow, so a non-zero
 * one replaces the 6 h default. The others have no counterpart of the same meaning: the BPF
 * conntrack's closing state is RST or FIN both ways (netfilter's CLOSE/TIME_WAIT, not CLOSE_WAIT),
 * and one timeout serves every non-TCP flow, replied or not.
 */
export function bpfConntrackTimeouts(conntrack: { tcpEstablishedTimeoutSeconds: number }): ConntrackTimeouts {
  const established = Math.trunc(conntrack.tcpEstablishedTimeoutSeconds);
  return established > 0
    ? { ...DEFAULT_CONNTRACK_TIMEOUTS, tcpEstablishedSeconds: established }
    : DEFAULT_CONNTRACK_TIMEOUTS;
}

/** One conntrack entry, as much as the GC needs of it. */
export interface CtRecord {
  /** The key's bytes (kbp_ct4_key or kbp_ct6_key), latin1. */
  key: string;
  /** The key of the other direction's entry: this entry's translated tuple, reversed. */
  pairKey: string;
  proto: number;
  reply: boolean;
  lastSeenNs: bigint;
  tcpFlags: number;
  svcId: number;
  backendId: number;
}

export function ctRecord(
  keys: Buffer,
  keyAt: number,
  values: Buffer,
  valueAt: number,
  layout: CtLayout = CT4_LAYOUT,
): CtRecord {
  const v = (name: keyof typeof ct4Val.fields) => valueAt + layout.value.fields[name].offset;
  const latin1 = (buf: Buffer, at: number, len: number) => buf.toString('latin1', at, at + len);
  // The key's proto byte and the padding after it: the same in both directions.
  const protoAt = layout.key.fields.proto.offset;
  return {
    key: latin1(keys, keyAt, layout.key.size),
    pairKey:
      latin1(values, v('xlateDaddr'), layout.addrBytes) +
      latin1(values, v('xlateSaddr'), layout.addrBytes) +
      latin1(values, v('xlateDport'), 2) +
      latin1(values, v('xlateSport'), 2) +
      latin1(keys, keyAt + protoAt, layout.key.size - protoAt),
    proto: keys[keyAt + protoAt]!,
    reply: (values[v('flags')]! & CT_F.REPLY) !== 0,
    lastSeenNs: values.readBigUInt64LE(v('lastSeenNs')),
    tcpFlags: values[v('tcpFlags')]!,
    svcId: values.readUInt32LE(v('svcId')),
    backendId: values.readUInt32LE(v('backendId')),
  };
}

export type FlowState = 'syn' | 'established' | 'closing' | 'other';

/** A flow's state from the TCP flags both of its entries saw. */
export function flowState(
  proto: number,
  forward: CtRecord | undefined,
  reply: CtRecord | undefined,
): FlowState {
  if (proto !== IPPROTO.TCP) return 'other';
  const fwd = forward?.tcpFlags ?? 0;
  const rev = reply?.tcpFlags ?? 0;
  // Closed once either side reset, or both sides sent their FIN. A half-closed stream (one FIN)
  // may idle as long as an established one: the other side can still send.
  if ((fwd | rev) & TCP_FLAG.RST || fwd & rev & TCP_FLAG.FIN) return 'closing';
  // Established once the client acknowledged (the server's SYN-ACK) and the server answered.
  const clientAcked = ((forward?.tcpFlags ?? 0) & TCP_FLAG.ACK) !== 0;
  return clientAcked && reply !== undefined ? 'established' : 'syn';
}

export function timeoutNs(state: FlowState, t: ConntrackTimeouts): bigint {
  const seconds = {
    syn: t.tcpSynSeconds,
    established: t.tcpEstablishedSeconds,
    closing: t.tcpClosingSeconds,
    other: t.otherSeconds,
  }[state];
  return BigInt(seconds) * 1_000_000_000n;
}

/**
 * The flows to delete from one conntrack map (pure), each as its one or two entries: flows idle
 * longer than their state's timeout; `stale(entry)` adds flows to delete whatever their age (UDP
 * towards removed backends). An entry whose partner is gone is judged alone.
 */
export function expiredFlows(
  records: readonly CtRecord[],
  nowNs: bigint,
  timeouts: ConntrackTimeouts,
  stale: (r: CtRecord) => boolean = () => false,
): JudgedFlows {
  const out: JudgedFlows = { expired: [], stale: [] };
  judgeFlows(records, new Map(records.map((r) => [r.key, r])), new Set(), nowNs, timeouts, stale, out);
  return out;
}

interface JudgedFlows {
  expired: CtRecord[][];
  stale: CtRecord[][];
}

/** expiredFlows over a part of a map's records (a GC pass judges one slice at a time): `byKey`
 * holds every record of the map, `done` the keys of the flows already judged. */
function judgeFlows(
  records: readonly CtRecord[],
  byKey: ReadonlyMap<string, CtRecord>,
  done: Set<string>,
  nowNs: bigint,
  timeouts: ConntrackTimeouts,
  stale: (r: CtRecord) => boolean,
  out: JudgedFlows,
): void {
  for (const r of records) {
    if (done.has(r.key)) continue;
    const partner = byKey.get(r.pairKey);
    const flow = partner ? [r, partner] : [r];
    for (const p of flow) done.add(p.key);
    if (flow.some(stale)) {
      out.stale.push(flow);
      continue;
    }
    const forward = r.reply ? partner : r;
    const reply = r.reply ? r : partner;
    let lastSeen = 0n;
    for (const p of flow) if (p.lastSeenNs > lastSeen) lastSeen = p.lastSeenNs;
    if (nowNs - lastSeen > timeoutNs(flowState(r.proto, forward, reply), timeouts)) out.expired.push(flow);
  }
}

export interface ConntrackGcStats {
  /** Entries read. */
  scanned: number;
  /** Flows deleted for being idle too long. */
  expired: number;
  /** Flows deleted because their backend left the service (UDP). */
  staleUdp: number;
  /** Flows idle in the scan but refreshed before the delete: kept. */
  refreshed: number;
  /** Map entries deleted (one or two per flow). */
  deletedEntries: number;
  durationMs: number;
}

/** CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_(coarse_)ns() reads (libuv's hrtime uses it too). */
export function monotonicNs(): bigint {
  return process.hrtime.bigint();
}

const CHUNK = 8192;

/** A conntrack map's entries, one batch lookup at a time. */
function* conntrackBatches(fd: number, layout: CtLayout): Generator<CtRecord[]> {
  const keys = Buffer.alloc(layout.key.size * CHUNK);
  const values = Buffer.alloc(layout.value.size * CHUNK);
  let inBatch: Buffer | null = null;
  for (;;) {
    const outBatch = Buffer.alloc(Math.max(layout.key.size, 8));
    const chunk = mapLookupBatch(fd, inBatch, outBatch, keys, values, CHUNK);
    const records: CtRecord[] = [];
    for (let i = 0; i < chunk.count; i++)
      records.push(ctRecord(keys, i * layout.key.size, values, i * layout.value.size, layout));
    yield records;
    if (chunk.done) return;
    inBatch = outBatch;
  }
}

/** Every entry of a conntrack map, with batched lookups. */
export function readConntrack(fd: number): CtRecord[] {
  return [...conntrackBatches(fd, layoutOf(fd))].flat();
}

/** Lets the event loop run (a sync, a scrape, a netlink event) between two slices of a GC pass. */
export const yieldToEventLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * One GC pass over a conntrack map. `stale` marks entries to delete now (UDP towards removed
 * backends). Expired flows are read again just before the delete and kept if a packet refreshed
 * them in between. A pass over hundreds of thousands of entries takes a second or more, so every
 * step of it (the walk, the judgement, the re-reads, the deletes) runs in slices of one batch
 * (8192 entries) and calls `pause` between them: the agent's syncs are never queued behind it.
 */
export async function collectConntrack(
  fd: number,
  timeouts: ConntrackTimeouts = DEFAULT_CONNTRACK_TIMEOUTS,
  stale?: (r: CtRecord) => boolean,
  nowNs: () => bigint = monotonicNs,
  pause: () => Promise<void> = yieldToEventLoop,
): Promise<ConntrackGcStats> {
  const started = performance.now();
  const layout = layoutOf(fd);
  const records: CtRecord[] = [];
  const byKey = new Map<string, CtRecord>();
  for (const batch of conntrackBatches(fd, layout)) {
    for (const r of batch) {
      records.push(r);
      byKey.set(r.key, r);
    }
    await pause();
  }
  const found: JudgedFlows = { expired: [], stale: [] };
  const judged = new Set<string>();
  const now = nowNs();
  for (let i = 0; i < records.length; i += CHUNK) {
    judgeFlows(records.slice(i, i + CHUNK), byKey, judged, now, timeouts, stale ?? (() => false), found);
    await pause();
  }
  const value = Buffer.alloc(layout.value.size);
  const wasRefreshed = (r: CtRecord) =>
    mapLookup(fd, Buffer.from(r.key, 'latin1'), value) && value.readBigUInt64LE(0) !== r.lastSeenNs;
  let refreshed = 0;
  const doomed: CtRecord[] = found.stale.flat();
  for (let i = 0; i < found.expired.length; i += CHUNK) {
    for (const flow of found.expired.slice(i, i + CHUNK)) {
      // A packet between the scan and now moved last_seen: the flow lives on, both directions.
      if (flow.some(wasRefreshed)) {
        refreshed++;
        continue;
      }
      doomed.push(...flow);
    }
    await pause();
  }
  for (let i = 0; i < doomed.length; i += CHUNK) {
    deleteEntries(fd, doomed.slice(i, i + CHUNK), layout.key.size);
    await pause();
  }
  return {
    scanned: records.length,
    expired: found.expired.length - refreshed,
    staleUdp: found.stale.length,
    refreshed,
    deletedEntries: doomed.length,
    durationMs: performance.now() - started,
  };
}

function deleteEntries(fd: number, records: readonly CtRecord[], keySize: number): void {
  deleteKeys(
    fd,
    records.map((r) => r.key),
    keySize,
  );
}

/** Deletes the keys (latin1 strings of `keySize` bytes) of an LRU map, those evicted meanwhile too. */
export function deleteKeys(fd: number, keys: readonly string[], keySize: number): void {
  if (keys.length === 0) return;
  const packed = Buffer.from(keys.join(''), 'latin1');
  try {
    mapDeleteBatch(fd, packed, keys.length);
  } catch (err) {
    // The batch stops at an entry the LRU already evicted: finish one by one.
    if (!(err instanceof NativeError)) throw err;
    for (let i = 0; i < keys.length; i++) mapDelete(fd, packed.subarray(i * keySize, (i + 1) * keySize));
  }
}
