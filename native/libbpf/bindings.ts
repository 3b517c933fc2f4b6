// The koffi bindings to libbpf.so.1 (libbpf >= 1.1): every libbpf function the agent calls, its
// opaque handle types, and the two checks that turn a failed call into NativeError naming the libbpf
// function and the errno text. The other files of native/libbpf/ wrap these calls; opts structs are
// filled by hand with the libbpf 1.1 x86_64 layouts of libbpf 1.1's public header libbpf.h (Debian
// 12's libbpf1), checked by the kernel tests that use them.

import koffi from 'koffi';
import { lastErrno, NativeError } from '../libc.js';
import { ENOENT } from './constants.js';

const lib = koffi.load('libbpf.so.1');
koffi.opaque('bpf_object');
koffi.opaque('bpf_map');
koffi.opaque('bpf_program');
koffi.opaque('btf');

export const f = {
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

/** A libbpf 1.x call result: >= 0 on success, -errno on failure. */
export function check(fn: string, rc: number, detail?: string): number {
  if (rc < 0) throw new NativeError(fn, -rc, detail);
  return rc;
}

export function nonNull<T>(fn: string, ptr: T | null, detail?: string): T {
  if (ptr === null) throw new NativeError(fn, lastErrno() || ENOENT, detail);
  return ptr;
}
