import { describe, expect, it } from 'vitest';
import { clusterIPForFamily, servicePortsForFamily, skipReason } from '../../src/brain/service-ports.js';
import { service } from '../support/model-fixtures.js';

describe('ShouldSkipService', () => {
  it('skips headless and ExternalName services', () => {
    expect(skipReason(service('ns', 'a', { clusterIP: 'None' }))).toMatch(/headless/);
    expect(skipReason(service('ns', 'a', { clusterIP: '' }))).toMatch(/headless/);
    expect(skipReason(service('ns', 'a', { type: 'ExternalName' }))).toMatch(/ExternalName/);
    expect(skipReason(service('ns', 'a'))).toBeNull();
    expect(servicePortsForFamily(service('ns', 'a', { clusterIP: 'None' }), 'IPv4')).toEqual([]);
  });
});

describe('per-family ClusterIP (GetClusterIPByFamily)', () => {
  it('takes the first clusterIPs entry of the family', () => {
    const svc = service('ns', 'a', { clusterIP: '172.30.0.1', clusterIPs: ['172.30.0.1', 'fd00:1234::1'] });
    expect(clusterIPForFamily(svc, 'IPv4')).toBe('172.30.0.1');
    expect(clusterIPForFamily(svc, 'IPv6')).toBe('fd00:1234::1');
  });
  it('falls back to clusterIP only when clusterIPs is empty, and only for its family', () => {
    const svc = service('ns', 'a', { clusterIP: '172.30.0.1', clusterIPs: [] });
    expect(clusterIPForFamily(svc, 'IPv4')).toBe('172.30.0.1');
    expect(clusterIPForFamily(svc, 'IPv6')).toBeNull();
    expect(servicePortsForFamily(svc, 'IPv6')).toEqual([]);
  });
});

describe('service port info', () => {
  it('names ports ns/name or ns/name:port', () => {
    const svc = service('ns1', 'svc1', {
      ports: [
        { name: '', protocol: 'TCP', port: 80, nodePort: 0 },
        { name: 'p53', protocol: 'UDP', port: 53, nodePort: 0 },
      ],
    });
    expect(servicePortsForFamily(svc, 'IPv4').map((p) => p.servicePortName)).toEqual([
      'ns1/svc1',
      'ns1/svc1:p53',
    ]);
  });
  it('filters externalIPs, LB ingress IPs and source ranges by family; trims ranges; skips ipMode Proxy and hostnames', () => {
    const svc = service('ns', 'lb', {
      type: 'LoadBalancer',
      externalIPs: ['192.168.99.11', 'fd00::11', 'garbage'],
      loadBalancerIngress: [
        { ip: '1.2.3.4', hostname: '', ipMode: 'VIP' },
        { ip: '1.2.3.5', hostname: '', ipMode: 'Proxy' },
        { ip: '', hostname: 'lb.example.com', ipMode: 'VIP' },
        { ip: 'fd00::5', hostname: '', ipMode: 'VIP' },
      ],
      loadBalancerSourceRanges: [' 203.0.113.0/25', '2001:db8::/64', 'nonsense'],
    });
    const [v4] = servicePortsForFamily(svc, 'IPv4');
    expect(v4?.externalIPs).toEqual(['192.168.99.11']);
    expect(v4?.loadBalancerIPs).toEqual(['1.2.3.4']);
    expect(v4?.loadBalancerSourceRanges).toEqual(['203.0.113.0/25']);
  });
  it('treats eTP=Local as Local only for NodePort and LoadBalancer types', () => {
    const clusterIPWithExternal = service('ns', 'a', {
      externalIPs: ['192.168.99.11'],
      externalTrafficPolicy: 'Local',
    });
    expect(servicePortsForFamily(clusterIPWithExternal, 'IPv4')[0]?.externalPolicyLocal).toBe(false);
    const nodePort = service('ns', 'a', {
      type: 'NodePort',
      externalTrafficPolicy: 'Local',
      ports: [{ name: 'p80', protocol: 'TCP', port: 80, nodePort: 30080 }],
    });
    expect(servicePortsForFamily(nodePort, 'IPv4')[0]?.externalPolicyLocal).toBe(true);
  });
  it('keeps healthCheckNodePort only for type=LoadBalancer with eTP=Local (NeedsHealthCheck)', () => {
    const lbLocal = service('ns', 'a', {
      type: 'LoadBalancer',
      externalTrafficPolicy: 'Local',
      healthCheckNodePort: 30000,
    });
    const npLocal = service('ns', 'a', {
      type: 'NodePort',
      externalTrafficPolicy: 'Local',
      healthCheckNodePort: 30000,
    });
    const lbCluster = service('ns', 'a', { type: 'LoadBalancer', healthCheckNodePort: 30000 });
    expect(servicePortsForFamily(lbLocal, 'IPv4')[0]?.healthCheckNodePort).toBe(30000);
    expect(servicePortsForFamily(npLocal, 'IPv4')[0]?.healthCheckNodePort).toBe(0);
    expect(servicePortsForFamily(lbCluster, 'IPv4')[0]?.healthCheckNodePort).toBe(0);
  });
  it('carries the ClientIP affinity timeout, 0 without affinity', () => {
    expect(
      servicePortsForFamily(
        service('ns', 'a', { sessionAffinity: 'ClientIP', sessionAffinityTimeoutSeconds: 10800 }),
        'IPv4',
      )[0]?.sessionAffinityTimeoutSeconds,
    ).toBe(10800);
    expect(
      servicePortsForFamily(service('ns', 'a', { sessionAffinityTimeoutSeconds: 10800 }), 'IPv4')[0]
        ?.sessionAffinityTimeoutSeconds,
    ).toBe(0);
  });
  it('derives UsesClusterEndpoints / UsesLocalEndpoints as serviceport.go does', () => {
    const itpLocal = servicePortsForFamily(
      service('ns', 'a', { internalTrafficPolicy: 'Local' }),
      'IPv4',
    )[0]!;
    expect([itpLocal.usesClusterEndpoints, itpLocal.usesLocalEndpoints]).toEqual([false, true]);
    const itpLocalExternal = servicePortsForFamily(
      service('ns', 'a', { internalTrafficPolicy: 'Local', externalIPs: ['1.1.1.1'] }),
      'IPv4',
    )[0]!;
    expect([itpLocalExternal.usesClusterEndpoints, itpLocalExternal.usesLocalEndpoints]).toEqual([
      true,
      true,
    ]);
    const etpLocal = servicePortsForFamily(
      service('ns', 'a', {
        type: 'NodePort',
        externalTrafficPolicy: 'Local',
        ports: [{ name: '', protocol: 'TCP', port: 80, nodePort: 30001 }],
      }),
      'IPv4',
    )[0]!;
    expect([
      etpLocal.externallyAccessible,
      etpLocal.usesClusterEndpoints,
      etpLocal.usesLocalEndpoints,
    ]).toEqual([true, true, true]);
    const plain = servicePortsForFamily(service('ns', 'a'), 'IPv4')[0]!;
    expect([plain.externallyAccessible, plain.usesClusterEndpoints, plain.usesLocalEndpoints]).toEqual([
      false,
      true,
      false,
    ]);
  });
  it('handles TCP, UDP and SCTP ports alike', () => {
    const svc = service('ns', 'multi', {
      ports: [
        { name: 'a', protocol: 'TCP', port: 80, nodePort: 0 },
        { name: 'b', protocol: 'UDP', port: 53, nodePort: 0 },
        { name: 'c', protocol: 'SCTP', port: 7777, nodePort: 0 },
      ],
    });
    expect(servicePortsForFamily(svc, 'IPv4').map((p) => p.protocol)).toEqual(['TCP', 'UDP', 'SCTP']);
  });
});
