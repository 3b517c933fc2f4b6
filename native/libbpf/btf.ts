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
