// oomScoreAdj: the agent's own /proc/self/oom_score_adj, written at start-up in every mode, as
// kube-proxy v1.37.2 does (cmd/kube-proxy/app/server.go calls ApplyOOMScoreAdj of
// pkg/util/oom/oom_linux.go with pid 0): two tries 100 ms apart, and when the kernel refuses
// (lowering the score needs CAP_SYS_RESOURCE) a log line and no failure: the proxy runs on with
// the score it has. The line is kube-proxy's, at its level: "Failed to apply OOMScore" at -v=2
// (debug here), since a pod without CAP_SYS_RESOURCE (the Helm chart grants it only on kernels
// before 5.11) meets it at every start, and kubelet gives the pod its oom_score_adj anyway.

import { readFileSync, writeFileSync } from 'node:fs';
import type { Logger } from '../logger.js';

export const OOM_SCORE_ADJ_PATH = '/proc/self/oom_score_adj';
const TRIES = 2;
const RETRY_MS = 100;

/** Writes `value` to /proc/self/oom_score_adj; returns the error of the last try, or null. */
export async function applyOomScoreAdj(
  value: number,
  log: Logger,
  path = OOM_SCORE_ADJ_PATH,
): Promise<Error | null> {
  let error: Error | null = null;
  for (let attempt = 0; attempt < TRIES; attempt++) {
    try {
      writeFileSync(path, String(value));
      log.debug({ path, value }, 'applied oom_score_adj');
      return null;
    } catch (err) {
      error = err as Error;
      // No such file: nothing a retry changes (kube-proxy gives up at once too).
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') break;
      if (attempt + 1 < TRIES) await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
    }
  }
  log.debug({ err: error?.message, path, value, current: readCurrent(path) }, 'Failed to apply OOMScore');
  return error;
}

function readCurrent(path: string): number | null {
  try {
    return Number.parseInt(readFileSync(path, 'utf8'), 10);
  } catch {
    return null;
  }
}
