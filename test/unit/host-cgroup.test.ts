import { describe, expect, it } from 'vitest';
import {
  CGROUP2_SUPER_MAGIC,
  cgroup2MountPoint,
  firstUncoveredProcess,
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
