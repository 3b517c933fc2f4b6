// The brain's output: kube-proxy's decisions for one node, as plain data. Every data plane
// (bpf, iptables, nftables, ipvs) renders these and never re-derives policy from the API objects.
// `render --output json` prints ProxyDecisions; docs/decisions-json.md documents the format.

import type { DetectLocalMode } from '../config/types.js';
import type { IpAddrInterface } from '../host/interfaces.js';
import type { ObjectProblem } from '../model/parse.js';
import type { IPFamily, Protocol, ServiceType, TrafficPolicy } from '../model/types.js';

export interface Endpoint {
  /** Canonical form of addresses[0] (sloppy parse, so "010.001.2.3" is "10.1.2.3"). */
  ip: string;
  port: number;
  /** net.JoinHostPort form: "10.1.2.3:80" or "[fd00::1]:80". Endpoint lists are sorted by it. */
  endpoint: string;
  isLocal: boolean;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  nodeName: string | null;
  /** The slice's own lists (shared, never modified): 10^5 endpoints need no copies of them. */
  zoneHints: readonly string[];
  nodeHints: readonly string[];
}

export type TopologyMode = '' | 'PreferSameZone' | 'PreferSameNode';

/** A service port as one family's proxier sees it, before its endpoints are attached. */
export interface ServicePortInfo {
  family: IPFamily;
  namespace: string;
  name: string;
  /** "" for an unnamed port. */
  portName: string;
  protocol: Protocol;
  /** ServicePortName.String(): "ns/name" or "ns/name:portName". */
  servicePortName: string;
  type: ServiceType;
  clusterIP: string;
  port: number;
  /** 0 when the port has no NodePort. */
  nodePort: number;
  externalIPs: string[];
  /** status.loadBalancer.ingress IPs of this family, except those with ipMode Proxy. */
  loadBalancerIPs: string[];
  /** Canonical CIDRs of this family. */
  loadBalancerSourceRanges: string[];
  /** 0 unless type=LoadBalancer and eTP=Local. */
  healthCheckNodePort: number;
  externalPolicyLocal: boolean;
  internalPolicyLocal: boolean;
  externallyAccessible: boolean;
  usesClusterEndpoints: boolean;
  usesLocalEndpoints: boolean;
  /** 0 without ClientIP affinity. */
  sessionAffinityTimeoutSeconds: number;
  /** The kube-bpf-proxy.io/scheduler annotation when present (validated by the bpf data plane). */
  schedulerAnnotation: string | null;
}

/**
 * What one scope's traffic gets (kube-proxy's per-scope outcome), decided here once so that no data
 * plane derives it from the traffic policies again.
 */
export interface ScopeVerdict {
  /** The traffic policy governing the scope (for names and labels only: the action says what happens). */
  policy: TrafficPolicy;
  /**
   * forward: DNAT to one of `endpoints`. drop: endpoints exist, but none the Local policy allows
   * ("has no local endpoints"). reject: the service port has no endpoints at all ("has no endpoints":
   * ICMP port unreachable, TCP reset).
   */
  action: 'forward' | 'drop' | 'reject';
  /** Under forward, the set the policy picks: the local endpoints for Local, else the cluster ones. */
  endpoints: Endpoint[];
}

/** A service port's decision without the raw policies: they are read through its verdicts. */
export interface ServicePortDecision
  extends Omit<ServicePortInfo, 'externalPolicyLocal' | 'internalPolicyLocal'> {
  topologyMode: TopologyMode;
  /** Every endpoint of this port and family after slice merging, sorted by `endpoint`. */
  endpoints: Endpoint[];
  clusterEndpoints: Endpoint[];
  localEndpoints: Endpoint[];
  allReachableEndpoints: Endpoint[];
  hasAnyEndpoints: boolean;
  /** Local, ready endpoints: what the healthCheckNodePort server reports. */
  localReadyEndpoints: number;
  /** ClusterIP traffic, under internalTrafficPolicy. */
  internal: ScopeVerdict;
  /**
   * Traffic to the external IPs, LoadBalancer IPs and NodePorts, under externalTrafficPolicy (decided
   * even where the port has no external address: kube-proxy counts such ports too).
   */
  external: ScopeVerdict;
  /**
   * The same external addresses reached from a pod or from the node itself: kube-proxy never applies
   * a Local externalTrafficPolicy to them (its "short-circuit"), so they get the cluster endpoints.
   * Null when that is what `external` does already, or when the port has no endpoints.
   */
  externalFromCluster: ScopeVerdict | null;
}

export type LocalDetector =
  | { mode: 'None' }
  | { mode: Extract<DetectLocalMode, 'ClusterCIDR' | 'NodeCIDR'>; cidrs: string[] }
  | { mode: 'BridgeInterface'; interfaceName: string }
  | { mode: 'InterfaceNamePrefix'; prefix: string };

export interface NodePortAddresses {
  /** True when nodePortAddresses is empty or holds 0.0.0.0/0 (::/0): every local address. */
  matchAll: boolean;
  /** When not matchAll: the node's addresses of this family inside the CIDRs, loopback rules applied. */
  ips: string[];
}

export interface FamilyDecisions {
  family: IPFamily;
  /** The node's primary IP of this family, or "" when it has none. */
  nodeIP: string;
  /** Sorted by servicePortName, then protocol. */
  servicePorts: ServicePortDecision[];
  nodePortAddresses: NodePortAddresses;
  localDetector: LocalDetector;
  /** Go's %#08x of 1<<masqueradeBit, e.g. "0x00004000". */
  masqueradeMark: string;
  masqueradeAll: boolean;
  /** IPv4 only: NodePorts answer on 127.0.0.0/8 (route_localnet). */
  localhostNodePorts: boolean;
  /**
   * The ServiceCIDRs' CIDRs of this family (networking.k8s.io/v1 ServiceCIDR spec.cidrs, the union
   * over every object), canonical, sorted by address, without duplicates. The nftables mode drops
   * traffic to an address inside them that is no ClusterIP; [] when none are known.
   */
  serviceCIDRs: string[];
}

/** An object left out of the decisions, located for a `file#doc Kind ns/name: reason` line. */
export type SkippedObject = ObjectProblem;

export interface ProxyDecisions {
  nodeName: string;
  families: FamilyDecisions[];
  /** Malformed or unsupported objects that were left out (reported as errors and counted). */
  skipped: SkippedObject[];
  /** Objects kube-proxy deliberately does not program (headless, ExternalName, FQDN slices, ...). */
  ignored: SkippedObject[];
}

/** Host facts `run` probes and `render --node-env` takes from a file. */
export interface NodeEnv {
  nodeName: string;
  nodeIPs: string[];
  /** Exactly what `ip -j addr show` prints (only the fields used are typed). */
  interfaces: IpAddrInterface[];
  nodeLabels: Record<string, string>;
  iptables: { randomFully: boolean; nfacct: boolean };
  /**
   * The families the proxy runs whatever the node IPs are. kube-proxy v1.37's rule modes run both
   * whenever the kernel has IPv6 (platformCheckSupported), programming the IPv6 tables on a node
   * without IPv6 addresses too. Unset: the families of the node IPs (IPv4 when none is known).
   */
  proxyFamilies?: IPFamily[];
}
