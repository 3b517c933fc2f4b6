// Userspace garbage collection of the conntrack maps. The datapath only stamps each entry with
// last_seen_ns and the TCP flags seen in its direction; the policy (how long a flow in a given
// state lives) is here, so it changes without reloading programs. The LRU maps would evict old
// flows anyway, but only under pressure and without regard to state: GC keeps room for new flows
// and forgets closed ones quickly.
//
// Timeouts follow Cilium's defaults (bpf-ct-timeout-*): TCP SYN 60 s, TCP established 6 h,
// TCP closing (FIN or RST seen) 10 s, everything else 60 s. They are idle timeouts: each packet
// refreshes last_seen_ns (at most once a second, KBP_CT_REFRESH_NS).

import { dumpMap, mapDelete, mapDeleteBatch, mapLookup } from '../../../native/libbpf.js';
import { NativeError } from '../../../native/libc.js';
import { IPPROTO } from './kernel-store.js';
import { CT_F, type Ct4Key, type Ct4Val, ct4Key, ct4Val, TCP_FLAG } from './layout.js';

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

export interface CtEntry {
  key: Ct4Key;
  value: Ct4Val;
}

/** The key of the other direction's entry: this entry's translated tuple, reversed. */
export function pairKey(e: CtEntry): Ct4Key {
  return {
    saddr: e.value.xlateDaddr,
    daddr: e.value.xlateSaddr,
    sport: e.value.xlateDport,
    dport: e.value.xlateSport,
    proto: e.key.proto,
  };
}

const keyId = (k: Ct4Key) => `${k.saddr}:${k.sport}>${k.daddr}:${k.dport}/${k.proto}`;

export type FlowState = 'syn' | 'established' | 'closing' | 'other';

/** A flow's state from the TCP flags both of its entries saw. */
export function flowState(
  proto: number,
  forward: CtEntry | undefined,
  reply: CtEntry | undefined,
): FlowState {
  if (proto !== IPPROTO.TCP) return 'other';
  const flags = (forward?.value.tcpFlags ?? 0) | (reply?.value.tcpFlags ?? 0);
  if (flags & (TCP_FLAG.FIN | TCP_FLAG.RST)) return 'closing';
  // Established once the client acknowledged (its SYN-ACK) and the server answered.
  const clientAcked = ((forward?.value.tcpFlags ?? 0) & TCP_FLAG.ACK) !== 0;
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
export function expiredEntries(
  entries: readonly CtEntry[],
  nowNs: bigint,
  timeouts: ConntrackTimeouts,
  stale: (e: CtEntry) => boolean = () => false,
): { expired: CtEntry[][]; stale: CtEntry[][] } {
  const byKey = new Map(entries.map((e) => [keyId(e.key), e]));
  const expired: CtEntry[][] = [];
  const staleOut: CtEntry[][] = [];
  const done = new Set<string>();
  for (const e of entries) {
    const id = keyId(e.key);
    if (done.has(id)) continue;
    const partner = byKey.get(keyId(pairKey(e)));
    const pair = partner ? [e, partner] : [e];
    for (const p of pair) done.add(keyId(p.key));
    const isReply = (e.value.flags & CT_F.REPLY) !== 0;
    const forward = isReply ? partner : e;
    const reply = isReply ? e : partner;
    if (pair.some(stale)) {
      staleOut.push(pair);
      continue;
    }
    let lastSeen = 0n;
    for (const p of pair) if (p.value.lastSeenNs > lastSeen) lastSeen = p.value.lastSeenNs;
    const state = flowState(e.key.proto, forward, reply);
    if (nowNs - lastSeen > timeoutNs(state, timeouts)) expired.push(pair);
  }
  return { expired, stale: staleOut };
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

/** CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_ns() reads (libuv's hrtime uses it too). */
export function monotonicNs(): bigint {
  return process.hrtime.bigint();
}

/**
 * One GC pass over a conntrack map. `stale` marks entries to delete now (UDP towards removed
 * backends). Expired entries are read again just before the delete and kept if a packet
 * refreshed them in between.
 */
export function collectConntrack(
  fd: number,
  timeouts: ConntrackTimeouts = DEFAULT_CONNTRACK_TIMEOUTS,
  stale?: (e: CtEntry) => boolean,
  nowNs: () => bigint = monotonicNs,
): ConntrackGcStats {
  const started = performance.now();
  const dump = dumpMap(fd, ct4Key.size, ct4Val.size);
  const entries = dump.keys.map((k, i) => ({ key: ct4Key.decode(k), value: ct4Val.decode(dump.values[i]!) }));
  const found = expiredEntries(entries, nowNs(), timeouts, stale);
  const value = Buffer.alloc(ct4Val.size);
  const wasRefreshed = (e: CtEntry) =>
    mapLookup(fd, ct4Key.encode(e.key), value) && ct4Val.decode(value).lastSeenNs !== e.value.lastSeenNs;
  let refreshed = 0;
  const doomed: CtEntry[] = found.stale.flat();
  for (const flow of found.expired) {
    // A packet between the scan and now moved last_seen: the flow lives on, both directions.
    if (flow.some(wasRefreshed)) {
      refreshed++;
      continue;
    }
    doomed.push(...flow);
  }
  deleteEntries(fd, doomed);
  return {
    scanned: entries.length,
    expired: found.expired.length - refreshed,
    staleUdp: found.stale.length,
    refreshed,
    deletedEntries: doomed.length,
    durationMs: performance.now() - started,
  };
}

function deleteEntries(fd: number, entries: readonly CtEntry[]): void {
  if (entries.length === 0) return;
  const keys = ct4Key.encodeMany(entries.map((e) => e.key));
  try {
    mapDeleteBatch(fd, keys, entries.length);
  } catch (err) {
    // The batch stops at an entry the LRU already evicted: finish one by one.
    if (!(err instanceof NativeError)) throw err;
    for (let i = 0; i < entries.length; i++)
      mapDelete(fd, keys.subarray(i * ct4Key.size, (i + 1) * ct4Key.size));
  }
}
