import { describe, expect, it } from 'vitest';
import {
  describeObject,
  formatProblem,
  type ObjectProblem,
  parseEndpointSlice,
  parseEvent,
  parseNode,
  parseObject,
  parseService,
  parseServiceCIDR,
} from '../../src/model/parse.js';
import { API_LIMITS, describeValue, formatPath } from '../../src/model/schema.js';
import { matchesKubeProxySelector } from '../../src/model/selector.js';

function service(spec: unknown, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'demo' }, spec, ...extra };
}

function slice(
  fields: Record<string, unknown>,
  labels: Record<string, string> = {},
): Record<string, unknown> {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: 'web-abc',
      namespace: 'demo',
      labels: { 'kubernetes.io/service-name': 'web', ...labels },
    },
    addressType: 'IPv4',
    ...fields,
  };
}

function reasonOf(result: { ok: true } | { ok: false; reason: string }): string {
  if (result.ok) throw new Error('expected a rejection');
  return result.reason;
}

function accepted<T>(result: { ok: true; value: T } | { ok: false; reason: string }): T {
  if (!result.ok) throw new Error(`expected success, got: ${result.reason}`);
  return result.value;
}

describe('parseService: API server defaulting', () => {
  it('defaults type, protocol, policies and affinity like the API server', () => {
    const svc = accepted(
      parseService(service({ clusterIP: '10.96.0.10', ports: [{ port: 80, targetPort: 8080 }] })),
    );
    expect(svc).toEqual({
      meta: { namespace: 'demo', name: 'web', uid: '', resourceVersion: '', labels: {}, annotations: {} },
      type: 'ClusterIP',
      clusterIP: '10.96.0.10',
      clusterIPs: [],
      ports: [{ name: '', protocol: 'TCP', port: 80, nodePort: 0 }],
      externalIPs: [],
      loadBalancerIngress: [],
      loadBalancerSourceRanges: [],
      externalTrafficPolicy: 'Cluster',
      internalTrafficPolicy: 'Cluster',
      sessionAffinity: 'None',
      sessionAffinityTimeoutSeconds: 0,
      healthCheckNodePort: 0,
    });
  });

  it('gives ClientIP affinity the 10800 s default timeout, or the configured one', () => {
    const defaulted = accepted(parseService(service({ sessionAffinity: 'ClientIP', ports: [{ port: 80 }] })));
    expect(defaulted.sessionAffinityTimeoutSeconds).toBe(10800);
    const configured = accepted(
      parseService(
        service({
          sessionAffinity: 'ClientIP',
          sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
          ports: [{ port: 80 }],
        }),
      ),
    );
    expect(configured.sessionAffinityTimeoutSeconds).toBe(60);
  });

  it('defaults a load balancer ingress ipMode to VIP and keeps Proxy and hostname-only entries', () => {
    const svc = accepted(
      parseService(
        service(
          { type: 'LoadBalancer', ports: [{ port: 80, nodePort: 30080 }] },
          {
            status: {
              loadBalancer: {
                ingress: [
                  { ip: '198.51.100.10' },
                  { ip: '198.51.100.11', ipMode: 'Proxy' },
                  { hostname: 'lb.example' },
                ],
              },
            },
          },
        ),
      ),
    );
    expect(svc.loadBalancerIngress).toEqual([
      { ip: '198.51.100.10', hostname: '', ipMode: 'VIP' },
      { ip: '198.51.100.11', hostname: '', ipMode: 'Proxy' },
      { ip: '', hostname: 'lb.example', ipMode: 'VIP' },
    ]);
  });

  it('reads every field kube-proxy uses', () => {
    const svc = accepted(
      parseService({
        kind: 'Service',
        metadata: {
          name: 'web-local',
          namespace: 'demo',
          uid: 'u-1',
          resourceVersion: '42',
          labels: { app: 'web' },
          annotations: { 'kube-bpf-proxy.io/scheduler': 'maglev' },
        },
        spec: {
          type: 'LoadBalancer',
          clusterIP: '10.96.0.12',
          clusterIPs: ['10.96.0.12', 'fd00::12'],
          externalIPs: ['192.0.2.50'],
          loadBalancerSourceRanges: [' 198.51.100.0/24', '192.0.2.0/24'],
          externalTrafficPolicy: 'Local',
          internalTrafficPolicy: 'Local',
          healthCheckNodePort: 32000,
          ports: [
            { name: 'http', port: 80, targetPort: 'http', nodePort: 30081 },
            { name: 'dns', protocol: 'UDP', port: 53, nodePort: 30053 },
            { name: 'sig', protocol: 'SCTP', port: 9999 },
          ],
        },
      }),
    );
    expect(svc.meta).toEqual({
      namespace: 'demo',
      name: 'web-local',
      uid: 'u-1',
      resourceVersion: '42',
      labels: { app: 'web' },
      annotations: { 'kube-bpf-proxy.io/scheduler': 'maglev' },
    });
    expect(svc.type).toBe('LoadBalancer');
    expect(svc.clusterIPs).toEqual(['10.96.0.12', 'fd00::12']);
    expect(svc.ports).toEqual([
      { name: 'http', protocol: 'TCP', port: 80, nodePort: 30081 },
      { name: 'dns', protocol: 'UDP', port: 53, nodePort: 30053 },
      { name: 'sig', protocol: 'SCTP', port: 9999, nodePort: 0 },
    ]);
    // Source ranges are trimmed by the brain (kube-proxy does it), not here.
    expect(svc.loadBalancerSourceRanges).toEqual([' 198.51.100.0/24', '192.0.2.0/24']);
    expect(svc.externalTrafficPolicy).toBe('Local');
    expect(svc.internalTrafficPolicy).toBe('Local');
    expect(svc.healthCheckNodePort).toBe(32000);
  });

  it('treats null like an absent field, as Go decoding does', () => {
    const svc = accepted(
      parseService(
        service({
          type: null,
          externalIPs: null,
          sessionAffinity: null,
          ports: [{ port: 80, protocol: null }],
        }),
      ),
    );
    expect(svc.type).toBe('ClusterIP');
    expect(svc.externalIPs).toEqual([]);
    expect(svc.ports[0]?.protocol).toBe('TCP');
  });
});

describe('parseService: addresses, as kube-proxy parses them', () => {
  it('reads addresses sloppily (leading zeros are decimal) and keeps them as written', () => {
    const svc = accepted(
      parseService(
        service({
          clusterIP: '010.096.000.010',
          clusterIPs: ['010.096.000.010', 'fd00::a'],
          externalIPs: ['010.001.002.003', 'fd00::1'],
          loadBalancerSourceRanges: [' 203.0.113.0/25', '2001:db8::/64 '],
          ports: [{ port: 80 }],
        }),
      ),
    );
    expect(svc.clusterIP).toBe('010.096.000.010');
    expect(svc.externalIPs).toEqual(['010.001.002.003', 'fd00::1']);
    expect(svc.loadBalancerSourceRanges).toEqual([' 203.0.113.0/25', '2001:db8::/64 ']);
  });

  it('rejects a Service whose ClusterIP does not parse: every rule is keyed on it', () => {
    expect(reasonOf(parseService(service({ clusterIP: '10.96.300.1', ports: [{ port: 80 }] })))).toBe(
      'spec.clusterIP: must be an IP address, "None" or "", got "10.96.300.1"',
    );
    expect(
      reasonOf(
        parseService(
          service({ clusterIP: '10.96.0.1', clusterIPs: ['10.96.0.1', 'fd00::g'], ports: [{ port: 80 }] }),
        ),
      ),
    ).toBe('spec.clusterIPs[1]: must be an IP address or "None", got "fd00::g"');
  });

  it('leaves out, and names, the externalIPs, source ranges and LB IPs that do not parse; blank ones silently', () => {
    const result = parseService({
      ...service({
        clusterIP: '10.96.0.1',
        type: 'LoadBalancer',
        externalIPs: ['192.0.2.1', '999.1.1.1', '', ' 192.0.2.2'],
        loadBalancerSourceRanges: ['10.0.0.0/8', 'garbage', '  ', '10.0.0.0/33'],
        ports: [{ port: 80 }],
      }),
      status: {
        loadBalancer: { ingress: [{ ip: '198.51.100.10' }, { ip: 'lb' }, { hostname: 'lb.example' }] },
      },
    });
    const svc = accepted(result);
    expect(svc.externalIPs).toEqual(['192.0.2.1']);
    expect(svc.loadBalancerSourceRanges).toEqual(['10.0.0.0/8']);
    expect(svc.loadBalancerIngress.map((i) => i.ip || i.hostname)).toEqual(['198.51.100.10', 'lb.example']);
    expect(result.ok && result.leftOut).toBe(
      'spec.externalIPs[1]: must be an IP address, got "999.1.1.1"; spec.externalIPs[3]: must be an IP address, got " 192.0.2.2"; ' +
        'spec.loadBalancerSourceRanges[1]: must be a CIDR, got "garbage" (and 2 more)',
    );
  });

  it('says nothing when every address is usable', () => {
    const result = parseService(
      service({ clusterIP: '10.96.0.1', externalIPs: ['fd00::1'], ports: [{ port: 80 }] }),
    );
    expect(result).toEqual({ ok: true, value: accepted(result) });
  });
});

describe('parseService: what the brain decides, not the parser', () => {
  it('accepts headless and ExternalName services without ports (the brain skips them)', () => {
    expect(accepted(parseService(service({ clusterIP: 'None' }))).clusterIP).toBe('None');
    expect(accepted(parseService(service({ type: 'ExternalName', externalName: 'db.example' }))).type).toBe(
      'ExternalName',
    );
  });

  it('keeps nodePort and healthCheckNodePort whatever the type: kube-proxy decides what they mean', () => {
    const svc = accepted(
      parseService(service({ healthCheckNodePort: 32000, ports: [{ port: 80, nodePort: 30080 }] })),
    );
    expect(svc.type).toBe('ClusterIP');
    expect(svc.ports[0]?.nodePort).toBe(30080);
    expect(svc.healthCheckNodePort).toBe(32000);
  });

  it('keeps the service-proxy-name label (the source applies the selector, the brain the skip rules)', () => {
    const raw = service({ ports: [{ port: 80 }] });
    (raw.metadata as Record<string, unknown>).labels = {
      'service.kubernetes.io/service-proxy-name': 'other',
    };
    expect(accepted(parseService(raw)).meta.labels).toEqual({
      'service.kubernetes.io/service-proxy-name': 'other',
    });
  });
});

describe('parseService: rejections name the field and the bad value', () => {
  const cases: [string, unknown, string][] = [
    [
      'a port out of range',
      service({
        ports: [
          { name: 'a', port: 80 },
          { name: 'b', port: 70000 },
        ],
      }),
      'spec.ports[1].port: must be an integer 1-65535, got 70000',
    ],
    [
      'a port as a string',
      service({ ports: [{ port: '80' }] }),
      'spec.ports[0].port: must be an integer 1-65535, got "80"',
    ],
    [
      'a fractional port',
      service({ ports: [{ port: 80.5 }] }),
      'spec.ports[0].port: must be an integer 1-65535, got 80.5',
    ],
    ['a missing port', service({ ports: [{ name: 'http' }] }), 'spec.ports[0].port: is required'],
    [
      'a nodePort out of range',
      service({ type: 'NodePort', ports: [{ port: 80, nodePort: 65536 }] }),
      'spec.ports[0].nodePort: must be an integer 1-65535, or 0 for none, got 65536',
    ],
    [
      'a negative healthCheckNodePort',
      service({ healthCheckNodePort: -1, ports: [{ port: 80 }] }),
      'spec.healthCheckNodePort: must be an integer 1-65535, or 0 for none, got -1',
    ],
    [
      'a lower-case protocol',
      service({ ports: [{ port: 80, protocol: 'tcp' }] }),
      'spec.ports[0].protocol: must be one of TCP, UDP, SCTP, got "tcp"',
    ],
    [
      'an unknown type',
      service({ type: 'Internal', ports: [{ port: 80 }] }),
      'spec.type: must be one of ClusterIP, NodePort, LoadBalancer, ExternalName, got "Internal"',
    ],
    [
      'an unknown traffic policy',
      service({ externalTrafficPolicy: 'Global', ports: [{ port: 80 }] }),
      'spec.externalTrafficPolicy: must be one of Cluster, Local, got "Global"',
    ],
    [
      'an affinity timeout beyond a day',
      service({
        sessionAffinity: 'ClientIP',
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 86401 } },
        ports: [{ port: 80 }],
      }),
      'spec.sessionAffinityConfig.clientIP.timeoutSeconds: must be an integer 1-86400, got 86401',
    ],
    [
      'no ports on a ClusterIP service',
      service({ clusterIP: '10.96.0.1' }),
      'spec.ports: must hold at least one port (only headless and ExternalName services may have none)',
    ],
    [
      'a null spec (no ports)',
      service(null),
      'spec.ports: must hold at least one port (only headless and ExternalName services may have none)',
    ],
    [
      'an unnamed port among several',
      service({ ports: [{ name: 'http', port: 80 }, { port: 443 }] }),
      'spec.ports[1].name: is required when the service has several ports',
    ],
    [
      'an empty name among several',
      service({
        ports: [
          { name: 'http', port: 80 },
          { name: '', port: 443 },
        ],
      }),
      'spec.ports[1].name: is required when the service has several ports',
    ],
    [
      'two ports of one name',
      service({
        ports: [
          { name: 'http', port: 80 },
          { name: 'http', port: 8080 },
        ],
      }),
      'spec.ports[1].name: duplicates spec.ports[0].name, got "http"',
    ],
    [
      'one port and protocol twice',
      service({
        ports: [
          { name: 'a', port: 80 },
          { name: 'b', port: 80, protocol: 'TCP' },
        ],
      }),
      'spec.ports[1]: duplicates port 80/TCP of spec.ports[0]',
    ],
    [
      'clusterIPs disagreeing with clusterIP',
      service({ clusterIP: '10.96.0.1', clusterIPs: ['10.96.0.2'], ports: [{ port: 80 }] }),
      'spec.clusterIPs[0]: must equal spec.clusterIP "10.96.0.1", got "10.96.0.2"',
    ],
    [
      'three clusterIPs',
      service({ clusterIPs: ['10.96.0.1', 'fd00::1', '10.96.0.2'], ports: [{ port: 80 }] }),
      'spec.clusterIPs: must hold at most 2 items, got a list of 3 items',
    ],
    [
      'an IP given as a number',
      service({ clusterIP: 167772161, ports: [{ port: 80 }] }),
      'spec.clusterIP: must be a string, got 167772161',
    ],
    [
      'a string where a list belongs',
      service({ externalIPs: '192.0.2.1', ports: [{ port: 80 }] }),
      'spec.externalIPs: must be a list, got "192.0.2.1"',
    ],
    ['a list where an object belongs', service([]), 'spec: must be an object, got an empty list'],
    ['a null port entry', service({ ports: [null] }), 'spec.ports[0]: must be an object, got null'],
    ['a number as the object', 42, 'must be an object, got 42'],
    ['no metadata', { kind: 'Service', spec: { ports: [{ port: 80 }] } }, 'metadata: is required'],
    [
      'no name',
      { metadata: { namespace: 'demo' }, spec: { ports: [{ port: 80 }] } },
      'metadata.name: is required',
    ],
    [
      'no namespace',
      { metadata: { name: 'web' }, spec: { ports: [{ port: 80 }] } },
      'metadata.namespace: is required',
    ],
    [
      'an upper-case name',
      { metadata: { name: 'Web', namespace: 'demo' }, spec: { ports: [{ port: 80 }] } },
      'metadata.name: must be a DNS-1035 label: lower-case letters, digits and "-", starting with a letter, got "Web"',
    ],
    [
      'a label value that is not a string',
      { metadata: { name: 'web', namespace: 'demo', labels: { app: 3 } }, spec: { ports: [{ port: 80 }] } },
      'metadata.labels.app: must be a string, got 3',
    ],
    [
      'an invalid label key',
      {
        metadata: { name: 'web', namespace: 'demo', labels: { 'a b': 'x' } },
        spec: { ports: [{ port: 80 }] },
      },
      'metadata.labels["a b"]: key must be a qualified name: at most 63 alphanumerics, "-", "_" or ".", starting and ending alphanumeric, with an optional DNS subdomain prefix and "/", got "a b"',
    ],
    [
      'the wrong kind',
      { kind: 'Pod', metadata: { name: 'web', namespace: 'demo' }, spec: { ports: [{ port: 80 }] } },
      'kind: must be Service, got "Pod"',
    ],
  ];
  it.each(cases)('rejects %s', (_what, raw, reason) => {
    expect(reasonOf(parseService(raw))).toBe(reason);
  });

  it('accepts name "" on the only port: the API server allows it, and the port is the unnamed one', () => {
    const svc = accepted(parseService(service({ clusterIP: '10.96.0.1', ports: [{ name: '', port: 80 }] })));
    expect(svc.ports).toEqual([{ name: '', protocol: 'TCP', port: 80, nodePort: 0 }]);
  });

  it('accepts the same port number on two protocols (DNS over UDP and TCP)', () => {
    const svc = accepted(
      parseService(
        service({
          ports: [
            { name: 'dns', protocol: 'UDP', port: 53 },
            { name: 'dns-tcp', protocol: 'TCP', port: 53 },
          ],
        }),
      ),
    );
    expect(svc.ports.map((p) => `${p.port}/${p.protocol}`)).toEqual(['53/UDP', '53/TCP']);
  });

  it('never quotes a huge value whole', () => {
    const name = 'a'.repeat(100_000);
    const reason = reasonOf(
      parseService({ metadata: { name, namespace: 'demo' }, spec: { ports: [{ port: 80 }] } }),
    );
    expect(reason).toBe(
      `metadata.name: must be at most 63 characters, got "${'a'.repeat(40)}…" (100000 characters)`,
    );
  });

  it('lists three problems and counts the rest', () => {
    const reason = reasonOf(
      parseService(
        service({ ports: [{ port: 0 }, { port: -1 }, { port: 1e6 }, { port: 'x' }, { port: null }] }),
      ),
    );
    expect(reason).toBe(
      'spec.ports[0].port: must be an integer 1-65535, got 0; spec.ports[1].port: must be an integer 1-65535, got -1; ' +
        'spec.ports[2].port: must be an integer 1-65535, got 1000000 (and 2 more)',
    );
  });

  it('rejects annotations beyond the API server total of 256 KiB', () => {
    const raw = service({ ports: [{ port: 80 }] });
    (raw.metadata as Record<string, unknown>).annotations = {
      big: 'x'.repeat(API_LIMITS.annotationsTotalBytes),
    };
    expect(reasonOf(parseService(raw))).toBe(
      'metadata.annotations: must total at most 262144 bytes of keys and values, got 262147',
    );
  });
});

describe('parseEndpointSlice', () => {
  it('reads an absent or null port name as "", as the API server defaults it', () => {
    const s = accepted(
      parseEndpointSlice(
        slice({
          ports: [
            { port: 8080 },
            { name: '', port: 8081 },
            { name: null, port: 8082 },
            { name: 'http', port: 8083 },
          ],
        }),
      ),
    );
    expect(s.ports).toEqual([
      { name: '', port: 8080, protocol: 'TCP' },
      { name: '', port: 8081, protocol: 'TCP' },
      { name: '', port: 8082, protocol: 'TCP' },
      { name: 'http', port: 8083, protocol: 'TCP' },
    ]);
  });

  it('endpoints share their conditions, empty hint lists and node names: one record per value, frozen', () => {
    const endpoint = (address: string, ready: boolean) => ({
      addresses: [address],
      conditions: { ready, serving: ready, terminating: false },
      nodeName: `node-${'a'.repeat(3)}`,
    });
    const a = accepted(
      parseEndpointSlice(slice({ endpoints: [endpoint('10.0.0.1', true), endpoint('10.0.0.2', false)] })),
    );
    const b = accepted(parseEndpointSlice(slice({ endpoints: [endpoint('10.0.0.3', true)] })));
    const [first, second] = a.endpoints;
    const [third] = b.endpoints;
    expect(first?.conditions).toEqual({ ready: true, serving: true, terminating: false });
    expect(second?.conditions).toEqual({ ready: false, serving: false, terminating: false });
    expect(third?.conditions).toBe(first?.conditions);
    expect(Object.isFrozen(first?.conditions)).toBe(true);
    expect(third?.zoneHints).toBe(first?.nodeHints);
    expect(first?.zoneHints).toEqual([]);
    expect(third?.nodeName).toBe('node-aaa');
  });

  it('keeps a nil or zero port for the brain to skip', () => {
    const s = accepted(
      parseEndpointSlice(slice({ ports: [{ name: 'a' }, { name: 'b', port: 0, protocol: 'UDP' }] })),
    );
    expect(s.ports).toEqual([
      { name: 'a', port: null, protocol: 'TCP' },
      { name: 'b', port: 0, protocol: 'UDP' },
    ]);
  });

  it('leaves absent conditions null: the brain reads nil ready and serving as true, nil terminating as false', () => {
    const s = accepted(
      parseEndpointSlice(
        slice({
          endpoints: [
            { addresses: ['10.244.1.10'] },
            { addresses: ['10.244.1.11'], conditions: { ready: false, terminating: true } },
            { addresses: ['10.244.1.12'], conditions: null },
          ],
        }),
      ),
    );
    expect(s.endpoints.map((e) => e.conditions)).toEqual([
      { ready: null, serving: null, terminating: null },
      { ready: false, serving: null, terminating: true },
      { ready: null, serving: null, terminating: null },
    ]);
  });

  it('reads nodeName, zone, hints and the service-name label', () => {
    const s = accepted(
      parseEndpointSlice(
        slice({
          ports: [{ name: 'http', port: 8080 }],
          endpoints: [
            {
              addresses: ['10.244.1.10', '10.244.1.99'],
              conditions: { ready: true, serving: true, terminating: false },
              nodeName: 'node-a',
              zone: 'zone-a',
              hints: { forZones: [{ name: 'zone-a' }], forNodes: [{ name: 'node-a' }] },
              targetRef: { kind: 'Pod', name: 'web-1' },
            },
          ],
        }),
      ),
    );
    expect(s.serviceName).toBe('web');
    expect(s.endpoints).toEqual([
      {
        addresses: ['10.244.1.10', '10.244.1.99'],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: 'node-a',
        zone: 'zone-a',
        zoneHints: ['zone-a'],
        nodeHints: ['node-a'],
      },
    ]);
  });

  it('leaves out, and names, endpoints without a usable first address; reads only addresses[0]', () => {
    const result = parseEndpointSlice(
      slice({
        endpoints: [
          { addresses: ['010.1.2.3', 'not-read'] },
          { addresses: [] },
          {},
          { addresses: ['fd00::1'] },
          { addresses: ['10.0.0.999'] },
          { addresses: ['10.0.0.4'] },
        ],
      }),
    );
    expect(accepted(result).endpoints.map((e) => e.addresses)).toEqual([
      ['010.1.2.3', 'not-read'],
      ['10.0.0.4'],
    ]);
    expect(result.ok && result.leftOut).toBe(
      'endpoints[1].addresses: must hold at least one address; endpoints[2].addresses: must hold at least one address; ' +
        'endpoints[3].addresses[0]: must be an IPv4 address (addressType IPv4), got "fd00::1" (and 1 more)',
    );
    const v6 = parseEndpointSlice(slice({ addressType: 'IPv6', endpoints: [{ addresses: ['10.0.0.1'] }] }));
    expect(v6.ok && v6.leftOut).toBe(
      'endpoints[0].addresses[0]: must be an IPv6 address (addressType IPv6), got "10.0.0.1"',
    );
  });

  it('keeps FQDN slices as they are (the brain ignores them whole)', () => {
    const result = parseEndpointSlice(
      slice({ addressType: 'FQDN', endpoints: [{ addresses: ['db.example'] }] }),
    );
    expect(accepted(result).addressType).toBe('FQDN');
    expect(result.ok && result.leftOut).toBeUndefined();
  });

  it('gives a slice without the service-name label an empty serviceName', () => {
    const raw = slice({});
    (raw.metadata as Record<string, unknown>).labels = {};
    expect(accepted(parseEndpointSlice(raw)).serviceName).toBe('');
  });

  const many = (n: number, make: (i: number) => unknown) => Array.from({ length: n }, (_, i) => make(i));
  const cases: [string, unknown, string][] = [
    ['no addressType', slice({ addressType: undefined }), 'addressType: is required'],
    [
      'an unknown addressType',
      slice({ addressType: 'IPv5' }),
      'addressType: must be one of IPv4, IPv6, FQDN, got "IPv5"',
    ],
    [
      'more than 1000 endpoints',
      slice({ endpoints: many(1001, (i) => ({ addresses: [`10.0.${i >> 8}.${i & 255}`] })) }),
      'endpoints: must hold at most 1000 items, got a list of 1001 items',
    ],
    [
      'more than 100 addresses',
      slice({ endpoints: [{ addresses: many(101, (i) => `10.0.0.${i}`) }] }),
      'endpoints[0].addresses: must hold at most 100 items, got a list of 101 items',
    ],
    [
      'more than 100 ports',
      slice({ ports: many(101, (i) => ({ name: `p${i}`, port: 1000 + i })) }),
      'ports: must hold at most 100 items, got a list of 101 items',
    ],
    [
      'more than 8 zone hints',
      slice({
        endpoints: [{ addresses: ['10.0.0.1'], hints: { forZones: many(9, (i) => ({ name: `z${i}` })) } }],
      }),
      'endpoints[0].hints.forZones: must hold at most 8 items, got a list of 9 items',
    ],
    [
      'a string condition',
      slice({ endpoints: [{ addresses: ['10.0.0.1'], conditions: { ready: 'true' } }] }),
      'endpoints[0].conditions.ready: must be true or false, got "true"',
    ],
    [
      'a port above 65535',
      slice({ ports: [{ name: 'a', port: 65536 }] }),
      'ports[0].port: must be an integer 0-65535, got 65536',
    ],
    [
      'a numeric port name',
      slice({ ports: [{ name: 80, port: 80 }] }),
      'ports[0].name: must be a string, got 80',
    ],
    [
      'an address that is a list',
      slice({ endpoints: [{ addresses: [['10.0.0.1']] }] }),
      'endpoints[0].addresses[0]: must be a string, got a list of 1 items',
    ],
    [
      'an address of 10000 characters',
      slice({ endpoints: [{ addresses: ['1'.repeat(10000)] }] }),
      `endpoints[0].addresses[0]: must be at most 253 characters, got "${'1'.repeat(40)}…" (10000 characters)`,
    ],
    [
      'a nodeName that is no DNS name',
      slice({ endpoints: [{ addresses: ['10.0.0.1'], nodeName: 'Node A' }] }),
      'endpoints[0].nodeName: must be a DNS subdomain: lower-case alphanumeric labels joined by ".", got "Node A"',
    ],
  ];
  it.each(cases)('rejects %s', (_what, raw, reason) => {
    expect(reasonOf(parseEndpointSlice(raw))).toBe(reason);
  });

  it('accepts exactly the API limits', () => {
    const s = accepted(
      parseEndpointSlice(
        slice({
          ports: Array.from({ length: 100 }, (_, i) => ({ name: `p${i}`, port: 1000 + i })),
          endpoints: Array.from({ length: 1000 }, (_, i) => ({
            addresses:
              i === 0 ? Array.from({ length: 100 }, (_, j) => `10.1.0.${j}`) : [`10.0.${i >> 8}.${i & 255}`],
          })),
        }),
      ),
    );
    expect(s.ports).toHaveLength(100);
    expect(s.endpoints).toHaveLength(1000);
    expect(s.endpoints[0]?.addresses).toHaveLength(100);
  });
});

describe('parseNode', () => {
  it('reads podCIDRs, addresses, taints and labels; a cluster-scoped object has namespace ""', () => {
    const node = accepted(
      parseNode({
        apiVersion: 'v1',
        kind: 'Node',
        metadata: {
          name: 'node-a',
          namespace: 'ignored',
          labels: { 'topology.kubernetes.io/zone': 'zone-a' },
        },
        spec: {
          podCIDRs: ['10.244.1.0/24', 'fd00:1::/64'],
          taints: [{ key: 'dedicated', effect: 'NoSchedule' }],
        },
        status: { addresses: [{ type: 'InternalIP', address: '10.10.0.1' }] },
      }),
    );
    expect(node).toEqual({
      meta: {
        namespace: '',
        name: 'node-a',
        uid: '',
        resourceVersion: '',
        labels: { 'topology.kubernetes.io/zone': 'zone-a' },
        annotations: {},
      },
      podCIDRs: ['10.244.1.0/24', 'fd00:1::/64'],
      addresses: [{ type: 'InternalIP', address: '10.10.0.1' }],
      taints: [{ key: 'dedicated', value: '', effect: 'NoSchedule' }],
      deletionTimestamp: null,
    });
  });

  it('fills podCIDRs from the older podCIDR, as the API server does', () => {
    expect(
      accepted(parseNode({ metadata: { name: 'n' }, spec: { podCIDR: '10.244.1.0/24' } })).podCIDRs,
    ).toEqual(['10.244.1.0/24']);
  });

  it('reports a node being deleted', () => {
    const node = accepted(parseNode({ metadata: { name: 'n', deletionTimestamp: '2025-01-01T00:00:00Z' } }));
    expect(node.deletionTimestamp).toBe('2025-01-01T00:00:00Z');
  });

  it.each([
    [
      { metadata: { name: 'n' }, spec: { podCIDRs: ['a', 'b', 'c'] } },
      'spec.podCIDRs: must hold at most 2 items, got a list of 3 items',
    ],
    [
      { metadata: { name: 'n' }, status: { addresses: [{ type: 'InternalIP' }] } },
      'status.addresses[0].address: is required',
    ],
    [{ metadata: { name: 'n' }, status: { addresses: 'x' } }, 'status.addresses: must be a list, got "x"'],
    [{ metadata: {} }, 'metadata.name: is required'],
  ])('rejects %j', (raw, reason) => {
    expect(reasonOf(parseNode(raw))).toBe(reason);
  });
});

describe('parseServiceCIDR', () => {
  const cidr = (spec: unknown, metadata: Record<string, unknown> = { name: 'kubernetes' }) => ({
    apiVersion: 'networking.k8s.io/v1',
    kind: 'ServiceCIDR',
    metadata,
    spec,
  });

  it('reads spec.cidrs of a cluster-scoped object, one CIDR or one of each family', () => {
    expect(parseServiceCIDR(cidr({ cidrs: ['10.96.0.0/16'] }))).toEqual({
      ok: true,
      value: {
        meta: {
          namespace: '',
          name: 'kubernetes',
          uid: '',
          resourceVersion: '',
          labels: {},
          annotations: {},
        },
        cidrs: ['10.96.0.0/16'],
      },
    });
    const dual = parseServiceCIDR(
      cidr({ cidrs: ['fd00:96::/112', '10.96.0.0/16'] }, { name: 'a', namespace: 'x' }),
    );
    expect(dual.ok && dual.value).toMatchObject({
      meta: { namespace: '' },
      cidrs: ['fd00:96::/112', '10.96.0.0/16'],
    });
  });

  it('refuses what the API server refuses: no CIDR, more than two, two of one family, a bad name or kind', () => {
    expect(reasonOf(parseServiceCIDR(cidr({})))).toBe('spec.cidrs: must hold at least one CIDR');
    expect(reasonOf(parseServiceCIDR(cidr(undefined)))).toBe('spec.cidrs: must hold at least one CIDR');
    expect(reasonOf(parseServiceCIDR(cidr({ cidrs: [] })))).toBe('spec.cidrs: must hold at least one CIDR');
    expect(reasonOf(parseServiceCIDR(cidr({ cidrs: ['10.0.0.0/8', 'fd00::/64', '10.1.0.0/16'] })))).toBe(
      'spec.cidrs: must hold at most 2 items, got a list of 3 items',
    );
    expect(reasonOf(parseServiceCIDR(cidr({ cidrs: ['10.96.0.0/16', '10.97.0.0/16'] })))).toBe(
      'spec.cidrs[1]: must be of the other IP family than spec.cidrs[0] (at most one CIDR per family), got "10.97.0.0/16"',
    );
    expect(reasonOf(parseServiceCIDR(cidr({ cidrs: [42] })))).toBe('spec.cidrs[0]: must be a string, got 42');
    expect(reasonOf(parseServiceCIDR(cidr({ cidrs: ['10.96.0.0/16'] }, { name: 'Big_Range' })))).toMatch(
      /^metadata\.name: must be a DNS subdomain/,
    );
    expect(reasonOf(parseServiceCIDR({ ...cidr({ cidrs: ['10.96.0.0/16'] }), kind: 'Service' }))).toBe(
      'kind: must be ServiceCIDR, got "Service"',
    );
  });

  it('leaves out a CIDR that does not parse and uses the other one', () => {
    expect(parseServiceCIDR(cidr({ cidrs: ['10.96.0.0/33', 'fd00:96::/112'] }))).toMatchObject({
      ok: true,
      value: { cidrs: ['fd00:96::/112'] },
      leftOut: 'spec.cidrs[0]: must be a CIDR, got "10.96.0.0/33"',
    });
    expect(parseServiceCIDR(cidr({ cidrs: ['10.96.0.1'] }))).toMatchObject({
      ok: true,
      value: { cidrs: [] },
      leftOut: 'spec.cidrs[0]: must be a CIDR, got "10.96.0.1"',
    });
    const event = parseEvent({
      type: 'upsert',
      kind: 'ServiceCIDR',
      origin: 'cidrs.yaml#0',
      object: cidr({ cidrs: ['bogus'] }),
    });
    expect(event.problem && formatProblem(event.problem)).toBe(
      'cidrs.yaml#0 ServiceCIDR kubernetes: spec.cidrs[0]: must be a CIDR, got "bogus" (left out; the rest of the ServiceCIDR is used)',
    );
  });
});

describe('parseObject, parseEvent, problems', () => {
  it('dispatches by kind', () => {
    expect(parseObject('Node', { metadata: { name: 'n' } }).ok).toBe(true);
    expect(parseObject('Service', { metadata: { name: 'n' } }).ok).toBe(false);
    expect(parseObject('EndpointSlice', slice({})).ok).toBe(true);
    expect(
      parseObject('ServiceCIDR', { metadata: { name: 'n' }, spec: { cidrs: ['10.96.0.0/16'] } }).ok,
    ).toBe(true);
    expect(parseObject('ServiceCIDR', { metadata: { name: 'n' } }).ok).toBe(false);
  });

  it('turns a failure into a located problem and formats it as the CLI prints it', () => {
    const result = parseEvent({
      type: 'upsert',
      kind: 'Service',
      origin: 'examples/web.yaml#2',
      object: service({
        ports: [
          { name: 'a', port: 80 },
          { name: 'b', port: 70000 },
        ],
      }),
    });
    expect(result).toEqual({
      ok: false,
      problem: {
        origin: 'examples/web.yaml#2',
        kind: 'Service',
        namespace: 'demo',
        name: 'web',
        reason: 'spec.ports[1].port: must be an integer 1-65535, got 70000',
      },
    });
    if (result.ok) return;
    expect(formatProblem(result.problem)).toBe(
      'examples/web.yaml#2 Service demo/web: spec.ports[1].port: must be an integer 1-65535, got 70000',
    );
  });

  it('reports the entries left out of a valid object as a problem of the object, and uses the rest', () => {
    const result = parseEvent({
      type: 'upsert',
      kind: 'Service',
      origin: 'examples/web.yaml#0',
      object: service({ clusterIP: '10.96.0.1', externalIPs: ['192.0.2.300'], ports: [{ port: 80 }] }),
    });
    expect(result.ok && result.object.kind === 'Service' && result.object.value.externalIPs).toEqual([]);
    expect(result.problem).toEqual({
      origin: 'examples/web.yaml#0',
      kind: 'Service',
      namespace: 'demo',
      name: 'web',
      reason:
        'spec.externalIPs[0]: must be an IP address, got "192.0.2.300" (left out; the rest of the Service is used)',
      entriesLeftOut: true,
    });
    expect(formatProblem(result.problem as ObjectProblem)).toBe(
      'examples/web.yaml#0 Service demo/web: spec.externalIPs[0]: must be an IP address, got "192.0.2.300" (left out; the rest of the Service is used)',
    );
  });

  it('returns the typed object of a valid event', () => {
    const result = parseEvent({
      type: 'upsert',
      kind: 'Node',
      origin: 'api',
      object: { metadata: { name: 'node-a' } },
    });
    expect(result.ok && result.object.kind === 'Node' && result.object.value.meta.name).toBe('node-a');
  });

  it('identifies garbage as well as it can', () => {
    expect(describeObject(null)).toEqual({ namespace: '', name: '' });
    expect(describeObject({ metadata: 'x' })).toEqual({ namespace: '', name: '' });
    expect(describeObject({ metadata: { name: 7, namespace: 'demo' } })).toEqual({
      namespace: 'demo',
      name: '',
    });
    expect(describeObject({ metadata: { name: 'x'.repeat(253) } }).name).toBe('x'.repeat(253));
    expect(describeObject({ metadata: { name: 'x'.repeat(100_000) } }).name).toBe(`${'x'.repeat(253)}…`);
    expect(
      formatProblem({ origin: 'a.yaml#0', kind: '', namespace: '', name: '', reason: 'YAML syntax error' }),
    ).toBe('a.yaml#0: YAML syntax error');
  });

  it('words paths and values briefly', () => {
    expect(formatPath(['spec', 'ports', 1, 'port'])).toBe('spec.ports[1].port');
    expect(formatPath(['metadata', 'labels', 'app.kubernetes.io/name'])).toBe(
      'metadata.labels["app.kubernetes.io/name"]',
    );
    expect(describeValue([1, 2])).toBe('a list of 2 items');
    expect(describeValue({})).toBe('an object');
    expect(describeValue(true)).toBe('true');
  });
});

describe('matchesKubeProxySelector (!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless)', () => {
  it.each([
    [undefined, true],
    [null, true],
    ['garbage', true],
    [{}, true],
    [{ app: 'web' }, true],
    [{ 'service.kubernetes.io/service-proxy-name': 'other' }, false],
    [{ 'service.kubernetes.io/service-proxy-name': '' }, false],
    [{ 'service.kubernetes.io/headless': '' }, false],
  ])('labels %j match: %s', (labels, expected) => {
    expect(matchesKubeProxySelector(labels)).toBe(expected);
  });
});
