// kube-proxy v1.33's reading of Services and EndpointSlices (ServiceChangeTracker and
// newBaseServiceInfo, EndpointsChangeTracker and EndpointSliceCache, the API server's defaulting
// they rely on), case by case: raw objects as a manifest or the API server gives them go through
// the change tracker and the brain, and each case checks what kube-proxy would program, and what
// is reported when something is left out.

import { describe, expect, it } from 'vitest';
import { decide } from '../../src/brain/decide.js';
import type { ProxyDecisions, ServicePortDecision } from '../../src/brain/types.js';
import type { SourceEvent } from '../../src/model/events.js';
import { ChangeTracker } from '../../src/model/tracker.js';
import { brainConfig, nodeEnv } from '../support/model-fixtures.js';

type Raw = Record<string, unknown>;

function rawService(name: string, spec: Raw, status?: Raw): Raw {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { namespace: 'ns', name },
    spec: { clusterIP: '10.96.0.10', ...spec },
    ...(status ? { status } : {}),
  };
}

function rawSlice(name: string, fields: Raw, labels: Record<string, string> = {}): Raw {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { namespace: 'ns', name, labels: { 'kubernetes.io/service-name': 'web', ...labels } },
    addressType: 'IPv4',
    ports: [{ name: '', port: 8080 }],
    ...fields,
  };
}

/** The tracker and the brain on a dual-stack node, as `render` runs them. */
function program(objects: Raw[]): ProxyDecisions {
  const tracker = new ChangeTracker('test-node');
  tracker.apply(
    objects.map(
      (object, i): SourceEvent => ({
        type: 'upsert',
        kind: object.kind as SourceEvent['kind'],
        object,
        origin: `case.yaml#${i}`,
      }),
    ),
  );
  return decide(tracker.state(), nodeEnv({ nodeIPs: ['192.168.0.2', '2001:db8::2'] }), brainConfig(), {
    skipped: tracker.skipped(),
  });
}

function ports(decisions: ProxyDecisions, family: 'IPv4' | 'IPv6' = 'IPv4'): ServicePortDecision[] {
  return decisions.families.find((f) => f.family === family)?.servicePorts ?? [];
}

function only(decisions: ProxyDecisions, family: 'IPv4' | 'IPv6' = 'IPv4'): ServicePortDecision {
  const [first, ...rest] = ports(decisions, family);
  if (!first || rest.length > 0)
    throw new Error(`expected one service port, got ${rest.length + (first ? 1 : 0)}`);
  return first;
}

const endpointsOf = (sp: ServicePortDecision) => sp.endpoints.map((e) => e.endpoint);
const reasons = (decisions: ProxyDecisions) =>
  decisions.skipped.map((p) => `${p.kind} ${p.name}: ${p.reason}`);

describe('Service ports', () => {
  it('an unnamed only port (name "" or none) gets the endpoints of a slice port without a name', () => {
    for (const name of [{ name: '' }, {}]) {
      const d = program([
        rawService('web', { ports: [{ ...name, port: 80 }] }),
        rawSlice('web-1', { ports: [{ port: 8080 }], endpoints: [{ addresses: ['10.244.1.10'] }] }),
      ]);
      expect(d.skipped).toEqual([]);
      expect(only(d).servicePortName).toBe('ns/web');
      expect(endpointsOf(only(d))).toEqual(['10.244.1.10:8080']);
    }
  });

  it('protocol unset is TCP on both sides (API server defaulting), and a UDP slice port does not match', () => {
    const d = program([
      rawService('web', { ports: [{ port: 80 }] }),
      rawSlice('web-1', { ports: [{ port: 8080 }], endpoints: [{ addresses: ['10.244.1.10'] }] }),
      rawSlice('web-2', {
        ports: [{ port: 5353, protocol: 'UDP' }],
        endpoints: [{ addresses: ['10.244.1.11'] }],
      }),
    ]);
    expect(only(d).protocol).toBe('TCP');
    expect(endpointsOf(only(d))).toEqual(['10.244.1.10:8080']);
  });

  it('a nodePort on a ClusterIP-type Service is programmed, as kube-proxy programs any nodePort != 0', () => {
    expect(only(program([rawService('web', { ports: [{ port: 80, nodePort: 30080 }] })])).nodePort).toBe(
      30080,
    );
  });
});

describe('Service addresses', () => {
  it('a ClusterIP that does not parse skips the Service with a report; the other Services work', () => {
    const d = program([
      rawService('bad', { clusterIP: '10.96.300.1', ports: [{ port: 80 }] }),
      rawService('web', { ports: [{ port: 80 }] }),
    ]);
    expect(ports(d).map((sp) => sp.name)).toEqual(['web']);
    expect(reasons(d)).toEqual([
      'Service bad: spec.clusterIP: must be an IP address, "None" or "", got "10.96.300.1"',
    ]);
    expect(d.skipped[0]?.entriesLeftOut).toBeUndefined();
  });

  it('ClusterIPs are read sloppily and per family', () => {
    const d = program([
      rawService('web', {
        clusterIP: '010.096.000.010',
        clusterIPs: ['010.096.000.010', 'fd00:96:0:0::a'],
        ports: [{ port: 80 }],
      }),
    ]);
    expect(only(d).clusterIP).toBe('10.96.0.10');
    expect(only(d, 'IPv6').clusterIP).toBe('fd00:96::a');
  });

  it('externalIPs that do not parse are left out and reported; blank ones silently; the other family is filtered', () => {
    const d = program([
      rawService('web', {
        clusterIPs: ['10.96.0.10', 'fd00:96::a'],
        externalIPs: ['192.0.2.1', '192.0.2.300', '', 'fd00::1'],
        ports: [{ port: 80 }],
      }),
    ]);
    expect(only(d).externalIPs).toEqual(['192.0.2.1']);
    expect(only(d, 'IPv6').externalIPs).toEqual(['fd00::1']);
    expect(reasons(d)).toEqual([
      'Service web: spec.externalIPs[1]: must be an IP address, got "192.0.2.300" (left out; the rest of the Service is used)',
    ]);
    expect(d.skipped[0]?.entriesLeftOut).toBe(true);
  });

  it('loadBalancerSourceRanges are trimmed (the API server lets spaces through); bad ones are left out and reported', () => {
    const d = program([
      rawService(
        'web',
        {
          type: 'LoadBalancer',
          loadBalancerSourceRanges: [' 203.0.113.0/25', '10.0.0.0/8 ', '10.0.0.0/40'],
          ports: [{ port: 80 }],
        },
        { loadBalancer: { ingress: [{ ip: '198.51.100.10' }] } },
      ),
    ]);
    expect(only(d).loadBalancerSourceRanges).toEqual(['203.0.113.0/25', '10.0.0.0/8']);
    expect(reasons(d)).toEqual([
      'Service web: spec.loadBalancerSourceRanges[2]: must be a CIDR, got "10.0.0.0/40" (left out; the rest of the Service is used)',
    ]);
  });

  it('0.0.0.0/0 stays a source range, as in v1.33 (v1.34 reads it as no ranges: kubernetes#132722)', () => {
    const d = program([
      rawService(
        'web',
        { type: 'LoadBalancer', loadBalancerSourceRanges: ['0.0.0.0/0'], ports: [{ port: 80 }] },
        { loadBalancer: { ingress: [{ ip: '198.51.100.10' }] } },
      ),
    ]);
    expect(only(d).loadBalancerSourceRanges).toEqual(['0.0.0.0/0']);
  });

  it('LB ingress: ipMode Proxy and hostname-only entries are skipped without a word, an IP that does not parse with one', () => {
    const d = program([
      rawService(
        'web',
        { type: 'LoadBalancer', ports: [{ port: 80 }] },
        {
          loadBalancer: {
            ingress: [
              { ip: '198.51.100.10' },
              { ip: '198.51.100.11', ipMode: 'Proxy' },
              { hostname: 'lb.example' },
              { ip: 'lb.example' },
            ],
          },
        },
      ),
    ]);
    expect(only(d).loadBalancerIPs).toEqual(['198.51.100.10']);
    expect(reasons(d)).toEqual([
      'Service web: status.loadBalancer.ingress[3].ip: must be an IP address, got "lb.example" (left out; the rest of the Service is used)',
    ]);
  });
});

describe('Service policies and affinity (API server defaulting, then newBaseServiceInfo)', () => {
  it('ClientIP affinity without a timeout gets 10800 s; a configured one is used; None ignores the config', () => {
    const timeout = (spec: Raw) =>
      only(program([rawService('web', { ports: [{ port: 80 }], ...spec })])).sessionAffinityTimeoutSeconds;
    expect(timeout({ sessionAffinity: 'ClientIP' })).toBe(10800);
    expect(timeout({ sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: {} } })).toBe(10800);
    expect(
      timeout({ sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } } }),
    ).toBe(60);
    expect(timeout({ sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } } })).toBe(0);
  });

  it('type unset is ClusterIP; eTP=Local counts only for NodePort and LoadBalancer; iTP unset is Cluster', () => {
    const sp = only(
      program([
        rawService('web', {
          externalTrafficPolicy: 'Local',
          externalIPs: ['192.0.2.1'],
          ports: [{ port: 80 }],
        }),
      ]),
    );
    expect(sp.type).toBe('ClusterIP');
    expect(sp.external.policy).toBe('Cluster');
    expect(sp.internal.policy).toBe('Cluster');
  });

  it('healthCheckNodePort counts only for LoadBalancer with eTP=Local', () => {
    const hc = (type: string, policy: string) =>
      only(
        program([
          rawService('web', {
            type,
            externalTrafficPolicy: policy,
            healthCheckNodePort: 32000,
            ports: [{ port: 80, nodePort: 30080 }],
          }),
        ]),
      ).healthCheckNodePort;
    expect(hc('LoadBalancer', 'Local')).toBe(32000);
    expect(hc('NodePort', 'Local')).toBe(0);
    expect(hc('LoadBalancer', 'Cluster')).toBe(0);
  });

  it('headless and ExternalName Services are ignored on purpose, not reported as malformed', () => {
    const d = program([
      rawService('headless', { clusterIP: 'None' }),
      rawService('ext', { clusterIP: '', type: 'ExternalName', externalName: 'db.example' }),
    ]);
    expect(ports(d)).toEqual([]);
    expect(d.skipped).toEqual([]);
    expect(d.ignored.map((i) => i.name).sort()).toEqual(['ext', 'headless']);
  });
});

describe('EndpointSlices', () => {
  const web = rawService('web', { ports: [{ port: 80 }] });

  it('ready and serving unset mean true, terminating unset means false', () => {
    const [ep] = only(
      program([web, rawSlice('web-1', { endpoints: [{ addresses: ['10.244.1.10'] }] })]),
    ).endpoints;
    expect(ep).toMatchObject({ ready: true, serving: true, terminating: false, isLocal: false });
  });

  it('a serving, terminating endpoint is used only when no endpoint is ready', () => {
    const terminating = {
      addresses: ['10.244.1.11'],
      conditions: { ready: false, serving: true, terminating: true },
    };
    const withReady = only(
      program([web, rawSlice('web-1', { endpoints: [{ addresses: ['10.244.1.10'] }, terminating] })]),
    );
    expect(withReady.clusterEndpoints.map((e) => e.endpoint)).toEqual(['10.244.1.10:8080']);
    const alone = only(program([web, rawSlice('web-1', { endpoints: [terminating] })]));
    expect(alone.clusterEndpoints.map((e) => e.endpoint)).toEqual(['10.244.1.11:8080']);
  });

  it('an endpoint in two slices: the non-terminating copy wins, whichever slice comes first', () => {
    for (const names of [
      ['a', 'b'],
      ['b', 'a'],
    ]) {
      const d = program([
        web,
        rawSlice(`web-${names[0]}`, {
          endpoints: [
            { addresses: ['10.244.1.10'], conditions: { ready: false, serving: true, terminating: true } },
          ],
        }),
        rawSlice(`web-${names[1]}`, { endpoints: [{ addresses: ['10.244.1.10'], nodeName: 'test-node' }] }),
      ]);
      expect(only(d).endpoints).toMatchObject([{ endpoint: '10.244.1.10:8080', ready: true, isLocal: true }]);
    }
  });

  it('a slice without the kubernetes.io/service-name label (or with "") is ignored, not malformed', () => {
    for (const labels of [{}, { 'kubernetes.io/service-name': '' }]) {
      const slice = rawSlice('web-1', { endpoints: [{ addresses: ['10.244.1.10'] }] });
      (slice.metadata as Raw).labels = labels;
      const d = program([web, slice]);
      expect(only(d).endpoints).toEqual([]);
      expect(d.skipped).toEqual([]);
      expect(d.ignored.map((i) => i.reason)).toEqual(['no kubernetes.io/service-name label']);
    }
  });

  it('an endpoint of the other family, or whose address does not parse, or without addresses, is left out and reported', () => {
    const d = program([
      web,
      rawSlice('web-1', {
        endpoints: [
          { addresses: ['10.244.1.10'] },
          { addresses: ['fd00::1'] },
          { addresses: ['10.244.1.300'] },
          { addresses: [] },
        ],
      }),
    ]);
    expect(endpointsOf(only(d))).toEqual(['10.244.1.10:8080']);
    expect(reasons(d)).toEqual([
      'EndpointSlice web-1: endpoints[1].addresses[0]: must be an IPv4 address (addressType IPv4), got "fd00::1"; ' +
        'endpoints[2].addresses[0]: must be an IPv4 address (addressType IPv4), got "10.244.1.300"; ' +
        'endpoints[3].addresses: must hold at least one address (left out; the rest of the EndpointSlice is used)',
    ]);
  });

  it('only addresses[0] is read, sloppily, and printed canonically', () => {
    const d = program([
      web,
      rawSlice('web-1', { endpoints: [{ addresses: ['010.244.001.010', '10.244.1.99'] }] }),
    ]);
    expect(endpointsOf(only(d))).toEqual(['10.244.1.10:8080']);
  });

  it('a slice port without a number, or 0, is ignored (kube-proxy logs it; the API allows it)', () => {
    const d = program([
      web,
      rawSlice('web-1', { ports: [{ name: '' }], endpoints: [{ addresses: ['10.244.1.10'] }] }),
      rawSlice('web-2', { ports: [{ name: '', port: 0 }], endpoints: [{ addresses: ['10.244.1.11'] }] }),
    ]);
    expect(only(d).endpoints).toEqual([]);
    expect(d.skipped).toEqual([]);
  });

  it('IPv6 slices feed the IPv6 family only; FQDN slices are ignored', () => {
    const dual = rawService('web', { clusterIPs: ['10.96.0.10', 'fd00:96::a'], ports: [{ port: 80 }] });
    const d = program([
      dual,
      rawSlice('web-4', { endpoints: [{ addresses: ['10.244.1.10'] }] }),
      rawSlice('web-6', { addressType: 'IPv6', endpoints: [{ addresses: ['fd00:244::10'] }] }),
      rawSlice('web-f', { addressType: 'FQDN', endpoints: [{ addresses: ['pod.example'] }] }),
    ]);
    expect(endpointsOf(only(d))).toEqual(['10.244.1.10:8080']);
    expect(endpointsOf(only(d, 'IPv6'))).toEqual(['[fd00:244::10]:8080']);
    expect(d.ignored.map((i) => `${i.name}: ${i.reason}`)).toEqual(['web-f: FQDN EndpointSlice']);
  });

  it('an endpoint is local only when its nodeName is this node', () => {
    const d = program([
      web,
      rawSlice('web-1', {
        endpoints: [{ addresses: ['10.244.1.10'], nodeName: 'test-node' }, { addresses: ['10.244.1.11'] }],
      }),
    ]);
    expect(only(d).endpoints.map((e) => e.isLocal)).toEqual([true, false]);
  });
});
