import { describe, expect, it } from 'vitest';
import { BPF_FS_MAGIC, bpffsVerdict, pinPathError } from '../../src/host/bpffs.js';

const SYSFS = 0x62656572;
const TMPFS = 0x01021994;

describe('bpffs verdict', () => {
  it('accepts a pin path whose nearest existing directory is on bpffs, wherever bpffs is mounted', () => {
    for (const [pinPath, existing] of [
      ['/sys/fs/bpf/kube-bpf-proxy', '/sys/fs/bpf'],
      ['/sys/fs/bpf/kube-bpf-proxy', '/sys/fs/bpf/kube-bpf-proxy'],
      ['/run/bpf/pins', '/run/bpf'],
    ] as const) {
      expect(bpffsVerdict({ pinPath, existing, fsType: BPF_FS_MAGIC })).toEqual({ action: 'ok' });
    }
  });

  it('mounts bpffs when /sys/fs/bpf is the bare sysfs directory', () => {
    expect(
      bpffsVerdict({ pinPath: '/sys/fs/bpf/kube-bpf-proxy', existing: '/sys/fs/bpf', fsType: SYSFS }),
    ).toEqual({ action: 'mount', why: '/sys/fs/bpf is on sysfs, not bpffs' });
    expect(bpffsVerdict({ pinPath: '/sys/fs/bpf', existing: '/sys/fs/bpf', fsType: SYSFS }).action).toBe(
      'mount',
    );
  });

  it('refuses a pin path on another filesystem rather than mounting over it', () => {
    expect(bpffsVerdict({ pinPath: '/tmp/x', existing: '/tmp', fsType: TMPFS })).toEqual({
      action: 'fail',
      why: '/tmp is on tmpfs, not bpffs',
    });
    // Something mounted below /sys/fs/bpf: a bpffs on top of /sys/fs/bpf would hide it.
    expect(
      bpffsVerdict({ pinPath: '/sys/fs/bpf/kbp/v1', existing: '/sys/fs/bpf/kbp', fsType: TMPFS }),
    ).toEqual({ action: 'fail', why: '/sys/fs/bpf/kbp is on tmpfs, not bpffs' });
    expect(bpffsVerdict({ pinPath: '/srv/pins', existing: '/', fsType: 0x1234 })).toEqual({
      action: 'fail',
      why: '/ is on a filesystem of type 0x1234, not bpffs',
    });
  });

  it('refuses when /sys/fs/bpf itself is missing (no sysfs, or a kernel without bpf)', () => {
    expect(
      bpffsVerdict({ pinPath: '/sys/fs/bpf/kube-bpf-proxy', existing: '/sys/fs', fsType: SYSFS }),
    ).toEqual({ action: 'fail', why: '/sys/fs/bpf does not exist' });
  });

  it('does not take a sibling of /sys/fs/bpf for a path under it', () => {
    expect(bpffsVerdict({ pinPath: '/sys/fs/bpfx/pins', existing: '/sys/fs', fsType: SYSFS })).toEqual({
      action: 'fail',
      why: '/sys/fs is on sysfs, not bpffs',
    });
  });

  it('names the fix in the error', () => {
    expect(pinPathError('/tmp/x', '/tmp is on tmpfs, not bpffs')).toBe(
      'bpf.pinPath /tmp/x is not on a bpffs mount (/tmp is on tmpfs, not bpffs); mount one with "mount -t bpf bpffs /sys/fs/bpf" or set bpf.pinPath/--bpf-pin-path under a bpffs mount',
    );
  });
});
