// BTF: the struct, enum and data-section layouts an object's BTF declares, read for the layout check.

import koffi from 'koffi';
import { type BpfObject, type Btf, f, nonNull } from './bindings.js';
import { BTF_KIND_DATASEC, BTF_KIND_ENUM, BTF_KIND_STRUCT } from './constants.js';

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

/**
 * The BTF type `name` of `kind`: its size, its info word and its vlen entries of `entrySize` bytes
 * each, or null when the BTF has no such type. struct btf_type { u32 name_off; u32 info; u32 size; }
 * is followed by the entries; vlen is info's low 16 bits.
 */
function btfType(
  btf: Btf,
  name: string,
  kind: number,
  entrySize: number,
): { info: number; size: number; entries: Buffer[] } | null {
  const id = f.btf_find(btf, name, kind) as number;
  if (id < 0) return null;
  const ptr = nonNull('btf__type_by_id', f.btf_type(btf, id) as bigint | null, name);
  const head = Buffer.from(koffi.view(ptr, 12));
  const info = head.readUInt32LE(4);
  const vlen = info & 0xffff;
  const all = Buffer.from(koffi.view(ptr, 12 + entrySize * vlen));
  const entries = Array.from({ length: vlen }, (_, i) =>
    all.subarray(12 + entrySize * i, 12 + entrySize * (i + 1)),
  );
  return { info, size: head.readUInt32LE(8), entries };
}

/** A struct's size and members from BTF, or null when the BTF has no struct of that name. */
export function btfStruct(btf: Btf, name: string): BtfStruct | null {
  // Entries: struct btf_member { u32 name_off; u32 type; u32 offset; }.
  const type = btfType(btf, name, BTF_KIND_STRUCT, 12);
  if (!type) return null;
  const members = type.entries.map((e) => ({
    name: f.btf_name(btf, e.readUInt32LE(0)) as string,
    typeId: e.readUInt32LE(4),
    bitOffset: e.readUInt32LE(8),
  }));
  return { name, size: type.size, members };
}

export interface BtfEnum {
  name: string;
  /** Bytes (1 for a packed enum in a one-byte field). */
  size: number;
  values: { name: string; value: number }[];
}

/** An enum's size and enumerators from BTF, or null when the BTF has no enum of that name. */
export function btfEnum(btf: Btf, name: string): BtfEnum | null {
  // Entries: struct btf_enum { u32 name_off; s32 val; }; info's kind_flag (bit 31) marks a signed enum.
  const type = btfType(btf, name, BTF_KIND_ENUM, 8);
  if (!type) return null;
  const signed = (type.info & 0x80000000) !== 0;
  const values = type.entries.map((e) => ({
    name: f.btf_name(btf, e.readUInt32LE(0)) as string,
    value: signed ? e.readInt32LE(4) : e.readUInt32LE(4),
  }));
  return { name, size: type.size, values };
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
  // Entries: struct btf_var_secinfo { u32 type; u32 offset; u32 size; }; each type is a
  // BTF_KIND_VAR whose name_off names the variable.
  const type = btfType(btf, name, BTF_KIND_DATASEC, 12);
  if (!type) return null;
  const vars = type.entries.map((e) => {
    const varPtr = nonNull('btf__type_by_id', f.btf_type(btf, e.readUInt32LE(0)) as bigint | null, name);
    return {
      name: f.btf_name(btf, Buffer.from(koffi.view(varPtr, 4)).readUInt32LE(0)) as string,
      offset: e.readUInt32LE(4),
      size: e.readUInt32LE(8),
    };
  });
  return { name, size: type.size, vars };
}
