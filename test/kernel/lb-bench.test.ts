// ns/packet of the tracked-flow path (tc and XDP) next to a trivial XDP_TX program, measured by
// the kernel in BPF_PROG_TEST_RUN, with 1 and with 100,000 services in the maps. Printed, not
// asserted (the figures depend on the machine); the test asserts the path measured is the one
// intended.
//
// BPF_PROG_TEST_RUN repeats the program on the same buffer, so a rewrite would turn every later
// repetition into a miss (reference/libbpf-from-node.md, gotcha 2). Two conntrack entries make
// the flow ping-pong instead: client->VIP is rewritten to client->backend and client->backend
// back to client->VIP, so every repetition takes the tracked-flow path.

import { afterAll, beforeAll, expect, it } from 'vitest';
import { mapUpdate, mapUpdateBatch, testRun } from '../../native/libbpf.js';
import {
  ACTION,
  ALGORITHM,
  backend4,
  ct4Key,
  ct4Val,
  PROGRAMS,
  SCOPE,
  slotKey,
  svc4Key,
  svcVal,
  TCP_FLAG,
  u32Codec,
} from '../../src/dataplanes/bpf/layout.js';
import { type LoadedLb, loadLb, writeConfig, writeFrontend } from '../support/lb-object.js';
import { buildPacket, IPPROTO_TCP, parsePacket, TCP } from '../support/packets.js';
import { describeRoot } from '../support/privileges.js';

const SERVICES = 100_000;
const REPEAT = 1_000_000;
const ROUNDS = 5;
const CAPACITY = 131_072;

const CLIENT = '10.244.1.10';
const VIP = '10.96.0.10';
const BACKEND = '10.244.2.5';

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** The i-th extra service address: 10.100.0.0/16 onwards, never VIP. */
function extraVip(i: number): string {
  return `10.${100 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}`;
}

/** Its backend: 10.200.0.0/16 onwards. */
function extraBackend(i: number): string {
  return `10.${200 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}`;
}

/** Services 2..n+1, one backend each, written in batches as the control plane does. */
function addServices(lb: LoadedLb, n: number) {
  const chunk = 10_000;
  for (let start = 0; start < n; start += chunk) {
    const ids = Array.from({ length: Math.min(chunk, n - start) }, (_, k) => start + k + 2);
    mapUpdateBatch(
      lb.fd.backends4,
      u32Codec.encodeMany(ids),
      backend4.encodeMany(ids.map((id) => ({ addr: extraBackend(id), port: 8080, flags: 1 }))),
      ids.length,
    );
    mapUpdateBatch(
      lb.fd.slots,
      slotKey.encodeMany(ids.map((svcId) => ({ svcId, slot: 0, gen: 0 }))),
      u32Codec.encodeMany(ids),
      ids.length,
    );
    mapUpdateBatch(
      lb.fd.svc4,
      svc4Key.encodeMany(
        ids.map((id) => ({ addr: extraVip(id), port: 80, proto: IPPROTO_TCP, scope: SCOPE.all })),
      ),
      svcVal.encodeMany(
        ids.map((svcId) => ({
          svcId,
          count: 1,
          localCount: 1,
          flags: 0,
          affinityTimeoutS: 0,
          gen: 0,
          algorithm: ALGORITHM.random,
          action: ACTION.forward,
        })),
      ),
      ids.length,
    );
  }
}

describeRoot('bpf/lb.o ns/packet (BPF_PROG_TEST_RUN, printed)', () => {
  let lb: LoadedLb;
  const frame = buildPacket({
    saddr: CLIENT,
    daddr: VIP,
    proto: IPPROTO_TCP,
    sport: 40000,
    dport: 80,
    tcpFlags: TCP.ACK,
  });
  const miss = buildPacket({
    saddr: CLIENT,
    daddr: '10.244.7.7',
    proto: IPPROTO_TCP,
    sport: 40000,
    dport: 80,
    tcpFlags: TCP.ACK,
  });

  beforeAll(() => {
    lb = loadLb({
      svc4: CAPACITY,
      slots: CAPACITY,
      backends4: CAPACITY,
      svcStats: CAPACITY,
      backendStats: CAPACITY,
      rr: CAPACITY,
    });
    writeConfig(lb);
    writeFrontend(lb, {
      svcId: 1,
      addr: VIP,
      port: 80,
      proto: IPPROTO_TCP,
      backends: [{ id: 1, addr: BACKEND, port: 8080, flags: 1 }],
    });
    const now = process.hrtime.bigint();
    const entry = (saddr: string, daddr: string, sport: number, dport: number, to: [string, number]) =>
      mapUpdate(
        lb.fd.ct4Tcp,
        ct4Key.encode({ saddr, daddr, sport, dport, proto: IPPROTO_TCP }),
        ct4Val.encode({
          lastSeenNs: now,
          xlateSaddr: saddr,
          xlateDaddr: to[0],
          xlateSport: sport,
          xlateDport: to[1],
          svcId: 1,
          backendId: 1,
          flags: 0,
          tcpFlags: TCP_FLAG.ACK,
        }),
      );
    entry(CLIENT, VIP, 40000, 80, [BACKEND, 8080]);
    entry(CLIENT, BACKEND, 40000, 8080, [VIP, 80]);
  });
  afterAll(() => lb?.close());

  function measure(label: string, services: number) {
    const progs = [
      ['tc tracked flow', PROGRAMS.tcFromPod, frame],
      ['XDP tracked flow', PROGRAMS.xdpFromExternal, frame],
      ['xdp_tx baseline', PROGRAMS.xdpTx, frame],
      ['tc not a service', PROGRAMS.tcFromPod, miss],
      ['XDP not a service', PROGRAMS.xdpFromExternal, miss],
    ] as const;
    const rows: string[] = [];
    for (const [name, prog, data] of progs) {
      const fd = lb.prog(prog);
      const ns = Array.from({ length: ROUNDS }, () => testRun(fd, { data, repeat: REPEAT }).durationNs);
      rows.push(
        `  ${name.padEnd(18)} ${String(median(ns)).padStart(4)} ns/packet (rounds: ${ns.join(', ')})`,
      );
      expect(median(ns)).toBeGreaterThan(0);
    }
    console.log(
      `${label}: ${services} service(s), repeat ${REPEAT}, median of ${ROUNDS}\n${rows.join('\n')}`,
    );
  }

  it('measures with 1 service; one repetition rewrites, two come back (the ping-pong)', () => {
    const once = parsePacket(testRun(lb.prog(PROGRAMS.tcFromPod), { data: frame }).dataOut);
    expect(once).toMatchObject({ daddr: BACKEND, dport: 8080, ipChecksumOk: true, l4ChecksumOk: true });
    for (const prog of [PROGRAMS.tcFromPod, PROGRAMS.xdpFromExternal]) {
      expect(testRun(lb.prog(prog), { data: frame, repeat: 2 }).dataOut).toEqual(frame);
    }
    measure('tracked-flow path', 1);
  });

  it(`measures with ${SERVICES.toLocaleString('en')} services`, () => {
    addServices(lb, SERVICES - 1);
    const probe = buildPacket({
      saddr: CLIENT,
      daddr: extraVip(SERVICES),
      proto: IPPROTO_TCP,
      sport: 1,
      dport: 80,
    });
    expect(parsePacket(testRun(lb.prog(PROGRAMS.tcFromPod), { data: probe }).dataOut)).toMatchObject({
      daddr: extraBackend(SERVICES),
      dport: 8080,
    });
    measure('tracked-flow path', SERVICES);
  });
});
