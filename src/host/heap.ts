// A full sync (the first, the hourly one, the one after a failure) rebuilds every Service's
// decisions, plan and map entries, and what it drops fills the old generation: V8 collects it only
// when it next needs room, and until then the process keeps the sync's peak as its RSS. One full
// collection when the sync is over gives the pages back, and it compacts: the survivors are spread
// over most of the pages the sync's garbage filled (10,000 Services: ~140 MiB of old space for
// ~96 MiB live), and only moving them frees those pages. The move needs room for the survivors
// while it runs, so the peak RSS grows by about the live heap, once per full sync.
// Incremental syncs allocate little and are left alone.

import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Logger } from '../logger.js';

type Collect = () => void;

let collector: Collect | null | undefined;

/** V8's own full collection (`gc` exposed to a fresh context), or null if this runtime refuses. */
function fullCollection(): Collect | null {
  if (collector === undefined) {
    try {
      setFlagsFromString('--expose-gc');
      const gc: unknown = runInNewContext('gc');
      collector = typeof gc === 'function' ? (gc as Collect) : null;
    } catch {
      collector = null;
    }
  }
  return collector;
}

/** Runs one full collection once the event loop has had its turn (after the sync that asks). */
export function collectHeapSoon(log: Logger): void {
  const collect = fullCollection();
  if (!collect) return;
  setImmediate(() => {
    const started = performance.now();
    const before = process.memoryUsage().heapUsed;
    // V8 on its own compacts only the pages it finds fragmented enough.
    setFlagsFromString('--compact-on-every-full-gc');
    try {
      collect();
    } finally {
      setFlagsFromString('--no-compact-on-every-full-gc');
    }
    log.debug(
      {
        ms: Math.round(performance.now() - started),
        heapUsedMiB: Math.round(process.memoryUsage().heapUsed / 2 ** 20),
        freedMiB: Math.round((before - process.memoryUsage().heapUsed) / 2 ** 20),
      },
      'heap collected after a full sync',
    );
  });
}
