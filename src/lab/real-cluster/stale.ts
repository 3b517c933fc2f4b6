// What a run of the real cluster killed before its down() left behind, found by name (RUN_PREFIX
// and the run's pid) and removed when that pid is gone: the processes of its network namespaces
// (a node's init among them, which takes the node's pid and mount namespaces with it), the
// namespaces, the nodes' cgroups and the state directories.

import { readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCommand } from '../../host/command.js';
import { deadRunPidOf } from '../run-names.js';
import { cgroupRootsWithPrefix, removeNodeCgroups } from './cgroups.js';
import { RUN_PREFIX } from './cluster.js';

/** The pid of the run that named `name`, when that run is gone (pure but for the liveness probe). */
export function deadRunPid(name: string, alive?: (pid: number) => boolean): number | null {
  return deadRunPidOf(RUN_PREFIX, name, alive);
}

export async function removeStaleRuns(): Promise<void> {
  const { stdout } = await runCommand('ip', ['netns', 'list'], { allowFailure: true });
  const namespaces = stdout
    .split('\n')
    .map((line) => line.split(' ')[0] ?? '')
    .filter((name) => deadRunPid(name) !== null);
  for (const ns of namespaces) {
    const pids = await runCommand('ip', ['netns', 'pids', ns], { allowFailure: true });
    for (const pid of pids.stdout.split('\n').filter((p) => /^\d+$/.test(p)))
      await runCommand('kill', ['-KILL', pid], { allowFailure: true });
  }
  for (const ns of namespaces) await runCommand('ip', ['netns', 'del', ns], { allowFailure: true });
  for (const root of cgroupRootsWithPrefix(RUN_PREFIX).filter((r) => deadRunPid(r) !== null))
    await removeNodeCgroups(root);
  for (const dir of readdirSync(tmpdir()).filter((d) => deadRunPid(d) !== null))
    rmSync(join(tmpdir(), dir), { recursive: true, force: true });
  if (namespaces.length > 0) console.log(`removed what earlier runs left: ${namespaces.join(', ')}`);
}
