// Hand-built brain decisions for the bpf data plane's tests: each test states only the fields it
// is about; the rest are those of a plain ClusterIP service port with no endpoints.

import type {
  Endpoint,
  FamilyDecisions,
  ProxyDecisions,
  ServicePortDecision,
} from '../../src/brain/types.js';
import { type ScopePolicies, scopeVerdicts } from '../../src/brain/verdicts.js';
import type { BpfConfig } from '../../src/config/types.js';
import { joinHostPort } from '../../src/net/ip.js';

export function ep(ip: string, port: number, extra: Partial<Endpoint> = {}): Endpoint {
  return {
    ip,
    port,
    endpoint: joinHostPort(ip, port),
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

/** A service port whose cluster endpoints are `endpoints` and local ones those marked isLocal. */
export function servicePort(
  namespace: string,
  name: string,
  input: Partial<ServicePortDecision> & { endpoints?: Endpoint[] } & Partial<ScopePolicies> = {},
): ServicePortDecision {
  const { internalPolicyLocal = false, externalPolicyLocal = false, ...fields } = input;
  const endpoints = fields.endpoints ?? [];
  const portName = fields.portName ?? '';
  const categorized = {
    clusterEndpoints: fields.clusterEndpoints ?? endpoints,
    localEndpoints: fields.localEndpoints ?? endpoints.filter((e) => e.isLocal),
    hasAnyEndpoints: fields.hasAnyEndpoints ?? endpoints.length > 0,
  };
  return {
    family: 'IPv4',
    namespace,
    name,
    portName,
    protocol: 'TCP',
    servicePortName: portName ? `${namespace}/${name}:${portName}` : `${namespace}/${name}`,
    type: 'ClusterIP',
    clusterIP: '10.96.0.10',
    port: 80,
    nodePort: 0,
    externalIPs: [],
    loadBalancerIPs: [],
    loadBalancerSourceRanges: [],
    healthCheckNodePort: 0,
    externallyAccessible: false,
    usesClusterEndpoints: true,
    usesLocalEndpoints: false,
    sessionAffinityTimeoutSeconds: 0,
    schedulerAnnotation: null,
    topologyMode: '',
    endpoints,
    allReachableEndpoints: endpoints,
    localReadyEndpoints: endpoints.filter((e) => e.isLocal && e.ready).length,
    ...scopeVerdicts({ internalPolicyLocal, externalPolicyLocal }, categorized),
    ...fields,
    ...categorized,
  };
}

export function decisions(
  servicePorts: ServicePortDecision[],
  family: Partial<FamilyDecisions> = {},
): ProxyDecisions {
  return {
    nodeName: 'node-a',
    families: [
      {
        family: 'IPv4',
        nodeIP: '192.168.1.10',
        // Sorted, as the brain gives them: the planner finds a Service's ports by binary search.
        servicePorts: [...servicePorts].sort((a, b) =>
          a.servicePortName !== b.servicePortName
            ? a.servicePortName < b.servicePortName
              ? -1
              : 1
            : a.protocol < b.protocol
              ? -1
              : a.protocol > b.protocol
                ? 1
                : 0,
        ),
        nodePortAddresses: { matchAll: true, ips: [] },
        localDetector: { mode: 'None' },
        masqueradeMark: '0x00004000',
        masqueradeAll: false,
        localhostNodePorts: true,
        serviceCIDRs: [],
        ...family,
      },
    ],
    skipped: [],
    ignored: [],
  };
}

export function bpfConfig(extra: Partial<BpfConfig> = {}): BpfConfig {
  return {
    scheduler: 'random',
    maglevFrontends: 'external',
    maglevTableSize: 16381,
    podInterfaces: [],
    externalInterfaces: [],
    xdpMode: 'off',
    pinPath: '/sys/fs/bpf/kube-bpf-proxy',
    // Tests that want the socket hooks attach them to a cgroup of their own, never the machine's root.
    socketLB: 'off',
    // Host routing changes which hook sees a flow between two pods: tests that want it ask for it
    // (the real-node matrix runs the chart's auto).
    hostRouting: 'stack',
    cgroupPath: '',
    mapSizes: {
      services: 1024,
      backends: 4096,
      backendCounters: 4096,
      backendSlots: 8192,
      conntrack: 16384,
      affinity: 4096,
      sourceRanges: 1024,
      socketReverse: 1024,
    },
    conntrackGCIntervalSeconds: 30,
    newFlowsPerSecondPerCpu: 20000,
    metricsMaxBackends: 100,
    ...extra,
  };
}
