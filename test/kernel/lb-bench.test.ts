// ns/packet of the tracked-flow path (tc and XDP, both families) next to a trivial XDP_TX
// program, measured by the kernel in BPF_PROG_TEST_RUN, with 1 and with 100,000 services in the
// maps, and of new flows through XDP in both families. Printed, not asserted (the figures depend
// on the machine); the test asserts the path measured is the one intended.
//
// BPF_PROG_TEST_RUN repeats the program on the same buffer, so a rewrite would turn every later
// repetition into a miss (the kernel's bpf_test_run reuses the one buffer it copied in). Two conntrack entries make
// the flow ping-pong instead: client->VIP is rewritten to client->backend and client->backend
// back to client->VIP, so every repetition takes the tracked-flow path; two reply entries do
// the same for the egress program (backend->client and VIP->client). A first fragment ping-pongs
// the same way and records its ports under both destinations, so a later fragment of the
// datagram ping-pongs too.
// A new flow cannot repeat (its first run makes it a tracked one), so new flows are measured one
// BPF_PROG_TEST_RUN each, every packet another client port, IPv4 and IPv6 alternating.
//
// KBP_BENCH_BASELINE=<an older lb.o> also measures that object against this one, round by round
// interleaved, and prints the ratios (docs/bpf-datapath.md, "Performance"): the repeated rows, and
// new and tracked flows one run per call (both families), each object's as ratios to its floor.
//
// KBP_BENCH_KATRAN=<balancer.bpf.o> measures Katran's XDP load balancer (built from
// facebookincubator/katran at 19f08fe, katran/lib/bpf/balancer.bpf.c, by whoever runs this:
// nothing here builds it) beside ours, a new and a tracked flow one run per call, as ratios to the
// xdp_tx floor of the same rounds.

import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  BACKEND,
  backendAddress,
  CLIENT,
  serviceAddress,
  VIP,
  writeServices,
  writeTrackedFlow,
} from '../../bench/bpf-cost.js';
import { dumpMap, mapDeleteBatch, mapUpdate, mapUpdateBatch } from '../../native/libbpf/map.js';
import {
  closeObject,
  findMap,
  loadObject,
  mapFd,
  openObject,
  programFd,
  setMapMaxEntries,
} from '../../native/libbpf/object.js';
import { type TestRunResult, testRun } from '../../native/libbpf/test-run.js';
import {
  BE_F,
  ct4Key,
  ct4Val,
  ct6Key,
  ct6Val,
  MAPS,
  PROGRAMS,
  SVC_F,
} from '../../src/dataplanes/bpf/layout.js';
import { canonicalIP } from '../../src/net/ip.js';
import { buildPacket, fragmentPacket, IPPROTO_TCP, parsePacket, TCP } from '../../src/net/packets.js';
import { FAMILY_CASES } from '../support/families.js';
import { type LoadedLb, loadLb, writeConfig, writeFrontend, XDP_PASS } from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

const SERVICES = 100_000;
const REPEAT = 1_000_000;
const ROUNDS = 5;
const CAPACITY = 131_072;
const BASELINE = process.env.KBP_BENCH_BASELINE;
/** What fragment tracking, the IPv6 socket hooks, the IPv6 SNAT source, the socket release hook and
 * the clock read once a tick added: absent from an older baseline object. */
const MAPS_SINCE_BASELINE = [
  'fragments4',
  'fragStats',
  'sockRev6',
  'ifAddrs6',
  'fragments6',
  'sockIdx',
  'clock',
] as const;
const KATRAN = process.env.KBP_BENCH_KATRAN;
/** New flows per family and round (each two conntrack entries: far below CAPACITY, no eviction). */
const NEW_FLOWS = 2_000;
/** The baseline comparison's new flows' first source port. */
const PER_CALL_PORT = 20000;

/** Does the object at `path` define the map `name`? */
function objectHasMap(path: string, name: string): boolean {
  const obj = openObject(path);
  try {
    findMap(obj, name);
    return true;
  } catch {
    return false;
  } finally {
    closeObject(obj);
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
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
  const reply = buildPacket({
    saddr: BACKEND,
    daddr: CLIENT,
    proto: IPPROTO_TCP,
    sport: 8080,
    dport: 40000,
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

  const [firstFragment, laterFragment] = fragmentPacket(
    buildPacket({
      saddr: CLIENT,
      daddr: VIP,
      proto: IPPROTO_TCP,
      sport: 40000,
      dport: 80,
      tcpFlags: TCP.ACK,
      payload: Buffer.alloc(1000, 0x5a),
      dontFragment: false,
    }),
    512,
  ) as [Buffer, Buffer];
  // The same flow in IPv6 (families.ts): the tc programs' IPv6 tracked path.
  const { A } = FAMILY_CASES.find((f) => f.family === 'IPv6')!;
  const frame6 = buildPacket({
    saddr: A(CLIENT),
    daddr: A(VIP),
    proto: IPPROTO_TCP,
    sport: 40000,
    dport: 80,
    tcpFlags: TCP.ACK,
  });
  const reply6 = buildPacket({
    saddr: A(BACKEND),
    daddr: A(CLIENT),
    proto: IPPROTO_TCP,
    sport: 8080,
    dport: 40000,
    tcpFlags: TCP.ACK,
  });

  const capacity = {
    ct4Tcp: CAPACITY,
    ct6Tcp: CAPACITY,
    svc4: CAPACITY,
    slots: CAPACITY,
    backends4: CAPACITY,
    svcStats: CAPACITY,
    backendStats: CAPACITY,
    rr: CAPACITY,
  };

  beforeAll(() => {
    lb = loadLb(capacity);
    writeConfig(lb);
    writeServices(lb, 1, 1);
    writeTrackedFlow(lb);
    writeTrackedFlow(lb, { client: A(CLIENT), vip: A(VIP), backend: A(BACKEND) });
  });
  afterAll(() => lb?.close());

  /** The baseline object, loaded with the maps it has; `slots`: it has kbp_slot_v2. */
  function loadBaseline(): { base: LoadedLb; slots: boolean } {
    const slots = objectHasMap(BASELINE!, MAPS.slots.name);
    const absent = slots ? MAPS_SINCE_BASELINE : [...MAPS_SINCE_BASELINE, 'slots' as const];
    return { base: loadLb(capacity, undefined, BASELINE!, absent), slots };
  }

  /** ROUNDS runs of `repeat = REPEAT`: one printed row, the median and every round. */
  function measureRow(name: string, fd: number, data: Buffer): string {
    const ns = Array.from({ length: ROUNDS }, () => testRun(fd, { data, repeat: REPEAT }).durationNs);
    expect(median(ns)).toBeGreaterThan(0);
    return `  ${name.padEnd(18)} ${String(median(ns)).padStart(4)} ns/packet (rounds: ${ns.join(', ')})`;
  }

  function measure(label: string, services: number) {
    const progs = [
      ['tc tracked flow', PROGRAMS.tcFromPod, frame],
      ['XDP tracked flow', PROGRAMS.xdpFromExternal, frame],
      ['XDP tracked IPv6', PROGRAMS.xdpFromExternal, frame6],
      ['xdp_tx baseline', PROGRAMS.xdpTx, frame],
      ['tc egress reply', PROGRAMS.tcEgress, reply],
      ['tc tracked IPv6', PROGRAMS.tcFromPod, frame6],
      ['tc egress IPv6', PROGRAMS.tcEgress, reply6],
      ['tc not a service', PROGRAMS.tcFromPod, miss],
      ['tc egress untracked', PROGRAMS.tcEgress, miss],
      ['XDP not a service', PROGRAMS.xdpFromExternal, miss],
    ] as const;
    const rows = progs.map(([name, prog, data]) => measureRow(name, lb.prog(prog), data));
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
    const back = parsePacket(testRun(lb.prog(PROGRAMS.tcEgress), { data: reply }).dataOut);
    expect(back).toMatchObject({ saddr: VIP, sport: 80, ipChecksumOk: true, l4ChecksumOk: true });
    expect(testRun(lb.prog(PROGRAMS.tcEgress), { data: reply, repeat: 2 }).dataOut).toEqual(reply);
    const once6 = parsePacket(testRun(lb.prog(PROGRAMS.tcFromPod), { data: frame6 }).dataOut);
    expect(once6).toMatchObject({ daddr: A(BACKEND), dport: 8080, l4ChecksumOk: true });
    for (const prog of [PROGRAMS.tcFromPod, PROGRAMS.xdpFromExternal]) {
      expect(testRun(lb.prog(prog), { data: frame6, repeat: 2 }).dataOut).toEqual(frame6);
    }
    const back6 = parsePacket(testRun(lb.prog(PROGRAMS.tcEgress), { data: reply6 }).dataOut);
    expect(back6).toMatchObject({ saddr: A(VIP), sport: 80, l4ChecksumOk: true });
    expect(testRun(lb.prog(PROGRAMS.tcEgress), { data: reply6, repeat: 2 }).dataOut).toEqual(reply6);
    measure('tracked-flow path', 1);
  });

  it('measures a first and a later fragment of a tracked flow (both ping-pong)', () => {
    const tc = lb.prog(PROGRAMS.tcFromPod);
    expect(testRun(tc, { data: firstFragment, repeat: 2 }).dataOut).toEqual(firstFragment);
    const once = parsePacket(testRun(tc, { data: laterFragment }).dataOut);
    expect(once).toMatchObject({ daddr: BACKEND, fragOffset: 512, ipChecksumOk: true });
    expect(testRun(tc, { data: laterFragment, repeat: 2 }).dataOut).toEqual(laterFragment);
    const rows = (
      [
        ['tc first fragment', firstFragment],
        ['tc later fragment', laterFragment],
        ['tc tracked flow', frame],
      ] as const
    ).map(([name, data]) => measureRow(name, tc, data));
    console.log(`fragment paths: 1 service, repeat ${REPEAT}, median of ${ROUNDS}\n${rows.join('\n')}`);
  });

  it.runIf(BASELINE)(
    'compares with the baseline object, rounds interleaved',
    () => {
      // A baseline from before kbp_slot_v2 gets no service entry (its slots held the backend id
      // alone): its rows are tracked flows and a packet to no service, which read none.
      const { base, slots } = loadBaseline();
      try {
        writeConfig(base);
        if (slots) writeServices(base, 1, 1);
        writeTrackedFlow(base);
        const cases = [
          ['tc tracked flow', PROGRAMS.tcFromPod, frame],
          ['XDP tracked flow', PROGRAMS.xdpFromExternal, frame],
          ['tc egress reply', PROGRAMS.tcEgress, reply],
          ['tc not a service', PROGRAMS.tcFromPod, miss],
          ['XDP not a service', PROGRAMS.xdpFromExternal, miss],
        ] as const;
        const rows: string[] = [];
        for (const [name, prog, data] of cases) {
          const ns: Record<'base' | 'now', number[]> = { base: [], now: [] };
          const once = (which: 'base' | 'now'): TestRunResult =>
            testRun((which === 'base' ? base : lb).prog(prog), { data, repeat: REPEAT });
          // Alternating which goes first, so neither always runs on a warmer cache.
          for (let round = 0; round < 2 * ROUNDS; round++) {
            const order = round % 2 ? (['now', 'base'] as const) : (['base', 'now'] as const);
            for (const which of order) ns[which].push(once(which).durationNs);
          }
          const b = median(ns.base);
          const n = median(ns.now);
          expect(b).toBeGreaterThan(0);
          rows.push(
            `  ${name.padEnd(18)} baseline ${String(b).padStart(4)}  now ${String(n).padStart(4)} ns/packet  now/baseline ${(n / b).toFixed(3)}`,
          );
        }
        console.log(
          `baseline ${BASELINE}, repeat ${REPEAT}, medians of ${2 * ROUNDS} interleaved rounds\n${rows.join('\n')}`,
        );
      } finally {
        base.close();
      }
    },
    // Ten interleaved rounds of five cases on two objects: minutes on a loaded machine.
    600_000,
  );

  it.runIf(BASELINE)(
    'compares with the baseline object one run per call, new and tracked flows, as ratios to the floor',
    () => {
      const { base, slots } = loadBaseline();
      try {
        // New flows need the service entries, which a baseline before kbp_slot_v2 cannot take.
        expect(slots, 'a baseline with kbp_slot_v2').toBe(true);
        const objects = { base, now: lb };
        for (const o of Object.values(objects)) {
          writeConfig(o);
          for (const { family, A: a } of FAMILY_CASES) {
            writeServices(o, 1, 1, family);
            writeTrackedFlow(o, { client: a(CLIENT), vip: a(VIP), backend: a(BACKEND) });
          }
        }
        // Each new-flow row its own source ports, none the tracked flow's (40000).
        const port = (row: number, k: number) => PER_CALL_PORT + row * NEW_FLOWS + k;
        const rows = [
          { name: 'xdp_tx floor', prog: PROGRAMS.xdpTx, family: 'IPv4', syn: false },
          ...FAMILY_CASES.flatMap(({ family }) => [
            { name: `tc tracked ${family}`, prog: PROGRAMS.tcFromPod, family, syn: false },
            { name: `XDP tracked ${family}`, prog: PROGRAMS.xdpFromExternal, family, syn: false },
            { name: `tc new ${family}`, prog: PROGRAMS.tcFromPod, family, syn: true },
            { name: `XDP new ${family}`, prog: PROGRAMS.xdpFromExternal, family, syn: true },
          ]),
        ].map((r, i) => {
          const a = FAMILY_CASES.find((f) => f.family === r.family)!.A;
          const packet = (sport: number, tcpFlags: number) =>
            buildPacket({ saddr: a(CLIENT), daddr: a(VIP), proto: IPPROTO_TCP, sport, dport: 80, tcpFlags });
          const frames = Array.from({ length: NEW_FLOWS }, (_, k) =>
            r.syn ? packet(port(i, k), TCP.SYN) : packet(40000, TCP.ACK),
          );
          return { ...r, frames, ns: { base: [] as number[], now: [] as number[] } };
        });
        const fromNewFlow = (p: number) => p >= PER_CALL_PORT && p < port(rows.length, 0);
        const removeNewFlows = (o: LoadedLb) => {
          for (const [fd, key, value] of [
            [o.fd.ct4Tcp, ct4Key, ct4Val],
            [o.fd.ct6Tcp, ct6Key, ct6Val],
          ] as const) {
            const { keys } = dumpMap(fd, key.size, value.size);
            const made = keys.filter((k) => {
              const { sport, dport } = key.decode(k);
              return fromNewFlow(sport) || fromNewFlow(dport);
            });
            if (made.length > 0) mapDeleteBatch(fd, Buffer.concat(made), made.length);
          }
        };
        for (const which of ['base', 'now'] as const) {
          for (const r of rows.filter((x) => x.prog !== PROGRAMS.xdpTx)) {
            const out = parsePacket(testRun(objects[which].prog(r.prog), { data: r.frames[0]! }).dataOut);
            expect(canonicalIP(out.daddr), `${which} ${r.name}`).toBe(
              canonicalIP(FAMILY_CASES.find((f) => f.family === r.family)!.A(BACKEND)),
            );
          }
          removeNewFlows(objects[which]);
        }
        for (let round = 0; round < 2 * ROUNDS; round++) {
          const order = round % 2 ? (['now', 'base'] as const) : (['base', 'now'] as const);
          for (const which of order) {
            for (const r of rows) {
              const fd = objects[which].prog(r.prog);
              let total = 0;
              for (const data of r.frames) total += testRun(fd, { data }).durationNs;
              r.ns[which].push(total / r.frames.length);
            }
            removeNewFlows(objects[which]);
          }
        }
        const floor = rows[0]!.ns;
        const lines = rows.map((r) => {
          const ratio = (which: 'base' | 'now') => median(r.ns[which].map((x, i) => x / floor[which][i]!));
          const b = ratio('base');
          const n = ratio('now');
          return `  ${r.name.padEnd(16)} baseline ${String(Math.round(median(r.ns.base))).padStart(5)} ns ${b.toFixed(2)}x  now ${String(Math.round(median(r.ns.now))).padStart(5)} ns ${n.toFixed(2)}x floor  now/baseline ${(n / b).toFixed(3)}`;
        });
        console.log(
          `baseline ${BASELINE}, one run per call: ${NEW_FLOWS} calls per row, object and round, medians of ${2 * ROUNDS} interleaved rounds\n${lines.join('\n')}`,
        );
      } finally {
        base.close();
      }
    },
    600_000,
  );

  it('measures new flows through XDP, IPv4 beside IPv6 (a LoadBalancer IP, a local backend)', () => {
    const xdp = lb.prog(PROGRAMS.xdpFromExternal);
    const families = FAMILY_CASES.map(({ family, A: a }, i) => {
      const svcId = 131_000 + i;
      writeFrontend(lb, {
        svcId,
        addr: a('192.168.50.100'),
        port: 443,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.LOADBALANCER,
        backends: [{ id: svcId, addr: a('10.244.2.10'), port: 8443, flags: BE_F.LOCAL }],
      });
      const syn = (n: number) =>
        buildPacket({
          saddr: a(`203.0.${113 + (n >> 16)}.${(n >> 8) & 0xff}`),
          daddr: a('192.168.50.100'),
          proto: IPPROTO_TCP,
          sport: 1024 + (n & 0xff),
          dport: 443,
          tcpFlags: TCP.SYN,
        });
      return { family, a, syn, ns: [] as number[][] };
    });
    // The floor of one run per packet: the trivial program, measured the same way.
    const tx = lb.prog(PROGRAMS.xdpTx);
    const floor: number[][] = [];
    let n = 0;
    for (let round = 0; round < ROUNDS; round++) {
      for (const f of families) f.ns.push([]);
      floor.push([]);
      for (let i = 0; i < NEW_FLOWS; i++, n++) {
        floor[round]!.push(testRun(tx, { data: frame }).durationNs);
        for (const f of families) {
          const out = testRun(xdp, { data: f.syn(n) });
          f.ns[round]!.push(out.durationNs);
          // Every packet a new flow, DNATed (a tracked one or a miss would be cheaper).
          if (i === 0) {
            expect(out.retval).toBe(XDP_PASS);
            expect(parsePacket(out.dataOut)).toMatchObject({ daddr: f.a('10.244.2.10'), dport: 8443 });
            expect(testRun(xdp, { data: f.syn(n) }).dataOut).toEqual(out.dataOut);
          }
        }
      }
    }
    const row = (name: string, ns: number[][]) => {
      const medians = ns.map(median);
      return `  ${name.padEnd(18)} ${String(median(medians)).padStart(4)} ns/packet (rounds: ${medians.join(', ')})`;
    };
    const [v4, v6] = families.map((f) => f.ns.map(median)) as [number[], number[]];
    const rows = [
      ...families.map((f) => row(`XDP new flow ${f.family}`, f.ns)),
      row('xdp_tx, one a run', floor),
      `  IPv6 / IPv4 by round: ${v6.map((x, r) => (x / v4[r]!).toFixed(3)).join(', ')}`,
    ];
    console.log(
      `new flows: ${NEW_FLOWS} per family and round, one per BPF_PROG_TEST_RUN, median of ${ROUNDS} rounds' medians\n${rows.join('\n')}`,
    );
  });

  it.runIf(KATRAN)("measures Katran's balancer beside ours, one run per call, as ratios to the floor", () => {
    // Katran's maps, as katran/lib/bpf/balancer_structs.h and balancer_consts.h (19f08fe) lay
    // them out: one VIP (vip_num 0) whose ring (RING_SIZE 65537 positions) names real 1, the
    // default gateway's MAC at ctl_array 0. No per-CPU LRU is set up (Katran's userspace makes
    // them), so its flows go to fallback_cache, one LRU insert per new flow either way.
    const RING_SIZE = 65537;
    const obj = openObject(KATRAN!);
    try {
      setMapMaxEntries(findMap(obj, 'ch_rings'), RING_SIZE);
      setMapMaxEntries(findMap(obj, 'fallback_cache'), 4 * NEW_FLOWS);
      loadObject(obj);
      const fd = (name: string) => mapFd(findMap(obj, name));
      const vip = Buffer.alloc(20); // vip_definition {vip, port, proto}
      vip.set([10, 96, 0, 10], 0);
      vip.writeUInt16BE(80, 16);
      vip[18] = IPPROTO_TCP;
      mapUpdate(fd('vip_map'), vip, Buffer.alloc(8)); // vip_meta {flags 0, vip_num 0}
      const ring = Array.from({ length: RING_SIZE }, (_, i) => i);
      const u32s = (xs: number[]) => Buffer.from(new Uint32Array(xs).buffer);
      mapUpdateBatch(fd('ch_rings'), u32s(ring), u32s(ring.map(() => 1)), RING_SIZE);
      const real = Buffer.alloc(20); // real_definition {dst, flags}
      real.set([10, 244, 2, 5], 0);
      mapUpdate(fd('reals'), u32s([1]), real);
      mapUpdate(fd('ctl_array'), u32s([0]), Buffer.from([2, 0, 0, 0, 0, 1, 0, 0]));
      const katran = programFd(obj, 'balancer_ingress');
      const packet = (daddr: string, dport: number, sport: number, tcpFlags: number) =>
        buildPacket({ saddr: CLIENT, daddr, proto: IPPROTO_TCP, sport, dport, tcpFlags });
      // Katran tracks a TCP flow from its SYN: the tracked flow's SYN goes first.
      expect(testRun(katran, { data: packet(VIP, 80, 40000, TCP.SYN) }).retval).toBe(3); // XDP_TX
      // Ours: a LoadBalancer IP with a local backend, as Katran's VIP (XDP_PASS, DNATed).
      writeFrontend(lb, {
        svcId: 131_010,
        addr: '192.168.50.101',
        port: 443,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.LOADBALANCER,
        backends: [{ id: 131_010, addr: '10.244.2.11', port: 8443, flags: BE_F.LOCAL }],
      });
      const xdp = lb.prog(PROGRAMS.xdpFromExternal);
      const ports = Array.from({ length: NEW_FLOWS }, (_, k) => 20000 + k);
      const rows = [
        { name: 'xdp_tx floor', fd: lb.prog(PROGRAMS.xdpTx), frames: ports.map(() => frame) },
        {
          name: 'ours XDP new flow',
          fd: xdp,
          frames: ports.map((p) => packet('192.168.50.101', 443, p, TCP.SYN)),
        },
        { name: 'ours XDP tracked', fd: xdp, frames: ports.map(() => frame) },
        { name: 'Katran new flow', fd: katran, frames: ports.map((p) => packet(VIP, 80, p, TCP.SYN)) },
        { name: 'Katran tracked', fd: katran, frames: ports.map(() => packet(VIP, 80, 40000, TCP.ACK)) },
      ].map((r) => ({ ...r, ns: [] as number[] }));
      const made = (fdOf: number, keySize: number, valueSize: number, sportAt: number, dportAt: number) => {
        const { keys } = dumpMap(fdOf, keySize, valueSize);
        const mine = (p: number) => p >= ports[0]! && p <= ports.at(-1)!;
        const gone = keys.filter((k) => mine(k.readUInt16BE(sportAt)) || mine(k.readUInt16BE(dportAt)));
        if (gone.length > 0) mapDeleteBatch(fdOf, Buffer.concat(gone), gone.length);
      };
      for (let round = 0; round < ROUNDS; round++) {
        // Each row's calls in a block, as a program's packets come one after another.
        for (const r of rows) {
          let total = 0;
          for (const data of r.frames) total += testRun(r.fd, { data }).durationNs;
          r.ns.push(total / r.frames.length);
        }
        made(lb.fd.ct4Tcp, ct4Key.size, ct4Val.size, ct4Key.fields.sport.offset, ct4Key.fields.dport.offset);
        made(fd('fallback_cache'), 40, 16, 32, 34); // flow_key: port16[0], port16[1]
      }
      const floor = rows[0]!.ns;
      const lines = rows.map((r) => {
        const ratios = r.ns.map((x, i) => x / floor[i]!);
        return `  ${r.name.padEnd(18)} ${String(Math.round(median(r.ns))).padStart(5)} ns/call  ${median(ratios).toFixed(2)}x floor (rounds: ${ratios.map((x) => x.toFixed(2)).join(', ')})`;
      });
      console.log(
        `Katran ${KATRAN} beside ours: ${NEW_FLOWS} calls of one run per row and round, medians of ${ROUNDS} rounds\n${lines.join('\n')}`,
      );
    } finally {
      closeObject(obj);
    }
  });

  it(`measures with ${SERVICES.toLocaleString('en')} services`, () => {
    writeServices(lb, 2, SERVICES);
    const probe = buildPacket({
      saddr: CLIENT,
      daddr: serviceAddress(SERVICES),
      proto: IPPROTO_TCP,
      sport: 1,
      dport: 80,
    });
    expect(parsePacket(testRun(lb.prog(PROGRAMS.tcFromPod), { data: probe }).dataOut)).toMatchObject({
      daddr: backendAddress(SERVICES),
      dport: 8080,
    });
    measure('tracked-flow path', SERVICES);
  });
});
