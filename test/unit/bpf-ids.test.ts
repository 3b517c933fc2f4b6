import { describe, expect, it } from 'vitest';
import { IdAllocator } from '../../src/dataplanes/bpf/ids.js';

describe('IdAllocator', () => {
  it('hands out ids from a cursor that moves forward and wraps', () => {
    const a = new IdAllocator('service', 1, 3, 0);
    expect(['a', 'b', 'c'].map((k) => a.allocate(k, 0))).toEqual([1, 2, 3]);
    expect(a.allocate('a', 0)).toBe(1);
    a.releaseAllExcept(new Set(['b', 'c']), 0);
    expect(a.allocate('d', 0)).toBe(1);
    expect(a.allocate('e', 0)).toBeNull();
    expect(a.keyOf(1)).toBe('d');
  });

  it('does not reuse a released or quarantined id before its time', () => {
    const a = new IdAllocator('backend', 1, 2, 1000);
    a.allocate('x', 0);
    a.releaseAllExcept(new Set(), 0);
    a.quarantine(2, 500);
    expect(a.allocate('y', 100)).toBeNull();
    expect(a.allocate('y', 600)).toBe(2);
    expect(a.allocate('z', 999)).toBeNull();
    expect(a.allocate('z', 1000)).toBe(1);
  });

  it('restores ids and continues after the highest one', () => {
    const a = new IdAllocator('service', 1, 100, 0);
    expect(a.restore('a', 7)).toBe(true);
    expect(a.restore('a', 7)).toBe(true);
    expect(a.restore('b', 7)).toBe(false);
    expect(a.restore('c', 101)).toBe(false);
    expect(a.allocate('d', 0)).toBe(8);
    a.quarantine(7, 10);
    expect(a.state().quarantined.has(7)).toBe(false);
    const copy = a.clone();
    copy.allocate('e', 0);
    expect(a.idOf('e')).toBeUndefined();
    expect(() => new IdAllocator('x', 5, 4, 0)).toThrow(/empty/);
  });

  it('hands out ids of the preferred part first, and the rest only while that part has none free', () => {
    // Backend ids: only those below bpf.mapSizes.backendCounters have counters of their own.
    const a = new IdAllocator('backend', 1, 1000, 100, undefined, 3);
    expect(['a', 'b', 'c', 'd'].map((k) => a.allocate(k, 0))).toEqual([1, 2, 3, 4]);
    a.release('b', 0);
    // 2 is in quarantine until 100: the next id comes from the rest of the range.
    expect(a.allocate('e', 50)).toBe(5);
    expect(a.allocate('f', 100)).toBe(2);
    // Churn in a small cluster keeps its ids low: released ids come back after their quarantine.
    for (let t = 200; t < 2000; t += 200) {
      a.release('f', t);
      expect(a.allocate(`g${t}`, t + 100)).toBe(2);
      a.release(`g${t}`, t + 100);
      expect(a.allocate('f', t + 200)).toBe(2);
    }
    expect(a.clone().allocate('h', 5000)).toBe(6);
    // The preferred part and its cursor are restored and copied like the rest.
    expect(a.state().cursors).toEqual([3, 6]);
  });

  it('counts the ids in use past the preferred part as they come and go, restored and copied', () => {
    const a = new IdAllocator('backend', 1, 1000, 100, undefined, 2);
    for (const k of ['a', 'b', 'c', 'd']) a.allocate(k, 0);
    expect(a.inUsePastPreferred).toBe(2);
    a.release('d', 0);
    a.release('a', 0);
    expect(a.inUsePastPreferred).toBe(1);
    expect(a.restore('x', 900)).toBe(true);
    expect(a.restore('y', 2)).toBe(false); // b holds 2: nothing counted
    expect(a.inUsePastPreferred).toBe(2);
    expect(a.clone().inUsePastPreferred).toBe(2);
    a.releaseAllExcept(new Set(['b']), 0);
    expect(a.inUsePastPreferred).toBe(0);
  });
});
