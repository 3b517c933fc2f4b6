// Garbage collection of the fragment maps (kbp_frag4_v1, kbp_frag6_v1; bpf/frag.h). A record
// serves one datagram, from its first fragment to its last: milliseconds on any path, and never
// longer than a receiving kernel waits to reassemble it (net.ipv4.ipfrag_time, 30 s by default).
// The maps are LRU, so the records of finished datagrams stayed until pressure evicted them and
// the maps never emptied once the traffic stopped (the soak, scripts/soak.sh, found 1,575 left on
// a node). Each conntrack GC pass now also deletes the records it had already seen, unchanged, at
// the previous pass: at least one GC interval old. A record rewritten meanwhile (a later datagram
// that reuses the IP id) is another datagram's, and waits for the next pass.

import { dumpMap, mapInfo } from '../../../native/libbpf/map.js';
import { deleteKeys } from './conntrack-gc.js';

/** The records (key → value, latin1) found unchanged at two passes in a row: their keys. */
export function agedRecords(
  previous: ReadonlyMap<string, string>,
  current: ReadonlyMap<string, string>,
): string[] {
  return [...current].filter(([key, value]) => previous.get(key) === value).map(([key]) => key);
}

/** One fragment map's sweep: what the last pass saw, kept for the next. */
export class FragmentSweep {
  private seen = new Map<string, string>();

  constructor(private readonly fd: number) {}

  /** Deletes the records the previous pass saw unchanged; returns how many went and how many are left. */
  sweep(): { deleted: number; left: number } {
    const { keySize, valueSize } = mapInfo(this.fd);
    const { keys, values } = dumpMap(this.fd, keySize, valueSize);
    const current = new Map(keys.map((k, i) => [k.toString('latin1'), values[i]?.toString('latin1') ?? '']));
    const aged = agedRecords(this.seen, current);
    deleteKeys(this.fd, aged, keySize);
    for (const key of aged) current.delete(key);
    this.seen = current;
    return { deleted: aged.length, left: current.size };
  }
}
