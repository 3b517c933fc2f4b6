// Loads bpf/lb.o for kernel tests with small map capacities (LRU maps are preallocated, and
// several engineers' tests share this machine's memory).

import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';
import type { BpfObject } from '../../native/libbpf/bindings.js';
import { BPF_FUNC_SET_RETVAL, BPF_PROG_TYPE_CGROUP_SOCK_ADDR } from '../../native/libbpf/constants.js';
import { mapDelete, mapLookup, mapUpdate, mapUpdateBatch } from '../../native/libbpf/map.js';
import {
  closeObject,
  findMap,
  loadObject,
  mapFd,
  openObject,
  programFd,
  setMapInitialValue,
  setMapMaxEntries,
} from '../../native/libbpf/object.js';
import { helperSupported, possibleCpus } from '../../native/libbpf/probe.js';
import { type TestRunResult, testRun } from '../../native/libbpf/test-run.js';
import { perCpuValueSize, sumPerCpu } from '../../src/dataplanes/bpf/codec.js';
import { publishConfig } from '../../src/dataplanes/bpf/kernel-store.js';
import {
  ACTION,
  ALGORITHM,
  affMatchKey,
  BE_F,
  type BpfConfigValue,
  backend4,
  backend6,
  type DatapathRodata,
  dropStats,
  MAPS,
  RODATA_MAP,
  rodata,
  SCOPE,
  slotKey,
  slotVal4,
  slotVal6,
  svc4Key,
  svc6Key,
  svcVal,
  u8Codec,
  u32Codec,
} from '../../src/dataplanes/bpf/layout.js';
import type { Lab } from '../../src/lab/netns.js';
import { ipFamilyOf } from '../../src/net/ip.js';
import { buildRoutingNamespace } from './fib-lab.js';
import { enterNetns } from './in-netns.js';

/** The programs' return codes (linux/pkt_cls.h TC_ACT_*, linux/bpf.h enum xdp_action). */
export const TC_ACT_UNSPEC = -1;
export const TC_ACT_SHOT = 2;
export const TC_ACT_REDIRECT = 7;
export const XDP_DROP = 1;
export const XDP_PASS = 2;
export const XDP_TX = 3;

export const LB_OBJECT_PATH = fileURLToPath(new URL('../../bpf/lb.o', import.meta.url));
/** The variant for kernels without bpf_loop (bpf/lb_compat.c). */
export const LB_COMPAT_OBJECT_PATH = fileURLToPath(new URL('../../bpf/lb_compat.o', import.meta.url));

type MapName = keyof typeof MAPS;

export interface LoadedLb {
  obj: BpfObject;
  fd: Record<MapName, number>;
  /** The load-time constants it was loaded with. */
  constants: DatapathRodata;
  prog(name: string): number;
  close(): void;
}

const TEST_CAPACITY: Partial<Record<MapName, number>> = {
  ct4Tcp: 16384,
  ct4Any: 16384,
  ct6Tcp: 1024,
  ct6Any: 1024,
  svc6: 1024,
  backends6: 1024,
  affinity6: 1024,
  srcRange6: 1024,
  sockRev4: 4096,
  sockRev6: 4096,
};

export function loadLb(
  capacity: Partial<Record<MapName, number>> = {},
  constants: DatapathRodata = {
    coarseClock: true,
    sockSetRetval: helperSupported(BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_FUNC_SET_RETVAL),
    // Host routing has its own test (lb-host-route.test.ts); with kbp_hostif_v1 empty it would
    // change nothing anyway.
    hostRouting: false,
  },
  objectPath: string = LB_OBJECT_PATH,
  /** Maps an older object (a benchmark's baseline) does not have: their fds are -1. */
  absentMaps: readonly MapName[] = [],
): LoadedLb {
  const obj = openObject(objectPath);
  try {
    setMapInitialValue(findMap(obj, RODATA_MAP), rodata.encode(constants));
    for (const [name, max] of Object.entries({ ...TEST_CAPACITY, ...capacity })) {
      if (absentMaps.includes(name as MapName)) continue;
      setMapMaxEntries(findMap(obj, MAPS[name as MapName].name), max);
    }
    loadObject(obj);
  } catch (err) {
    closeObject(obj);
    throw err;
  }
  const fd = Object.fromEntries(
    Object.entries(MAPS).map(([key, layout]) => [
      key,
      absentMaps.includes(key as MapName) ? -1 : mapFd(findMap(obj, layout.name)),
    ]),
  ) as Record<MapName, number>;
  return { obj, fd, constants, prog: (name) => programFd(obj, name), close: () => closeObject(obj) };
}

// ---------- writing map entries through the codecs (what the control plane's writer does) ----------

export interface TestBackend {
  id: number;
  addr: string;
  port: number;
  flags?: number;
}

export interface TestFrontend {
  svcId: number;
  addr: string;
  port: number;
  proto: number;
  scope?: number;
  backends: TestBackend[];
  algorithm?: number;
  flags?: number;
  action?: number;
  affinityTimeoutS?: number;
  gen?: number;
}

/** The backend ids each service's frontends last listed, per loaded object. */
const servedBy = new WeakMap<LoadedLb, Map<number, number[]>>();

/** Backends, then the slot generation in one batch (local backends first: the programs take a
 * slot's locality from its position, below local_count, as the planner orders them), then the
 * {backend, service} pairs, then the frontend entry; pairs of backends the service no longer lists
 * go after it (as the writer). The frontend address's family picks the maps. */
export function writeFrontend(lb: LoadedLb, f: TestFrontend): void {
  const gen = f.gen ?? 0;
  const v6 = ipFamilyOf(f.addr) === 'IPv6';
  const backend = v6 ? backend6 : backend4;
  for (const b of f.backends) {
    mapUpdate(
      v6 ? lb.fd.backends6 : lb.fd.backends4,
      u32Codec.encode(b.id),
      backend.encode({ addr: b.addr, port: b.port, flags: b.flags ?? 0 }),
    );
  }
  if (f.backends.length > 0) {
    const local = (b: TestBackend) => ((b.flags ?? 0) & BE_F.LOCAL) !== 0;
    const ordered = [...f.backends.filter(local), ...f.backends.filter((b) => !local(b))];
    const keys = slotKey.encodeMany(ordered.map((_, slot) => ({ svcId: f.svcId, slot, gen })));
    const values = (v6 ? slotVal6 : slotVal4).encodeMany(
      ordered.map((b) => ({ backendId: b.id, port: b.port, addr: b.addr })),
    );
    mapUpdateBatch(lb.fd.slots, keys, values, ordered.length);
  }
  for (const b of f.backends)
    mapUpdate(
      lb.fd.affinityMatch,
      affMatchKey.encode({ backendId: b.id, svcId: f.svcId }),
      u8Codec.encode(1),
    );
  mapUpdate(
    v6 ? lb.fd.svc6 : lb.fd.svc4,
    (v6 ? svc6Key : svc4Key).encode({
      addr: f.addr,
      port: f.port,
      proto: f.proto,
      scope: f.scope ?? SCOPE.all,
    }),
    svcVal.encode({
      svcId: f.svcId,
      count: f.backends.length,
      localCount: f.backends.filter((b) => (b.flags ?? 0) & BE_F.LOCAL).length,
      flags: f.flags ?? 0,
      affinityTimeoutS: f.affinityTimeoutS ?? 0,
      gen,
      algorithm: f.algorithm ?? ALGORITHM.random,
      action: f.action ?? (f.backends.length > 0 ? ACTION.forward : ACTION.reject),
    }),
  );
  const served = servedBy.get(lb) ?? new Map<number, number[]>();
  servedBy.set(lb, served);
  const ids = f.backends.map((b) => b.id);
  for (const id of served.get(f.svcId) ?? [])
    if (!ids.includes(id))
      mapDelete(lb.fd.affinityMatch, affMatchKey.encode({ backendId: id, svcId: f.svcId }));
  served.set(f.svcId, ids);
}

export const TEST_CONFIG: BpfConfigValue = {
  snatAddr4: '192.168.50.1',
  snatAddr6: 'fd00::c0a8:3201', // 192.168.50.1 in fd00::/96 (families.ts)
  snatPortMin: 61000,
  snatPortMax: 61999,
  maglevSize: 16381,
  hashSeed: 0x1234abcd,
  nodeportMin: 30000,
  nodeportMax: 32767,
  newFlowRate: 0,
};

export function writeConfig(lb: LoadedLb, value: Partial<BpfConfigValue> = {}): BpfConfigValue {
  const cfg = { ...TEST_CONFIG, ...value };
  // As the agent publishes it: the other generation, then the flip (test runs are sequential,
  // so no grace period is needed).
  publishConfig(lb.fd, cfg);
  return cfg;
}

export function run(lb: LoadedLb, prog: string, frame: Buffer, repeat = 1): TestRunResult {
  return testRun(lb.prog(prog), { data: frame, repeat });
}

/** An XDP test run as if `frame` arrived on interface `ingressIfindex` (struct xdp_md as ctx). */
export function runXdpOn(lb: LoadedLb, prog: string, frame: Buffer, ingressIfindex: number): TestRunResult {
  const ctx = Buffer.alloc(24); // data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex
  ctx.writeUInt32LE(frame.length, 4);
  ctx.writeUInt32LE(ingressIfindex, 12);
  return testRun(lb.prog(prog), { data: frame, ctx });
}

/**
 * For a describe block: bpf/lb.o loaded inside fib-lab.ts's routing namespace (its FIB lookups see
 * that namespace's routes), with TEST_CONFIG, handed to `loaded` in beforeAll; the namespace and
 * the object go after the block.
 */
export function lbInRoutingNamespace(lab: Lab, loaded: (lb: LoadedLb) => void): void {
  let lb: LoadedLb | undefined;
  let leave: (() => void) | null = null;
  beforeAll(async () => {
    await buildRoutingNamespace(lab);
    leave = enterNetns(lab.ns('fib'));
    lb = loadLb();
    writeConfig(lb);
    loaded(lb);
  });
  afterAll(async () => {
    lb?.close();
    leave?.();
    await lab.destroy();
  });
}

/** Packets kbp_drops_v1 counted for `reason`, over every CPU. */
export function dropCount(lb: LoadedLb, reason: number): bigint {
  const buf = Buffer.alloc(perCpuValueSize(dropStats.size, possibleCpus()));
  mapLookup(lb.fd.drops, u32Codec.encode(reason), buf);
  return sumPerCpu(dropStats, buf, possibleCpus()).packets;
}
