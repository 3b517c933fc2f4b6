// A source feeds the change trackers in model/ with SourceEvents (model/events.ts).

import type { SourceEvent } from '../model/events.js';

export interface Source {
  /** Resolves once the initial list of every kind has been delivered (kube-proxy waits for this before its first sync). */
  start(onEvent: (events: SourceEvent[]) => void): Promise<void>;
  stop(): Promise<void>;
}
