import { afterAll, beforeAll, expect, it } from 'vitest';
import { btfDatasec, btfEnum, objectBtf } from '../../native/libbpf/btf.js';
import { mapInfo } from '../../native/libbpf/map.js';
import { closeObject, getPinned, openObject, pinObject } from '../../native/libbpf/object.js';
import { closeFd } from '../../native/libc.js';
import {
  enumMismatches,
  layoutMismatches,
  verifyLayoutAgainstBtf,
} from '../../src/dataplanes/bpf/btf-check.js';
import { ENUMS, MAPS, RODATA_MAP, rodata, STRUCTS } from '../../src/dataplanes/bpf/layout.js';
import { makePinDir, removePinDir } from '../support/bpffs.js';
import { LB_OBJECT_PATH, loadLb } from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

describeRoot('bpf/lb.o layout (BTF)', () => {
  let pinDir = '';
  beforeAll(() => {
    pinDir = makePinDir('layout');
  });
  afterAll(() => removePinDir(pinDir));

  it('matches layout.ts in the BTF of the opened object, struct by struct', () => {
    const obj = openObject(LB_OBJECT_PATH);
    try {
      expect(layoutMismatches(obj, { loaded: false })).toEqual([]);
    } finally {
      closeObject(obj);
    }
    expect(STRUCTS.length).toBeGreaterThan(20);
  });

  it('has every constant layout.ts uses as an enum in BTF, and catches one that differs', () => {
    const obj = openObject(LB_OBJECT_PATH);
    try {
      const btf = objectBtf(obj);
      const lookup = (name: string) => btfEnum(btf, name);
      for (const e of ENUMS) expect(lookup(e.cName), e.cName).not.toBeNull();
      expect(btfEnum(btf, 'kbp_ct_flags')?.size).toBe(1);
      expect(enumMismatches(lookup)).toEqual([]);
      const tampered = ENUMS.map((e) =>
        e.tsName === 'DROP_REASON'
          ? { ...e, members: e.members.map((m) => (m.key === 'fib' ? { ...m, value: 11 } : m)) }
          : e,
      );
      expect(enumMismatches(lookup, tampered)).toEqual([
        'enum kbp_drop_reason: KBP_DROP_FIB is 9 in BTF, layout.ts DROP_REASON.fib is 11',
      ]);
    } finally {
      closeObject(obj);
    }
  });

  it('holds only the load-time constants in .rodata', () => {
    const obj = openObject(LB_OBJECT_PATH);
    try {
      const sec = btfDatasec(objectBtf(obj), RODATA_MAP);
      expect(sec?.size).toBe(rodata.size);
      expect(Object.fromEntries(sec!.vars.map((v) => [v.name, v.offset]))).toEqual(rodata.vars);
    } finally {
      closeObject(obj);
    }
  });

  it('creates every map with the key and value sizes layout.ts states, and pins them', () => {
    const lb = loadLb();
    try {
      verifyLayoutAgainstBtf(lb.obj);
      const path = `${pinDir}/${MAPS.svc4.name}`;
      pinObject(lb.fd.svc4, path);
      const fd = getPinned(path);
      try {
        expect(mapInfo(fd)).toMatchObject({ name: MAPS.svc4.name, keySize: 8, valueSize: 24 });
      } finally {
        closeFd(fd);
      }
    } finally {
      lb.close();
    }
  });
});
