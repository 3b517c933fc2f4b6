import { describe, expect, it } from 'vitest';
import {
  localDetectorFor,
  masqueradeMark,
  nodeEligible,
  primaryNodeIP,
  resolveNodePortAddresses,
} from '../../src/brain/node.js';
import { node, nodeEnv } from '../support/model-fixtures.js';

const ifaces = nodeEnv().interfaces;

describe('nodePortAddresses', () => {
  it('matches every local address when empty, when holding the zero CIDR, or when no entry is of the family', () => {
    expect(resolveNodePortAddresses([], 'IPv4', '192.168.0.2', ifaces, true).matchAll).toBe(true);
    expect(resolveNodePortAddresses(['0.0.0.0/0'], 'IPv4', '192.168.0.2', ifaces, true).matchAll).toBe(true);
    expect(resolveNodePortAddresses(['::/0'], 'IPv6', '', ifaces, true).matchAll).toBe(true);
    expect(resolveNodePortAddresses(['192.168.0.0/24'], 'IPv6', '', ifaces, true).matchAll).toBe(true);
  });
  it('lists the node addresses inside the CIDRs', () => {
    expect(resolveNodePortAddresses(['192.168.0.0/24'], 'IPv4', '192.168.0.2', ifaces, true)).toEqual({
      matchAll: false,
      ips: ['192.168.0.2'],
    });
    expect(resolveNodePortAddresses(['2001:db8::/64'], 'IPv6', '2001:db8::2', ifaces, true)).toEqual({
      matchAll: false,
      ips: ['2001:db8::2'],
    });
    expect(resolveNodePortAddresses(['10.99.0.0/16'], 'IPv4', '192.168.0.2', ifaces, true)).toEqual({
      matchAll: false,
      ips: [],
    });
  });
  it('keeps IPv4 loopback only with localhostNodePorts and never IPv6 loopback', () => {
    expect(
      resolveNodePortAddresses(['127.0.0.0/8', '192.168.0.0/24'], 'IPv4', '192.168.0.2', ifaces, true).ips,
    ).toEqual(['127.0.0.1', '192.168.0.2']);
    expect(
      resolveNodePortAddresses(['127.0.0.0/8', '192.168.0.0/24'], 'IPv4', '192.168.0.2', ifaces, false).ips,
    ).toEqual(['192.168.0.2']);
    expect(resolveNodePortAddresses(['::1/128'], 'IPv6', '', ifaces, true).ips).toEqual([]);
  });
  it('resolves "primary" to the node IP of the family', () => {
    expect(resolveNodePortAddresses(['primary'], 'IPv4', '192.168.0.2', ifaces, true)).toEqual({
      matchAll: false,
      ips: ['192.168.0.2'],
    });
  });
});

describe('local traffic detectors', () => {
  it('ClusterCIDR uses the cluster CIDR of the family, NoOp without one', () => {
    expect(
      localDetectorFor('ClusterCIDR', 'IPv4', ['10.0.0.0/8', 'fd00:10::/64'], null, {
        bridgeInterface: '',
        interfaceNamePrefix: '',
      }),
    ).toEqual({ mode: 'ClusterCIDR', cidrs: ['10.0.0.0/8'] });
    expect(
      localDetectorFor('ClusterCIDR', 'IPv6', ['10.0.0.0/8'], null, {
        bridgeInterface: '',
        interfaceNamePrefix: '',
      }),
    ).toEqual({ mode: 'None' });
  });
  it('NodeCIDR uses the Node podCIDRs', () => {
    const n = node('test-node', { podCIDRs: ['10.244.1.0/24', 'fd00:244:1::/64'] });
    expect(
      localDetectorFor('NodeCIDR', 'IPv6', [], n, { bridgeInterface: '', interfaceNamePrefix: '' }),
    ).toEqual({ mode: 'NodeCIDR', cidrs: ['fd00:244:1::/64'] });
  });
  it('BridgeInterface and InterfaceNamePrefix carry their names', () => {
    expect(
      localDetectorFor('BridgeInterface', 'IPv4', [], null, {
        bridgeInterface: 'cbr0',
        interfaceNamePrefix: '',
      }),
    ).toEqual({ mode: 'BridgeInterface', interfaceName: 'cbr0' });
    expect(
      localDetectorFor('InterfaceNamePrefix', 'IPv4', [], null, {
        bridgeInterface: '',
        interfaceNamePrefix: 'veth',
      }),
    ).toEqual({ mode: 'InterfaceNamePrefix', prefix: 'veth' });
  });
});

describe('masquerade mark (%#08x of 1<<bit)', () => {
  it('prints 8 zero-padded digits after 0x', () => {
    expect(masqueradeMark(14)).toBe('0x00004000');
    expect(masqueradeMark(0)).toBe('0x00000001');
    expect(masqueradeMark(31)).toBe('0x80000000');
  });
});

describe('node facts', () => {
  it('takes the primary IP per family from the given IPs, else the Node InternalIP', () => {
    expect(primaryNodeIP(['2001:db8::2', '192.168.0.2'], null, 'IPv4')).toBe('192.168.0.2');
    expect(
      primaryNodeIP(
        [],
        node('n', {
          addresses: [
            { type: 'ExternalIP', address: '1.1.1.1' },
            { type: 'InternalIP', address: '10.1.1.1' },
          ],
        }),
        'IPv4',
      ),
    ).toBe('10.1.1.1');
  });
  it('is eligible unless missing, deleted, or tainted ToBeDeletedByClusterAutoscaler', () => {
    expect(nodeEligible(node('n'))).toBe(true);
    expect(nodeEligible(null)).toBe(false);
    expect(nodeEligible(node('n', { deletionTimestamp: '2026-01-01T00:00:00Z' }))).toBe(false);
    expect(
      nodeEligible(
        node('n', { taints: [{ key: 'ToBeDeletedByClusterAutoscaler', value: '1', effect: 'NoSchedule' }] }),
      ),
    ).toBe(false);
  });
});
