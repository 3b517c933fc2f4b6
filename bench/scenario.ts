// The benchmark's cluster: N Services × E endpoints as Service and EndpointSlice manifests.
//
// 300,000 real backends cannot run on one machine, so E real backend pods serve every Service:
// Service i's slice lists the same E pod IPs (same target port 8080), so every Service is distinct
// in every data plane (own ClusterIP, own chains or map entries, own endpoint set) while the
// traffic always reaches a real server. The measured Service is the last one (the worst case for
// iptables' linear KUBE-SERVICES walk); it alone also has a UDP port (53 -> 5353) for the UDP
// probes. Its slice lives in a file of its own, so an endpoint change edits one small file.
//
// A scenario is of one IP family: N single-stack Services of that family, with slices of its
// address type. The node and the pods are dual-stack in every scenario; each IPv4 address of the
// layout below has its IPv6 counterpart, the same 32 bits in the low bits of fd00::/96 (10.96.0.2
// is fd00::a60:2, a /24 is a /120), as the kernel tests' families do.

import type { NodeEnv } from '../src/brain/types.js';
import { canonicalIP, type IPFamily } from '../src/net/ip.js';

/** The family's counterpart of one of the layout's IPv4 addresses (itself in IPv4). */
export function inFamily(family: IPFamily, ipv4: string): string {
  if (family === 'IPv4') return ipv4;
  const v6 = canonicalIP(`fd00::${ipv4}`);
  if (!v6) throw new Error(`inFamily: ${ipv4} is not an IPv4 address`);
  return v6;
}

/** ... of one of its IPv4 CIDRs (a /24 is a /120). */
export function cidrInFamily(family: IPFamily, cidr: string): string {
  const [address = '', bits = ''] = cidr.split('/');
  return family === 'IPv4' ? cidr : `${inFamily(family, address)}/${96 + Number(bits)}`;
}

export const NAMESPACE = 'bench';
export const NODE_NAME = 'node';
export const NODE_IP = '10.10.0.1';
/** The node's facts for the control-plane benches that run the sync loop without a lab node. */
export const NODE_ENV: NodeEnv = {
  nodeName: NODE_NAME,
  nodeIPs: [NODE_IP],
  interfaces: [],
  nodeLabels: {},
  iptables: { randomFully: true, nfacct: true },
};
export const POD_CIDR = '10.244.0.0/24';
/** Pod traffic stays inside it (no masquerade needed for pod-to-service traffic). */
export const CLUSTER_CIDR = '10.244.0.0/16';
/** kube-proxy's clusterCIDR on the dual-stack node: one CIDR of each family, comma-separated. */
export const DUAL_STACK_CLUSTER_CIDR = `${CLUSTER_CIDR},${cidrInFamily('IPv6', CLUSTER_CIDR)}`;
/** The API server's service ranges: 10.96.0.0/16 as the lab's control plane has it, and its IPv6 counterpart. */
export const SERVICE_CIDRS = ['10.96.0.0/16', cidrInFamily('IPv6', '10.96.0.0/16')];
export const CLIENT_POD_IP = '10.244.0.5';
export const TCP_TARGET_PORT = 8080;
export const UDP_TARGET_PORT = 5353;
export const SERVICE_TCP_PORT = 80;
export const SERVICE_UDP_PORT = 53;
/** Most backend pods a scenario starts (each is a process and a namespace). */
export const MAX_BACKEND_PODS = 32;

export interface Scenario {
  services: number;
  endpoints: number;
  /** The Services' family (single-stack); IPv4 when absent. */
  family?: IPFamily;
}

export function scenarioFamily(scenario: Scenario): IPFamily {
  return scenario.family ?? 'IPv4';
}

/** The i-th backend pod's IP (i from 0). */
export function backendPodIP(i: number, family: IPFamily = 'IPv4'): string {
  return inFamily(family, `10.244.0.${10 + i}`);
}

/**
 * The ClusterIP of service i (i from 0): 10.96.0.2 onwards, within 10.96.0.0/12 (kubeadm's default
 * service CIDR; in IPv6 fd00::a60:2 onwards, within fd00::a60:0/108). 10.96.0.1 is the
 * `kubernetes` Service's when the API server is the source.
 */
export function clusterIP(i: number, family: IPFamily = 'IPv4'): string {
  const n = i + 2;
  if (n > 2 ** 20 - 2) throw new Error(`service ${i}: more services than 10.96.0.0/12 holds`);
  return inFamily(family, `10.${96 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`);
}

/** svc-00042; an IPv6 scenario's Services are other objects (svc6-00042), so both can be in one API server in turn. */
export function serviceName(i: number, family: IPFamily = 'IPv4'): string {
  return `${family === 'IPv4' ? 'svc' : 'svc6'}-${String(i).padStart(5, '0')}`;
}

/** The Service traffic goes to: the last one. */
export function measuredService(scenario: Scenario): { index: number; name: string; ip: string } {
  const index = scenario.services - 1;
  const family = scenarioFamily(scenario);
  return { index, name: serviceName(index, family), ip: clusterIP(index, family) };
}

export function validateScenario(scenario: Scenario): void {
  if (!Number.isInteger(scenario.services) || scenario.services < 1)
    throw new Error(`services must be a positive integer, got ${scenario.services}`);
  if (
    !Number.isInteger(scenario.endpoints) ||
    scenario.endpoints < 1 ||
    scenario.endpoints > MAX_BACKEND_PODS
  )
    throw new Error(
      `endpoints must be 1..${MAX_BACKEND_PODS} (one real pod each), got ${scenario.endpoints}`,
    );
  clusterIP(scenario.services - 1, scenarioFamily(scenario));
}

/** Service i; the measured (last) one also has the UDP port. */
export function serviceObject(i: number, scenario: Scenario): object {
  const withUdp = i === scenario.services - 1;
  const ports: object[] = [
    { name: 'http', protocol: 'TCP', port: SERVICE_TCP_PORT, targetPort: TCP_TARGET_PORT },
  ];
  if (withUdp)
    ports.push({ name: 'dns', protocol: 'UDP', port: SERVICE_UDP_PORT, targetPort: UDP_TARGET_PORT });
  const family = scenarioFamily(scenario);
  const ip = clusterIP(i, family);
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: serviceName(i, family), namespace: NAMESPACE },
    spec: { type: 'ClusterIP', clusterIP: ip, clusterIPs: [ip], ipFamilies: [family], ports },
  };
}

/** The slice of service i: the E backend pods, plus `extraIPs` (not real pods: endpoint changes). */
export function endpointSlice(i: number, scenario: Scenario, extraIPs: string[] = []): object {
  const withUdp = i === scenario.services - 1;
  const ports: object[] = [{ name: 'http', protocol: 'TCP', port: TCP_TARGET_PORT }];
  if (withUdp) ports.push({ name: 'dns', protocol: 'UDP', port: UDP_TARGET_PORT });
  const family = scenarioFamily(scenario);
  const ips = [...Array.from({ length: scenario.endpoints }, (_, e) => backendPodIP(e, family)), ...extraIPs];
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${serviceName(i, family)}-1`,
      namespace: NAMESPACE,
      labels: { 'kubernetes.io/service-name': serviceName(i, family) },
    },
    addressType: family,
    ports,
    endpoints: ips.map((ip) => ({
      addresses: [ip],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: NODE_NAME,
    })),
  };
}

/**
 * Service i's slice with E addresses of its own (10.100.0.0 onwards or their IPv6 counterparts, N × E in all, as a real
 * cluster has) instead of the E shared backend pods.
 */
export function withOwnAddresses(slice: object, i: number): object {
  const s = slice as { addressType: IPFamily; endpoints: { addresses: string[] }[] };
  const ip = (k: number) => {
    const n = i * s.endpoints.length + k;
    return inFamily(s.addressType, `10.${100 + (n >> 16)}.${(n >> 8) & 0xff}.${n & 0xff}`);
  };
  return { ...s, endpoints: s.endpoints.map((e, k) => ({ ...e, addresses: [ip(k)] })) };
}

/** Every Service of the scenario and every slice but the measured one (which changes), as API objects. */
export function scenarioObjects(
  scenario: Scenario,
  opts: { distinctEndpoints?: boolean } = {},
): { services: object[]; slices: object[] } {
  validateScenario(scenario);
  const last = scenario.services - 1;
  const services: object[] = [];
  const slices: object[] = [];
  for (let i = 0; i < scenario.services; i++) {
    services.push(serviceObject(i, scenario));
    if (i === last) continue;
    const slice = endpointSlice(i, scenario);
    slices.push(opts.distinctEndpoints ? withOwnAddresses(slice, i) : slice);
  }
  return { services, slices };
}

export interface ManifestFiles {
  /** file name → JSON text */
  'services.json': string;
  'slices.json': string;
  'measured-slice.json': string;
}

export const MEASURED_SLICE_FILE = 'measured-slice.json';

const list = (items: object[]) => JSON.stringify({ apiVersion: 'v1', kind: 'List', items });

export function manifestFiles(scenario: Scenario, opts: { distinctEndpoints?: boolean } = {}): ManifestFiles {
  const { services, slices } = scenarioObjects(scenario, opts);
  return {
    'services.json': list(services),
    'slices.json': list(slices),
    'measured-slice.json': JSON.stringify(endpointSlice(scenario.services - 1, scenario)),
  };
}

/** The bpf map sizes a scenario needs past the defaults (powers of two): one frontend per Service
 * (bpf.mapSizes.services) and E slots each, twice over while a frontend switches generation
 * (bpf.mapSizes.backendSlots, which also sizes the affinity pairs). */
export function scenarioMapSizes(scenario: Scenario): { services: number; backendSlots: number } {
  const pow2 = (n: number) => 2 ** Math.ceil(Math.log2(n));
  return {
    services: Math.max(65536, pow2(scenario.services + 1)),
    backendSlots: Math.max(1048576, pow2(2 * (scenario.services + 1) * (scenario.endpoints + 1))),
  };
}

/** The IP an endpoint change adds to the measured slice: in the pod CIDR, never a backend pod. */
export function changedEndpointIP(change: number, family: IPFamily = 'IPv4'): string {
  return inFamily(family, `10.244.0.${100 + (change % 150)}`);
}

type Raw = Record<string, unknown> & { metadata: Record<string, unknown> };

/** What kube-apiserver and the controllers add to an object the bench's scenario writes: fields the parser never reads. */
export function asStored(kind: 'Service' | 'EndpointSlice', object: object, i: number): object {
  const o = object as Raw;
  const time = '2026-12-01T10:00:00Z';
  const uid = (n: number) => `0b1c2d3e-4f50-4a6b-8c7d-${String(n).padStart(12, '0')}`;
  const metadata: Record<string, unknown> = {
    ...o.metadata,
    uid: uid(2 * i + (kind === 'Service' ? 0 : 1)),
    resourceVersion: String(1000 + i),
    creationTimestamp: time,
    managedFields: [
      {
        manager: kind === 'Service' ? 'kubectl-client-side-apply' : 'kube-controller-manager',
        operation: 'Update',
        apiVersion: o.apiVersion,
        time,
        fieldsType: 'FieldsV1',
        fieldsV1: kind === 'Service' ? { 'f:spec': { 'f:ports': {}, 'f:type': {} } } : { 'f:endpoints': {} },
      },
    ],
  };
  if (kind === 'Service') {
    const spec = o.spec as Record<string, unknown>;
    return {
      ...o,
      metadata,
      spec: {
        ...spec,
        ipFamilyPolicy: 'SingleStack',
        sessionAffinity: 'None',
        internalTrafficPolicy: 'Cluster',
      },
      status: { loadBalancer: {} },
    };
  }
  const labels = metadata.labels as Record<string, string>;
  const service = labels['kubernetes.io/service-name'] ?? '';
  return {
    ...o,
    metadata: {
      ...metadata,
      generateName: `${service}-`,
      labels: { ...labels, 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': time },
      ownerReferences: [
        {
          apiVersion: 'v1',
          kind: 'Service',
          name: service,
          uid: uid(2 * i),
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    endpoints: (o.endpoints as Raw[]).map((e, k) => ({
      ...e,
      targetRef: { kind: 'Pod', namespace: metadata.namespace, name: `${service}-${k}`, uid: uid(k) },
    })),
  };
}
