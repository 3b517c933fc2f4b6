// The real kube-proxy's klog lines read as syncs (src/lab/kube-proxy.ts), as the benchmark and the
// differential test follow it, and the shared KubeProxyConfiguration.

import { describe, expect, it } from 'vitest';
import {
  goDurationMs,
  kubeProxyConfig,
  kubeProxyLineReader,
  parseKlogLine,
  SYNC_LOG_LEVEL,
} from '../../src/lab/kube-proxy.js';

describe('kube-proxy log', () => {
  it('parses klog text lines: message and key=value pairs, quoted or not', () => {
    expect(
      parseKlogLine(
        'I1201 23:40:00.123456   4242 proxier.go:301] "Iptables sync params" ipFamily="IPv4" minSyncPeriod="1s" syncPeriod="30s" maxSyncPeriod="1h0m0s"',
      ),
    ).toEqual({
      msg: 'Iptables sync params',
      ipFamily: 'IPv4',
      minSyncPeriod: '1s',
      syncPeriod: '30s',
      maxSyncPeriod: '1h0m0s',
    });
    expect(parseKlogLine('E1201 01:02:03.4 7 x.go:1] "Sync failed" retryingTime=30s')).toEqual({
      msg: 'Sync failed',
      retryingTime: '30s',
    });
    expect(parseKlogLine('not klog')).toBeNull();
  });

  it('reads Go durations in milliseconds', () => {
    expect(goDurationMs('12.5ms')).toBe(12.5);
    expect(goDurationMs('1.5s')).toBe(1500);
    expect(goDurationMs('1m2.5s')).toBe(62500);
    expect(goDurationMs('850µs')).toBeCloseTo(0.85);
    expect(goDurationMs('3ns')).toBeCloseTo(3e-6);
    expect(goDurationMs('12 ms')).toBeNaN();
    expect(goDurationMs('')).toBeNaN();
  });

  it('counts the IPv4 proxier\'s "SyncProxyRules complete" lines as syncs, full or partial', () => {
    const read = kubeProxyLineReader();
    const line = (msg: string, fields: string) => `I1201 23:40:00.1 1 proxier.go:9] "${msg}" ${fields}`;
    expect(
      read(
        line(
          'Not syncing iptables until Services and Endpoints have been received from master',
          'ipFamily="IPv4"',
        ),
      ).sync,
    ).toBeUndefined();
    expect(read(line('Syncing iptables rules', 'ipFamily="IPv6" fullSync=true')).sync).toBeUndefined();
    expect(read(line('SyncProxyRules complete', 'ipFamily="IPv6" elapsed="2ms"')).sync).toBeUndefined();
    read(line('Syncing iptables rules', 'ipFamily="IPv4" fullSync=true'));
    expect(read(line('SyncProxyRules complete', 'ipFamily="IPv4" elapsed="1.25s"')).sync).toEqual({
      durationMs: 1250,
      full: true,
    });
    read(line('Syncing nftables rules', 'ipFamily="IPv4" fullSync=false'));
    expect(read(line('SyncProxyRules complete', 'ipFamily="IPv4" elapsed="40ms"')).sync).toEqual({
      durationMs: 40,
      full: false,
    });
  });

  it("the IPv6 proxier's syncs when its family is measured, and none of the IPv4 one's", () => {
    const read = kubeProxyLineReader('IPv6');
    const line = (msg: string, fields: string) => `I1202 06:10:00.1 1 proxier.go:9] "${msg}" ${fields}`;
    read(line('Syncing iptables rules', 'ipFamily="IPv4" fullSync=true'));
    expect(read(line('SyncProxyRules complete', 'ipFamily="IPv4" elapsed="9ms"')).sync).toBeUndefined();
    read(line('Syncing iptables rules', 'ipFamily="IPv6" fullSync=true'));
    expect(read(line('SyncProxyRules complete', 'ipFamily="IPv6" elapsed="30ms"')).sync).toEqual({
      durationMs: 30,
      full: true,
    });
  });

  it('reads the ipvs proxier\'s syncs, logged at --v=4 with a lowercase "syncProxyRules complete"; every one full', () => {
    expect(SYNC_LOG_LEVEL).toEqual({ iptables: 2, nftables: 2, ipvs: 4 });
    const read = kubeProxyLineReader();
    const line = (msg: string, fields: string) => `I1202 02:40:00.1 1 proxier.go:9] "${msg}" ${fields}`;
    expect(read(line('ipvs sync params', 'ipFamily="IPv4" minSyncPeriod="1s"')).sync).toBeUndefined();
    expect(read(line('Syncing ipvs proxier rules', 'ipFamily="IPv4"')).sync).toBeUndefined();
    expect(read(line('syncProxyRules complete', 'ipFamily="IPv6" elapsed="3ms"')).sync).toBeUndefined();
    expect(read(line('syncProxyRules complete', 'ipFamily="IPv4" elapsed="812.5ms"')).sync).toEqual({
      durationMs: 812.5,
      full: true,
    });
  });

  it('ipvs mode names its scheduler in its own section, beside its periods; other modes have none', () => {
    const base = { hostname: 'node', clusterCIDR: '10.244.0.0/16', kubeconfig: '/k' };
    expect(kubeProxyConfig({ ...base, mode: 'ipvs', syncPeriod: '5s', ipvsScheduler: 'rr' })).toContain(
      'ipvs:\n  syncPeriod: 5s\n  scheduler: rr\n',
    );
    expect(kubeProxyConfig({ ...base, mode: 'ipvs', ipvsScheduler: 'rr' })).toContain(
      'ipvs:\n  scheduler: rr\n',
    );
    expect(kubeProxyConfig({ ...base, mode: 'ipvs' })).not.toContain('ipvs:');
    expect(() => kubeProxyConfig({ ...base, mode: 'iptables', ipvsScheduler: 'rr' })).toThrow(/scheduler/);
  });

  it('one configuration for both: periods in the mode section, extra lines appended', () => {
    const text = kubeProxyConfig({
      mode: 'nftables',
      hostname: 'node',
      clusterCIDR: '10.244.0.0/16',
      kubeconfig: '/k',
      syncPeriod: '5s',
      extraLines: ['bpf:', '  pinPath: /sys/fs/bpf/x'],
    });
    expect(text).toContain('mode: nftables\nhostnameOverride: node\n');
    expect(text).toContain('clientConnection:\n  kubeconfig: /k\nmetricsBindAddress');
    expect(text).toContain('nftables:\n  syncPeriod: 5s\nbpf:\n  pinPath: /sys/fs/bpf/x\n');
  });
});
