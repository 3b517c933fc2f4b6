// The writer's MapStore over the real maps: layout.ts codecs, batch syscalls where the map type
// has them (hash and array maps), one call per element where it has not (LPM trie, map-in-map).
// E2BIG/ENOSPC become MapFullError naming the map, its capacity and the setting that raises it.

import { BPF_F_INNER_MAP, BPF_MAP_TYPE_ARRAY, E2BIG, ENOSPC } from '../../../native/libbpf/constants.js';
import {
  createMap,
  dumpMap,
  mapDelete,
  mapDeleteBatch,
  mapFdById,
  mapInfo,
  mapLookup,
  mapLookupBatch,
  mapUpdate,
  mapUpdateBatch,
} from '../../../native/libbpf/map.js';
import { possibleCpus } from '../../../native/libbpf/probe.js';
import { closeFd, NativeError } from '../../../native/libc.js';
import type { IPFamily } from '../../model/types.js';
import { ipFamilyOf } from '../../net/ip.js';
import { perCpuValueSize, sumPerCpu } from './codec.js';
import {
  decodeFrontendKey,
  decodeFrontendValue,
  encodeFrontendKey,
  encodeFrontendValue,
} from './frontend-codec.js';
import {
  affMatchKey,
  BE_F,
  type BpfConfigValue,
  backend4,
  backend6,
  config as configCodec,
  type DropStats,
  dropStats,
  type FragStats,
  fragStats,
  ip4Codec,
  ip6Codec,
  MAPS,
  type SockConfig,
  SRC_RANGE_ID_BITS,
  slotKey,
  slotVal4,
  slotVal6,
  sockConfig,
  srcRange4Key,
  srcRange6Key,
  svc4Key,
  svc6Key,
  svcDropKey,
  svcVal,
  type TrafficStats,
  trafficStats,
  u8Codec,
  u32Codec,
} from './layout.js';
import { MAP_SIZE_SETTING, type MapName } from './object.js';
import {
  type AffinityMatch,
  type BackendEntry,
  type FrontendEntry,
  type MaglevKey,
  MapFullError,
  type MapStore,
  type SlotKey,
  type SlotWrite,
  type SourceRange,
  type StoredState,
} from './store.js';
import { DATAPATH_FAMILIES, type FrontendKey } from './types.js';

/** Each family's maps of the writer's entries, and their codecs. */
const FAMILY_MAPS = {
  IPv4: {
    svc: 'svc4',
    svcKey: svc4Key,
    backends: 'backends4',
    backend: backend4,
    slotVal: slotVal4,
    srcRange: 'srcRange4',
    srcRangeKey: srcRange4Key,
  },
  IPv6: {
    svc: 'svc6',
    svcKey: svc6Key,
    backends: 'backends6',
    backend: backend6,
    slotVal: slotVal6,
    srcRange: 'srcRange6',
    srcRangeKey: srcRange6Key,
  },
} as const satisfies Record<IPFamily, Record<string, unknown>>;

const FAMILIES = Object.keys(FAMILY_MAPS) as IPFamily[];

function rangeKey(r: SourceRange) {
  const [addr, bits] = r.cidr.split('/');
  return { prefixlen: SRC_RANGE_ID_BITS + Number(bits), svcId: r.serviceId, addr: addr! };
}

export class KernelStore implements MapStore {
  readonly families = DATAPATH_FAMILIES;
  private readonly cpus = possibleCpus();
  private configFlippedAtMs: number | null = null;

  constructor(
    private readonly fd: Record<MapName, number>,
    private readonly capacity: Record<MapName, number>,
  ) {}

  /** Runs a write, turning "map full" into MapFullError. */
  private guard<T>(map: MapName, write: () => T): T {
    try {
      return write();
    } catch (err) {
      if (err instanceof NativeError && (err.errno === E2BIG || err.errno === ENOSPC)) {
        throw new MapFullError(MAPS[map].name, this.capacity[map], MAP_SIZE_SETTING[map], err);
      }
      throw err;
    }
  }

  private updateBatch(map: MapName, keys: Buffer, values: Buffer, count: number): void {
    if (count === 0) return;
    this.guard(map, () => mapUpdateBatch(this.fd[map], keys, values, count));
  }

  /** Deletes packed keys; an absent key is not an error. */
  private deleteBatch(map: MapName, keys: Buffer, count: number): void {
    if (count === 0) return;
    try {
      mapDeleteBatch(this.fd[map], keys, count);
    } catch (err) {
      // The batch stops at the first absent key: finish one by one.
      if (!(err instanceof NativeError)) throw err;
      const size = keys.length / count;
      for (let i = 0; i < count; i++) mapDelete(this.fd[map], keys.subarray(i * size, (i + 1) * size));
    }
  }

  upsertBackends(entries: readonly BackendEntry[]): void {
    for (const family of FAMILIES) {
      const m = FAMILY_MAPS[family];
      const of = entries.filter((b) => b.family === family);
      this.updateBatch(
        m.backends,
        u32Codec.encodeMany(of.map((b) => b.id)),
        m.backend.encodeMany(
          of.map((b) => ({
            addr: b.address,
            port: b.port,
            flags: (b.isLocal ? BE_F.LOCAL : 0) | (b.terminating ? BE_F.TERMINATING : 0),
          })),
        ),
        of.length,
      );
    }
  }

  deleteBackends(entries: readonly Pick<BackendEntry, 'id' | 'family'>[]): void {
    for (const family of FAMILIES) {
      const of = entries.filter((b) => b.family === family);
      this.deleteBatch(FAMILY_MAPS[family].backends, u32Codec.encodeMany(of.map((b) => b.id)), of.length);
    }
  }

  upsertSlots(entries: readonly SlotWrite[]): void {
    // One batch for both families: keys and values in the same order.
    const ordered = FAMILIES.flatMap((family) => entries.filter((s) => s.backend.family === family));
    this.updateBatch(
      'slots',
      slotKey.encodeMany(ordered.map((s) => ({ svcId: s.serviceId, slot: s.slot, gen: s.gen }))),
      Buffer.concat(
        FAMILIES.map((family) =>
          FAMILY_MAPS[family].slotVal.encodeMany(
            ordered
              .filter((s) => s.backend.family === family)
              .map((s) => ({ backendId: s.backendId, port: s.backend.port, addr: s.backend.address })),
          ),
        ),
      ),
      ordered.length,
    );
  }

  deleteSlots(keys: readonly SlotKey[]): void {
    this.deleteBatch(
      'slots',
      slotKey.encodeMany(keys.map((s) => ({ svcId: s.serviceId, slot: s.slot, gen: s.gen }))),
      keys.length,
    );
  }

  installMaglevTable(key: MaglevKey, table: Uint32Array): number {
    const inner = createMap(BPF_MAP_TYPE_ARRAY, 'kbp_mglv_inner', 4, 4, table.length, {
      mapFlags: BPF_F_INNER_MAP,
    });
    try {
      writeU32Entries(inner, arrayIndexes(table.length), table);
      // The outer map takes its own reference: one update swaps the whole table for readers.
      this.guard('maglev', () =>
        mapUpdate(this.fd.maglev, u32Codec.encode(key.serviceId), u32Codec.encode(inner)),
      );
      return mapInfo(inner).id;
    } finally {
      closeFd(inner);
    }
  }

  shareMaglevTable(key: MaglevKey, tableId: number): void {
    withMapId(tableId, (inner) =>
      this.guard('maglev', () =>
        mapUpdate(this.fd.maglev, u32Codec.encode(key.serviceId), u32Codec.encode(inner)),
      ),
    );
  }

  readMaglevTable(tableId: number): Uint32Array {
    return readMaglevTable(tableId);
  }

  writeMaglevEntries(tableId: number, indexes: Uint32Array, backendIds: Uint32Array): void {
    withMapId(tableId, (inner) => writeU32Entries(inner, indexes, backendIds));
  }

  deleteMaglev(keys: readonly MaglevKey[]): void {
    for (const k of keys) mapDelete(this.fd.maglev, u32Codec.encode(k.serviceId));
  }

  upsertAffinityMatches(entries: readonly AffinityMatch[]): void {
    this.updateBatch(
      'affinityMatch',
      affMatchKey.encodeMany(entries.map((m) => ({ backendId: m.backendId, svcId: m.serviceId }))),
      u8Codec.encodeMany(entries.map(() => 1)),
      entries.length,
    );
  }

  deleteAffinityMatches(entries: readonly AffinityMatch[]): void {
    this.deleteBatch(
      'affinityMatch',
      affMatchKey.encodeMany(entries.map((m) => ({ backendId: m.backendId, svcId: m.serviceId }))),
      entries.length,
    );
  }

  upsertSourceRanges(entries: readonly SourceRange[]): void {
    for (const r of entries) {
      const m = FAMILY_MAPS[r.family];
      this.guard(m.srcRange, () =>
        mapUpdate(this.fd[m.srcRange], m.srcRangeKey.encode(rangeKey(r)), u8Codec.encode(1)),
      );
    }
  }

  deleteSourceRanges(entries: readonly SourceRange[]): void {
    for (const r of entries) {
      const m = FAMILY_MAPS[r.family];
      mapDelete(this.fd[m.srcRange], m.srcRangeKey.encode(rangeKey(r)));
    }
  }

  private resetStats(map: 'svcStats' | 'backendStats', allIds: readonly number[]): void {
    // Backend ids past kbp_best_v1 (bpf.mapSizes.backendCounters) have no counters to reset.
    const ids = allIds.filter((id) => id < this.capacity[map]);
    const size = perCpuValueSize(MAPS[map].valueSize, this.cpus);
    this.updateBatch(map, u32Codec.encodeMany(ids), Buffer.alloc(size * ids.length), ids.length);
  }

  resetServiceStats(serviceIds: readonly number[]): void {
    this.resetStats('svcStats', serviceIds);
    // Per-reason drop counters left by the id's previous user (an LRU hash that only holds
    // services that dropped something: deleting is resetting).
    const fresh = new Set(serviceIds);
    const { keys } = dumpMap(this.fd.svcDrops, svcDropKey.size, perCpuValueSize(dropStats.size, this.cpus));
    const stale = keys.filter((k) => fresh.has(svcDropKey.decode(k).svcId));
    this.deleteBatch('svcDrops', Buffer.concat(stale), stale.length);
  }

  resetBackendStats(backendIds: readonly number[]): void {
    this.resetStats('backendStats', backendIds);
  }

  upsertFrontends(entries: readonly FrontendEntry[]): void {
    for (const family of FAMILIES) {
      const m = FAMILY_MAPS[family];
      const of = entries.filter((f) => f.key.family === family);
      this.updateBatch(
        m.svc,
        m.svcKey.encodeMany(of.map((f) => encodeFrontendKey(f.key))),
        svcVal.encodeMany(of.map((f) => encodeFrontendValue(f.value))),
        of.length,
      );
    }
  }

  deleteFrontends(keys: readonly FrontendKey[]): void {
    for (const family of FAMILIES) {
      const m = FAMILY_MAPS[family];
      const of = keys.filter((k) => k.family === family);
      this.deleteBatch(m.svc, m.svcKey.encodeMany(of.map(encodeFrontendKey)), of.length);
    }
  }

  read(): StoredState {
    const dump = (map: MapName) => dumpMap(this.fd[map], MAPS[map].keySize, MAPS[map].valueSize);
    const slots = dump('slots');
    const maglev = dump('maglev');
    const matches = dump('affinityMatch');
    return {
      frontends: FAMILIES.flatMap((family) => {
        const m = FAMILY_MAPS[family];
        const frontends = dump(m.svc);
        return frontends.keys.map((k, i) => ({
          key: decodeFrontendKey(m.svcKey.decode(k), family),
          value: decodeFrontendValue(svcVal.decode(frontends.values[i]!)),
        }));
      }),
      slots: slots.keys.map((k, i) => {
        const key = slotKey.decode(k);
        return {
          serviceId: key.svcId,
          slot: key.slot,
          gen: key.gen,
          backendId: slotVal4.decode(slots.values[i]!).backendId,
        };
      }),
      backends: FAMILIES.flatMap((family) => {
        const m = FAMILY_MAPS[family];
        const backends = dump(m.backends);
        return backends.keys.map((k, i) => {
          const b = m.backend.decode(backends.values[i]!);
          return {
            id: u32Codec.decode(k),
            family,
            address: b.addr,
            port: b.port,
            isLocal: (b.flags & BE_F.LOCAL) !== 0,
            terminating: (b.flags & BE_F.TERMINATING) !== 0,
          };
        });
      }),
      maglev: maglev.keys.map((k, i) => ({
        key: { serviceId: u32Codec.decode(k) },
        tableId: u32Codec.decode(maglev.values[i]!),
      })),
      maglevTables: [...new Set(maglev.values.map((v) => u32Codec.decode(v)))].map((id) => {
        const table = readMaglevTable(id);
        return { id, backendIds: [...new Set(table)], size: table.length };
      }),
      affinityMatches: matches.keys.map((k) => {
        const m = affMatchKey.decode(k);
        return { backendId: m.backendId, serviceId: m.svcId };
      }),
      sourceRanges: FAMILIES.flatMap((family) => {
        const m = FAMILY_MAPS[family];
        return dump(m.srcRange).keys.map((k) => {
          const r = m.srcRangeKey.decode(k);
          return { serviceId: r.svcId, family, cidr: `${r.addr}/${r.prefixlen - SRC_RANGE_ID_BITS}` };
        });
      }),
    };
  }

  /** The node's addresses of both families for NodePorts on every node address (kbp_node4_v1,
   * kbp_node6_v1). */
  setNodeAddresses(addresses: readonly string[]): void {
    const maps = [
      { family: 'IPv4', map: 'nodeAddrs4', codec: ip4Codec },
      { family: 'IPv6', map: 'nodeAddrs6', codec: ip6Codec },
    ] as const;
    for (const { family, map, codec } of maps) {
      const current = dumpMap(this.fd[map], codec.size, 4).keys.map((k) => codec.decode(k));
      const wanted = addresses.filter((a) => ipFamilyOf(a) === family);
      const stale = current.filter((a) => !wanted.includes(a));
      const fresh = wanted.filter((a) => !current.includes(a));
      this.updateBatch(map, codec.encodeMany(fresh), u32Codec.encodeMany(fresh.map(() => 1)), fresh.length);
      this.deleteBatch(map, codec.encodeMany(stale), stale.length);
    }
  }

  /** Each interface's SNAT source, per family (kbp_ifaddr4_v1, kbp_ifaddr6_v1; see
   * interfaceAddresses): new and changed entries written, those of interfaces gone or without an
   * address deleted. */
  setInterfaceAddresses(addresses: Readonly<Record<IPFamily, ReadonlyMap<number, string>>>): void {
    const maps = [
      { family: 'IPv4', map: 'ifAddrs4', codec: ip4Codec },
      { family: 'IPv6', map: 'ifAddrs6', codec: ip6Codec },
    ] as const;
    const held = this.interfaceAddresses();
    for (const { family, map, codec } of maps) {
      const wanted = addresses[family];
      const current = held[family];
      const stale = [...current.keys()].filter((ifindex) => !wanted.has(ifindex));
      const fresh = [...wanted].filter(([ifindex, addr]) => current.get(ifindex) !== addr);
      this.updateBatch(
        map,
        u32Codec.encodeMany(fresh.map(([ifindex]) => ifindex)),
        codec.encodeMany(fresh.map(([, addr]) => addr)),
        fresh.length,
      );
      this.deleteBatch(map, u32Codec.encodeMany(stale), stale.length);
    }
  }

  /** The local pods' devices host routing delivers to (kbp_hostif_v1: ifindex -> HOST_IF; see
   * hostRouteInterfaces): new and changed entries written, the others deleted. */
  setHostRouteInterfaces(wanted: ReadonlyMap<number, number>): void {
    const dump = dumpMap(this.fd.hostIfs, 4, 4);
    const current = new Map(dump.keys.map((k, i) => [u32Codec.decode(k), u32Codec.decode(dump.values[i]!)]));
    const stale = [...current.keys()].filter((ifindex) => !wanted.has(ifindex));
    const fresh = [...wanted].filter(([ifindex, kind]) => current.get(ifindex) !== kind);
    this.updateBatch(
      'hostIfs',
      u32Codec.encodeMany(fresh.map(([ifindex]) => ifindex)),
      u32Codec.encodeMany(fresh.map(([, kind]) => kind)),
      fresh.length,
    );
    this.deleteBatch('hostIfs', u32Codec.encodeMany(stale), stale.length);
  }

  /** The interfaces' SNAT sources as the maps hold them (ifindex -> address), per family. */
  interfaceAddresses(): Record<IPFamily, Map<number, string>> {
    const read = (fd: number, codec: typeof ip4Codec) => {
      const dump = dumpMap(fd, 4, codec.size);
      return new Map(dump.keys.map((k, i) => [u32Codec.decode(k), codec.decode(dump.values[i]!)]));
    };
    return { IPv4: read(this.fd.ifAddrs4, ip4Codec), IPv6: read(this.fd.ifAddrs6, ip6Codec) };
  }

  /** Per-CPU counters of a service (svc_id) or backend (backend_id), summed; null past the map. */
  trafficStats(of: 'service' | 'backend', id: number): TrafficStats | null {
    const map = of === 'service' ? 'svcStats' : 'backendStats';
    const value = Buffer.alloc(perCpuValueSize(trafficStats.size, this.cpus));
    return mapLookup(this.fd[map], u32Codec.encode(id), value)
      ? sumPerCpu(trafficStats, value, this.cpus)
      : null;
  }

  /** kbp_drops_v1[reason], summed over CPUs. */
  dropStats(reason: number): DropStats | null {
    const value = Buffer.alloc(perCpuValueSize(dropStats.size, this.cpus));
    return mapLookup(this.fd.drops, u32Codec.encode(reason), value)
      ? sumPerCpu(dropStats, value, this.cpus)
      : null;
  }

  /** kbp_fragst_v1, summed over CPUs. */
  fragmentStats(): FragStats | null {
    const value = Buffer.alloc(perCpuValueSize(fragStats.size, this.cpus));
    return mapLookup(this.fd.fragStats, u32Codec.encode(0), value)
      ? sumPerCpu(fragStats, value, this.cpus)
      : null;
  }

  readConfig(): BpfConfigValue {
    return readLiveConfig(this.fd);
  }

  /** Publishes the node configuration as a new generation (publishConfig). A caller that writes
   * again within CONFIG_GRACE_MS of the last flip first waits configGraceRemainingMs(). */
  writeConfig(value: BpfConfigValue): void {
    publishConfig(this.fd, value);
    this.configFlippedAtMs = performance.now();
  }

  /** How long until the generation that stopped being live at the last flip may be rewritten. */
  configGraceRemainingMs(): number {
    if (this.configFlippedAtMs === null) return 0;
    return Math.max(0, CONFIG_GRACE_MS - (performance.now() - this.configFlippedAtMs));
  }

  /** Whose sockets the socket hooks serve; written before they are attached. */
  writeSockConfig(value: SockConfig): void {
    mapUpdate(this.fd.sockConfig, u32Codec.encode(0), sockConfig.encode(value));
  }
}

/** Programs read the configuration through a pointer into its live generation for the length of
 * one run (microseconds, inside an RCU read section); the generation they may still be reading is
 * rewritten only this long after the flip that retired it. */
export const CONFIG_GRACE_MS = 50;

type ConfigFds = { config: number; configGen: number };

/** The live generation of kbp_cfg_v2 (kbp_cfggen_v1[0], 0 or 1). */
export function liveConfigGen(fd: ConfigFds): number {
  const gen = Buffer.alloc(4);
  mapLookup(fd.configGen, u32Codec.encode(0), gen);
  return gen.readUInt32LE(0) & 1;
}

export function readLiveConfig(fd: ConfigFds): BpfConfigValue {
  const value = Buffer.alloc(configCodec.size);
  mapLookup(fd.config, u32Codec.encode(liveConfigGen(fd)), value);
  return configCodec.decode(value);
}

/**
 * Publishes a node configuration atomically, as the service entries are: the whole value into
 * the generation the programs do not read, then one 4-byte write makes it live. A program sees
 * the old configuration or the new one, never a mix (an ARRAY value rewritten in place can be
 * read half old, half new).
 */
export function publishConfig(fd: ConfigFds, value: BpfConfigValue): void {
  const next = liveConfigGen(fd) ^ 1;
  mapUpdate(fd.config, u32Codec.encode(next), configCodec.encode(value));
  mapUpdate(fd.configGen, u32Codec.encode(0), u32Codec.encode(next));
}

/** Runs `use` with an fd of the map named by its id (as the outer Maglev map returns it). */
function withMapId<T>(mapId: number, use: (fd: number) => T): T {
  const fd = mapFdById(mapId);
  try {
    return use(fd);
  } finally {
    closeFd(fd);
  }
}

/** 0, 1, …, n - 1 as the packed __u32 keys of an ARRAY map. */
function arrayIndexes(n: number): Uint32Array {
  const indexes = new Uint32Array(n);
  for (let i = 0; i < n; i++) indexes[i] = i;
  return indexes;
}

const bytesOf = (a: Uint32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** entry indexes[i] = values[i] of a map with __u32 keys and values, in one batch. */
function writeU32Entries(fd: number, indexes: Uint32Array, values: Uint32Array): void {
  if (indexes.length > 0) mapUpdateBatch(fd, bytesOf(indexes), bytesOf(values), indexes.length);
}

/** The backend ids of a Maglev inner table, named by its map id (as the outer map returns it): one
 * batch lookup of the whole array. */
export function readMaglevTable(mapId: number): Uint32Array {
  return withMapId(mapId, (fd) => {
    const size = mapInfo(fd).maxEntries;
    const keys = Buffer.alloc(4 * size);
    const values = Buffer.alloc(4 * size);
    const { count } = mapLookupBatch(fd, null, Buffer.alloc(8), keys, values, size);
    const table = new Uint32Array(size);
    for (let i = 0; i < count; i++) table[keys.readUInt32LE(4 * i)] = values.readUInt32LE(4 * i);
    return table;
  });
}
