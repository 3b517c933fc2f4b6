// The one logger: structured JSON lines on stderr (pino). The level follows kube-proxy's -v
// (logging.verbosity: 0 info, 1-3 debug, 4 and up trace); LOG_LEVEL overrides it. Commands that
// print results keep stdout for their output.

import { type Logger, pino } from 'pino';

export type { Logger };

export function levelForVerbosity(verbosity: number): string {
  if (verbosity >= 4) return 'trace';
  return verbosity >= 1 ? 'debug' : 'info';
}

export function createLogger(verbosity = 0): Logger {
  const level = process.env.LOG_LEVEL ?? levelForVerbosity(verbosity);
  return pino({ level, base: { component: 'kube-bpf-proxy' } }, pino.destination(2));
}

/** For tests and library use: logs nothing. */
export const silentLogger: Logger = pino({ level: 'silent' });
