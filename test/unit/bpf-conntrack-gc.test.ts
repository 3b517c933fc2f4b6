import { describe, expect, it } from 'vitest';
import {
  bpfConntrackTimeouts,
  type CtRecord,
  ctRecord,
  DEFAULT_CONNTRACK_TIMEOUTS,
  expiredFlows,
  flowState,
} from '../../src/dataplanes/bpf/conntrack-gc.js';
import { agedRecords } from '../../src/dataplanes/bpf/fragment-gc.js';
import { CT_F, type Ct4Key, type Ct4Val, ct4Key, ct4Val, TCP_FLAG } from '../../src/dataplanes/bpf/layout.js';

interface CtEntry {
  key: Ct4Key;
  value: Ct4Val;
}

/** The key of the other direction, as the datapath writes it: the translated tuple, reversed. */
function pairKey(e: CtEntry): Ct4Key {
  return {
    saddr: e.value.xlateDaddr,
    daddr: e.value.xlateSaddr,
    sport: e.value.xlateDport,
    dport: e.value.xlateSport,
    proto: e.key.proto,
  };
}

/** Encoded and read back the way the GC reads the map. */
const record = (e: CtEntry): CtRecord => ctRecord(ct4Key.encode(e.key), 0, ct4Val.encode(e.value), 0);

const S = 1_000_000_000n;

/** A tracked flow client:cport -> vip:vport DNATed to backend:bport, as the datapath writes it. */
function flow(
  cport: number,
  proto: number,
  lastSeen: { fwd: bigint; reply?: bigint },
  flags: { fwd?: number; reply?: number } = {},
  backendId = 1,
): CtEntry[] {
  const forward: CtEntry = {
    key: { saddr: '10.0.0.1', daddr: '10.96.0.10', sport: cport, dport: 80, proto },
    value: {
      lastSeenNs: lastSeen.fwd,
      xlateSaddr: '10.0.0.1',
      xlateDaddr: '10.1.0.5',
      xlateSport: cport,
      xlateDport: 8080,
      svcId: 1,
      backendId,
      flags: 0,
      tcpFlags: flags.fwd ?? 0,
    },
  };
  if (lastSeen.reply === undefined) return [forward];
  const reply: CtEntry = {
    key: pairKey(forward),
    value: {
      lastSeenNs: lastSeen.reply,
      xlateSaddr: '10.96.0.10',
      xlateDaddr: '10.0.0.1',
      xlateSport: 80,
      xlateDport: cport,
      svcId: 1,
      backendId,
      flags: CT_F.REPLY,
      tcpFlags: flags.reply ?? 0,
    },
  };
  return [forward, reply];
}

/** Each flow as [client port, number of entries]. */
const ports = (flows: CtRecord[][]) =>
  flows.map((f) => [Buffer.from(f[0]!.key, 'latin1').readUInt16BE(ct4Key.fields.sport.offset), f.length]);

describe('conntrack GC policy', () => {
  it('pairs each entry with the other direction', () => {
    const [fwd, reply] = flow(40000, 6, { fwd: 0n, reply: 0n }).map(record);
    expect(reply!.pairKey).toBe(fwd!.key);
    expect(fwd!.pairKey).toBe(reply!.key);
    expect(reply!.reply).toBe(true);
  });

  it('tells the TCP state from the flags both directions saw', () => {
    const syn = flow(1, 6, { fwd: 0n }, { fwd: TCP_FLAG.SYN }).map(record);
    expect(flowState(6, syn[0], undefined)).toBe('syn');
    const est = flow(
      1,
      6,
      { fwd: 0n, reply: 0n },
      { fwd: TCP_FLAG.SYN | TCP_FLAG.ACK, reply: TCP_FLAG.SYN | TCP_FLAG.ACK },
    ).map(record);
    expect(flowState(6, est[0], est[1])).toBe('established');
    const fin = flow(
      1,
      6,
      { fwd: 0n, reply: 0n },
      { fwd: TCP_FLAG.ACK | TCP_FLAG.FIN, reply: TCP_FLAG.ACK },
    ).map(record);
    // Half-closed: the server may still send for as long as an established flow idles.
    expect(flowState(6, fin[0], fin[1])).toBe('established');
    const bothFin = flow(
      1,
      6,
      { fwd: 0n, reply: 0n },
      { fwd: TCP_FLAG.ACK | TCP_FLAG.FIN, reply: TCP_FLAG.ACK | TCP_FLAG.FIN },
    ).map(record);
    expect(flowState(6, bothFin[0], bothFin[1])).toBe('closing');
    const rst = flow(1, 6, { fwd: 0n, reply: 0n }, { fwd: TCP_FLAG.ACK, reply: TCP_FLAG.RST }).map(record);
    expect(flowState(6, rst[0], rst[1])).toBe('closing');
    expect(flowState(17, undefined, undefined)).toBe('other');
  });

  it('expires flows by state, both entries together, and keeps fresh ones', () => {
    const now = 100_000n * S;
    const ack = TCP_FLAG.SYN | TCP_FLAG.ACK;
    const entries = [
      // established, idle 1 h: kept (6 h timeout)
      ...flow(1, 6, { fwd: now - 3600n * S, reply: now - 3600n * S }, { fwd: ack, reply: ack }),
      // established, idle 7 h: expired
      ...flow(2, 6, { fwd: now - 7n * 3600n * S, reply: now - 7n * 3600n * S }, { fwd: ack, reply: ack }),
      // SYN only, 61 s: expired; 59 s: kept
      ...flow(3, 6, { fwd: now - 61n * S }, { fwd: TCP_FLAG.SYN }),
      ...flow(4, 6, { fwd: now - 59n * S }, { fwd: TCP_FLAG.SYN }),
      // closed both ways 11 s ago: expired, although younger than the established timeout
      ...flow(
        5,
        6,
        { fwd: now - 11n * S, reply: now - 12n * S },
        { fwd: ack | TCP_FLAG.FIN, reply: ack | TCP_FLAG.FIN },
      ),
      // half-closed 11 s ago: kept (the established timeout applies)
      ...flow(8, 6, { fwd: now - 11n * S, reply: now - 12n * S }, { fwd: ack | TCP_FLAG.FIN, reply: ack }),
      // UDP 61 s: expired; a reply 30 s ago keeps the other one alive
      ...flow(6, 17, { fwd: now - 61n * S, reply: now - 61n * S }),
      ...flow(7, 17, { fwd: now - 90n * S, reply: now - 30n * S }),
    ];
    const { expired, stale } = expiredFlows(entries.map(record), now, DEFAULT_CONNTRACK_TIMEOUTS);
    expect(ports(expired)).toEqual([
      [2, 2],
      [3, 1],
      [5, 2],
      [6, 2],
    ]);
    expect(stale).toEqual([]);
  });

  it('deletes flows marked stale whatever their age', () => {
    const now = 1000n * S;
    const entries = [
      ...flow(1, 17, { fwd: now, reply: now }, {}, 7),
      ...flow(2, 17, { fwd: now, reply: now }, {}, 8),
    ];
    const { expired, stale } = expiredFlows(
      entries.map(record),
      now,
      DEFAULT_CONNTRACK_TIMEOUTS,
      (r) => r.backendId === 7,
    );
    expect(ports(stale)).toEqual([[1, 2]]);
    expect(expired).toEqual([]);
  });
});

describe('bpfConntrackTimeouts', () => {
  it('conntrack.tcpEstablishedTimeout sets the established timeout; the others keep their defaults', () => {
    expect(bpfConntrackTimeouts({ tcpEstablishedTimeoutSeconds: 86400 })).toEqual({
      ...DEFAULT_CONNTRACK_TIMEOUTS,
      tcpEstablishedSeconds: 86400,
    });
  });
  it('0 leaves the default, as it leaves netfilter’s value', () => {
    expect(bpfConntrackTimeouts({ tcpEstablishedTimeoutSeconds: 0 })).toEqual(DEFAULT_CONNTRACK_TIMEOUTS);
  });
});

describe('fragment records GC deletes', () => {
  it('are those the previous pass saw with the same value', () => {
    const previous = new Map([
      ['a', 'ports 1'],
      ['b', 'ports 1'],
      ['c', 'ports 1'],
    ]);
    // b was rewritten by a later datagram with the same IP id, d is new, c is gone already.
    const current = new Map([
      ['a', 'ports 1'],
      ['b', 'ports 2'],
      ['d', 'ports 1'],
    ]);
    expect(agedRecords(previous, current)).toEqual(['a']);
    expect(agedRecords(new Map(), current)).toEqual([]);
  });
});
