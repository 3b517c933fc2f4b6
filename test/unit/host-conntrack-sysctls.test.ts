import { describe, expect, it } from 'vitest';
import {
  type ConntrackReadings,
  type ConntrackSettings,
  conntrackMax,
  countCpuList,
  planConntrackSysctls,
} from '../../src/host/conntrack-sysctls.js';

/** kube-proxy v1.37.2's defaults (src/config/defaults.ts). */
const DEFAULTS: ConntrackSettings = {
  maxPerCore: 32768,
  min: 131072,
  tcpEstablishedTimeoutSeconds: 86400,
  tcpCloseWaitTimeoutSeconds: 3600,
  tcpBeLiberal: false,
  udpTimeoutSeconds: 0,
  udpStreamTimeoutSeconds: 0,
};

/** A fresh network namespace on a 2-CPU host whose nf_conntrack_max is 262144 (this machine's kernel defaults). */
function host(overrides: Partial<ConntrackReadings['sysctls']> = {}, rest: Partial<ConntrackReadings> = {}) {
  return {
    cpus: 2,
    hashsize: 262144,
    ...rest,
    sysctls: {
      nf_conntrack_max: 262144,
      nf_conntrack_tcp_timeout_established: 432000,
      nf_conntrack_tcp_timeout_close_wait: 60,
      nf_conntrack_tcp_be_liberal: 0,
      nf_conntrack_udp_timeout: 30,
      nf_conntrack_udp_timeout_stream: 120,
      ...overrides,
    },
  } satisfies ConntrackReadings;
}

describe('nf_conntrack_max, as kube-proxy v1.37.2 computes it', () => {
  it('is maxPerCore × CPUs when that is above min', () => {
    expect(conntrackMax({ maxPerCore: 32768, min: 131072 }, 8)).toBe(262144);
  });
  it('is min when maxPerCore × CPUs is not above it', () => {
    expect(conntrackMax({ maxPerCore: 32768, min: 131072 }, 2)).toBe(131072);
    expect(conntrackMax({ maxPerCore: 32768, min: 131072 }, 4)).toBe(131072);
  });
  it('is capped at 1,048,576, even when min is above the cap', () => {
    expect(conntrackMax({ maxPerCore: 32768, min: 131072 }, 64)).toBe(1048576);
    expect(conntrackMax({ maxPerCore: 32768, min: 4000000 }, 64)).toBe(1048576);
  });
  it('is 0 (leave it alone) when maxPerCore is 0, whatever min says', () => {
    expect(conntrackMax({ maxPerCore: 0, min: 131072 }, 2)).toBe(0);
  });
});

describe('planConntrackSysctls', () => {
  it('with the defaults on a host that already allows more flows, writes only the two TCP timeouts', () => {
    expect(planConntrackSysctls(DEFAULTS, host())).toEqual([
      { kind: 'sysctl', name: 'nf_conntrack_tcp_timeout_established', value: 86400 },
      { kind: 'sysctl', name: 'nf_conntrack_tcp_timeout_close_wait', value: 3600 },
    ]);
  });

  it('raises nf_conntrack_max and then the hashsize to max / 4, never lowers either', () => {
    const small = host({ nf_conntrack_max: 65536 }, { hashsize: 16384, cpus: 8 });
    expect(
      planConntrackSysctls(
        { ...DEFAULTS, tcpEstablishedTimeoutSeconds: 0, tcpCloseWaitTimeoutSeconds: 0 },
        small,
      ),
    ).toEqual([
      { kind: 'sysctl', name: 'nf_conntrack_max', value: 262144 },
      { kind: 'hashsize', value: 65536 },
    ]);
    const large = host({ nf_conntrack_max: 2000000 }, { hashsize: 500000, cpus: 8 });
    expect(
      planConntrackSysctls(
        { ...DEFAULTS, tcpEstablishedTimeoutSeconds: 0, tcpCloseWaitTimeoutSeconds: 0 },
        large,
      ),
    ).toEqual([]);
  });

  it('checks the hashsize even when nf_conntrack_max is already large enough', () => {
    expect(
      planConntrackSysctls(
        { ...DEFAULTS, tcpEstablishedTimeoutSeconds: 0, tcpCloseWaitTimeoutSeconds: 0 },
        host({}, { hashsize: 1024 }),
      ),
    ).toEqual([{ kind: 'hashsize', value: 32768 }]);
  });

  it('writes nf_conntrack_max when it cannot be read, and fails when the hashsize cannot be', () => {
    const unreadable = host({ nf_conntrack_max: null });
    expect(planConntrackSysctls(DEFAULTS, unreadable)[0]).toEqual({
      kind: 'sysctl',
      name: 'nf_conntrack_max',
      value: 131072,
    });
    expect(() => planConntrackSysctls(DEFAULTS, host({}, { hashsize: null }))).toThrow(
      /cannot read \/sys\/module\/nf_conntrack\/parameters\/hashsize/,
    );
  });

  it('with maxPerCore 0, touches neither nf_conntrack_max nor the hashsize (nor reads the hashsize)', () => {
    const plan = planConntrackSysctls(
      { ...DEFAULTS, maxPerCore: 0 },
      host({ nf_conntrack_max: 1 }, { hashsize: null }),
    );
    expect(plan.map((w) => (w.kind === 'sysctl' ? w.name : w.kind))).toEqual([
      'nf_conntrack_tcp_timeout_established',
      'nf_conntrack_tcp_timeout_close_wait',
    ]);
  });

  it('writes every setting that differs, in kube-proxy order; equal ones and zeros are left alone', () => {
    const settings: ConntrackSettings = {
      maxPerCore: 0,
      min: 0,
      tcpEstablishedTimeoutSeconds: 432000,
      tcpCloseWaitTimeoutSeconds: 120,
      tcpBeLiberal: true,
      udpTimeoutSeconds: 45,
      udpStreamTimeoutSeconds: 0,
    };
    expect(planConntrackSysctls(settings, host())).toEqual([
      { kind: 'sysctl', name: 'nf_conntrack_tcp_timeout_close_wait', value: 120 },
      { kind: 'sysctl', name: 'nf_conntrack_tcp_be_liberal', value: 1 },
      { kind: 'sysctl', name: 'nf_conntrack_udp_timeout', value: 45 },
    ]);
  });

  it('tcpBeLiberal false never writes 0 over a 1 the host set', () => {
    expect(
      planConntrackSysctls({ ...DEFAULTS, maxPerCore: 0 }, host({ nf_conntrack_tcp_be_liberal: 1 })).some(
        (w) => w.kind === 'sysctl' && w.name === 'nf_conntrack_tcp_be_liberal',
      ),
    ).toBe(false);
  });

  it('timeouts are whole seconds, as kube-proxy truncates the duration', () => {
    const plan = planConntrackSysctls({ ...DEFAULTS, maxPerCore: 0, udpStreamTimeoutSeconds: 90.7 }, host());
    expect(plan).toContainEqual({ kind: 'sysctl', name: 'nf_conntrack_udp_timeout_stream', value: 90 });
  });
});

describe('countCpuList', () => {
  it('counts the CPUs of /sys/devices/system/cpu/online', () => {
    expect(countCpuList('0-1\n')).toBe(2);
    expect(countCpuList('0-3,8,10-11')).toBe(7);
    expect(countCpuList('0')).toBe(1);
  });
  it('rejects what it cannot read', () => {
    expect(() => countCpuList('')).toThrow(/cannot read CPU list/);
    expect(() => countCpuList('3-1')).toThrow(/cannot read CPU list/);
    expect(() => countCpuList('a-b')).toThrow(/cannot read CPU list/);
  });
});
