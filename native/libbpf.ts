// koffi bindings to libbpf.so.1 (libbpf >= 1.1). Thin and typed: every call that fails throws
// NativeError naming the libbpf function and the errno text. Keys and values are Buffers laid out
// by src/dataplanes/bpf/layout.ts. Opts structs are filled by hand with the libbpf 1.1 x86_64
// layouts of libbpf 1.1's public header libbpf.h (Debian 12's libbpf1), checked by the kernel tests that use them.

import koffi from 'koffi';
import { closeFd, lastErrno, NativeError } from './libc.js';

const lib = koffi.load('libbpf.so.1');
koffi.opaque('bpf_object');
koffi.opaque('bpf_map');
koffi.opaque('bpf_program');
koffi.opaque('btf');

const f = {
  open_file: lib.func('bpf_object *bpf_object__open_file(const char *path, const void *opts)'),
  load: lib.func('int bpf_object__load(bpf_object *obj)'),
  close: lib.func('void bpf_object__close(bpf_object *obj)'),
  find_map: lib.func('bpf_map *bpf_object__find_map_by_name(const bpf_object *obj, const char *name)'),
  map_fd: lib.func('int bpf_map__fd(const bpf_map *map)'),
  map_set_max_entries: lib.func('int bpf_map__set_max_entries(bpf_map *map, uint32_t max_entries)'),
  map_reuse_fd: lib.func('int bpf_map__reuse_fd(bpf_map *map, int fd)'),
  map_set_initial_value: lib.func(
    'int bpf_map__set_initial_value(bpf_map *map, const void *data, size_t size)',
  ),
  find_prog: lib.func(
    'bpf_program *bpf_object__find_program_by_name(const bpf_object *obj, const char *name)',
  ),
  prog_fd: lib.func('int bpf_program__fd(const bpf_program *prog)'),
  next_prog: lib.func('bpf_program *bpf_object__next_program(const bpf_object *obj, bpf_program *prog)'),
  prog_name: lib.func('const char *bpf_program__name(const bpf_program *prog)'),
  prog_set_autoload: lib.func('int bpf_program__set_autoload(bpf_program *prog, bool autoload)'),
  object_btf: lib.func('btf *bpf_object__btf(const bpf_object *obj)'),
  btf_find: lib.func('int32_t btf__find_by_name_kind(const btf *btf, const char *name, uint32_t kind)'),
  btf_type: lib.func('const void *btf__type_by_id(const btf *btf, uint32_t id)'),
  btf_name: lib.func('const char *btf__name_by_offset(const btf *btf, uint32_t offset)'),
  update: lib.func('int bpf_map_update_elem(int fd, const void *key, const void *value, uint64_t flags)'),
  lookup: lib.func('int bpf_map_lookup_elem(int fd, const void *key, void *value)'),
  lookup_flags: lib.func(
    'int bpf_map_lookup_elem_flags(int fd, const void *key, void *value, uint64_t flags)',
  ),
  delete: lib.func('int bpf_map_delete_elem(int fd, const void *key)'),
  next_key: lib.func('int bpf_map_get_next_key(int fd, const void *key, void *next_key)'),
  update_batch: lib.func(
    'int bpf_map_update_batch(int fd, const void *keys, const void *values, _Inout_ uint32_t *count, const void *opts)',
  ),
  delete_batch: lib.func(
    'int bpf_map_delete_batch(int fd, const void *keys, _Inout_ uint32_t *count, const void *opts)',
  ),
  lookup_batch: lib.func(
    'int bpf_map_lookup_batch(int fd, void *in_batch, void *out_batch, void *keys, void *values, _Inout_ uint32_t *count, const void *opts)',
  ),
  lookup_and_delete_batch: lib.func(
    'int bpf_map_lookup_and_delete_batch(int fd, void *in_batch, void *out_batch, void *keys, void *values, _Inout_ uint32_t *count, const void *opts)',
  ),
  map_create: lib.func(
    'int bpf_map_create(int map_type, const char *name, uint32_t key_size, uint32_t value_size, uint32_t max_entries, const void *opts)',
  ),
  obj_pin: lib.func('int bpf_obj_pin(int fd, const char *path)'),
  obj_get: lib.func('int bpf_obj_get(const char *path)'),
  obj_info: lib.func('int bpf_obj_get_info_by_fd(int fd, void *info, _Inout_ uint32_t *info_len)'),
  test_run: lib.func('int bpf_prog_test_run_opts(int prog_fd, void *opts)'),
  xdp_attach: lib.func('int bpf_xdp_attach(int ifindex, int prog_fd, uint32_t flags, const void *opts)'),
  xdp_detach: lib.func('int bpf_xdp_detach(int ifindex, uint32_t flags, const void *opts)'),
  xdp_query_id: lib.func('int bpf_xdp_query_id(int ifindex, int flags, _Out_ uint32_t *prog_id)'),
  tc_hook_create: lib.func('int bpf_tc_hook_create(void *hook)'),
  tc_attach: lib.func('int bpf_tc_attach(const void *hook, void *opts)'),
  tc_detach: lib.func('int bpf_tc_detach(const void *hook, const void *opts)'),
  tc_query: lib.func('int bpf_tc_query(const void *hook, void *opts)'),
  link_create: lib.func('int bpf_link_create(int prog_fd, int target_fd, int attach_type, const void *opts)'),
  link_detach: lib.func('int bpf_link_detach(int link_fd)'),
  link_update: lib.func('int bpf_link_update(int link_fd, int new_prog_fd, const void *opts)'),
  map_fd_by_id: lib.func('int bpf_map_get_fd_by_id(uint32_t id)'),
  prog_fd_by_id: lib.func('int bpf_prog_get_fd_by_id(uint32_t id)'),
  num_possible_cpus: lib.func('int libbpf_num_possible_cpus(void)'),
  probe_helper: lib.func('int libbpf_probe_bpf_helper(int prog_type, int helper_id, const void *opts)'),
};

/** Opaque libbpf handles (koffi 3 hands pointers over as bigint). */
export type BpfObject = bigint & { readonly __brand: 'bpf_object' };
export type BpfMap = bigint & { readonly __brand: 'bpf_map' };
export type Btf = bigint & { readonly __brand: 'btf' };

export const ENOENT = 2;
export const EEXIST = 17;
export const E2BIG = 7;
export const EINVAL = 22;
export const ENOSPC = 28;
export const ENOTSUPP = 524;

// enum bpf_map_type
export const BPF_MAP_TYPE_ARRAY = 2;
// map update flags
export const BPF_ANY = 0n;
// map_flags
export const BPF_F_INNER_MAP = 1 << 12;
// XDP attach flags
export const XDP_FLAGS_SKB_MODE = 2;
export const XDP_FLAGS_DRV_MODE = 4;
// tc
export const BPF_TC_INGRESS = 1;
export const BPF_TC_EGRESS = 2;
export const BPF_TC_F_REPLACE = 1;
// enum bpf_attach_type values absent from Debian's 6.1 UAPI headers
export const BPF_TCX_INGRESS = 46;
export const BPF_TCX_EGRESS = 47;
export const BPF_XDP = 37;
// BTF kinds
export const BTF_KIND_STRUCT = 4;
export const BTF_KIND_ENUM = 6;
export const BTF_KIND_DATASEC = 15;

/** A libbpf 1.x call result: >= 0 on success, -errno on failure. */
function check(fn: string, rc: number, detail?: string): number {
  if (rc < 0) throw new NativeError(fn, -rc, detail);
  return rc;
}

function nonNull<T>(fn: string, ptr: T | null, detail?: string): T {
  if (ptr === null) throw new NativeError(fn, lastErrno() || ENOENT, detail);
  return ptr;
}

// ---------- objects, maps, programs ----------

export function openObject(path: string): BpfObject {
  return nonNull('bpf_object__open_file', f.open_file(path, null) as BpfObject | null, path);
}

/** Verifies and loads every program and creates (or reuses) every map. */
export function loadObject(obj: BpfObject): void {
  check('bpf_object__load', f.load(obj) as number);
}

/** loadObject on one of koffi's worker threads: the event loop goes on while the kernel verifies
 * the programs (the agent reads its Services meanwhile). The object must not be touched until the
 * promise settles. libbpf keeps no thread-local state and logs to stderr itself. */
export async function loadObjectOffThread(obj: BpfObject): Promise<void> {
  const rc = await new Promise<number>((resolve, reject) =>
    f.load.async(obj, (err: unknown, result: number) => (err ? reject(err) : resolve(result))),
  );
  check('bpf_object__load', rc);
}

/** Closes the object: its program and map fds (pinned objects and links stay). */
export function closeObject(obj: BpfObject): void {
  f.close(obj);
}

export function findMap(obj: BpfObject, name: string): BpfMap {
  return nonNull('bpf_object__find_map_by_name', f.find_map(obj, name) as BpfMap | null, name);
}

export function mapFd(map: BpfMap): number {
  return check('bpf_map__fd', f.map_fd(map) as number);
}

/** Before loadObject only. */
export function setMapMaxEntries(map: BpfMap, maxEntries: number): void {
  check('bpf_map__set_max_entries', f.map_set_max_entries(map, maxEntries) as number);
}

/** Before loadObject: use an existing (e.g. pinned) map instead of creating one. */
export function reuseMapFd(map: BpfMap, fd: number): void {
  check('bpf_map__reuse_fd', f.map_reuse_fd(map, fd) as number);
}

/** Before loadObject: the contents of a global data map (".rodata", ".data", ".bss"). */
export function setMapInitialValue(map: BpfMap, data: Buffer): void {
  check('bpf_map__set_initial_value', f.map_set_initial_value(map, data, data.length) as number);
}

/** The names of the object's programs, in the order of its ELF sections. */
export function programNames(obj: BpfObject): string[] {
  const names: string[] = [];
  for (let prog = f.next_prog(obj, null); prog; prog = f.next_prog(obj, prog)) names.push(f.prog_name(prog));
  return names;
}

/** Before loadObject: whether loading verifies and loads this program (libbpf's default: yes). */
export function setProgramAutoload(obj: BpfObject, name: string, autoload: boolean): void {
  const prog = nonNull('bpf_object__find_program_by_name', f.find_prog(obj, name) as bigint | null, name);
  check('bpf_program__set_autoload', f.prog_set_autoload(prog, autoload) as number, name);
}

export function programFd(obj: BpfObject, name: string): number {
  const prog = nonNull('bpf_object__find_program_by_name', f.find_prog(obj, name) as bigint | null, name);
  return check('bpf_program__fd', f.prog_fd(prog) as number, name);
}

// ---------- map elements ----------

export function mapUpdate(fd: number, key: Buffer, value: Buffer, flags: bigint = BPF_ANY): void {
  check('bpf_map_update_elem', f.update(fd, key, value, flags) as number);
}

/** Fills `value` and returns true, or returns false when the key is absent. */
export function mapLookup(fd: number, key: Buffer, value: Buffer): boolean {
  const rc = f.lookup(fd, key, value) as number;
  if (rc === -ENOENT) return false;
  check('bpf_map_lookup_elem', rc);
  return true;
}

/** Returns false when the key was absent. */
export function mapDelete(fd: number, key: Buffer): boolean {
  const rc = f.delete(fd, key) as number;
  if (rc === -ENOENT) return false;
  check('bpf_map_delete_elem', rc);
  return true;
}

/** Writes the key after `key` (the first key when `key` is null) into `next`; false at the end. */
export function mapNextKey(fd: number, key: Buffer | null, next: Buffer): boolean {
  const rc = f.next_key(fd, key, next) as number;
  if (rc === -ENOENT) return false;
  check('bpf_map_get_next_key', rc);
  return true;
}

function batchOpts(elemFlags: bigint): Buffer {
  const opts = Buffer.alloc(24);
  opts.writeBigUInt64LE(24n, 0);
  opts.writeBigUInt64LE(elemFlags, 8);
  return opts;
}

/** Writes `count` keys/values (packed back to back) in one syscall. Returns how many were written. */
export function mapUpdateBatch(
  fd: number,
  keys: Buffer,
  values: Buffer,
  count: number,
  elemFlags: bigint = BPF_ANY,
): number {
  const n = [count];
  check('bpf_map_update_batch', f.update_batch(fd, keys, values, n, batchOpts(elemFlags)) as number);
  return n[0]!;
}

/** Deletes `count` packed keys. Missing keys fail with ENOENT after the ones before them. */
export function mapDeleteBatch(fd: number, keys: Buffer, count: number): number {
  const n = [count];
  check('bpf_map_delete_batch', f.delete_batch(fd, keys, n, batchOpts(0n)) as number);
  return n[0]!;
}

export interface BatchChunk {
  /** Elements written into keys/values. */
  count: number;
  /** True when the map has no more elements after this chunk. */
  done: boolean;
}

/**
 * One chunk of a batched walk. `inBatch` is null for the first call, then the previous
 * `outBatch`; both tokens must be at least max(keySize, 8) bytes. Values of per-CPU maps take
 * roundUp(valueSize, 8) * possibleCpus() bytes each.
 */
export function mapLookupBatch(
  fd: number,
  inBatch: Buffer | null,
  outBatch: Buffer,
  keys: Buffer,
  values: Buffer,
  maxCount: number,
): BatchChunk {
  return batchWalk('bpf_map_lookup_batch', f.lookup_batch, fd, inBatch, outBatch, keys, values, maxCount);
}

/** As mapLookupBatch, deleting what it returns. */
export function mapLookupAndDeleteBatch(
  fd: number,
  inBatch: Buffer | null,
  outBatch: Buffer,
  keys: Buffer,
  values: Buffer,
  maxCount: number,
): BatchChunk {
  return batchWalk(
    'bpf_map_lookup_and_delete_batch',
    f.lookup_and_delete_batch,
    fd,
    inBatch,
    outBatch,
    keys,
    values,
    maxCount,
  );
}

function batchWalk(
  name: string,
  fn: (typeof f)['lookup_batch'],
  fd: number,
  inBatch: Buffer | null,
  outBatch: Buffer,
  keys: Buffer,
  values: Buffer,
  maxCount: number,
): BatchChunk {
  const n = [maxCount];
  const rc = fn(fd, inBatch, outBatch, keys, values, n, batchOpts(0n)) as number;
  if (rc === -ENOENT) return { count: n[0]!, done: true };
  check(name, rc);
  return { count: n[0]!, done: false };
}

export interface MapDump {
  keys: Buffer[];
  values: Buffer[];
}

/**
 * Every element of a map: batched lookups where the map type supports them, get_next_key plus
 * lookup otherwise (LPM tries, map-in-map). `valueSize` is the full per-element size (per-CPU
 * maps: roundUp(value_size, 8) * possibleCpus()).
 */
export function dumpMap(fd: number, keySize: number, valueSize: number, chunk = 4096): MapDump {
  const out: MapDump = { keys: [], values: [] };
  const tokenSize = Math.max(keySize, 8);
  const keys = Buffer.alloc(keySize * chunk);
  const values = Buffer.alloc(valueSize * chunk);
  let inBatch: Buffer | null = null;
  for (;;) {
    const outBatch = Buffer.alloc(tokenSize);
    let res: BatchChunk;
    try {
      res = mapLookupBatch(fd, inBatch, outBatch, keys, values, chunk);
    } catch (err) {
      if (
        inBatch === null &&
        err instanceof NativeError &&
        (err.errno === EINVAL || err.errno === ENOTSUPP)
      ) {
        return dumpMapByKeys(fd, keySize, valueSize);
      }
      throw err;
    }
    for (let i = 0; i < res.count; i++) {
      out.keys.push(Buffer.from(keys.subarray(i * keySize, (i + 1) * keySize)));
      out.values.push(Buffer.from(values.subarray(i * valueSize, (i + 1) * valueSize)));
    }
    if (res.done) return out;
    inBatch = outBatch;
  }
}

function dumpMapByKeys(fd: number, keySize: number, valueSize: number): MapDump {
  const out: MapDump = { keys: [], values: [] };
  let key: Buffer | null = null;
  for (;;) {
    const next = Buffer.alloc(keySize);
    if (!mapNextKey(fd, key, next)) return out;
    const value = Buffer.alloc(valueSize);
    // An element deleted between the two calls is simply skipped.
    if (mapLookup(fd, next, value)) {
      out.keys.push(next);
      out.values.push(value);
    }
    key = next;
  }
}

export interface MapCreateOptions {
  mapFlags?: number;
  innerMapFd?: number;
}

/** Creates a map outside any object (Maglev inner tables). Returns its fd. */
export function createMap(
  type: number,
  name: string,
  keySize: number,
  valueSize: number,
  maxEntries: number,
  options: MapCreateOptions = {},
): number {
  const opts = Buffer.alloc(48);
  opts.writeBigUInt64LE(48n, 0);
  opts.writeUInt32LE(options.innerMapFd ?? 0, 24);
  opts.writeUInt32LE(options.mapFlags ?? 0, 28);
  return check(
    'bpf_map_create',
    f.map_create(type, name, keySize, valueSize, maxEntries, opts) as number,
    name,
  );
}

export interface MapInfo {
  type: number;
  id: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  mapFlags: number;
  name: string;
}

export function mapInfo(fd: number): MapInfo {
  const info = Buffer.alloc(96);
  check('bpf_obj_get_info_by_fd', f.obj_info(fd, info, [info.length]) as number);
  const nameEnd = info.indexOf(0, 24);
  return {
    type: info.readUInt32LE(0),
    id: info.readUInt32LE(4),
    keySize: info.readUInt32LE(8),
    valueSize: info.readUInt32LE(12),
    maxEntries: info.readUInt32LE(16),
    mapFlags: info.readUInt32LE(20),
    name: info.toString('latin1', 24, nameEnd < 0 || nameEnd > 40 ? 40 : nameEnd),
  };
}

/** Opens a map by its id (e.g. a Maglev inner map named by its outer map). Returns its fd. */
export function mapFdById(id: number): number {
  return check('bpf_map_get_fd_by_id', f.map_fd_by_id(id) as number, `map id ${id}`);
}

/**
 * The name of a loaded program, by id: the kernel keeps the first 15 characters of the name
 * (BPF_OBJ_NAME_LEN), so a longer one comes back cut.
 */
export function programNameById(id: number): string {
  const fd = check('bpf_prog_get_fd_by_id', f.prog_fd_by_id(id) as number, `program id ${id}`);
  try {
    // struct bpf_prog_info: char name[16] at offset 64.
    const info = Buffer.alloc(80);
    check('bpf_obj_get_info_by_fd', f.obj_info(fd, info, [info.length]) as number);
    const end = info.indexOf(0, 64);
    return info.toString('latin1', 64, end < 0 || end > 80 ? 80 : end);
  } finally {
    closeFd(fd);
  }
}

/** Number of possible CPUs: the multiplier of per-CPU map values. */
export function possibleCpus(): number {
  return check('libbpf_num_possible_cpus', f.num_possible_cpus() as number);
}

// ---------- bpffs ----------

export function pinObject(fd: number, path: string): void {
  check('bpf_obj_pin', f.obj_pin(fd, path) as number, path);
}

/** Opens a pinned map, program or link. Returns its fd. */
export function getPinned(path: string): number {
  return check('bpf_obj_get', f.obj_get(path) as number, path);
}

// ---------- BPF_PROG_TEST_RUN ----------

export interface TestRunOptions {
  data: Buffer;
  repeat?: number;
  /** __sk_buff (tc) or xdp_md (XDP) context passed to the program. */
  ctx?: Buffer;
  /** Room for the output packet; defaults to the input length + 256. */
  dataOutSize?: number;
}

export interface TestRunResult {
  retval: number;
  /** Average ns per run as the kernel measured it. */
  durationNs: number;
  dataOut: Buffer;
}

export function testRun(progFd: number, options: TestRunOptions): TestRunResult {
  const dataOut = Buffer.alloc(options.dataOutSize ?? options.data.length + 256);
  const opts = Buffer.alloc(80);
  opts.writeBigUInt64LE(80n, 0);
  opts.writeBigUInt64LE(koffi.address(options.data), 8);
  opts.writeBigUInt64LE(koffi.address(dataOut), 16);
  opts.writeUInt32LE(options.data.length, 24);
  opts.writeUInt32LE(dataOut.length, 28);
  if (options.ctx) {
    opts.writeBigUInt64LE(koffi.address(options.ctx), 32);
    opts.writeUInt32LE(options.ctx.length, 48);
  }
  opts.writeUInt32LE(options.repeat ?? 1, 60);
  check('bpf_prog_test_run_opts', f.test_run(progFd, opts) as number);
  return {
    retval: opts.readInt32LE(56),
    durationNs: opts.readUInt32LE(64),
    dataOut: dataOut.subarray(0, opts.readUInt32LE(28)),
  };
}

// ---------- attach ----------

export function xdpAttach(ifindex: number, progFd: number, flags: number): void {
  check('bpf_xdp_attach', f.xdp_attach(ifindex, progFd, flags, null) as number, `ifindex ${ifindex}`);
}

export function xdpDetach(ifindex: number, flags: number): void {
  check('bpf_xdp_detach', f.xdp_detach(ifindex, flags, null) as number, `ifindex ${ifindex}`);
}

/** The id of the XDP program attached in the given mode, 0 when none. */
export function xdpQueryId(ifindex: number, flags: number): number {
  const id = [0];
  check('bpf_xdp_query_id', f.xdp_query_id(ifindex, flags, id) as number, `ifindex ${ifindex}`);
  return id[0]!;
}

function tcHook(ifindex: number, attachPoint: number): Buffer {
  const hook = Buffer.alloc(24);
  hook.writeBigUInt64LE(24n, 0);
  hook.writeInt32LE(ifindex, 8);
  hook.writeUInt32LE(attachPoint, 12);
  return hook;
}

function tcOpts(progFd: number, flags: number, handle: number, priority: number): Buffer {
  const opts = Buffer.alloc(32);
  opts.writeBigUInt64LE(32n, 0);
  opts.writeInt32LE(progFd, 8);
  opts.writeUInt32LE(flags, 12);
  opts.writeUInt32LE(handle, 20);
  opts.writeUInt32LE(priority, 24);
  return opts;
}

/** Creates the clsact qdisc; an existing one is fine. */
export function tcHookCreate(ifindex: number): void {
  const rc = f.tc_hook_create(tcHook(ifindex, BPF_TC_INGRESS | BPF_TC_EGRESS)) as number;
  if (rc !== -EEXIST) check('bpf_tc_hook_create', rc, `ifindex ${ifindex}`);
}

export interface TcFilter {
  handle: number;
  priority: number;
  progId: number;
}

/** Attaches a direct-action cls_bpf filter; handle/priority 0 let the kernel choose. */
export function tcAttach(
  ifindex: number,
  attachPoint: number,
  progFd: number,
  options: { handle?: number; priority?: number; replace?: boolean } = {},
): TcFilter {
  const opts = tcOpts(
    progFd,
    options.replace ? BPF_TC_F_REPLACE : 0,
    options.handle ?? 0,
    options.priority ?? 0,
  );
  check('bpf_tc_attach', f.tc_attach(tcHook(ifindex, attachPoint), opts) as number, `ifindex ${ifindex}`);
  return { progId: opts.readUInt32LE(16), handle: opts.readUInt32LE(20), priority: opts.readUInt32LE(24) };
}

export function tcDetach(ifindex: number, attachPoint: number, handle: number, priority: number): void {
  check(
    'bpf_tc_detach',
    f.tc_detach(tcHook(ifindex, attachPoint), tcOpts(0, 0, handle, priority)) as number,
    `ifindex ${ifindex}`,
  );
}

/** The program id of the filter at handle/priority, or null when there is none. */
export function tcQuery(
  ifindex: number,
  attachPoint: number,
  handle: number,
  priority: number,
): number | null {
  if (handle === 0 || priority === 0 || priority > 0xffff)
    throw new Error(`tcQuery: bad handle/priority ${handle}/${priority}`);
  const opts = tcOpts(0, 0, handle, priority);
  const rc = f.tc_query(tcHook(ifindex, attachPoint), opts) as number;
  // The kernel answers EINVAL ("Cannot find specified filter chain") once the last filter of the
  // chain is gone, ENOENT while other filters remain.
  if (rc === -ENOENT || rc === -EINVAL) return null;
  check('bpf_tc_query', rc, `ifindex ${ifindex}`);
  return opts.readUInt32LE(16);
}

/**
 * bpf_link_create: for tcx pass the ifindex and BPF_TCX_INGRESS/EGRESS; for XDP the ifindex,
 * BPF_XDP and the XDP_FLAGS_* mode in `flags`. Returns the link fd.
 */
export function linkCreate(progFd: number, targetFd: number, attachType: number, flags = 0): number {
  // struct bpf_link_create_opts: size_t sz; __u32 flags; (the union after it is not used here)
  const opts = Buffer.alloc(16);
  opts.writeBigUInt64LE(16n, 0);
  opts.writeUInt32LE(flags, 8);
  return check('bpf_link_create', f.link_create(progFd, targetFd, attachType, opts) as number);
}

export const BPF_PROG_TYPE_SCHED_CLS = 3;
export const BPF_PROG_TYPE_XDP = 6;
export const BPF_PROG_TYPE_CGROUP_SOCK_ADDR = 18;
/** enum bpf_attach_type: the cgroup socket-address hooks (linux/bpf.h). */
export const BPF_CGROUP_INET4_CONNECT = 10;
export const BPF_CGROUP_UDP4_SENDMSG = 14;
export const BPF_CGROUP_UDP4_RECVMSG = 19;
export const BPF_CGROUP_INET4_GETPEERNAME = 29;
export const BPF_CGROUP_INET6_CONNECT = 11;
export const BPF_CGROUP_UDP6_SENDMSG = 15;
export const BPF_CGROUP_UDP6_RECVMSG = 20;
export const BPF_CGROUP_INET6_GETPEERNAME = 30;
/** BPF_PROG_TYPE_CGROUP_SOCK's hook on a socket's release (kernel 5.9). */
export const BPF_CGROUP_INET_SOCK_RELEASE = 34;
export const BPF_FUNC_SET_RETVAL = 187;
/** bpf_redirect_neigh and bpf_redirect_peer (5.10+): host routing (bpf.hostRouting) needs both. */
export const BPF_FUNC_REDIRECT_NEIGH = 152;
export const BPF_FUNC_REDIRECT_PEER = 155;
/** bpf_loop (5.17+): bpf/lb.o needs it, bpf/lb_compat.o does not. */
export const BPF_FUNC_LOOP = 181;

/** Whether programs of `progType` may call helper `helperId` on this kernel (libbpf loads a probe
 * program); an error (a kernel without the program type) reads as no. */
export function helperSupported(progType: number, helperId: number): boolean {
  return (f.probe_helper(progType, helperId, null) as number) === 1;
}

export function linkDetach(linkFd: number): void {
  check('bpf_link_detach', f.link_detach(linkFd) as number);
}

/** Swaps the program behind a link in one step (the hook never runs without a program). */
export function linkUpdate(linkFd: number, progFd: number): void {
  check('bpf_link_update', f.link_update(linkFd, progFd, null) as number);
}

export interface LinkInfo {
  type: number;
  id: number;
  progId: number;
  /** tcx links: the interface (0 once it is gone) and BPF_TCX_INGRESS/EGRESS. */
  ifindex: number;
  attachType: number;
  /** cgroup links: the cgroup's id (its directory's inode number on cgroup2); the attach type
   * follows it at 24. */
  cgroupId: bigint;
  cgroupAttachType: number;
}

export function linkInfo(fd: number): LinkInfo {
  // struct bpf_link_info: type, id, prog_id, then a union aligned to 8 (tcx: ifindex, attach_type).
  const info = Buffer.alloc(64);
  check('bpf_obj_get_info_by_fd', f.obj_info(fd, info, [info.length]) as number);
  return {
    type: info.readUInt32LE(0),
    id: info.readUInt32LE(4),
    progId: info.readUInt32LE(8),
    ifindex: info.readUInt32LE(16),
    attachType: info.readUInt32LE(20),
    cgroupId: info.readBigUInt64LE(16),
    cgroupAttachType: info.readUInt32LE(24),
  };
}

// ---------- BTF ----------

export interface BtfMember {
  name: string;
  /** Offset in bits (bitfields are not used by types.h). */
  bitOffset: number;
  typeId: number;
}

export interface BtfStruct {
  name: string;
  size: number;
  members: BtfMember[];
}

export function objectBtf(obj: BpfObject): Btf {
  return nonNull('bpf_object__btf', f.object_btf(obj) as Btf | null);
}

/** A struct's size and members from BTF, or null when the BTF has no struct of that name. */
export function btfStruct(btf: Btf, name: string): BtfStruct | null {
  const id = f.btf_find(btf, name, BTF_KIND_STRUCT) as number;
  if (id < 0) return null;
  const ptr = nonNull('btf__type_by_id', f.btf_type(btf, id) as bigint | null, name);
  // struct btf_type { u32 name_off; u32 info; u32 size; } then vlen x struct btf_member
  // { u32 name_off; u32 type; u32 offset; }; vlen is info's low 16 bits.
  const head = Buffer.from(koffi.view(ptr, 12));
  const vlen = head.readUInt32LE(4) & 0xffff;
  const all = Buffer.from(koffi.view(ptr, 12 + 12 * vlen));
  const members: BtfMember[] = [];
  for (let i = 0; i < vlen; i++) {
    const at = 12 + 12 * i;
    members.push({
      name: f.btf_name(btf, all.readUInt32LE(at)) as string,
      typeId: all.readUInt32LE(at + 4),
      bitOffset: all.readUInt32LE(at + 8),
    });
  }
  return { name, size: head.readUInt32LE(8), members };
}

export interface BtfEnum {
  name: string;
  /** Bytes (1 for a packed enum in a one-byte field). */
  size: number;
  values: { name: string; value: number }[];
}

/** An enum's size and enumerators from BTF, or null when the BTF has no enum of that name. */
export function btfEnum(btf: Btf, name: string): BtfEnum | null {
  const id = f.btf_find(btf, name, BTF_KIND_ENUM) as number;
  if (id < 0) return null;
  const ptr = nonNull('btf__type_by_id', f.btf_type(btf, id) as bigint | null, name);
  // struct btf_type { u32 name_off; u32 info; u32 size; } then vlen x struct btf_enum
  // { u32 name_off; s32 val; }; info's kind_flag (bit 31) marks a signed enum.
  const head = Buffer.from(koffi.view(ptr, 12));
  const info = head.readUInt32LE(4);
  const vlen = info & 0xffff;
  const signed = (info & 0x80000000) !== 0;
  const all = Buffer.from(koffi.view(ptr, 12 + 8 * vlen));
  const values: BtfEnum['values'] = [];
  for (let i = 0; i < vlen; i++) {
    const at = 12 + 8 * i;
    values.push({
      name: f.btf_name(btf, all.readUInt32LE(at)) as string,
      value: signed ? all.readInt32LE(at + 4) : all.readUInt32LE(at + 4),
    });
  }
  return { name, size: head.readUInt32LE(8), values };
}

export interface BtfDatasec {
  name: string;
  /** The section's size in the object. */
  size: number;
  /** Its variables, by offset. */
  vars: { name: string; offset: number; size: number }[];
}

/** A data section's size and variables from BTF (e.g. ".rodata"), or null when it has none. */
export function btfDatasec(btf: Btf, name: string): BtfDatasec | null {
  const id = f.btf_find(btf, name, BTF_KIND_DATASEC) as number;
  if (id < 0) return null;
  const ptr = nonNull('btf__type_by_id', f.btf_type(btf, id) as bigint | null, name);
  // struct btf_type then vlen x struct btf_var_secinfo { u32 type; u32 offset; u32 size; }; each
  // type is a BTF_KIND_VAR whose name_off names the variable.
  const head = Buffer.from(koffi.view(ptr, 12));
  const vlen = head.readUInt32LE(4) & 0xffff;
  const all = Buffer.from(koffi.view(ptr, 12 + 12 * vlen));
  const vars: BtfDatasec['vars'] = [];
  for (let i = 0; i < vlen; i++) {
    const at = 12 + 12 * i;
    const varPtr = nonNull('btf__type_by_id', f.btf_type(btf, all.readUInt32LE(at)) as bigint | null, name);
    vars.push({
      name: f.btf_name(btf, Buffer.from(koffi.view(varPtr, 4)).readUInt32LE(0)) as string,
      offset: all.readUInt32LE(at + 4),
      size: all.readUInt32LE(at + 8),
    });
  }
  return { name, size: head.readUInt32LE(8), vars };
}
