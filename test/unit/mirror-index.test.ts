import { describe, expect, it } from 'vitest';
import {
  EntriesByService,
  PairsByService,
  type ServiceIndex,
  SlotsByService,
} from '../../src/dataplanes/bpf/mirror-index.js';
import type { AffinityMatch, SlotEntry, SlotKey } from '../../src/dataplanes/bpf/store.js';
import { mulberry32 } from '../support/random.js';

// The compact indexes must answer every question exactly as the generic one (a Map entry and an
// object per map entry) does, after any sequence of writes and deletions.

/** In one order whatever the order of their keys. */
function sorted<V extends object>(values: Iterable<V>): V[] {
  const text = (v: V) => JSON.stringify(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : 1)));
  return [...values].sort((a, b) => (text(a) < text(b) ? -1 : 1));
}

function expectSame<K extends { serviceId: number }, V extends K>(
  compact: ServiceIndex<K, V>,
  reference: ServiceIndex<K, V>,
  probes: K[],
  serviceIds: number[],
): void {
  expect(sorted(compact.all())).toEqual(sorted(reference.all()));
  for (const id of serviceIds) expect(sorted(compact.ofService(id))).toEqual(sorted(reference.ofService(id)));
  for (const k of probes) {
    expect(compact.has(k)).toBe(reference.has(k));
    expect(compact.get(k)).toEqual(reference.get(k));
  }
}

describe('SlotsByService', () => {
  it.each([1, 2, 3, 4, 5])(
    'matches the generic index after random writes and deletions (seed %i)',
    (seed) => {
      const random = mulberry32(seed);
      const pick = (n: number) => Math.floor(random() * n);
      const compact = new SlotsByService([]);
      const reference = new EntriesByService<SlotKey, SlotEntry>((k) => `${k.gen}/${k.slot}`, []);
      const serviceIds = [1, 2, 3, 7];
      const key = (): SlotKey => ({ serviceId: serviceIds[pick(4)]!, gen: pick(4), slot: pick(12) });
      for (let step = 0; step < 2_000; step++) {
        const k = key();
        if (random() < 0.6) {
          const entry = { ...k, backendId: pick(50) };
          compact.set(entry);
          reference.set(entry);
          expect(compact.backendIdAt(k)).toBe(entry.backendId);
        } else {
          compact.delete(k);
          reference.delete(k);
          expect(compact.backendIdAt(k)).toBeUndefined();
        }
        if (step % 100 === 0) expectSame(compact, reference, [key(), key(), key()], serviceIds);
      }
      expectSame(compact, reference, Array.from({ length: 50 }, key), serviceIds);
      const keep = (serviceId: number, gen: number, slot: number) => (serviceId + gen + slot) % 3 === 0;
      const kept = (s: SlotEntry) => keep(s.serviceId, s.gen, s.slot);
      expect(sorted(compact.where(keep))).toEqual(sorted(reference.all().filter(kept)));
      expect(sorted(compact.where(keep, [2, 7]))).toEqual(
        sorted(reference.all().filter((s) => kept(s) && [2, 7].includes(s.serviceId))),
      );
    },
  );

  it('starts from the entries read back from the maps', () => {
    const entries = [
      { serviceId: 4, gen: 1, slot: 2, backendId: 9 },
      { serviceId: 4, gen: 0, slot: 0, backendId: 0 },
    ];
    const index = new SlotsByService(entries);
    expect(sorted(index.all())).toEqual(sorted(entries));
    expect(index.backendIdAt({ serviceId: 4, gen: 1, slot: 0 })).toBeUndefined();
    expect(index.backendIdAt({ serviceId: 4, gen: 0, slot: 0 })).toBe(0);
  });
});

describe('PairsByService', () => {
  it.each([1, 2, 3])('matches the generic index, small and past the switch to a Set (seed %i)', (seed) => {
    const random = mulberry32(seed);
    const pick = (n: number) => Math.floor(random() * n);
    const compact = new PairsByService([]);
    const reference = new EntriesByService<AffinityMatch, AffinityMatch>((m) => m.backendId, []);
    const serviceIds = [1, 2];
    // Service 1 stays small; service 2 grows past the array's limit and shrinks again.
    const key = (): AffinityMatch => {
      const serviceId = serviceIds[pick(2)]!;
      return { serviceId, backendId: pick(serviceId === 1 ? 8 : 60) };
    };
    for (let step = 0; step < 3_000; step++) {
      const k = key();
      const add = step < 1_500 ? random() < 0.8 : random() < 0.2;
      if (add) {
        compact.set(k);
        reference.set(k);
      } else {
        compact.delete(k);
        reference.delete(k);
      }
      if (step % 100 === 0) expectSame(compact, reference, [key(), key(), key()], serviceIds);
    }
    expectSame(compact, reference, Array.from({ length: 60 }, key), serviceIds);
    const keep = (serviceId: number, backendId: number) => (serviceId + backendId) % 2 === 0;
    expect(sorted(compact.where(keep))).toEqual(
      sorted(reference.all().filter((m) => keep(m.serviceId, m.backendId))),
    );
    expect(sorted(compact.where(keep, [2]))).toEqual(
      sorted(reference.all().filter((m) => keep(m.serviceId, m.backendId) && m.serviceId === 2)),
    );
  });
});
