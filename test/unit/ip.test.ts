import { describe, expect, it } from 'vitest';
import { canonicalIP, formatCIDR, ipFamilyOf, joinHostPort, parseCIDR } from '../../src/net/ip.js';

describe('sloppy IP parsing (ParseIPSloppy) and canonical printing (net.IP.String)', () => {
  it('reads IPv4 leading zeros as decimal', () => {
    expect(canonicalIP('010.001.2.3')).toBe('10.1.2.3');
    expect(canonicalIP('0000010.0.0.08')).toBe('10.0.0.8');
  });
  it('rejects what Go rejects', () => {
    for (const bad of [
      '256.1.1.1',
      '1.2.3',
      '1.2.3.4.5',
      'a.b.c.d',
      '',
      '1.2.3.-4',
      '::1::2',
      '1:2:3:4:5:6:7:8:9',
      'fe80::1%eth0',
      ' 1.2.3.4x',
    ]) {
      expect(canonicalIP(bad), bad).toBeNull();
    }
  });
  it('prints IPv6 per RFC 5952: longest zero run, first on ties, lower case', () => {
    expect(canonicalIP('2001:0DB8:0:0:0:0:0:1')).toBe('2001:db8::1');
    expect(canonicalIP('1:0:0:1:0:0:1:1')).toBe('1::1:0:0:1:1');
    expect(canonicalIP('1:0:0:1:0:0:0:1')).toBe('1:0:0:1::1');
    expect(canonicalIP('1:2:3:4:5:6:0:8')).toBe('1:2:3:4:5:6:0:8');
    expect(canonicalIP('::')).toBe('::');
    expect(canonicalIP('fd00::0001')).toBe('fd00::1');
  });
  it('treats IPv4-mapped IPv6 as IPv4, as Go does', () => {
    expect(ipFamilyOf('::ffff:10.1.2.3')).toBe('IPv4');
    expect(canonicalIP('::ffff:10.1.2.3')).toBe('10.1.2.3');
    expect(ipFamilyOf('fd00::1')).toBe('IPv6');
  });
  it('masks CIDRs to their network, like ParseCIDR', () => {
    expect(formatCIDR(parseCIDR('203.0.113.77/25')!)).toBe('203.0.113.0/25');
    expect(formatCIDR(parseCIDR('2001:db8::ff/64')!)).toBe('2001:db8::/64');
    expect(parseCIDR('10.0.0.0/33')).toBeNull();
    expect(parseCIDR('10.0.0.0')).toBeNull();
  });
  it('joins host and port like net.JoinHostPort', () => {
    expect(joinHostPort('10.180.0.1', 80)).toBe('10.180.0.1:80');
    expect(joinHostPort('fd00::1', 80)).toBe('[fd00::1]:80');
  });
});
