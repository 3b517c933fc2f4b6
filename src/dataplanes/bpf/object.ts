// Loads bpf/lb.o for the agent: map capacities from the config, maps pinned under a versioned
// bpffs directory and reused on the next start (so conntrack, affinity and the service and
// backend ids survive a restart), and the object's layout checked against layout.ts.

import { existsSync, mkdirSync, unlinkSync } from 'node:fs';
import { release } from 'node:os';
import { fileURLToPath } from 'node:url';
import type { BpfObject } from '../../../native/libbpf/bindings.js';
import {
  BPF_FUNC_LOOP,
  BPF_FUNC_SET_RETVAL,
  BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
  BPF_PROG_TYPE_SCHED_CLS,
  BPF_PROG_TYPE_XDP,
} from '../../../native/libbpf/constants.js';
import { dumpMap, mapInfo, mapLookup, mapUpdateBatch } from '../../../native/libbpf/map.js';
import {
  closeObject,
  findMap,
  getPinned,
  loadObjectOffThread,
  mapFd,
  openObject,
  pinObject,
  programFd,
  programNames,
  reuseMapFd,
  setMapInitialValue,
  setMapMaxEntries,
  setProgramAutoload,
} from '../../../native/libbpf/object.js';
import { helperSupported } from '../../../native/libbpf/probe.js';
import { closeFd, dupFd } from '../../../native/libc.js';
import type { BpfConfig } from '../../config/types.js';
import { ensureBpffs } from '../../host/bpffs.js';
import { lockPinPath } from '../../host/pin-lock.js';
import type { Logger } from '../../logger.js';
import { verifyLayoutAgainstBtf } from './btf-check.js';
import {
  backend4,
  backend6,
  MAPS,
  RODATA_MAP,
  rodata,
  slotKey,
  slotVal4,
  slotVal6,
  u32Codec,
} from './layout.js';

export type MapName = keyof typeof MAPS;

/** Pinned objects live under <bpf.pinPath>/v1: a new layout gets a new directory, never a
 * reinterpretation of the old maps. */
export const PIN_LAYOUT_VERSION = 'v1';

/** The config setting that sizes each map (named in map-full errors). */
export const MAP_SIZE_SETTING: Record<MapName, string> = {
  svc4: 'bpf.mapSizes.services',
  svc6: 'bpf.mapSizes.services',
  slots: 'bpf.mapSizes.backendSlots',
  backends4: 'bpf.mapSizes.backends',
  backends6: 'bpf.mapSizes.backends',
  maglev: 'bpf.mapSizes.services',
  ct4Tcp: 'bpf.mapSizes.conntrack',
  ct4Any: 'bpf.mapSizes.conntrack',
  ct6Tcp: 'bpf.mapSizes.conntrack',
  ct6Any: 'bpf.mapSizes.conntrack',
  affinity4: 'bpf.mapSizes.affinity',
  affinity6: 'bpf.mapSizes.affinity',
  affinityMatch: 'bpf.mapSizes.backendSlots',
  srcRange4: 'bpf.mapSizes.sourceRanges',
  srcRange6: 'bpf.mapSizes.sourceRanges',
  rr: 'bpf.mapSizes.services',
  svcStats: 'bpf.mapSizes.services',
  backendStats: 'bpf.mapSizes.backendCounters',
  drops: '',
  svcDrops: 'bpf.mapSizes.services',
  config: '',
  configGen: '',
  newFlowRate: '',
  clock: '',
  nodeAddrs4: '',
  nodeAddrs6: '',
  ifAddrs4: '',
  ifAddrs6: '',
  hostIfs: '',
  hostDst4: '',
  hostDst6: '',
  sockConfig: '',
  sockRev4: 'bpf.mapSizes.socketReverse',
  sockRev6: 'bpf.mapSizes.socketReverse',
  sockIdx: 'bpf.mapSizes.socketReverse',
  fragments4: '',
  fragStats: '',
  fragments6: '',
};

/** max_entries of every map from bpf.mapSizes; null keeps the object's own value. */
export function mapCapacities(sizes: BpfConfig['mapSizes']): Record<MapName, number | null> {
  return {
    svc4: sizes.services,
    svc6: sizes.services,
    slots: sizes.backendSlots,
    backends4: sizes.backends,
    backends6: sizes.backends,
    maglev: sizes.services,
    ct4Tcp: sizes.conntrack,
    ct4Any: sizes.conntrack,
    ct6Tcp: sizes.conntrack,
    ct6Any: sizes.conntrack,
    affinity4: sizes.affinity,
    affinity6: sizes.affinity,
    affinityMatch: sizes.backendSlots,
    srcRange4: sizes.sourceRanges,
    srcRange6: sizes.sourceRanges,
    // Indexed by id: ids run from 1 to capacity - 1.
    rr: sizes.services,
    svcStats: sizes.services,
    // Backend ids past it have no counters of their own (they are counted in their services').
    backendStats: sizes.backendCounters,
    drops: null,
    svcDrops: sizes.services,
    config: null,
    configGen: null,
    newFlowRate: null,
    clock: null,
    nodeAddrs4: null,
    nodeAddrs6: null,
    ifAddrs4: null,
    ifAddrs6: null,
    hostIfs: null,
    hostDst4: null,
    hostDst6: null,
    sockConfig: null,
    sockRev4: sizes.socketReverse,
    sockRev6: sizes.socketReverse,
    // One entry per live translated socket, however many sockRev entries it made.
    sockIdx: sizes.socketReverse,
    // Datagrams in flight as fragments (fragments6 too): the object's 8192 (an LRU: the oldest
    // are forgotten).
    fragments4: null,
    fragStats: null,
    fragments6: null,
  };
}

/** The data plane object for a kernel: bpf/lb.o where tc programs may call bpf_loop (5.17+),
 * else bpf/lb_compat.o (its SNAT port search unrolled; bpf/lb_compat.c). */
export function objectFileFor(hasBpfLoop: boolean): string {
  return hasBpfLoop ? 'lb.o' : 'lb_compat.o';
}

/** Can tc and XDP programs call bpf_loop here (libbpf's helper probe)? */
export function kernelHasBpfLoop(): boolean {
  return (
    helperSupported(BPF_PROG_TYPE_SCHED_CLS, BPF_FUNC_LOOP) &&
    helperSupported(BPF_PROG_TYPE_XDP, BPF_FUNC_LOOP)
  );
}

/** bpf/lb.o (or lb_compat.o, see objectFileFor) next to the package root, from src/ (tsx,
 * vitest) or from dist/src/ (built). */
export function defaultObjectPath(file: string = objectFileFor(kernelHasBpfLoop())): string {
  for (const up of ['../../../bpf/', '../../../../bpf/']) {
    const path = fileURLToPath(new URL(up + file, import.meta.url));
    if (existsSync(path)) return path;
  }
  throw new Error(`bpf/${file} not found: run \`npm run build:bpf\``);
}

/** True when the running kernel is at least major.minor (os.release(), e.g. "6.1.0-18-amd64"). */
export function kernelAtLeast(major: number, minor: number, kernelRelease = release()): boolean {
  const [maj = 0, min = 0] = kernelRelease.split(/[.-]/).map((p) => Number.parseInt(p, 10));
  return maj > major || (maj === major && min >= minor);
}

export interface LoadedObject {
  obj: BpfObject;
  /** <pinPath>/v1 */
  pinDir: string;
  fd: Record<MapName, number>;
  /** max_entries of each map as loaded (a reused map keeps its own). */
  capacity: Record<MapName, number>;
  /** Host routing in the programs (LoadOptions.hostRouting, decided). */
  hostRouting: boolean;
  /** Maps found pinned and reused, with the config size they ignored when it differs. */
  reused: { name: MapName; capacity: number; configured: number | null }[];
  /** The fd of a loaded program; throws for one not loaded yet (see loadPrograms). */
  prog(name: string): number;
  /** Verifies and loads those of `names` not loaded yet, on this object's maps; returns them. */
  loadPrograms(names: Iterable<string>): Promise<string[]>;
  close(): void;
}

export function mapPinPath(pinDir: string, name: MapName): string {
  return `${pinDir}/maps/${MAPS[name].name}`;
}

/** The slot map before slots held their backend's address: slot key -> __u32 backend id. */
const SLOTS_V1 = 'kbp_slot_v1';

/**
 * An agent upgraded in place finds its frontends pinned, and the slot generations they name in
 * kbp_slot_v1, which the new programs no longer read: those slots are copied into the new slot map,
 * each with its backend's address and port (the backend maps are reused), before any program of
 * this object is attached, so new flows of random and rr Services keep their backends until the
 * first sync; the old map's pin goes. Returns the slots copied.
 */
function migrateSlotsV1(pinDir: string, fd: Record<MapName, number>): number {
  const path = `${pinDir}/maps/${SLOTS_V1}`;
  if (!existsSync(path)) return 0;
  const old = getPinned(path);
  try {
    const { keys, values } = dumpMap(old, slotKey.size, u32Codec.size);
    const moved: { key: Buffer; value: Buffer }[] = [];
    const v4 = Buffer.alloc(backend4.size);
    const v6 = Buffer.alloc(backend6.size);
    keys.forEach((key, i) => {
      const id = u32Codec.decode(values[i]!);
      // One id space for both families: the id is in one of the two backend maps.
      const b = mapLookup(fd.backends4, u32Codec.encode(id), v4)
        ? { codec: slotVal4, ...backend4.decode(v4) }
        : mapLookup(fd.backends6, u32Codec.encode(id), v6)
          ? { codec: slotVal6, ...backend6.decode(v6) }
          : null;
      if (b) moved.push({ key, value: b.codec.encode({ backendId: id, port: b.port, addr: b.addr }) });
    });
    if (moved.length > 0)
      mapUpdateBatch(
        fd.slots,
        Buffer.concat(moved.map((m) => m.key)),
        Buffer.concat(moved.map((m) => m.value)),
        moved.length,
      );
    unlinkSync(path);
    return moved.length;
  } finally {
    closeFd(old);
  }
}

export interface LoadOptions {
  pinPath: string;
  mapSizes: BpfConfig['mapSizes'];
  objectPath?: string;
  /** Host routing in the programs (kbp_host_routing; hostRoutingDecision); off by default. The
   * maps need none of the programs' settings: a decision still under way (it reads the node's
   * netfilter chains) is awaited only once they are created, before the programs load. */
  hostRouting?: boolean | Promise<boolean>;
  /** The programs verified at start (default: every one); the others load on first use
   * (LoadedObject.loadPrograms). The kernel verifies each program it loads, the largest cost of a
   * start, so a node loads only what its interfaces and settings use. */
  programs?: readonly string[];
  /** Says so when bpffs had to be mounted for the pins. */
  log: Logger;
}

/** Before loading: only `wanted` of the object's programs load. Returns every program's name. */
function autoloadOnly(obj: BpfObject, wanted: readonly string[]): string[] {
  const all = programNames(obj);
  const unknown = wanted.filter((name) => !all.includes(name));
  if (unknown.length > 0) throw new Error(`no such bpf program: ${unknown.join(', ')}`);
  for (const name of all) setProgramAutoload(obj, name, wanted.includes(name));
  return all;
}

/**
 * The programs of one loaded object file, each verified when first asked for, each from a copy of
 * the object of its own that reuses every map of the first (all of the object's maps are in MAPS)
 * and gets the same .rodata, so they read and write the same state. Programs asked for together
 * are verified at once on koffi's worker threads: the kernel verifies one program per thread (the
 * start's eleven: 0.7-0.8x the time of one object holding them, two shared cores). A copy is
 * closed once its program is loaded, keeping a descriptor of the program only: libbpf holds ~0.5
 * MiB per open copy (eleven copies kept open: +5.5 MiB of RSS against one object).
 */
class ProgramLoader {
  private readonly fds = new Map<string, number>();
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly path: string,
    private readonly rodataValue: Buffer,
    private readonly fd: Record<MapName, number>,
  ) {}

  fdOf(name: string): number {
    const fd = this.fds.get(name);
    if (fd === undefined) throw new Error(`bpf program ${name} is not loaded`);
    return fd;
  }

  /** One load at a time: two callers asking for the same program load it once. */
  load(names: Iterable<string>): Promise<string[]> {
    const wanted = [...new Set(names)];
    const next = this.queue.then(() => this.loadMissing(wanted.filter((name) => !this.fds.has(name))));
    this.queue = next.catch(() => {});
    return next;
  }

  close(): void {
    for (const fd of this.fds.values()) closeFd(fd);
    this.fds.clear();
  }

  private async loadMissing(missing: string[]): Promise<string[]> {
    const copies: BpfObject[] = [];
    try {
      for (const name of missing) copies.push(this.copyFor(name));
      const loads = await Promise.allSettled(copies.map((obj) => loadObjectOffThread(obj)));
      const failed = loads.find((l): l is PromiseRejectedResult => l.status === 'rejected');
      if (failed) throw failed.reason;
      for (const [i, name] of missing.entries()) this.fds.set(name, dupFd(programFd(copies[i]!, name)));
    } finally {
      for (const obj of copies) closeObject(obj);
    }
    return missing;
  }

  /** A copy of the object that will load `name` alone, on the first copy's maps. */
  private copyFor(name: string): BpfObject {
    const obj = openObject(this.path);
    try {
      setMapInitialValue(findMap(obj, RODATA_MAP), this.rodataValue);
      autoloadOnly(obj, [name]);
      for (const map of Object.keys(MAPS) as MapName[])
        reuseMapFd(findMap(obj, MAPS[map].name), this.fd[map]);
      return obj;
    } catch (err) {
      closeObject(obj);
      throw err;
    }
  }
}

export async function loadPinnedObject(options: LoadOptions): Promise<LoadedObject> {
  const pinDir = `${options.pinPath}/${PIN_LAYOUT_VERSION}`;
  ensureBpffs(options.pinPath, options.log);
  mkdirSync(`${pinDir}/maps`, { recursive: true });
  // Before anything reads or writes a pinned map: a second agent on this pin path stops here.
  const lock = lockPinPath(options.pinPath);
  const objectPath = options.objectPath ?? defaultObjectPath();
  let obj: BpfObject;
  try {
    obj = openObject(objectPath);
  } catch (err) {
    lock.release();
    throw err;
  }
  const capacities = mapCapacities(options.mapSizes);
  const reused: LoadedObject['reused'] = [];
  try {
    // This copy creates (or reuses) the maps only; the programs load in copies of their own, each
    // with the settings in its own .rodata (this copy's is never read).
    const all = autoloadOnly(obj, []);
    for (const name of Object.keys(MAPS) as MapName[]) {
      const map = findMap(obj, MAPS[name].name);
      const path = mapPinPath(pinDir, name);
      if (existsSync(path)) {
        const fd = getPinned(path);
        try {
          // A pinned map keeps its size: resizing would mean a new map and losing its entries.
          const size = mapInfo(fd).maxEntries;
          setMapMaxEntries(map, size);
          reuseMapFd(map, fd);
          reused.push({ name, capacity: size, configured: capacities[name] });
        } finally {
          closeFd(fd);
        }
      } else {
        const size = capacities[name];
        if (size !== null) setMapMaxEntries(map, size);
      }
    }
    // Off the event loop from here: the caller's own start-up (the host-routing decision's
    // commands, the agent's remaining modules) runs while the kernel creates the maps.
    const creating = loadObjectOffThread(obj);
    // Settled at once, so that a failure of the decision does not leave the creation unawaited.
    const [created, hostRouting] = await Promise.allSettled([creating, options.hostRouting ?? false]);
    if (created.status === 'rejected') throw created.reason;
    if (hostRouting.status === 'rejected') throw hostRouting.reason;
    // bpf_ktime_get_coarse_ns arrived in 5.11; on 5.10 the programs read the precise clock.
    const rodataValue = rodata.encode({
      coarseClock: kernelAtLeast(5, 11),
      sockSetRetval: helperSupported(BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_FUNC_SET_RETVAL),
      hostRouting: hostRouting.value,
    });
    verifyLayoutAgainstBtf(obj);
    const fd = {} as Record<MapName, number>;
    const capacity = {} as Record<MapName, number>;
    for (const name of Object.keys(MAPS) as MapName[]) {
      fd[name] = mapFd(findMap(obj, MAPS[name].name));
      capacity[name] = mapInfo(fd[name]).maxEntries;
      if (!reused.some((r) => r.name === name)) pinObject(fd[name], mapPinPath(pinDir, name));
    }
    if (!reused.some((r) => r.name === 'slots')) {
      const migrated = migrateSlotsV1(pinDir, fd);
      if (migrated > 0) options.log.info({ slots: migrated }, 'slots of kbp_slot_v1 copied into kbp_slot_v2');
    }
    const programs = new ProgramLoader(objectPath, rodataValue, fd);
    try {
      await programs.load(options.programs ?? all);
    } catch (err) {
      programs.close();
      throw err;
    }
    return {
      obj,
      pinDir,
      fd,
      capacity,
      hostRouting: hostRouting.value,
      reused,
      prog: (name) => programs.fdOf(name),
      loadPrograms: (names) => programs.load(names),
      close: () => {
        programs.close();
        closeObject(obj);
        lock.release();
      },
    };
  } catch (err) {
    closeObject(obj);
    lock.release();
    throw err;
  }
}
