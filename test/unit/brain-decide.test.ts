import { describe, expect, it } from 'vitest';
import { decide } from '../../src/brain/decide.js';
import type { EndpointSlice, Service } from '../../src/model/types.js';
import { brainConfig, endpoint, node, nodeEnv, service, slice } from '../support/model-fixtures.js';

const config = brainConfig({ clusterCIDRs: ['10.244.0.0/16', 'fd00:244::/56'] });

function state(services: Service[], slices: EndpointSlice[]) {
  return {
    services: new Map(services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
    endpointSlices: new Map(slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
    node: node('test-node', { labels: { 'topology.kubernetes.io/zone': 'zone-a' } }),
    serviceCIDRs: new Map(),
  };
}

describe('decide', () => {
  const dual = service('ns', 'dual', { clusterIP: '172.30.0.1', clusterIPs: ['172.30.0.1', 'fd00:30::1'] });
  const slices = [
    slice('ns', 'dual', 'dual-v4', [
      endpoint('10.244.0.5', { nodeName: 'test-node' }),
      endpoint('10.244.1.5'),
    ]),
    slice('ns', 'dual', 'dual-v6', [endpoint('fd00:244::5')], undefined, 'IPv6'),
  ];

  it('decides both families side by side on a dual-stack node, each with its own endpoints and detector', () => {
    const d = decide(state([dual], slices), nodeEnv({ nodeIPs: ['192.168.0.2', '2001:db8::2'] }), config);
    expect(d.families.map((f) => f.family)).toEqual(['IPv4', 'IPv6']);
    const [v4, v6] = d.families;
    expect(v4?.servicePorts[0]?.clusterIP).toBe('172.30.0.1');
    expect(v4?.servicePorts[0]?.clusterEndpoints.map((e) => e.endpoint)).toEqual([
      '10.244.0.5:80',
      '10.244.1.5:80',
    ]);
    expect(v6?.servicePorts[0]?.clusterIP).toBe('fd00:30::1');
    expect(v6?.servicePorts[0]?.clusterEndpoints.map((e) => e.endpoint)).toEqual(['[fd00:244::5]:80']);
    expect(v4?.localDetector).toEqual({ mode: 'ClusterCIDR', cidrs: ['10.244.0.0/16'] });
    expect(v6?.localDetector).toEqual({ mode: 'ClusterCIDR', cidrs: ['fd00:244::/56'] });
    expect(v4?.localhostNodePorts).toBe(true);
    expect(v6?.localhostNodePorts).toBe(false);
    expect(v4?.servicePorts[0]?.localReadyEndpoints).toBe(1);
  });

  it('serves only the families the node has an IP of', () => {
    const d = decide(state([dual], slices), nodeEnv({ nodeIPs: ['192.168.0.2'] }), config);
    expect(d.families.map((f) => f.family)).toEqual(['IPv4']);
  });

  it('lists headless and ExternalName services and FQDN slices as ignored, not as decisions', () => {
    const d = decide(
      state(
        [
          service('ns', 'headless', { clusterIP: 'None' }),
          service('ns', 'ext', { type: 'ExternalName', clusterIP: '' }),
        ],
        [slice('ns', 'x', 'fqdn', [endpoint('example.com')], undefined, 'FQDN')],
      ),
      nodeEnv(),
      config,
    );
    expect(d.families[0]?.servicePorts).toEqual([]);
    expect(d.ignored.map((i) => `${i.kind} ${i.name}: ${i.reason}`)).toEqual([
      'Service headless: headless service (no ClusterIP)',
      'Service ext: ExternalName service',
      'EndpointSlice fqdn: FQDN EndpointSlice',
    ]);
  });

  it('applies topology from the node zone label', () => {
    const svc = service('ns', 'topo');
    const s = slice('ns', 'topo', 'topo-1', [
      endpoint('10.244.0.1', { zoneHints: ['zone-a'] }),
      endpoint('10.244.0.2', { zoneHints: ['zone-b'] }),
    ]);
    const d = decide(state([svc], [s]), nodeEnv(), config);
    expect(d.families[0]?.servicePorts[0]?.topologyMode).toBe('PreferSameZone');
    expect(d.families[0]?.servicePorts[0]?.clusterEndpoints.map((e) => e.endpoint)).toEqual([
      '10.244.0.1:80',
    ]);
  });
});
