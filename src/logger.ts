// The one logger: structured JSON lines on stderr (pino), level from --v / LOG_LEVEL.
// Commands that print results to stdout keep stdout for their output.

import { type Logger, pino } from 'pino';

export type { Logger };

export function createLogger(level: string = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({ level, base: { component: 'kube-bpf-proxy' } }, pino.destination(2));
}

/** For tests and library use: logs nothing. */
export const silentLogger: Logger = pino({ level: 'silent' });
