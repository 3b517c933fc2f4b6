// libbpf's object lifecycle: open an ELF object, set its maps and programs up before the load,
// load it, find its maps and programs, close it; and bpffs pins.

import { type BpfMap, type BpfObject, check, f, nonNull } from './bindings.js';

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

export function pinObject(fd: number, path: string): void {
  check('bpf_obj_pin', f.obj_pin(fd, path) as number, path);
}

/** Opens a pinned map, program or link. Returns its fd. */
export function getPinned(path: string): number {
  return check('bpf_obj_get', f.obj_get(path) as number, path);
}
