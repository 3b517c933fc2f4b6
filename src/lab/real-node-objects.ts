// The Kubernetes objects of the real-node lab (src/lab/real-node.ts): its Nodes, and each Service
// dual-stack (RequireDualStack, every address with its ipv6Of() counterpart) with an EndpointSlice
// per family of ready endpoints, as the controllers make them.

import { ipv6Of, nodeOf, type PodInfo, REAL_NODES, type RealNode } from './real-node-plan.js';

/** Addresses are IPv4; each Service also gets every address's ipv6Of() counterpart (dual-stack). */
export interface LabService {
  name: string;
  type: 'ClusterIP' | 'NodePort' | 'LoadBalancer';
  clusterIP: string;
  ports: { name: string; protocol: 'TCP' | 'UDP'; port: number; targetPort: number; nodePort?: number }[];
  externalTrafficPolicy?: 'Cluster' | 'Local';
  healthCheckNodePort?: number;
  /** status.loadBalancer.ingress, as the cloud or MetalLB writes it. */
  loadBalancerIP?: string;
  /** spec.externalIPs: addresses the cluster's network routes to some node. */
  externalIPs?: string[];
  /** Pods by name; host-network servers by their node. */
  endpoints: ({ pod: string } | { hostNode: string })[];
}

/** The Nodes, Services and EndpointSlices of `services`; `podOf` gives each endpoint pod's addresses. */
export function labObjects(
  services: LabService[],
  podOf: (name: string) => PodInfo,
): Record<string, unknown>[] {
  return [
    ...REAL_NODES.map(nodeObject),
    ...services.flatMap((svc) => serviceObjects(svc, podOf) as Record<string, unknown>[]),
  ];
}

/** A RequireDualStack Service (each address with its ipv6Of() counterpart) and a slice per family. */
function serviceObjects(svc: LabService, podOf: (name: string) => PodInfo): unknown[] {
  const metadata = { name: svc.name, namespace: 'default' };
  const service = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata,
    spec: {
      type: svc.type,
      clusterIP: svc.clusterIP,
      clusterIPs: [svc.clusterIP, ipv6Of(svc.clusterIP)],
      ipFamilies: ['IPv4', 'IPv6'],
      ipFamilyPolicy: 'RequireDualStack',
      ports: svc.ports,
      ...(svc.type === 'ClusterIP' ? {} : { externalTrafficPolicy: svc.externalTrafficPolicy ?? 'Cluster' }),
      ...(svc.healthCheckNodePort ? { healthCheckNodePort: svc.healthCheckNodePort } : {}),
      ...(svc.externalIPs ? { externalIPs: svc.externalIPs.flatMap((ip) => [ip, ipv6Of(ip)]) } : {}),
    },
    status: svc.loadBalancerIP
      ? {
          loadBalancer: {
            ingress: [svc.loadBalancerIP, ipv6Of(svc.loadBalancerIP)].map((ip) => ({ ip, ipMode: 'VIP' })),
          },
        }
      : {},
  };
  const slice = (addressType: 'IPv4' | 'IPv6') => {
    const v4 = addressType === 'IPv4';
    const endpoints = svc.endpoints.map((endpoint) => {
      const conditions = { ready: true, serving: true, terminating: false };
      if ('hostNode' in endpoint) {
        const node = nodeOf(endpoint.hostNode);
        return { addresses: [v4 ? node.ip : node.ip6], conditions, nodeName: endpoint.hostNode };
      }
      const pod = podOf(endpoint.pod);
      return {
        addresses: [v4 ? pod.ip : pod.ip6],
        conditions,
        nodeName: pod.node,
        targetRef: { kind: 'Pod', namespace: 'default', name: pod.name },
      };
    });
    return {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        name: `${svc.name}-lab${v4 ? '' : '-v6'}`,
        namespace: 'default',
        labels: { 'kubernetes.io/service-name': svc.name },
      },
      addressType,
      ports: svc.ports.map((p) => ({ name: p.name, protocol: p.protocol, port: p.targetPort })),
      endpoints,
    };
  };
  return [service, slice('IPv4'), slice('IPv6')];
}

function nodeObject(node: RealNode): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: node.name,
      labels: { 'kubernetes.io/hostname': node.name, 'kubernetes.io/os': 'linux' },
    },
    spec: { podCIDR: node.podCIDR, podCIDRs: [node.podCIDR, node.podCIDR6] },
    status: {
      addresses: [
        { type: 'InternalIP', address: node.ip },
        { type: 'InternalIP', address: node.ip6 },
        { type: 'Hostname', address: node.name },
      ],
    },
  };
}
