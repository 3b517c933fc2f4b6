import { afterAll, beforeAll, expect, it } from 'vitest';
import { closeObject, getPinned, mapInfo, openObject, pinObject } from '../../native/libbpf.js';
import { closeFd } from '../../native/libc.js';
import { layoutMismatches, MAPS, STRUCTS, verifyLayoutAgainstBtf } from '../../src/dataplanes/bpf/layout.js';
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
