// BPF per-packet cost as the kernel measures it (BPF_PROG_TEST_RUN, average ns over `repeat` runs):
// the tc and XDP load balancer programs on a tracked flow (XDP in both families), next to the
// trivial xdp_tx program, with 1 service and with many in the maps. The object is loaded by the agent's own loader into
// a private pin directory, removed afterwards.
//
// BPF_PROG_TEST_RUN repeats a program on the same buffer, so a rewrite would turn every later
// repetition into a miss; two conntrack entries make the flow ping-pong instead (client->VIP
// becomes client->backend, which the second entry turns back), so every repetition takes the
// tracked-flow path, as in test/kernel/lb-bench.test.ts.

import { rmSync } from 'node:fs';
import { mapUpdate, mapUpdateBatch, testRun } from '../native/libbpf.js';
import { publishConfig } from '../src/dataplanes/bpf/kernel-store.js';
import {
  ACTION,
  ALGORITHM,
  backend4,
  CT_F,
  ct4Key,
  ct4Val,
  ct6Key,
  ct6Val,
  PROGRAMS,
  SCOPE,
  slotKey,
  svc4Key,
  svcVal,
  TCP_FLAG,
  u32Codec,
} from '../src/dataplanes/bpf/layout.js';
import { type LoadedObject, loadPinnedObject } from '../src/dataplanes/bpf/object.js';
import type { Logger } from '../src/logger.js';
import { ipFamilyOf } from '../src/net/ip.js';
import { buildPacket, IPPROTO_TCP, TCP } from '../src/net/packets.js';
import type { BpfCostSample } from './measures.js';

export const CLIENT = '10.244.1.10';
export const VIP = '10.96.0.10';
export const BACKEND = '10.244.2.5';
/** The same flow in IPv6: each address in the low 32 bits of fd00::/96. */
export const FLOW6 = { client: 'fd00::af4:10a', vip: 'fd00::a60:a', backend: 'fd00::af4:205' } as const;
const BATCH = 10_000;

export const BPF_COST_PROGRAMS = [
  { label: 'tc (tracked flow)', prog: PROGRAMS.tcFromPod, v6: false },
  { label: 'XDP (tracked flow)', prog: PROGRAMS.xdpFromExternal, v6: false },
  { label: 'XDP IPv6 (tracked flow)', prog: PROGRAMS.xdpFromExternal, v6: true },
  { label: 'xdp_tx (baseline)', prog: PROGRAMS.xdpTx, v6: false },
] as const;

/** Service id's address: id 1 is the measured VIP; the others are from 10.100.0.0 on. */
export const serviceAddress = (id: number) =>
  id === 1 ? VIP : `10.${100 + (id >> 16)}.${(id >> 8) & 0xff}.${id & 0xff}`;
/** Its one backend: BACKEND for id 1, the others from 10.200.0.0 on. */
export const backendAddress = (id: number) =>
  id === 1 ? BACKEND : `10.${200 + (id >> 16)}.${(id >> 8) & 0xff}.${id & 0xff}`;

/** Services from..to (ids), one backend each, written in batches in the writer's publication order. */
export function writeServices(lb: Pick<LoadedObject, 'fd'>, from: number, to: number): void {
  for (let start = from; start <= to; start += BATCH) {
    const ids = Array.from({ length: Math.min(BATCH, to - start + 1) }, (_, k) => start + k);
    // Publication order, as the writer does it: backends, slots, then the service entries.
    mapUpdateBatch(
      lb.fd.backends4,
      u32Codec.encodeMany(ids),
      backend4.encodeMany(ids.map((id) => ({ addr: backendAddress(id), port: 8080, flags: 1 }))),
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
        ids.map((id) => ({ addr: serviceAddress(id), port: 80, proto: IPPROTO_TCP, scope: SCOPE.all })),
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

/**
 * ns/packet of each program at each service count (ascending), `rounds` rounds of `repeat`
 * repetitions each. `pinPath` must be a fresh directory on bpffs; it is removed afterwards.
 */
export async function measureBpfCost(opts: {
  serviceCounts: number[];
  rounds: number;
  repeat: number;
  pinPath: string;
  log: Logger;
  onStep?: (text: string) => void;
}): Promise<BpfCostSample[]> {
  const counts = [...opts.serviceCounts].sort((a, b) => a - b);
  const capacity = Math.max(1024, 2 ** Math.ceil(Math.log2((counts.at(-1) ?? 1) + 2)));
  const lb = await loadPinnedObject({
    pinPath: opts.pinPath,
    log: opts.log,
    mapSizes: {
      services: capacity,
      backends: capacity,
      backendCounters: capacity,
      backendSlots: capacity,
      conntrack: 16384,
      affinity: 1024,
      sourceRanges: 1024,
      socketReverse: 1024,
    },
  });
  const samples: BpfCostSample[] = [];
  try {
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
    writeTrackedFlow(lb);
    writeTrackedFlow(lb, FLOW6);
    const packet = (saddr: string, daddr: string) =>
      buildPacket({ saddr, daddr, proto: IPPROTO_TCP, sport: 40000, dport: 80, tcpFlags: TCP.ACK });
    const frames = { v4: packet(CLIENT, VIP), v6: packet(FLOW6.client, FLOW6.vip) };
    let written = 0;
    for (const services of counts) {
      opts.onStep?.(`BPF_PROG_TEST_RUN with ${services.toLocaleString('en')} service(s)`);
      writeServices(lb, written + 1, services);
      written = Math.max(written, services);
      for (const { label, prog, v6 } of BPF_COST_PROGRAMS) {
        const fd = lb.prog(prog);
        const frame = v6 ? frames.v6 : frames.v4;
        for (let round = 0; round < opts.rounds; round++) {
          samples.push({
            program: label,
            services,
            round,
            nsPerPacket: testRun(fd, { data: frame, repeat: opts.repeat }).durationNs,
          });
        }
      }
    }
    return samples;
  } finally {
    lb.close();
    rmSync(opts.pinPath, { recursive: true, force: true });
  }
}
