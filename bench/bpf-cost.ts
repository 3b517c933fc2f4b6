// BPF per-packet cost as the kernel measures it (BPF_PROG_TEST_RUN): the tc and XDP load balancer
// programs on a tracked flow and on a new flow, in IPv4 and IPv6, each row beside the trivial
// xdp_tx program measured the same way (its floor), with 1 service and with many in the maps (of
// each family). The object is loaded by the agent's own loader into a private pin directory,
// removed afterwards.
//
// Two ways of measuring, each with its own floor:
// - `repeat` runs a call (average): BPF_PROG_TEST_RUN repeats a program on the same buffer, so a
//   rewrite would turn every later repetition into a miss; two conntrack entries make the flow
//   ping-pong instead (client->VIP becomes client->backend, which the second entry turns back), so
//   every repetition takes the tracked-flow path, as in test/kernel/lb-bench.test.ts. Floor: xdp_tx
//   with the same `repeat`.
// - One run a call, NEW_FLOW_CALLS calls averaged into a round's figure: a new flow cannot repeat
//   on one buffer (the first run creates its entries), so each call is a SYN from a source port no
//   entry has. One run per call also counts what a lone run pays that a millionth repetition does
//   not (the kernel's clock reads around it, caches the previous call left cold), so the tracked
//   flow and the floor are measured the same way beside it, in the same rounds: a row's ratio to
//   that floor is comparable across machines, its nanoseconds are not. The conntrack entries the
//   calls made are removed after each round.

import { rmSync } from 'node:fs';
import { dumpMap, mapDeleteBatch, mapUpdate, mapUpdateBatch } from '../native/libbpf/map.js';
import { testRun } from '../native/libbpf/test-run.js';
import { publishConfig } from '../src/dataplanes/bpf/kernel-store.js';
import {
  ACTION,
  ALGORITHM,
  backend4,
  backend6,
  CT_F,
  ct4Key,
  ct4Val,
  ct6Key,
  ct6Val,
  PROGRAMS,
  SCOPE,
  SVC_F,
  slotKey,
  slotVal4,
  slotVal6,
  svc4Key,
  svc6Key,
  svcVal,
  TCP_FLAG,
  u32Codec,
} from '../src/dataplanes/bpf/layout.js';
import { type LoadedObject, loadPinnedObject } from '../src/dataplanes/bpf/object.js';
import type { Logger } from '../src/logger.js';
import { canonicalIP, type IPFamily, ipFamilyOf } from '../src/net/ip.js';
import { buildPacket, IPPROTO_TCP, parsePacket, TCP } from '../src/net/packets.js';
import type { BpfCostSample } from './measures.js';
import { inFamily } from './scenario.js';

export const CLIENT = '10.244.1.10';
export const VIP = '10.96.0.10';
export const BACKEND = '10.244.2.5';
const BATCH = 10_000;
/** Calls (one run each) averaged into one round of a one-run-per-call figure. */
export const NEW_FLOW_CALLS = 1000;
/** The new flows' source ports: NEW_FLOW_CALLS of them per new-flow row from here, none the
 * tracked flow's. */
const NEW_FLOW_PORT = 20000;

/**
 * How a row is measured: `repeat` runs a call (the tracked flow's ping-pong, or the trivial
 * program), or one run a call (a tracked flow, a new flow: a SYN per call, or the trivial program).
 */
export type CostPath = 'tracked' | 'baseline' | 'tracked-per-call' | 'new' | 'floor';

export const BASELINE_LABEL = 'xdp_tx (baseline)';
export const FLOOR_LABEL = 'xdp_tx (floor, one run per call)';

/** Each row, and the trivial row its ratio is to: the one measured the same way. */
export const BPF_COST_PROGRAMS = [
  { label: 'tc (tracked flow)', prog: PROGRAMS.tcFromPod, path: 'tracked', floor: BASELINE_LABEL },
  { label: 'XDP (tracked flow)', prog: PROGRAMS.xdpFromExternal, path: 'tracked', floor: BASELINE_LABEL },
  { label: BASELINE_LABEL, prog: PROGRAMS.xdpTx, path: 'baseline', floor: BASELINE_LABEL },
  {
    label: 'tc (tracked flow, one run per call)',
    prog: PROGRAMS.tcFromPod,
    path: 'tracked-per-call',
    floor: FLOOR_LABEL,
  },
  { label: 'tc (new flow, one run per call)', prog: PROGRAMS.tcFromPod, path: 'new', floor: FLOOR_LABEL },
  {
    label: 'XDP (tracked flow, one run per call)',
    prog: PROGRAMS.xdpFromExternal,
    path: 'tracked-per-call',
    floor: FLOOR_LABEL,
  },
  {
    label: 'XDP (new flow, one run per call)',
    prog: PROGRAMS.xdpFromExternal,
    path: 'new',
    floor: FLOOR_LABEL,
  },
  { label: FLOOR_LABEL, prog: PROGRAMS.xdpTx, path: 'floor', floor: FLOOR_LABEL },
] as const satisfies readonly { label: string; prog: string; path: CostPath; floor: string }[];

type CostRow = { label: string; prog: string; path: CostPath; floor: string };
const ROWS: readonly CostRow[] = BPF_COST_PROGRAMS;
const REPEATED = ROWS.filter((r) => r.path === 'tracked' || r.path === 'baseline');
const PER_CALL = ROWS.filter((r) => !REPEATED.includes(r));
const NEW_FLOW_ROWS = PER_CALL.filter((r) => r.path === 'new');
/** The trivial programs do not look at the packet: measured once, with the first family's. */
const trivial = (row: CostRow) => row.path === 'baseline' || row.path === 'floor';

/** Service id's address: id 1 is the measured VIP; the others are from 10.100.0.0 on (or their IPv6 counterparts). */
export const serviceAddress = (id: number, family: IPFamily = 'IPv4') =>
  inFamily(family, id === 1 ? VIP : `10.${100 + (id >> 16)}.${(id >> 8) & 0xff}.${id & 0xff}`);
/** Its one backend: BACKEND for id 1, the others from 10.200.0.0 on. */
export const backendAddress = (id: number, family: IPFamily = 'IPv4') =>
  inFamily(family, id === 1 ? BACKEND : `10.${200 + (id >> 16)}.${(id >> 8) & 0xff}.${id & 0xff}`);

/**
 * Services from..to (ids) of `family`, one backend each, written in batches in the writer's
 * publication order. A service id's frontends of both families share its id (one backend id, in
 * the family's backends map), each with a slot generation of its own (a slot holds its backend's
 * address): IPv4 0, IPv6 1.
 */
export function writeServices(
  lb: Pick<LoadedObject, 'fd'>,
  from: number,
  to: number,
  family: IPFamily = 'IPv4',
): void {
  const v6 = family === 'IPv6';
  const [backends, backendCodec, frontends, keyCodec, slotCodec] = v6
    ? ([lb.fd.backends6, backend6, lb.fd.svc6, svc6Key, slotVal6] as const)
    : ([lb.fd.backends4, backend4, lb.fd.svc4, svc4Key, slotVal4] as const);
  const gen = v6 ? 1 : 0;
  for (let start = from; start <= to; start += BATCH) {
    const ids = Array.from({ length: Math.min(BATCH, to - start + 1) }, (_, k) => start + k);
    // Publication order, as the writer does it: backends, slots, then the service entries.
    mapUpdateBatch(
      backends,
      u32Codec.encodeMany(ids),
      backendCodec.encodeMany(ids.map((id) => ({ addr: backendAddress(id, family), port: 8080, flags: 1 }))),
      ids.length,
    );
    mapUpdateBatch(
      lb.fd.slots,
      slotKey.encodeMany(ids.map((svcId) => ({ svcId, slot: 0, gen }))),
      slotCodec.encodeMany(
        ids.map((id) => ({ backendId: id, port: 8080, addr: backendAddress(id, family) })),
      ),
      ids.length,
    );
    mapUpdateBatch(
      frontends,
      keyCodec.encodeMany(
        ids.map((id) => ({
          addr: serviceAddress(id, family),
          port: 80,
          proto: IPPROTO_TCP,
          scope: SCOPE.all,
        })),
      ),
      svcVal.encodeMany(
        ids.map((svcId) => ({
          svcId,
          count: 1,
          localCount: 1,
          // The measured frontend answers outside too (a LoadBalancer IP's would), so that XDP
          // takes its new flows; its backend is node-local (no SNAT).
          flags: svcId === 1 ? SVC_F.EXTERNAL : 0,
          affinityTimeoutS: 0,
          gen,
          algorithm: ALGORITHM.random,
          action: ACTION.forward,
        })),
      ),
      ids.length,
    );
  }
}

/**
 * Conntrack entries that make a packet rewrite back and forth under BPF_PROG_TEST_RUN's repeats:
 * forward entries turn CLIENT->VIP:80 and CLIENT->BACKEND:8080 into each other (ingress), reply
 * entries BACKEND:8080->CLIENT and VIP:80->CLIENT (egress).
 */
export function writeTrackedFlow(
  lb: Pick<LoadedObject, 'fd'>,
  /** Another family's addresses of the flow (the conntrack maps are the addresses' family's). */
  addrs: { client: string; vip: string; backend: string } = { client: CLIENT, vip: VIP, backend: BACKEND },
): void {
  const now = process.hrtime.bigint();
  type Endpoint = { addr: string; port: number };
  const client: Endpoint = { addr: addrs.client, port: 40000 };
  const vip: Endpoint = { addr: addrs.vip, port: 80 };
  const backend: Endpoint = { addr: addrs.backend, port: 8080 };
  const v6 = ipFamilyOf(addrs.client) === 'IPv6';
  const [key, value] = v6 ? [ct6Key, ct6Val] : [ct4Key, ct4Val];
  const entry = (src: Endpoint, dst: Endpoint, xSrc: Endpoint, xDst: Endpoint, flags: number) =>
    mapUpdate(
      v6 ? lb.fd.ct6Tcp : lb.fd.ct4Tcp,
      key.encode({
        saddr: src.addr,
        daddr: dst.addr,
        sport: src.port,
        dport: dst.port,
        proto: IPPROTO_TCP,
      }),
      value.encode({
        lastSeenNs: now,
        xlateSaddr: xSrc.addr,
        xlateDaddr: xDst.addr,
        xlateSport: xSrc.port,
        xlateDport: xDst.port,
        svcId: 1,
        backendId: 1,
        flags,
        tcpFlags: TCP_FLAG.ACK,
      }),
    );
  entry(client, vip, client, backend, 0);
  entry(client, backend, client, vip, 0);
  entry(backend, client, vip, client, CT_F.REPLY);
  entry(vip, client, backend, client, CT_F.REPLY);
}

/** Every conntrack entry but the tracked flow's four: what the new-flow calls of a round created. */
function removeNewFlows(lb: Pick<LoadedObject, 'fd'>, family: IPFamily): void {
  const [fd, key, value] =
    family === 'IPv6' ? ([lb.fd.ct6Tcp, ct6Key, ct6Val] as const) : ([lb.fd.ct4Tcp, ct4Key, ct4Val] as const);
  const { keys } = dumpMap(fd, key.size, value.size);
  const fromNewFlow = (port: number) =>
    port >= NEW_FLOW_PORT && port < NEW_FLOW_PORT + NEW_FLOW_ROWS.length * NEW_FLOW_CALLS;
  const made = keys.filter((k) => {
    const { sport, dport } = key.decode(k);
    return fromNewFlow(sport) || fromNewFlow(dport);
  });
  if (made.length > 0) mapDeleteBatch(fd, Buffer.concat(made), made.length);
}

/** The flow's packets of one family: the tracked flow's ACK, and for each new-flow row a SYN per
 * call (ports of its own, so that no row's call finds another's entry). */
function familyPackets(family: IPFamily) {
  const client = inFamily(family, CLIENT);
  const vip = inFamily(family, VIP);
  const packet = (sport: number, tcpFlags: number) =>
    buildPacket({ saddr: client, daddr: vip, proto: IPPROTO_TCP, sport, dport: 80, tcpFlags });
  const syns = new Map<string, Buffer[]>(
    NEW_FLOW_ROWS.map((row, i) => [
      row.label,
      Array.from({ length: NEW_FLOW_CALLS }, (_, k) =>
        packet(NEW_FLOW_PORT + i * NEW_FLOW_CALLS + k, TCP.SYN),
      ),
    ]),
  );
  return { tracked: packet(40000, TCP.ACK), syns, backend: inFamily(family, BACKEND) };
}

/** Did one run of the program send the packet to the backend (the path a row claims to measure)? */
function translates(fd: number, frame: Buffer, backend: string): boolean {
  const out = testRun(fd, { data: frame }).dataOut;
  try {
    return canonicalIP(parsePacket(out).daddr) === canonicalIP(backend);
  } catch {
    return false;
  }
}

/**
 * ns/packet of each program at each service count (ascending) in each family, `rounds` rounds of
 * `repeat` repetitions each, or of NEW_FLOW_CALLS calls of one run (each round measures every
 * such row, so that each meets the machine as its floor does). A row whose program does not
 * take the intended path in a family is not measured there, and `onStep` says so (XDP on IPv6
 * before it translated IPv6); the tc rows must. `pinPath` must be a fresh directory on bpffs; it is
 * removed afterwards.
 */
export async function measureBpfCost(opts: {
  serviceCounts: number[];
  rounds: number;
  repeat: number;
  /** Default IPv4 only. */
  families?: readonly IPFamily[];
  pinPath: string;
  log: Logger;
  onStep?: (text: string) => void;
}): Promise<BpfCostSample[]> {
  const counts = [...opts.serviceCounts].sort((a, b) => a - b);
  const families = opts.families ?? ['IPv4'];
  const lb = await loadCostObject(opts.pinPath, opts.log, counts.at(-1) ?? 1, families.length);
  const samples: BpfCostSample[] = [];
  try {
    publishCostConfig(lb);
    const packets = new Map(families.map((family) => [family, familyPackets(family)]));
    for (const family of families) {
      writeTrackedFlow(lb, {
        client: inFamily(family, CLIENT),
        vip: inFamily(family, VIP),
        backend: inFamily(family, BACKEND),
      });
    }
    const run: CostRun = { ...opts, lb, families, packets };
    let written = 0;
    for (const services of counts) {
      opts.onStep?.(`BPF_PROG_TEST_RUN with ${services.toLocaleString('en')} service(s) of each family`);
      for (const family of families) writeServices(lb, written + 1, services, family);
      written = Math.max(written, services);
      const sample: AddCostSample = (row, family, round, nsPerPacket) =>
        samples.push({ program: row.label, family, services, round, nsPerPacket, floor: row.floor });
      measureRepeated(run, sample);
      measurePerCall(run, sample);
    }
    return samples;
  } finally {
    lb.close();
    rmSync(opts.pinPath, { recursive: true, force: true });
  }
}

type FamilyPackets = ReturnType<typeof familyPackets>;
type AddCostSample = (row: CostRow, family: IPFamily, round: number, nsPerPacket: number) => void;

/** What the measures of one service count share: the object, each family's packets, the counts. */
interface CostRun {
  lb: LoadedObject;
  families: readonly IPFamily[];
  packets: Map<IPFamily, FamilyPackets>;
  rounds: number;
  repeat: number;
  onStep?: (text: string) => void;
}

/** The object pinned at `pinPath`, its maps sized for `maxServices` Services of each family. */
function loadCostObject(
  pinPath: string,
  log: Logger,
  maxServices: number,
  families: number,
): Promise<LoadedObject> {
  const capacity = Math.max(1024, 2 ** Math.ceil(Math.log2(maxServices + 2)));
  return loadPinnedObject({
    pinPath,
    log,
    mapSizes: {
      services: capacity,
      backends: capacity,
      backendCounters: capacity,
      // Each family's frontends have slots of their own (writeServices).
      backendSlots: capacity * families,
      // The new flows of a round (two entries each) fit beside the tracked flow, never evicted.
      conntrack: Math.max(16384, 4 * NEW_FLOW_ROWS.length * NEW_FLOW_CALLS),
      affinity: 1024,
      sourceRanges: 1024,
      socketReverse: 1024,
    },
  });
}

function publishCostConfig(lb: LoadedObject): void {
  publishConfig(lb.fd, {
    snatAddr4: '192.168.50.1',
    snatAddr6: '::',
    snatPortMin: 61000,
    snatPortMax: 61999,
    maglevSize: 16381,
    hashSeed: 0x1234abcd,
    nodeportMin: 30000,
    nodeportMax: 32767,
    newFlowRate: 0,
  });
}

/** The rows measured in a family: trivial ones in the first only, the others where one run
 * takes the intended path (XDP may not translate a family; a tc row must). */
function measuredRows(run: CostRun, rows: readonly CostRow[], family: IPFamily): CostRow[] {
  return rows.filter((row) => {
    if (trivial(row)) return family === run.families[0];
    const { tracked, syns, backend } = run.packets.get(family) as FamilyPackets;
    const ok = translates(run.lb.prog(row.prog), syns.get(row.label)?.[0] ?? tracked, backend);
    if (row.path === 'new') removeNewFlows(run.lb, family);
    if (ok) return true;
    if (row.prog !== PROGRAMS.xdpFromExternal)
      throw new Error(`${row.label} ${family}: one run did not send the packet to ${backend}`);
    run.onStep?.(`${row.label} ${family}: the program does not translate ${family}: not measured`);
    return false;
  });
}

/** The rows measured by the kernel's own repeat of the tracked packet. */
function measureRepeated(run: CostRun, sample: AddCostSample): void {
  for (const family of run.families) {
    const { tracked } = run.packets.get(family) as FamilyPackets;
    for (const row of measuredRows(run, REPEATED, family)) {
      for (let round = 0; round < run.rounds; round++)
        sample(
          row,
          family,
          round,
          testRun(run.lb.prog(row.prog), { data: tracked, repeat: run.repeat }).durationNs,
        );
    }
  }
}

/** The rows measured call by call (NEW_FLOW_CALLS calls of one run each), new flows removed after each round. */
function measurePerCall(run: CostRun, sample: AddCostSample): void {
  const perCall = run.families.flatMap((family) =>
    measuredRows(run, PER_CALL, family).map((row) => {
      const { tracked, syns } = run.packets.get(family) as FamilyPackets;
      // A tracked packet is rewritten in the output only: every call is the same input.
      const frames = syns.get(row.label) ?? Array.from({ length: NEW_FLOW_CALLS }, () => tracked);
      return { row, family, fd: run.lb.prog(row.prog), frames };
    }),
  );
  // Each round runs every row's calls in a block, as a program's packets come one after
  // another (interleaving the rows call by call would leave the maps cold for whichever row
  // comes first after the floor); the rounds interleave the rows in time.
  for (let round = 0; round < run.rounds; round++) {
    for (const m of perCall) {
      let total = 0;
      for (const frame of m.frames) total += testRun(m.fd, { data: frame }).durationNs;
      sample(m.row, m.family, round, total / m.frames.length);
    }
    for (const family of run.families) removeNewFlows(run.lb, family);
  }
}
