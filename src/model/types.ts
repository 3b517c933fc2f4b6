// The typed model of the Kubernetes objects kube-proxy reads, after validation (model/parse.ts).
// Only the fields kube-proxy's semantics depend on are kept. Addresses stay as the API gave them
// (strings); the brain parses them sloppily, as kube-proxy does, per IP family.

export { IP_FAMILIES, type IPFamily } from '../net/ip.js';

export type Protocol = 'TCP' | 'UDP' | 'SCTP';
export type ServiceType = 'ClusterIP' | 'NodePort' | 'LoadBalancer' | 'ExternalName';
export type TrafficPolicy = 'Cluster' | 'Local';

export interface ObjectMeta {
  namespace: string;
  name: string;
  uid: string;
  resourceVersion: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

export interface ServicePort {
  /** "" for an unnamed port. */
  name: string;
  protocol: Protocol;
  port: number;
  /** 0 when not allocated. */
  nodePort: number;
}

export interface LoadBalancerIngress {
  ip: string;
  hostname: string;
  /** "VIP" (the default) or "Proxy"; kube-proxy skips Proxy-mode IPs. */
  ipMode: 'VIP' | 'Proxy';
}

export interface Service {
  meta: ObjectMeta;
  type: ServiceType;
  /** spec.clusterIP: "" or "None" for headless. */
  clusterIP: string;
  clusterIPs: string[];
  ports: ServicePort[];
  externalIPs: string[];
  loadBalancerIngress: LoadBalancerIngress[];
  loadBalancerSourceRanges: string[];
  externalTrafficPolicy: TrafficPolicy;
  internalTrafficPolicy: TrafficPolicy;
  sessionAffinity: 'None' | 'ClientIP';
  /** Defaulted by the API server to 10800 when affinity is ClientIP. */
  sessionAffinityTimeoutSeconds: number;
  /** 0 when not allocated. */
  healthCheckNodePort: number;
}

export interface EndpointPort {
  /** "" for the unnamed port; the API server defaults an absent name to "". */
  name: string;
  /** null when absent. */
  port: number | null;
  protocol: Protocol;
}

export interface EndpointConditions {
  ready: boolean | null;
  serving: boolean | null;
  terminating: boolean | null;
}

export interface SliceEndpoint {
  addresses: string[];
  conditions: EndpointConditions;
  nodeName: string | null;
  zone: string | null;
  zoneHints: string[];
  nodeHints: string[];
}

export interface EndpointSlice {
  meta: ObjectMeta;
  /** Value of the kubernetes.io/service-name label; "" when missing. */
  serviceName: string;
  addressType: 'IPv4' | 'IPv6' | 'FQDN';
  ports: EndpointPort[];
  endpoints: SliceEndpoint[];
}

export interface NodeTaint {
  key: string;
  value: string;
  effect: string;
}

export interface Node {
  meta: ObjectMeta;
  podCIDRs: string[];
  addresses: { type: string; address: string }[];
  taints: NodeTaint[];
  deletionTimestamp: string | null;
}

/** A networking.k8s.io/v1 ServiceCIDR: a range the API server allocates ClusterIPs from. */
export interface ServiceCIDR {
  meta: ObjectMeta;
  /** spec.cidrs that parse (at most one per family), as written. */
  cidrs: string[];
}

/** Everything the brain reads from the API, keyed by "namespace/name" (cluster-scoped objects by name). */
export interface ClusterState {
  services: ReadonlyMap<string, Service>;
  endpointSlices: ReadonlyMap<string, EndpointSlice>;
  node: Node | null;
  /** Every ServiceCIDR object, by name. */
  serviceCIDRs: ReadonlyMap<string, ServiceCIDR>;
}

export const SERVICE_PROXY_NAME_LABEL = 'service.kubernetes.io/service-proxy-name';
export const HEADLESS_LABEL = 'service.kubernetes.io/headless';
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
export const TRIGGER_TIME_ANNOTATION = 'endpoints.kubernetes.io/last-change-trigger-time';
/** kube-proxy's informer label selector. */
export const KUBE_PROXY_LABEL_SELECTOR = `!${SERVICE_PROXY_NAME_LABEL},!${HEADLESS_LABEL}`;
