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
});
