// A full sync (the first, the hourly one, the one after a failure) rebuilds every Service's
// decisions, plan and map entries, and what it drops fills the old generation: V8 collects it only
// when it next needs room, and until then the process keeps the sync's peak as its RSS. One full
// collection when the sync is over gives the pages back, and it compacts: the survivors are spread
// over most of the pages the sync's garbage filled (10,000 Services: ~140 MiB of old space for
// ~96 MiB live), and only moving them frees those pages. The move needs room for the survivors
// while it runs, so the peak RSS grows by about the live heap, once per full sync.
// The sync also grew the young generation to its largest (2 × 16 MiB on 64-bit), and V8 shrinks it
// only in a full collection that finds the process has allocated little over the last seconds:
// never the one right after the sync, whose window still holds the sync. A second collection once
// the agent has been quiet for a while gives those pages back (10,000 Services: ~30 MiB of RSS).
// After each, glibc's malloc is asked to return its free pages: the lists' bodies and the native
// buffers the sync dropped leave free chunks in the arenas of the threads that held them, which
// free() returns only from the top of the main heap.
// Incremental syncs allocate little and are left alone.

import { getHeapSpaceStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { mallocTrim } from '../../native/libc.js';
import type { Logger } from '../logger.js';

type Collect = () => void;

/** Past V8's few seconds of allocation history (measured: 4.5 s after the sync's collection is too
 * soon, 6 s is enough). */
export const QUIET_COLLECTION_DELAY_MS = 10_000;

let collector: Collect | null | undefined;
let quietCollection: NodeJS.Timeout | null = null;

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

const youngGenerationMiB = () =>
  (getHeapSpaceStatistics().find((space) => space.space_name === 'new_space')?.physical_space_size ?? 0) /
  2 ** 20;

/** Runs one full collection once the event loop has had its turn (after the sync that asks), and
 * another once the agent has been quiet for `quietDelayMs`, which releases the young generation. */
export function collectHeapSoon(log: Logger, quietDelayMs = QUIET_COLLECTION_DELAY_MS): void {
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
    mallocTrim();
    log.debug(
      {
        ms: Math.round(performance.now() - started),
        heapUsedMiB: Math.round(process.memoryUsage().heapUsed / 2 ** 20),
        freedMiB: Math.round((before - process.memoryUsage().heapUsed) / 2 ** 20),
      },
      'heap collected after a full sync',
    );
    if (quietCollection) clearTimeout(quietCollection);
    quietCollection = setTimeout(() => {
      quietCollection = null;
      const before = youngGenerationMiB();
      collect();
      mallocTrim();
      log.debug(
        { youngGenerationMiB: { before: Math.round(before), after: Math.round(youngGenerationMiB()) } },
        'heap collected once quiet',
      );
    }, quietDelayMs);
    // A pending collection never keeps a stopping agent alive.
    quietCollection.unref();
  });
}
