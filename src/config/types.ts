// The validated configuration every other module reads. Built by config/load.ts from kube-proxy's
// KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1) with flags applied on top.

import type { ConntrackSettings } from '../host/conntrack-sysctls.js';

export type ProxyMode = 'bpf' | 'iptables' | 'nftables' | 'ipvs';
export const PROXY_MODES: readonly ProxyMode[] = ['bpf', 'iptables', 'nftables', 'ipvs'];

export type DetectLocalMode = 'ClusterCIDR' | 'NodeCIDR' | 'BridgeInterface' | 'InterfaceNamePrefix';

export type BpfScheduler = 'random' | 'rr' | 'maglev';
/** Which frontends `scheduler: maglev` gives a Maglev table: the external ones (NodePort,
 * LoadBalancer, externalIPs; ClusterIPs pick at random), or all of them. */
export type MaglevFrontends = 'external' | 'all';

export interface BpfConfig {
  /** Default backend choice; a service may override it with the annotation kube-bpf-proxy.io/scheduler. */
  scheduler: BpfScheduler;
  /** Which frontends the default scheduler maglev applies to (the annotation applies to all). */
  maglevFrontends: MaglevFrontends;
  /** Prime; 16381 by default. */
  maglevTableSize: number;
  /** Interface name patterns (trailing "*" matches a prefix) facing pods: tc ingress. */
  podInterfaces: string[];
  /** Interface name patterns of the node's external interfaces: tc ingress and, if enabled, XDP. */
  externalInterfaces: string[];
  /** XDP on external interfaces: "native", "generic" or "off". */
  xdpMode: 'native' | 'generic' | 'off';
  /** bpffs directory under which maps and links are pinned (a versioned subdirectory is added). */
  pinPath: string;
  /** Socket-level load balancing on the cgroup socket hooks: "host" serves the node's own network
   * namespace (hostNetwork pods, kubelet, node processes), "all" pods' sockets too, "off" none. */
  socketLB: 'host' | 'all' | 'off';
  /** BPF host routing (docs/bpf-datapath.md, "Host routing"): "bpf" sends flows between local
   * pods from veth to veth past the node's stack, "stack" never, "auto" where the node allows it
   * (hostRoutingDecision). */
  hostRouting: 'auto' | 'bpf' | 'stack';
  /** The cgroup v2 directory the socket hooks attach to; "" is the cgroup2 root (found in
   * /proc/self/mountinfo). A hierarchy's root narrows to the node's cgroup, the parent of the
   * kubelet's kubepods, when the agent runs in a pod (socketHookCgroupDir). */
  cgroupPath: string;
  mapSizes: {
    services: number;
    backends: number;
    /** Backend ids with per-CPU counters of their own (kbp_best_v1): ids 1 … backendCounters - 1. */
    backendCounters: number;
    backendSlots: number;
    conntrack: number;
    affinity: number;
    sourceRanges: number;
    /** Sockets the socket hooks translated, per backend (kbp_sockrev4_v1, LRU). */
    socketReverse: number;
  };
  conntrackGCIntervalSeconds: number;
  /** New flows one CPU may create per second (kbp_config.new_flow_rate); 0 = no limit. */
  newFlowsPerSecondPerCpu: number;
  /** Per-backend metric series are exported for at most this many backends (0 = none). */
  metricsMaxBackends: number;
}

export interface ProxyConfig {
  mode: ProxyMode;
  featureGates: Record<string, boolean>;
  hostnameOverride: string;
  bindAddress: string;
  healthzBindAddress: string;
  metricsBindAddress: string;
  enableProfiling: boolean;
  /** Exit when a bind address cannot be bound, instead of logging and going on. */
  bindAddressHardFail: boolean;
  /** oom_score_adj of the agent process (kube-proxy's default -999). */
  oomScoreAdj: number;
  logging: { format: 'text' | 'json'; verbosity: number; flushFrequencySeconds: number };
  /** Per family, from clusterCIDR (comma-separated in kube-proxy). */
  clusterCIDRs: string[];
  /** CIDRs and/or the word "primary"; empty means every local address. */
  nodePortAddresses: string[];
  /** "" selects the default (ClusterCIDR). */
  detectLocalMode: DetectLocalMode;
  detectLocal: { bridgeInterface: string; interfaceNamePrefix: string };
  /** Mode-specific values resolved for the chosen mode (iptables.* / nftables.* / ipvs.*). */
  masqueradeBit: number;
  masqueradeAll: boolean;
  localhostNodePorts: boolean;
  syncPeriodSeconds: number;
  minSyncPeriodSeconds: number;
  configSyncPeriodSeconds: number;
  ipvs: {
    scheduler: string;
    excludeCIDRs: string[];
    strictARP: boolean;
    tcpTimeoutSeconds: number;
    tcpFinTimeoutSeconds: number;
    udpTimeoutSeconds: number;
  };
  conntrack: ConntrackSettings;
  clientConnection: {
    kubeconfig: string;
    qps: number;
    burst: number;
    contentType: string;
    /** Accept header of API requests; "" lets the client choose. */
    acceptContentTypes: string;
  };
  /** --master: the API server URL, overriding the kubeconfig's. */
  master: string;
  bpf: BpfConfig;
}
