// A corpus of generated malformed objects mixed with good ones, written into YAML and JSON files,
// multi-document streams and lists: the bad-input tests of the manifests reader and of `render`.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { WatchedKind } from '../../src/model/events.js';
import { type ObjectProblem, parseObject } from '../../src/model/parse.js';
import { describeValue } from '../../src/model/schema.js';
import { mulberry32 } from './random.js';

// biome-ignore lint/suspicious/noExplicitAny: the mutations reach anywhere into raw JSON, typed or not
export type Raw = Record<string, any>;

export interface Mutation {
  what: string;
  kind: WatchedKind;
  mutate: (object: Raw, id: string) => void;
  /** A fragment the reason must contain: normally the field path and the problem. */
  reason: string;
  /** Values JSON cannot carry (NaN, Infinity): only written as YAML. */
  yamlOnly?: boolean;
}

const NAMESPACE = 'demo';

function goodService(name: string): Raw {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: NAMESPACE, labels: { app: name } },
    spec: {
      type: 'NodePort',
      clusterIP: '10.96.1.1',
      clusterIPs: ['10.96.1.1'],
      ports: [
        { name: 'http', protocol: 'TCP', port: 80, targetPort: 8080, nodePort: 30080 },
        { name: 'dns', protocol: 'UDP', port: 53, targetPort: 5353, nodePort: 30053 },
      ],
      sessionAffinity: 'ClientIP',
      sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
      externalIPs: ['192.0.2.50'],
      loadBalancerSourceRanges: ['198.51.100.0/24'],
    },
    status: { loadBalancer: { ingress: [{ ip: '198.51.100.10' }] } },
  };
}

function goodSlice(name: string): Raw {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: NAMESPACE, labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4',
    ports: [{ name: 'http', protocol: 'TCP', port: 8080 }],
    endpoints: [
      {
        addresses: ['10.244.1.10'],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: 'node-a',
        zone: 'zone-a',
        hints: { forZones: [{ name: 'zone-a' }] },
      },
    ],
  };
}

function goodNode(name: string): Raw {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels: { 'topology.kubernetes.io/zone': 'zone-a' } },
    spec: { podCIDRs: ['10.244.1.0/24'], taints: [{ key: 'k', value: 'v', effect: 'NoSchedule' }] },
    status: { addresses: [{ type: 'InternalIP', address: '10.10.0.1' }] },
  };
}

function goodServiceCIDR(name: string): Raw {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'ServiceCIDR',
    metadata: { name },
    spec: { cidrs: ['10.96.0.0/16', 'fd00:96::/112'] },
  };
}

const BASE: Record<WatchedKind, (name: string) => Raw> = {
  Service: goodService,
  EndpointSlice: goodSlice,
  Node: goodNode,
  ServiceCIDR: goodServiceCIDR,
};

function nested(depth: number, leaf: unknown, asList: boolean): unknown {
  let value = leaf;
  for (let i = 0; i < depth; i++) value = asList ? [value] : { deeper: value };
  return value;
}
const many = (n: number, make: (i: number) => unknown) => Array.from({ length: n }, (_, i) => make(i));
const LONG = 'x'.repeat(100_000);

const DELETE = Symbol('delete');

/** A mutation setting (or deleting) the value at a path like "spec.ports[0].port"; a function value gets the object's id. */
function mutation(
  kind: WatchedKind,
  path: string,
  value: unknown,
  reason: string,
  yamlOnly = false,
): Mutation {
  const keys = path.match(/[^.[\]]+/g) ?? [];
  const shown =
    value === DELETE ? 'deleted' : typeof value === 'function' ? 'per object' : describeValue(value);
  return {
    what: `${path} ${shown}`,
    kind,
    reason,
    yamlOnly,
    mutate: (object, id) => {
      let target = object;
      for (const key of keys.slice(0, -1)) target = target[key];
      const last = keys[keys.length - 1] as string;
      if (value === DELETE) delete target[last];
      else target[last] = typeof value === 'function' ? value(id) : value;
    },
  };
}
const S = (path: string, value: unknown, reason: string, yamlOnly = false) =>
  mutation('Service', path, value, reason, yamlOnly);
const E = (path: string, value: unknown, reason: string) => mutation('EndpointSlice', path, value, reason);
const N = (path: string, value: unknown, reason: string) => mutation('Node', path, value, reason);
const C = (path: string, value: unknown, reason: string) => mutation('ServiceCIDR', path, value, reason);

const PORT_RANGE = 'must be an integer 1-65535';
const NODE_PORT_RANGE = 'must be an integer 1-65535, or 0 for none';
const SERVICE_TYPES = 'must be one of ClusterIP, NodePort, LoadBalancer, ExternalName';
const NO_PORTS = 'spec.ports: must hold at least one port';

// biome-ignore format: one case per line reads as a table
const MUTATIONS: Mutation[] = [
  // ports out of range, wrong number types
  ...[0, -1, 65536, 1e9, 80.5].map((v) => S('spec.ports[0].port', v, `spec.ports[0].port: ${PORT_RANGE}, got ${v}`)),
  S('spec.ports[0].port', Number.NaN, `spec.ports[0].port: ${PORT_RANGE}, got NaN`, true),
  S('spec.ports[1].port', Number.POSITIVE_INFINITY, `spec.ports[1].port: ${PORT_RANGE}, got Infinity`, true),
  S('spec.ports[0].port', '80', `spec.ports[0].port: ${PORT_RANGE}, got "80"`),
  S('spec.ports[0].port', null, `spec.ports[0].port: ${PORT_RANGE}, got null`),
  S('spec.ports[1].port', DELETE, 'spec.ports[1].port: is required'),
  S('spec.ports[0].port', [80], `spec.ports[0].port: ${PORT_RANGE}, got a list of 1 items`),
  S('spec.ports[0].port', { value: 80 }, `spec.ports[0].port: ${PORT_RANGE}, got an object`),
  S('spec.ports[0].nodePort', 70000, `spec.ports[0].nodePort: ${NODE_PORT_RANGE}, got 70000`),
  S('spec.ports[1].nodePort', -5, `spec.ports[1].nodePort: ${NODE_PORT_RANGE}, got -5`),
  S('spec.healthCheckNodePort', 65536, `spec.healthCheckNodePort: ${NODE_PORT_RANGE}, got 65536`),
  S('spec.ports[0].targetPort', 0, 'spec.ports[0].targetPort: must be a port number 1-65535 or a port name'),
  S('spec.ports[0].targetPort', 'a-very-long-port-name', 'spec.ports[0].targetPort: must be a port number'),
  // enums
  S('spec.ports[0].protocol', 'tcp', 'spec.ports[0].protocol: must be one of TCP, UDP, SCTP, got "tcp"'),
  S('spec.ports[1].protocol', 'HTTP', 'spec.ports[1].protocol: must be one of TCP, UDP, SCTP, got "HTTP"'),
  S('spec.ports[0].protocol', ['TCP'], 'spec.ports[0].protocol: must be one of TCP, UDP, SCTP, got a list of 1 items'),
  S('spec.type', 'LoadBalancers', `spec.type: ${SERVICE_TYPES}, got "LoadBalancers"`),
  S('spec.type', 5, `spec.type: ${SERVICE_TYPES}, got 5`),
  S('spec.externalTrafficPolicy', 'Global', 'spec.externalTrafficPolicy: must be one of Cluster, Local, got "Global"'),
  S('spec.internalTrafficPolicy', 'local', 'spec.internalTrafficPolicy: must be one of Cluster, Local, got "local"'),
  S('spec.sessionAffinity', 'Sticky', 'spec.sessionAffinity: must be one of None, ClientIP, got "Sticky"'),
  S('spec.sessionAffinityConfig.clientIP.timeoutSeconds', 0, 'clientIP.timeoutSeconds: must be an integer 1-86400, got 0'),
  S('spec.sessionAffinityConfig.clientIP.timeoutSeconds', 86401, 'timeoutSeconds: must be an integer 1-86400, got 86401'),
  S('spec.sessionAffinityConfig.clientIP.timeoutSeconds', '60', 'timeoutSeconds: must be an integer 1-86400, got "60"'),
  S('status.loadBalancer.ingress[0].ipMode', 'Tunnel', 'ingress[0].ipMode: must be one of VIP, Proxy, got "Tunnel"'),
  // bad IPs: ClusterIPs that do not parse, wrong types and sizes, mixed families the API server refuses
  S('spec.clusterIP', 167772161, 'spec.clusterIP: must be a string, got 167772161'),
  S('spec.clusterIP', ['10.96.1.1'], 'spec.clusterIP: must be a string, got a list of 1 items'),
  S('spec.clusterIP', { ip: '10.96.1.1' }, 'spec.clusterIP: must be a string, got an object'),
  S('spec.clusterIP', '1'.repeat(300), 'spec.clusterIP: must be at most 253 characters'),
  S('spec.clusterIPs', '10.96.1.1', 'spec.clusterIPs: must be a list, got "10.96.1.1"'),
  S('spec.clusterIPs', ['10.96.1.1', 'fd00::1', '10.96.1.2'], 'spec.clusterIPs: must hold at most 2 items, got a list of 3 items'),
  S('spec.clusterIPs', ['fd00::1', '10.96.1.1'], 'spec.clusterIPs[0]: must equal spec.clusterIP "10.96.1.1", got "fd00::1"'),
  S('spec.clusterIPs', [123], 'spec.clusterIPs[0]: must be a string, got 123'),
  S('spec.clusterIP', '10.96.300.1', 'spec.clusterIP: must be an IP address, "None" or "", got "10.96.300.1"'),
  S('spec.clusterIPs', ['10.96.1.1', 'fd00::zz'], 'spec.clusterIPs[1]: must be an IP address or "None", got "fd00::zz"'),
  S('spec.externalIPs', '192.0.2.1', 'spec.externalIPs: must be a list, got "192.0.2.1"'),
  S('spec.externalIPs', [null], 'spec.externalIPs[0]: must be a string, got null'),
  S('spec.externalIPs', [['192.0.2.1']], 'spec.externalIPs[0]: must be a string, got a list of 1 items'),
  S('spec.externalIPs', [LONG], 'spec.externalIPs[0]: must be at most 253 characters, got "xxxx'),
  S('spec.loadBalancerSourceRanges', { cidr: '10.0.0.0/8' }, 'spec.loadBalancerSourceRanges: must be a list, got an object'),
  S('status.loadBalancer.ingress', '198.51.100.10', 'status.loadBalancer.ingress: must be a list'),
  S('status.loadBalancer.ingress[0].ip', 42, 'status.loadBalancer.ingress[0].ip: must be a string, got 42'),
  // nulls, lists and strings where objects belong
  S('spec', null, NO_PORTS),
  S('spec', [], 'spec: must be an object, got an empty list'),
  S('spec', 'garbage', 'spec: must be an object, got "garbage"'),
  S('status', 5, 'status: must be an object, got 5'),
  S('spec.ports', [], NO_PORTS),
  S('spec.ports', [null], 'spec.ports[0]: must be an object, got null'),
  S('spec.ports', 'http:80', 'spec.ports: must be a list, got "http:80"'),
  S('spec.ports[1].name', DELETE, 'spec.ports[1].name: is required when the service has several ports'),
  S('spec.ports[1].name', 'http', 'spec.ports[1].name: duplicates spec.ports[0].name'),
  S('spec.ports[1]', { name: 'alt', protocol: 'TCP', port: 80 }, 'spec.ports[1]: duplicates port 80/TCP of spec.ports[0]'),
  S('spec.ports[0].name', 'HTTP', 'spec.ports[0].name: must be a DNS label'),
  S('spec.ports[0].name', 'p'.repeat(64), 'spec.ports[0].name: must be at most 63 characters'),
  // metadata
  S('metadata', null, 'metadata: must be an object, got null'),
  S('metadata', 'web', 'metadata: must be an object, got "web"'),
  S('metadata', DELETE, 'metadata: is required'),
  S('metadata.name', DELETE, 'metadata.name: is required'),
  S('metadata.name', 42, 'metadata.name: must be a string, got 42'),
  S('metadata.name', (id: string) => [id], 'metadata.name: must be a string, got a list of 1 items'),
  S('metadata.name', (id: string) => `Web_${id}`, 'metadata.name: must be a DNS-1035 label'),
  S('metadata.name', (id: string) => `${id}-${'n'.repeat(10_000)}`, 'metadata.name: must be at most 63 characters'),
  S('metadata.namespace', 'Demo_NS', 'metadata.namespace: must be a DNS label'),
  S('metadata.namespace', ['demo'], 'metadata.namespace: must be a string, got a list of 1 items'),
  S('metadata.labels', 'app=web', 'metadata.labels: must be an object, got "app=web"'),
  S('metadata.labels', { app: 3 }, 'metadata.labels.app: must be a string, got 3'),
  S('metadata.labels', { 'bad key!': 'x' }, 'metadata.labels["bad key!"]: key must be a qualified name'),
  S('metadata.labels', { app: LONG }, 'metadata.labels.app: must be a label value'),
  S('metadata.labels', { app: nested(50, 'x', false) }, 'metadata.labels.app: must be a string, got an object'),
  S('metadata.annotations', { note: 5 }, 'metadata.annotations.note: must be a string, got 5'),
  S('metadata.annotations', { big: 'b'.repeat(300_000) }, 'metadata.annotations: must total at most 262144 bytes of keys and values, got 300003'),
  S('spec.ports[0].port', nested(40, 80, true), `spec.ports[0].port: ${PORT_RANGE}, got a list of 1 items`),
  S('spec.ports', nested(30, { port: 80 }, false), 'spec.ports: must be a list, got an object'),
  // the source's own checks: kind and apiVersion
  S('kind', 'Servic', 'unsupported kind'),
  S('apiVersion', 'v2', 'apiVersion: Service must be v1, got "v2"'),
  S('kind', ['Service'], 'kind: must be a string, got a list of 1 items'),

  // EndpointSlices
  E('addressType', DELETE, 'addressType: is required'),
  E('addressType', 'IPv5', 'addressType: must be one of IPv4, IPv6, FQDN, got "IPv5"'),
  E('addressType', 'ipv4', 'addressType: must be one of IPv4, IPv6, FQDN, got "ipv4"'),
  E('addressType', ['IPv4', 'IPv6'], 'addressType: must be one of IPv4, IPv6, FQDN, got a list of 2 items'),
  E('endpoints', many(1001, (i) => ({ addresses: [`10.1.${i >> 8}.${i & 255}`] })), 'endpoints: must hold at most 1000 items, got a list of 1001 items'),
  E('endpoints[0].addresses', many(101, (i) => `10.1.0.${i}`), 'endpoints[0].addresses: must hold at most 100 items, got a list of 101 items'),
  E('ports', many(101, (i) => ({ name: `p${i}`, port: 1000 + i })), 'ports: must hold at most 100 items, got a list of 101 items'),
  E('endpoints[0].hints.forZones', many(9, (i) => ({ name: `z${i}` })), 'endpoints[0].hints.forZones: must hold at most 8 items'),
  E('endpoints[0].hints.forNodes', many(9, (i) => ({ name: `n${i}` })), 'endpoints[0].hints.forNodes: must hold at most 8 items'),
  E('ports[0].port', 70000, 'ports[0].port: must be an integer 0-65535, got 70000'),
  E('ports[0].port', -1, 'ports[0].port: must be an integer 0-65535, got -1'),
  E('ports[0].port', '8080', 'ports[0].port: must be an integer 0-65535, got "8080"'),
  E('ports[0].name', 80, 'ports[0].name: must be a string, got 80'),
  E('ports[0].name', 'HTTP', 'ports[0].name: must be a DNS label: lower-case letters, digits and "-", starting and ending alphanumeric, got "HTTP"'),
  E('ports[0].protocol', 'udp', 'ports[0].protocol: must be one of TCP, UDP, SCTP, got "udp"'),
  E('ports', { name: 'http' }, 'ports: must be a list, got an object'),
  E('endpoints', 'x', 'endpoints: must be a list, got "x"'),
  E('endpoints', [null], 'endpoints[0]: must be an object, got null'),
  E('endpoints', [['10.0.0.1']], 'endpoints[0]: must be an object, got a list of 1 items'),
  E('endpoints[0].addresses', '10.0.0.1', 'endpoints[0].addresses: must be a list, got "10.0.0.1"'),
  E('endpoints[0].addresses', [10], 'endpoints[0].addresses[0]: must be a string, got 10'),
  E('endpoints[0].addresses', [null], 'endpoints[0].addresses[0]: must be a string, got null'),
  E('endpoints[0].addresses', ['1'.repeat(1000)], 'endpoints[0].addresses[0]: must be at most 253 characters'),
  E('endpoints[0].conditions.ready', 'true', 'endpoints[0].conditions.ready: must be true or false, got "true"'),
  E('endpoints[0].conditions.serving', 1, 'endpoints[0].conditions.serving: must be true or false, got 1'),
  E('endpoints[0].conditions.terminating', 'no', 'endpoints[0].conditions.terminating: must be true or false, got "no"'),
  E('endpoints[0].conditions', 'ready', 'endpoints[0].conditions: must be an object, got "ready"'),
  E('endpoints[0].nodeName', 42, 'endpoints[0].nodeName: must be a string, got 42'),
  E('endpoints[0].nodeName', 'Node_A', 'endpoints[0].nodeName: must be a DNS subdomain'),
  E('endpoints[0].nodeName', 'n'.repeat(300), 'endpoints[0].nodeName: must be at most 253 characters'),
  E('endpoints[0].zone', 5, 'endpoints[0].zone: must be a string, got 5'),
  E('endpoints[0].zone', 'z'.repeat(1000), 'endpoints[0].zone: must be at most 253 characters'),
  E('endpoints[0].hints.forZones', [{ name: 5 }], 'endpoints[0].hints.forZones[0].name: must be a string, got 5'),
  E('endpoints[0].hints.forZones', [null], 'endpoints[0].hints.forZones[0]: must be an object, got null'),
  E('endpoints[0].hints', 'zone-a', 'endpoints[0].hints: must be an object, got "zone-a"'),
  E('metadata.name', (id: string) => `slice-${id}!`, 'metadata.name: must be a DNS subdomain'),
  E('metadata.name', (id: string) => `${id}-${'s'.repeat(300)}`, 'metadata.name: must be at most 253 characters'),
  E('metadata', DELETE, 'metadata: is required'),
  E('metadata.labels', { 'kubernetes.io/service-name': 5 }, 'metadata.labels["kubernetes.io/service-name"]: must be a string, got 5'),
  E('endpoints[0].conditions', { ready: nested(45, true, false) }, 'endpoints[0].conditions.ready: must be true or false, got an object'),
  E('apiVersion', 'discovery.k8s.io/v1beta1', 'apiVersion: EndpointSlice must be discovery.k8s.io/v1, got "discovery.k8s.io/v1beta1"'),

  // Nodes
  N('spec.podCIDRs', ['10.244.1.0/24', 'fd00::/64', '10.244.9.0/24'], 'spec.podCIDRs: must hold at most 2 items, got a list of 3 items'),
  N('spec.podCIDRs', '10.244.1.0/24', 'spec.podCIDRs: must be a list, got "10.244.1.0/24"'),
  N('spec.podCIDR', 42, 'spec.podCIDR: must be a string, got 42'),
  N('status.addresses', [{ type: 'InternalIP' }], 'status.addresses[0].address: is required'),
  N('status.addresses', [{ address: '10.10.0.1' }], 'status.addresses[0].type: is required'),
  N('status.addresses[0].address', 10, 'status.addresses[0].address: must be a string, got 10'),
  N('status.addresses', 'x', 'status.addresses: must be a list, got "x"'),
  N('spec.taints', [{ effect: 'NoSchedule' }], 'spec.taints[0].key: is required'),
  N('spec.taints', 'x', 'spec.taints: must be a list, got "x"'),
  N('metadata.name', (id: string) => `node ${id}`, 'metadata.name: must be a DNS subdomain'),
  N('metadata.name', DELETE, 'metadata.name: is required'),
  N('metadata.name', (id: string) => `${id}-${'m'.repeat(300)}`, 'metadata.name: must be at most 253 characters'),
  N('metadata.labels', { zone: ['a'] }, 'metadata.labels.zone: must be a string, got a list of 1 items'),
  N('spec', 'x', 'spec: must be an object, got "x"'),
  N('status', 5, 'status: must be an object, got 5'),
  N('metadata.deletionTimestamp', 5, 'metadata.deletionTimestamp: must be a string, got 5'),
  N('kind', 'Nodes', 'unsupported kind'),

  // ServiceCIDRs
  C('spec.cidrs', DELETE, 'spec.cidrs: must hold at least one CIDR'),
  C('spec.cidrs', ['10.96.0.0/16', '10.97.0.0/16'], 'spec.cidrs[1]: must be of the other IP family than spec.cidrs[0] (at most one CIDR per family), got "10.97.0.0/16"'),
  C('spec.cidrs', ['10.96.0.0/16', 'fd00::/112', '10.97.0.0/16'], 'spec.cidrs: must hold at most 2 items, got a list of 3 items'),
  C('spec.cidrs', '10.96.0.0/16', 'spec.cidrs: must be a list, got "10.96.0.0/16"'),
  C('spec.cidrs[0]', 10, 'spec.cidrs[0]: must be a string, got 10'),
  C('metadata.name', (id: string) => `Range ${id}`, 'metadata.name: must be a DNS subdomain'),
  C('apiVersion', 'networking.k8s.io/v1beta1', 'apiVersion: ServiceCIDR must be networking.k8s.io/v1, got "networking.k8s.io/v1beta1"'),
];

/**
 * Objects with entries kube-proxy skips one by one (externalIPs that do not parse, endpoints without a
 * usable address): used without them, and reported with `leftOut` in the reason.
 */
export function partlyBad(i: number): { object: Raw; leftOut: string } {
  if (i % 2 === 0) {
    const s = goodService(`badip-${i}`);
    s.spec.externalIPs = ['not-an-ip', '010.001.002.003', 'fd00::zz', ' '];
    return {
      object: s,
      leftOut:
        'spec.externalIPs[0]: must be an IP address, got "not-an-ip"; spec.externalIPs[2]: must be an IP address, got "fd00::zz" (left out; the rest of the Service is used)',
    };
  }
  const e = goodSlice(`badip-${i}`);
  e.endpoints.push({ addresses: ['fd00::1'] }, { addresses: ['10.0.0.999'] }, { addresses: [] });
  return {
    object: e,
    leftOut:
      'endpoints[1].addresses[0]: must be an IPv4 address (addressType IPv4), got "fd00::1"; endpoints[2].addresses[0]: must be an IPv4 address (addressType IPv4), got "10.0.0.999"; endpoints[3].addresses: must hold at least one address (left out; the rest of the EndpointSlice is used)',
  };
}

export interface Planted {
  object: Raw;
  kind: WatchedKind;
  good: boolean;
  mutation?: Mutation;
  /** A good object used without some entries: the reason its report must give. */
  leftOut?: string;
  origin: string;
}

type Carrier = 'yaml-doc' | 'yaml-list' | 'json-file' | 'json-list';

/** Writes objects into files of every shape and returns where each one went. */
function plant(dir: string, objects: Omit<Planted, 'origin'>[], next: () => number): Planted[] {
  const planted: Planted[] = [];
  let fileIndex = 0;
  let at = 0;
  while (at < objects.length) {
    const yamlOnly = (o: Omit<Planted, 'origin'>) => o.mutation?.yamlOnly === true;
    const carriers: Carrier[] = ['yaml-doc', 'yaml-list', 'json-file', 'json-list'];
    let carrier = carriers[Math.floor(next() * carriers.length)] as Carrier;
    const count = carrier === 'json-file' ? 1 : 1 + Math.floor(next() * 12);
    const batch = objects.slice(at, at + count);
    if (carrier.startsWith('json') && batch.some(yamlOnly)) carrier = 'yaml-doc';
    at += batch.length;
    const sub = fileIndex % 3 === 0 ? 'nested/deeper' : fileIndex % 3 === 1 ? 'nested' : '.';
    mkdirSync(join(dir, sub), { recursive: true });
    const file = join(
      dir,
      sub,
      `f${String(fileIndex++).padStart(3, '0')}.${carrier.startsWith('json') ? 'json' : 'yaml'}`,
    );
    if (carrier === 'yaml-doc') {
      writeFileSync(file, batch.map((o) => stringify(o.object)).join('---\n'));
      batch.forEach((o, i) => {
        planted.push({ ...o, origin: `${file}#${i}` });
      });
    } else if (carrier === 'yaml-list') {
      // A leading comment-only document shifts the list to document 1.
      writeFileSync(
        file,
        `---\n# generated\n---\n${stringify({ apiVersion: 'v1', kind: 'List', items: batch.map((o) => o.object) })}`,
      );
      batch.forEach((o, i) => {
        planted.push({ ...o, origin: `${file}#1.items[${i}]` });
      });
    } else if (carrier === 'json-file') {
      writeFileSync(file, JSON.stringify(batch[0]?.object));
      planted.push({ ...(batch[0] as Omit<Planted, 'origin'>), origin: `${file}#0` });
    } else {
      writeFileSync(
        file,
        JSON.stringify({ apiVersion: 'v1', kind: 'List', items: batch.map((o) => o.object) }, null, 1),
      );
      batch.forEach((o, i) => {
        planted.push({ ...o, origin: `${file}#0.items[${i}]` });
      });
    }
  }
  return planted;
}

/** What a report must say the object is: its kind as written, and the identity describeObject gives. */
export function expectedIdentity(object: Raw): Pick<ObjectProblem, 'kind' | 'namespace' | 'name'> {
  const meta = typeof object.metadata === 'object' && object.metadata !== null ? object.metadata : {};
  const text = (v: unknown) => (typeof v !== 'string' ? '' : v.length > 253 ? `${v.slice(0, 253)}…` : v);
  return { kind: text(object.kind), namespace: text(meta.namespace), name: text(meta.name) };
}

export interface Corpus {
  planted: Planted[];
  malformed: Planted[];
  good: Planted[];
  /** The parse of each good object alone, before anything could touch it. */
  alone: Map<Raw, ReturnType<typeof parseObject>>;
}

/** Each mutation applied to a fresh good object of its kind, in memory. */
export function malformedObjects(): { object: Raw; kind: WatchedKind; mutation: Mutation }[] {
  return MUTATIONS.map((mutation, id) => {
    const object = BASE[mutation.kind](`m${id}`);
    mutation.mutate(object, `m${id}`);
    return { object, kind: mutation.kind, mutation };
  });
}

/** Generates the corpus (deterministically) and writes it under `root`. */
export function writeMalformedCorpus(root: string): Corpus {
  const next = mulberry32(20250101);
  const objects: Omit<Planted, 'origin'>[] = [];
  let id = 0;
  // Every mutation twice, so each lands in two differently shaped files.
  for (const round of [0, 1]) {
    for (const mutation of MUTATIONS) {
      const object = BASE[mutation.kind](`m${id}-r${round}`);
      mutation.mutate(object, `m${id}`);
      id++;
      objects.push({ object, kind: mutation.kind, good: false, mutation });
    }
  }
  const kinds: WatchedKind[] = ['Service', 'EndpointSlice', 'Node'];
  for (let i = 0; i < 90; i++) {
    const kind = kinds[i % 3] as WatchedKind;
    if (i % 9 === 4 || i % 9 === 5) {
      const { object, leftOut } = partlyBad(i);
      objects.push({ object, kind: object.kind as WatchedKind, good: true, leftOut });
    } else objects.push({ object: BASE[kind](`good-${i}`), kind, good: true });
  }
  // Shuffle so good and bad objects share files and lists.
  for (let i = objects.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [objects[i], objects[j]] = [objects[j] as Omit<Planted, 'origin'>, objects[i] as Omit<Planted, 'origin'>];
  }
  // The parse of each good object alone, before anything could touch it.
  const alone = new Map(
    objects.filter((o) => o.good).map((o) => [o.object, parseObject(o.kind, structuredClone(o.object))]),
  );
  const planted = plant(root, objects, next);
  const malformed = planted.filter((p) => !p.good);
  const good = planted.filter((p) => p.good);
  return { planted, malformed, good, alone };
}
