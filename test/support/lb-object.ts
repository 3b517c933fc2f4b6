// Loads bpf/lb.o for kernel tests with small map capacities (LRU maps are preallocated, and
// several engineers' tests share this machine's memory).

import { fileURLToPath } from 'node:url';
import {
  type BpfObject,
  closeObject,
  findMap,
  loadObject,
  mapFd,
  openObject,
  programFd,
  setMapMaxEntries,
} from '../../native/libbpf.js';
import { MAPS } from '../../src/dataplanes/bpf/layout.js';

export const LB_OBJECT_PATH = fileURLToPath(new URL('../../bpf/lb.o', import.meta.url));

type MapName = keyof typeof MAPS;

export interface LoadedLb {
  obj: BpfObject;
  fd: Record<MapName, number>;
  prog(name: string): number;
  close(): void;
}

const TEST_CAPACITY: Partial<Record<MapName, number>> = {
  ct4Tcp: 16384,
  ct4Any: 16384,
  ct6Tcp: 1024,
  ct6Any: 1024,
  svc6: 1024,
  backends6: 1024,
  affinity6: 1024,
  srcRange6: 1024,
};

export function loadLb(capacity: Partial<Record<MapName, number>> = {}): LoadedLb {
  const obj = openObject(LB_OBJECT_PATH);
  try {
    for (const [name, max] of Object.entries({ ...TEST_CAPACITY, ...capacity })) {
      setMapMaxEntries(findMap(obj, MAPS[name as MapName].name), max);
    }
    loadObject(obj);
  } catch (err) {
    closeObject(obj);
    throw err;
  }
  const fd = Object.fromEntries(
    Object.entries(MAPS).map(([key, layout]) => [key, mapFd(findMap(obj, layout.name))]),
  ) as Record<MapName, number>;
  return { obj, fd, prog: (name) => programFd(obj, name), close: () => closeObject(obj) };
}
