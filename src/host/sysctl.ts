// A sysctl set the way kube-proxy's EnsureSysctl sets it (pkg/proxy/util/utils.go at v1.37.2): read
// first, write only a value that differs. A container whose /proc/sys is read-only (any that is
// not privileged) can then still run where the node already has the value.

import type { CommandRunner } from './command.js';

/** Sets key to value unless it has it already; throws when the write fails. */
export async function ensureSysctl(exec: CommandRunner, key: string, value: string): Promise<void> {
  const current = await exec('sysctl', ['-n', key], { allowFailure: true });
  if (current.code === 0 && current.stdout.trim() === value) return;
  await exec('sysctl', ['-qw', `${key}=${value}`]);
}
