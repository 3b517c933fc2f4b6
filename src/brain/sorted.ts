// Sorted arrays kept sorted under small changes: a change costs binary searches and a copy of the
// array's references, not a sort of everything (the brain's service ports, the bpf plan's lists).

/** Where `x` goes in `list` (sorted by `compare`): the first entry not before it. */
export function lowerBound<T, K = T>(list: readonly T[], x: K, compare: (a: T, x: K) => number): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (compare(list[mid]!, x) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** A copy of a sorted list without the entries equal to `remove`'s and with `add`'s in place. */
export function patchSorted<T>(
  list: readonly T[],
  remove: Iterable<T>,
  add: Iterable<T>,
  compare: (a: T, b: T) => number,
): T[] {
  const out = list.slice();
  for (const x of remove) {
    const i = lowerBound(out, x, compare);
    if (i < out.length && compare(out[i]!, x) === 0) out.splice(i, 1);
  }
  for (const x of add) out.splice(lowerBound(out, x, compare), 0, x);
  return out;
}
