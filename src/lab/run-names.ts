// Names that carry the pid of the run that made them (network namespaces, cgroups, directories):
// a later run removes what a killed run left, once that pid is gone.

import { existsSync } from 'node:fs';

/**
 * The pid in `name` after `prefix` (e.g. kbpc123-node1 → 123), when that run is gone; null for
 * another run's live name, this run's own, or a name of another form. Pure but for the probe.
 */
export function deadRunPidOf(
  prefix: string,
  name: string,
  alive: (pid: number) => boolean = (pid) => existsSync(`/proc/${pid}`),
): number | null {
  const match = new RegExp(`^/?${prefix}(\\d+)-`).exec(name);
  if (!match) return null;
  const pid = Number(match[1]);
  return pid === process.pid || alive(pid) ? null : pid;
}
