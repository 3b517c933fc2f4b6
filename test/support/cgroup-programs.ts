// The BPF programs attached directly at a cgroup, as bpftool lists them: for the checks that the
// lab's agents attach their socket hooks at their own nodes' cgroups, never at the machine's root.

import { runCommand } from '../../src/host/command.js';

export interface CgroupProgram {
  id: number;
  attachType: string;
  name: string;
}

/** `bpftool cgroup show DIR`: the programs attached at DIR itself (not those it inherits). */
export async function cgroupPrograms(dir: string): Promise<CgroupProgram[]> {
  const { stdout } = await runCommand('bpftool', ['-j', 'cgroup', 'show', dir]);
  // bpftool prints nothing at all for a cgroup without programs.
  if (stdout.trim() === '') return [];
  const listed = JSON.parse(stdout) as { id: number; attach_type: string; name: string }[];
  return listed.map((p) => ({ id: p.id, attachType: p.attach_type, name: p.name }));
}
