import { describe, expect, it } from 'vitest';
import { Decider, decide } from '../../src/brain/decide.js';
import type { EndpointSlice, Service, ServiceCIDR } from '../../src/model/types.js';
import {
  brainConfig,
  endpoint,
  node,
  nodeEnv,
  service,
  serviceCIDR,
  serviceCIDRMap,
  slice,
} from '../support/model-fixtures.js';

const config = brainConfig({ clusterCIDRs: ['10.244.0.0/16', 'fd00:244::/56'] });

function state(services: Service[], slices: EndpointSlice[], serviceCIDRs: ServiceCIDR[] = []) {
  return {
    services: new Map(services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
    endpointSlices: new Map(slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
    node: node('test-node', { labels: { 'topology.kubernetes.io/zone': 'zone-a' } }),
    serviceCIDRs: serviceCIDRMap(...serviceCIDRs),
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

  it('serves the families the runner chose (the rule modes: IPv6 too when the kernel has it), node IPs or not', () => {
    const env = nodeEnv({ nodeIPs: ['192.168.0.2'], proxyFamilies: ['IPv6', 'IPv4'] });
    const d = decide(state([dual], slices), env, config);
    expect(d.families.map((f) => f.family)).toEqual(['IPv4', 'IPv6']);
    // No IPv6 node IP: the IPv6 family still gets its service ports.
    expect(d.families[1]?.nodeIP).toBe('');
    expect(d.families[1]?.servicePorts).toHaveLength(1);
    const v4only = decide(state([dual], slices), nodeEnv({ proxyFamilies: ['IPv4'] }), config);
    expect(v4only.families.map((f) => f.family)).toEqual(['IPv4']);
  });

  it('lists headless and ExternalName services and FQDN slices as ignored, not as decisions (Services first, by name)', () => {
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
      'Service ext: ExternalName service',
      'Service headless: headless service (no ClusterIP)',
      'EndpointSlice fqdn: FQDN EndpointSlice',
    ]);
  });

  it('gives each family the union of the ServiceCIDRs of that family: canonical, sorted by address, without duplicates', () => {
    const cidrs = [
      serviceCIDR('kubernetes', ['10.96.0.0/16', 'fd00:96::/112']),
      serviceCIDR('more', ['10.100.0.0/16']),
      // The same ranges again, written as the sloppy parse reads them; and one more IPv6 range.
      serviceCIDR('again', ['010.096.0.1/16', 'FD00:0096:0::/112']),
      serviceCIDR('v6', ['fd00:95::/112']),
    ];
    const d = decide(state([], [], cidrs), nodeEnv({ nodeIPs: ['192.168.0.2', '2001:db8::2'] }), config);
    expect(d.families.map((f) => [f.family, f.serviceCIDRs])).toEqual([
      ['IPv4', ['10.96.0.0/16', '10.100.0.0/16']],
      ['IPv6', ['fd00:95::/112', 'fd00:96::/112']],
    ]);
    expect(decide(state([], []), nodeEnv(), config).families[0]?.serviceCIDRs).toEqual([]);
  });

  it('the Decider takes ServiceCIDR changes on a partial decision, as decide() does', () => {
    const decider = new Decider();
    const env = nodeEnv({ nodeIPs: ['192.168.0.2', '2001:db8::2'] });
    const first = state([dual], slices);
    const firstScope = { changedServices: new Set<string>(), full: true, reason: 'first sync' };
    expect(decider.decide(first, env, config, firstScope).decisions).toEqual(decide(first, env, config));
    const withCIDRs = state([dual], slices, [serviceCIDR('kubernetes', ['172.30.0.0/16', 'fd00:30::/112'])]);
    const partialScope = { changedServices: new Set<string>(), full: false, reason: 'changed Services' };
    const { decisions: partial, scope } = decider.decide(withCIDRs, env, config, partialScope);
    expect(scope).toEqual(partialScope);
    expect(partial).toEqual(decide(withCIDRs, env, config));
    expect(partial.families.map((f) => f.serviceCIDRs)).toEqual([['172.30.0.0/16'], ['fd00:30::/112']]);
    expect(partial.families[0]?.servicePorts).toHaveLength(1);
  });

  it('the Decider widens a partial scope to full, and says why, when the node it decides for changes', () => {
    const decider = new Decider();
    const cluster = state([dual], slices);
    const partial = { changedServices: new Set<string>(), full: false, reason: 'changed Services' };
    decider.decide(cluster, nodeEnv({ nodeName: 'node-a' }), config, {
      ...partial,
      full: true,
      reason: 'first sync',
    });
    const same = decider.decide(cluster, nodeEnv({ nodeName: 'node-a' }), config, partial);
    expect(same.scope).toEqual(partial);
    const moved = decider.decide(cluster, nodeEnv({ nodeName: 'node-b' }), config, partial);
    expect(moved.scope).toMatchObject({
      full: true,
      reason: expect.stringMatching(/^brain: the node's name/),
    });
    expect(moved.decisions).toEqual(decide(cluster, nodeEnv({ nodeName: 'node-b' }), config));
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
