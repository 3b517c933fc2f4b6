// Builders for typed model objects with the API server's defaults, so brain tests state only
// what matters to them.

import type { BrainConfig } from '../../src/brain/decide.js';
import type { NodeEnv } from '../../src/brain/types.js';
import type {
  EndpointSlice,
  Node,
  ObjectMeta,
  Service,
  ServiceCIDR,
  SliceEndpoint,
} from '../../src/model/types.js';

export function meta(namespace: string, name: string, extra: Partial<ObjectMeta> = {}): ObjectMeta {
  return {
    namespace,
    name,
    uid: `${namespace}-${name}`,
    resourceVersion: '1',
    labels: {},
    annotations: {},
    ...extra,
  };
}

export function service(
  namespace: string,
  name: string,
  spec: Partial<Omit<Service, 'meta'>> & { meta?: Partial<ObjectMeta> } = {},
): Service {
  const { meta: metaOverrides, ...rest } = spec;
  return {
    meta: meta(namespace, name, metaOverrides),
    type: 'ClusterIP',
    clusterIP: '172.30.0.41',
    clusterIPs: [],
    ports: [{ name: 'p80', protocol: 'TCP', port: 80, nodePort: 0 }],
    externalIPs: [],
    loadBalancerIngress: [],
    loadBalancerSourceRanges: [],
    externalTrafficPolicy: 'Cluster',
    internalTrafficPolicy: 'Cluster',
    sessionAffinity: 'None',
    sessionAffinityTimeoutSeconds: 0,
    healthCheckNodePort: 0,
    ...rest,
  };
}

export function endpoint(address: string, extra: Partial<SliceEndpoint> = {}): SliceEndpoint {
  return {
    addresses: [address],
    conditions: { ready: null, serving: null, terminating: null },
    nodeName: null,
    zone: null,
    zoneHints: [],
    nodeHints: [],
    ...extra,
  };
}

export function slice(
  namespace: string,
  serviceName: string,
  sliceName: string,
  endpoints: SliceEndpoint[],
  ports: EndpointSlice['ports'] = [{ name: 'p80', port: 80, protocol: 'TCP' }],
  addressType: EndpointSlice['addressType'] = 'IPv4',
): EndpointSlice {
  return { meta: meta(namespace, sliceName), serviceName, addressType, ports, endpoints };
}

export function node(
  name: string,
  extra: Partial<Omit<Node, 'meta'>> & { labels?: Record<string, string> } = {},
): Node {
  const { labels, ...rest } = extra;
  return {
    meta: meta('', name, { labels: labels ?? {} }),
    podCIDRs: [],
    addresses: [],
    taints: [],
    deletionTimestamp: null,
    ...rest,
  };
}

export function serviceCIDR(name: string, cidrs: string[]): ServiceCIDR {
  return { meta: meta('', name), cidrs };
}

/** ServiceCIDRs keyed by name, as ClusterState holds them. */
export function serviceCIDRMap(...objects: ServiceCIDR[]): Map<string, ServiceCIDR> {
  return new Map(objects.map((o) => [o.meta.name, o]));
}

export function nodeEnv(extra: Partial<NodeEnv> = {}): NodeEnv {
  return {
    nodeName: 'test-node',
    nodeIPs: ['192.168.0.2'],
    interfaces: [
      {
        ifname: 'lo',
        addr_info: [
          { family: 'inet', local: '127.0.0.1', prefixlen: 8 },
          { family: 'inet6', local: '::1', prefixlen: 128 },
        ],
      },
      {
        ifname: 'eth0',
        addr_info: [
          { family: 'inet', local: '192.168.0.2', prefixlen: 24 },
          { family: 'inet6', local: '2001:db8::2', prefixlen: 64 },
        ],
      },
    ],
    nodeLabels: {},
    iptables: { randomFully: true, nfacct: false },
    ...extra,
  };
}

/** The brain's settings at kube-proxy's defaults (ClusterCIDR detection of 10.244.0.0/16), with overrides. */
export function brainConfig(overrides: Partial<BrainConfig> = {}): BrainConfig {
  return {
    nodePortAddresses: [],
    detectLocalMode: 'ClusterCIDR',
    detectLocal: { bridgeInterface: '', interfaceNamePrefix: '' },
    clusterCIDRs: ['10.244.0.0/16'],
    masqueradeBit: 14,
    masqueradeAll: false,
    localhostNodePorts: true,
    featureGates: {},
    ...overrides,
  };
}
