import { describe, expect, it } from 'vitest';
import {
  categorizeEndpoints,
  mergeSlices,
  portKey,
  type TopologyContext,
} from '../../src/brain/endpoints.js';
import type { Endpoint } from '../../src/brain/types.js';
import { endpoint, slice } from '../support/model-fixtures.js';

const ctx: TopologyContext = { nodeName: 'test-node', zone: 'zone-a', preferSameTrafficDistribution: false };
const names = (eps: Endpoint[]) => eps.map((ep) => ep.endpoint);

describe('EndpointSlice merging', () => {
  it('matches slice ports by name and protocol, and skips nil or zero ports', () => {
    const s = slice(
      'ns',
      'svc',
      's1',
      [endpoint('10.0.0.1')],
      [
        { name: 'p80', port: 80, protocol: 'TCP' },
        { name: 'p80', port: 8080, protocol: 'UDP' },
        { name: 'nil-port', port: null, protocol: 'TCP' },
        { name: 'zero', port: 0, protocol: 'TCP' },
        { name: '', port: 82, protocol: 'TCP' },
      ],
    );
    const merged = mergeSlices([s], 'IPv4', 'test-node');
    expect([...merged.keys()].sort()).toEqual(
      [portKey('', 'TCP'), portKey('p80', 'TCP'), portKey('p80', 'UDP')].sort(),
    );
    expect(names(merged.get(portKey('p80', 'UDP'))!)).toEqual(['10.0.0.1:8080']);
    expect(names(merged.get(portKey('', 'TCP'))!)).toEqual(['10.0.0.1:82']);
  });
  it('uses only addresses[0], parsed sloppily, and skips endpoints without addresses or of the other family', () => {
    const s = slice('ns', 'svc', 's1', [
      { ...endpoint('010.001.2.3'), addresses: ['010.001.2.3', '10.9.9.9'] },
      { ...endpoint('x'), addresses: [] },
      endpoint('fd00::1'),
      endpoint('not-an-ip'),
    ]);
    expect(names(mergeSlices([s], 'IPv4', 'test-node').get(portKey('p80', 'TCP'))!)).toEqual(['10.1.2.3:80']);
  });
  it('merges slices of one family and ignores slices of the other address type', () => {
    const a = slice('ns', 'svc', 's1', [endpoint('10.0.0.1')]);
    const b = slice('ns', 'svc', 's2', [endpoint('10.0.0.2')]);
    const v6 = slice('ns', 'svc', 's3', [endpoint('fd00::3')], undefined, 'IPv6');
    expect(names(mergeSlices([a, b, v6], 'IPv4', 'n').get(portKey('p80', 'TCP'))!)).toEqual([
      '10.0.0.1:80',
      '10.0.0.2:80',
    ]);
    expect(names(mergeSlices([a, b, v6], 'IPv6', 'n').get(portKey('p80', 'TCP'))!)).toEqual(['[fd00::3]:80']);
  });
  it('sorts by the endpoint string, so 10.0.0.10:80 comes before 10.0.0.1:80 and 10.0.0.2:80', () => {
    const s = slice('ns', 'svc', 's1', [endpoint('10.0.0.2'), endpoint('10.0.0.10'), endpoint('10.0.0.1')]);
    expect(names(mergeSlices([s], 'IPv4', 'n').get(portKey('p80', 'TCP'))!)).toEqual([
      '10.0.0.10:80',
      '10.0.0.1:80',
      '10.0.0.2:80',
    ]);
  });
  it('prefers a non-terminating copy of a duplicated endpoint', () => {
    const terminating = { ready: false, serving: true, terminating: true };
    const live = slice('ns', 'svc', 'a', [endpoint('10.0.0.1')]);
    const dying = slice('ns', 'svc', 'b', [endpoint('10.0.0.1', { conditions: terminating })]);
    const [ep] = mergeSlices([live, dying], 'IPv4', 'n').get(portKey('p80', 'TCP'))!;
    expect(ep?.terminating).toBe(false);
    const [ep2] = mergeSlices([dying, live].reverse(), 'IPv4', 'n').get(portKey('p80', 'TCP'))!;
    expect(ep2?.terminating).toBe(false);
  });
  it('resolves other duplicates as kube-proxy does: the last live copy in slice-name order, else the first', () => {
    const terminating = { ready: false, serving: true, terminating: true };
    const live = { ready: true, serving: true, terminating: false };
    const copy = (name: string, nodeName: string, conditions = live) =>
      slice('ns', 'svc', name, [endpoint('10.0.0.1', { nodeName, conditions }), endpoint('10.0.0.2')]);
    const winner = (slices: ReturnType<typeof slice>[]) => {
      const list = mergeSlices(slices, 'IPv4', 'n').get(portKey('p80', 'TCP'))!;
      expect(names(list)).toEqual(['10.0.0.1:80', '10.0.0.2:80']);
      return list[0]!.nodeName;
    };
    expect(winner([copy('b', 'y'), copy('a', 'x')])).toBe('y');
    expect(winner([copy('b', 'y', terminating), copy('a', 'x', terminating)])).toBe('x');
    expect(winner([copy('c', 'z', terminating), copy('b', 'y'), copy('a', 'x')])).toBe('y');
    // Within one slice too: the later live copy wins.
    const within = slice('ns', 'svc', 'a', [
      endpoint('10.0.0.1', { nodeName: 'x' }),
      endpoint('10.0.0.1', { nodeName: 'y' }),
      endpoint('10.0.0.1', { nodeName: 'z', conditions: terminating }),
    ]);
    expect(
      mergeSlices([within], 'IPv4', 'n')
        .get(portKey('p80', 'TCP'))!
        .map((e) => e.nodeName),
    ).toEqual(['y']);
  });
  it('reads conditions: ready/serving default true, terminating default false; isLocal from nodeName', () => {
    const s = slice('ns', 'svc', 's1', [
      endpoint('10.0.0.1', { nodeName: 'test-node' }),
      endpoint('10.0.0.2', {
        conditions: { ready: false, serving: null, terminating: true },
        nodeName: 'other',
      }),
    ]);
    const [a, b] = mergeSlices([s], 'IPv4', 'test-node').get(portKey('p80', 'TCP'))!;
    expect(a).toMatchObject({ ready: true, serving: true, terminating: false, isLocal: true });
    expect(b).toMatchObject({ ready: false, serving: true, terminating: true, isLocal: false });
  });
});

function ep(name: string, extra: Partial<Endpoint> = {}): Endpoint {
  return {
    ip: name,
    port: 80,
    endpoint: `${name}:80`,
    isLocal: false,
    ready: true,
    serving: true,
    terminating: false,
    nodeName: null,
    zoneHints: [],
    nodeHints: [],
    ...extra,
  };
}
const cluster = { usesClusterEndpoints: true, usesLocalEndpoints: false };
const local = { usesClusterEndpoints: false, usesLocalEndpoints: true };
const both = { usesClusterEndpoints: true, usesLocalEndpoints: true };
const terminating = { ready: false, serving: true, terminating: true };

describe('CategorizeEndpoints', () => {
  it('uses ready endpoints for the Cluster policy', () => {
    const r = categorizeEndpoints(
      [ep('10.0.0.1'), ep('10.0.0.2', { ready: false, serving: false })],
      cluster,
      ctx,
    );
    expect(names(r.clusterEndpoints)).toEqual(['10.0.0.1:80']);
    expect(r.allReachableEndpoints).toBe(r.clusterEndpoints);
    expect(r.hasAnyEndpoints).toBe(true);
  });
  it('falls back to serving+terminating endpoints when no endpoint is ready', () => {
    const r = categorizeEndpoints(
      [ep('10.0.0.1', terminating), ep('10.0.0.2', { ready: false, serving: false, terminating: true })],
      cluster,
      ctx,
    );
    expect(names(r.clusterEndpoints)).toEqual(['10.0.0.1:80']);
    expect(r.hasAnyEndpoints).toBe(true);
  });
  it('has no endpoints when nothing is ready or serving-terminating', () => {
    const r = categorizeEndpoints([ep('10.0.0.1', { ready: false, serving: false })], both, ctx);
    expect(r.hasAnyEndpoints).toBe(false);
    expect(r.clusterEndpoints).toEqual([]);
    expect(r.localEndpoints).toEqual([]);
  });
  it('Local policy: local ready endpoints; hasAnyEndpoints from endpoints anywhere', () => {
    const r = categorizeEndpoints([ep('10.0.0.1', { isLocal: true }), ep('10.0.0.2')], local, ctx);
    expect(names(r.localEndpoints)).toEqual(['10.0.0.1:80']);
    expect(r.allReachableEndpoints).toBe(r.localEndpoints);
    const remoteOnly = categorizeEndpoints([ep('10.0.0.2')], local, ctx);
    expect(remoteOnly.localEndpoints).toEqual([]);
    expect(remoteOnly.hasAnyEndpoints).toBe(true);
  });
  it('Local policy falls back to local serving+terminating endpoints, and the union is reachable', () => {
    const r = categorizeEndpoints(
      [ep('10.0.0.1', { isLocal: true, ...terminating }), ep('10.0.0.2')],
      both,
      ctx,
    );
    expect(names(r.localEndpoints)).toEqual(['10.0.0.1:80']);
    expect(names(r.clusterEndpoints)).toEqual(['10.0.0.2:80']);
    expect(names(r.allReachableEndpoints)).toEqual(['10.0.0.1:80', '10.0.0.2:80']);
  });
  it('filters by zone hints when every ready endpoint has hints and one matches the node zone', () => {
    const eps = [ep('10.0.0.1', { zoneHints: ['zone-a'] }), ep('10.0.0.2', { zoneHints: ['zone-b'] })];
    const r = categorizeEndpoints(eps, cluster, ctx);
    expect(r.topologyMode).toBe('PreferSameZone');
    expect(names(r.clusterEndpoints)).toEqual(['10.0.0.1:80']);
  });
  it('ignores zone hints when one ready endpoint lacks them, or none matches the zone', () => {
    expect(
      categorizeEndpoints([ep('10.0.0.1', { zoneHints: ['zone-a'] }), ep('10.0.0.2')], cluster, ctx)
        .topologyMode,
    ).toBe('');
    const r = categorizeEndpoints(
      [ep('10.0.0.1', { zoneHints: ['zone-c'] }), ep('10.0.0.2', { zoneHints: ['zone-b'] })],
      cluster,
      ctx,
    );
    expect(r.topologyMode).toBe('');
    expect(r.clusterEndpoints).toHaveLength(2);
  });
  it('uses node hints only with the PreferSameTrafficDistribution gate', () => {
    const eps = [
      ep('10.0.0.1', { nodeHints: ['test-node'], zoneHints: ['zone-a'] }),
      ep('10.0.0.2', { nodeHints: ['other'], zoneHints: ['zone-a'] }),
    ];
    expect(categorizeEndpoints(eps, cluster, ctx).topologyMode).toBe('PreferSameZone');
    const gated = categorizeEndpoints(eps, cluster, { ...ctx, preferSameTrafficDistribution: true });
    expect(gated.topologyMode).toBe('PreferSameNode');
    expect(names(gated.clusterEndpoints)).toEqual(['10.0.0.1:80']);
  });
  it('does not apply topology to the terminating fallback, and unions when topology is in use', () => {
    const eps = [
      ep('10.0.0.1', { zoneHints: ['zone-b'], isLocal: true }),
      ep('10.0.0.2', { zoneHints: ['zone-a'] }),
    ];
    const r = categorizeEndpoints(eps, both, ctx);
    expect(names(r.clusterEndpoints)).toEqual(['10.0.0.2:80']);
    expect(names(r.localEndpoints)).toEqual(['10.0.0.1:80']);
    expect(names(r.allReachableEndpoints)).toEqual(['10.0.0.1:80', '10.0.0.2:80']);
  });
});
