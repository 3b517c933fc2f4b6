import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  CGROUP2_SUPER_MAGIC,
  cgroup2MountPoint,
  cgroup2PathOf,
  cgroupOfPid,
  firstUncoveredProcess,
  nodeCgroupOf,
  resolveCgroup2Dir,
  uncoveredProcessWarning,
} from '../../src/host/cgroup.js';

describe('cgroup2MountPoint', () => {
  it('finds the unified layout at /sys/fs/cgroup', () => {
    const mountinfo = [
      '22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw',
      '30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate',
    ].join('\n');
    expect(cgroup2MountPoint(mountinfo)).toBe('/sys/fs/cgroup');
  });

  it('finds the hybrid layout at /sys/fs/cgroup/unified, next to the v1 controllers', () => {
    const mountinfo = [
      '31 22 0:27 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755',
      '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw',
      '42 31 0:39 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct',
    ].join('\n');
    expect(cgroup2MountPoint(mountinfo)).toBe('/sys/fs/cgroup/unified');
  });

  it('skips mounts of a sub-cgroup and takes the shortest root mount; null without cgroup2', () => {
    const mountinfo = [
      '50 22 0:26 /kubepods /var/lib/x rw - cgroup2 cgroup2 rw',
      '51 22 0:26 / /host\\040root/sys/fs/cgroup rw - cgroup2 cgroup2 rw',
      '52 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw',
    ].join('\n');
    expect(cgroup2MountPoint(mountinfo)).toBe('/sys/fs/cgroup');
    expect(cgroup2MountPoint(mountinfo.split('\n').slice(0, 2).join('\n'))).toBe('/host root/sys/fs/cgroup');
    expect(cgroup2MountPoint('22 1 0:21 / /sys rw - sysfs sysfs rw')).toBeNull();
  });
});

describe('resolveCgroup2Dir', () => {
  const TMPFS = 0x01021994;
  const fs = (types: Record<string, number>) => (path: string) => {
    const type = types[path];
    if (type === undefined) throw Object.assign(new Error(`ENOENT ${path}`), { code: 'ENOENT' });
    return type;
  };

  it('takes a cgroup2 directory as it is, and the unified subdirectory of a hybrid root', () => {
    expect(resolveCgroup2Dir('/sys/fs/cgroup', fs({ '/sys/fs/cgroup': CGROUP2_SUPER_MAGIC }))).toBe(
      '/sys/fs/cgroup',
    );
    expect(
      resolveCgroup2Dir(
        '/run/kube-bpf-proxy/cgroupv2',
        fs({
          '/run/kube-bpf-proxy/cgroupv2': TMPFS,
          '/run/kube-bpf-proxy/cgroupv2/unified': CGROUP2_SUPER_MAGIC,
        }),
      ),
    ).toBe('/run/kube-bpf-proxy/cgroupv2/unified');
  });

  it('refuses a directory that is neither', () => {
    expect(() => resolveCgroup2Dir('/sys/fs/cgroup', fs({ '/sys/fs/cgroup': TMPFS }))).toThrow(
      '/sys/fs/cgroup is not a cgroup v2 directory, nor is /sys/fs/cgroup/unified',
    );
  });
});

describe('which processes the socket hooks on bpf.cgroupPath cannot see', () => {
  const agent = { pid: 100, comm: 'kube-bpf-proxy' };
  const kubelet = { pid: 200, comm: 'kubelet' };
  const sshd = { pid: 300, comm: 'sshd' };

  it('nothing when the cgroup holds the agent and every process of its network namespace', () => {
    expect(firstUncoveredProcess(agent, [agent, kubelet, sshd], new Set([100, 200, 300, 999]))).toBeNull();
  });

  it('the agent itself first when it is outside', () => {
    expect(firstUncoveredProcess(agent, [agent, kubelet], new Set([200]))).toEqual({
      ...agent,
      isAgent: true,
    });
  });

  it('else the first process of the namespace outside, as the one example', () => {
    expect(firstUncoveredProcess(agent, [agent, kubelet, sshd], new Set([100, 200]))).toEqual({
      ...sshd,
      isAgent: false,
    });
  });

  it('the warning names the cgroup, the example and the setting that fixes it', () => {
    const text = uncoveredProcessWarning('/sys/fs/cgroup/kubepods.slice', { ...sshd, isAgent: false });
    expect(text).toContain('bpf.cgroupPath /sys/fs/cgroup/kubepods.slice does not contain');
    expect(text).toContain('(pid 300, sshd)');
    expect(text).toContain('no service translation at the socket hooks');
    expect(uncoveredProcessWarning('/x', { ...agent, isAgent: true })).toContain('the agent itself (pid 100');
  });
});

// Issue 27: on the real cluster's nodes (src/lab/real-cluster/), which share this machine's cgroup2
// hierarchy, the chart's agent attached its socket hooks at the hierarchy's root, where they saw
// every node's processes. It now narrows a root to its node's cgroup, the parent of kubepods.
describe("the node's cgroup for the socket hooks", () => {
  it('is the parent of kubepods: the root on a usual node, the kubelet cgroupRoot on a nested one', () => {
    expect(nodeCgroupOf('/kubepods/besteffort/pod1234/abcd')).toBe('/');
    expect(
      nodeCgroupOf('/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-x.scope'),
    ).toBe('/');
    expect(nodeCgroupOf('/kbpc77-node1/kubepods/burstable/pod9/ctr')).toBe('/kbpc77-node1');
    expect(nodeCgroupOf('/system.slice/kube-bpf-proxy.service')).toBeNull();
    expect(nodeCgroupOf('/')).toBeNull();
  });

  it("reads the cgroup2 path of /proc/self/cgroup beside a hybrid host's v1 lines", () => {
    expect(cgroup2PathOf('12:pids:/node1/kubepods/pod1/c\n0::/node1/kubepods/pod1/c\n')).toBe(
      '/node1/kubepods/pod1/c',
    );
    expect(cgroup2PathOf('4:memory:/x\n')).toBeNull();
  });

  describe('finds the cgroup holding a pid in a hierarchy', () => {
    const root = mkdtempSync(join(tmpdir(), 'kbp-cgroup-'));
    const cgroup = (rel: string, pids: number[]) => {
      mkdirSync(join(root, rel), { recursive: true });
      writeFileSync(join(root, rel, 'cgroup.procs'), pids.map((p) => `${p}\n`).join(''));
    };
    cgroup('/', [1]);
    cgroup('/node1/system', [10, 11]);
    cgroup('/node1/kubepods/besteffort/pod1/agent', [42]);
    cgroup('/node2/kubepods/besteffort/pod2/agent', [43]);
    afterAll(() => rmSync(root, { recursive: true, force: true }));

    it('takes the hint when it holds the pid', () => {
      expect(cgroupOfPid(root, 42, '/node1/kubepods/besteffort/pod1/agent')).toBe(
        '/node1/kubepods/besteffort/pod1/agent',
      );
    });

    it('walks the tree when the hint is relative to a cgroup namespace ("/"), or wrong', () => {
      expect(cgroupOfPid(root, 43, '/')).toBe('/node2/kubepods/besteffort/pod2/agent');
      expect(cgroupOfPid(root, 11, '/elsewhere')).toBe('/node1/system');
      expect(cgroupOfPid(root, 99, null)).toBeNull();
    });
  });
});
