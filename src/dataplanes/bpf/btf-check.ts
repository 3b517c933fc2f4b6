// The start-up check of layout.ts against the loaded object's BTF: every struct codec's size and
// member offsets, every constant table's C enum, the .rodata variables, and every map's key and
// value size. A mismatch stops the agent before it writes a map the programs would read otherwise.

import type { BpfObject } from '../../../native/libbpf/bindings.js';
import {
  type BtfDatasec,
  type BtfEnum,
  btfDatasec,
  btfEnum,
  btfStruct,
  objectBtf,
} from '../../../native/libbpf/btf.js';
import { mapInfo } from '../../../native/libbpf/map.js';
import { findMap, mapFd } from '../../../native/libbpf/object.js';
import { ENUMS, type EnumLayout, MAPS, RODATA_MAP, rodata, STRUCTS } from './layout.js';

/**
 * Compares every codec with the struct of the same name in the object's BTF (size, and each
 * member's offset by name, both ways), every constant table with its C enum (enumMismatches),
 * the .rodata variables with `rodata`, and every map's key/value size in the loaded object with
 * MAPS. Returns the mismatches; empty means the object and this file agree.
 */
export function layoutMismatches(obj: BpfObject, options: { loaded: boolean }): string[] {
  const problems: string[] = [];
  const btf = objectBtf(obj);
  for (const codec of STRUCTS) {
    const s = btfStruct(btf, codec.cName);
    if (!s) {
      problems.push(`struct ${codec.cName}: not in the object's BTF`);
      continue;
    }
    if (s.size !== codec.size)
      problems.push(`struct ${codec.cName}: BTF size ${s.size}, layout.ts ${codec.size}`);
    const expected = new Map<string, number>();
    for (const [name, field] of Object.entries(codec.fields)) expected.set(cMemberName(name), field.offset);
    for (const [name, offset] of Object.entries(codec.padding)) expected.set(name, offset);
    for (const m of s.members) {
      const want = expected.get(m.name);
      if (want === undefined) problems.push(`struct ${codec.cName}: member ${m.name} is not in layout.ts`);
      else if (m.bitOffset !== want * 8)
        problems.push(`struct ${codec.cName}.${m.name}: BTF offset ${m.bitOffset / 8}, layout.ts ${want}`);
      expected.delete(m.name);
    }
    for (const name of expected.keys()) problems.push(`struct ${codec.cName}: ${name} is not in BTF`);
  }
  problems.push(...enumMismatches((name) => btfEnum(btf, name)));
  problems.push(...rodataMismatches(btfDatasec(btf, RODATA_MAP)));
  if (options.loaded) {
    for (const layout of Object.values(MAPS)) {
      const info = mapInfo(mapFd(findMap(obj, layout.name)));
      if (info.keySize !== layout.keySize || info.valueSize !== layout.valueSize)
        problems.push(
          `map ${layout.name}: key/value ${info.keySize}/${info.valueSize} bytes, layout.ts ${layout.keySize}/${layout.valueSize}`,
        );
    }
  }
  return problems;
}

/**
 * Compares each constant table with its C enum as `lookup` finds it in BTF: every key's
 * enumerator must be there with the same value, and the enum must have no enumerator this file
 * does not know (unless the table lists it as C-only). Returns the mismatches.
 */
export function enumMismatches(
  lookup: (cName: string) => Pick<BtfEnum, 'values'> | null,
  layouts: readonly EnumLayout[] = ENUMS,
): string[] {
  const problems: string[] = [];
  for (const layout of layouts) {
    const found = lookup(layout.cName);
    if (!found) {
      problems.push(`enum ${layout.cName}: not in the object's BTF (layout.ts ${layout.tsName})`);
      continue;
    }
    const inBtf = new Map(found.values.map((v) => [v.name, v.value]));
    for (const m of layout.members) {
      const value = inBtf.get(m.cName);
      if (value === undefined)
        problems.push(`enum ${layout.cName}: ${m.cName} is not in BTF (layout.ts ${layout.tsName}.${m.key})`);
      else if (value !== m.value)
        problems.push(
          `enum ${layout.cName}: ${m.cName} is ${value} in BTF, layout.ts ${layout.tsName}.${m.key} is ${m.value}`,
        );
      inBtf.delete(m.cName);
    }
    for (const [name, value] of inBtf) {
      if (!layout.cOnly.includes(name))
        problems.push(`enum ${layout.cName}: ${name} (${value}) is not in layout.ts ${layout.tsName}`);
    }
  }
  return problems;
}

/** The object's .rodata against `rodata`: the same variables at the same offsets, and no more
 * bytes (an initialised struct template would land there too). */
function rodataMismatches(sec: BtfDatasec | null): string[] {
  if (!sec) return [`${RODATA_MAP}: not in the object's BTF`];
  const problems: string[] = [];
  if (sec.size !== rodata.size)
    problems.push(`${RODATA_MAP}: ${sec.size} bytes in the object, layout.ts rodata ${rodata.size}`);
  const expected = new Map(Object.entries(rodata.vars));
  for (const v of sec.vars) {
    const want = expected.get(v.name);
    if (want === undefined) problems.push(`${RODATA_MAP}: ${v.name} is not in layout.ts rodata`);
    else if (v.offset !== want || v.size !== 4)
      problems.push(
        `${RODATA_MAP}: ${v.name} at ${v.offset} (${v.size} bytes), layout.ts rodata at ${want} (4)`,
      );
    expected.delete(v.name);
  }
  for (const name of expected.keys()) problems.push(`${RODATA_MAP}: ${name} is not in BTF`);
  return problems;
}

/** Throws with every mismatch between the object and layout.ts (see layoutMismatches). */
export function verifyLayoutAgainstBtf(
  obj: BpfObject,
  options: { loaded: boolean } = { loaded: true },
): void {
  const problems = layoutMismatches(obj, options);
  if (problems.length > 0)
    throw new Error(`bpf object does not match layout.ts:\n  ${problems.join('\n  ')}`);
}

/** camelCase codec field name -> the C member name (svcId -> svc_id, snatAddr4 -> snat_addr4). */
function cMemberName(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
