// The kernel and e2e tiers' setup file (vitest.config.ts): after each test and after each file, no program of
// ours (kbp_sock*, bpf/lb.c's socket hooks) is attached at the machine's cgroup2 root. A test's
// agents attach their socket hooks at a cgroup the test made (Lab.ownCgroup(), the real-node lab's
// node cgroups), where they see the test's processes and none of the machine's others.

import { afterAll, afterEach } from 'vitest';
import { findCgroup2Root } from '../../src/host/cgroup.js';
import { cgroupPrograms } from './cgroup-programs.js';
import { isRoot } from './privileges.js';

async function expectNoneOursAtRoot(when: string): Promise<void> {
  if (!isRoot) return;
  const root = findCgroup2Root();
  const ours = (await cgroupPrograms(root)).filter((p) => p.name.startsWith('kbp_sock'));
  if (ours.length > 0)
    throw new Error(
      `${when}: programs of ours attached at the machine's cgroup2 root ${root}: ${ours.map((p) => `${p.name} (id ${p.id}, ${p.attachType})`).join(', ')}; give the agents a cgroup the test made (Lab.ownCgroup())`,
    );
}

afterEach((context) => expectNoneOursAtRoot(`after "${context.task.name}"`));
afterAll(() => expectNoneOursAtRoot('after the file'));
