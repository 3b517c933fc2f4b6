// kube-proxy's defaulting of a v1alpha1 KubeProxyConfiguration (pkg/proxy/apis/config/v1alpha1/defaults.go):
// nulls, zero durations, zero numbers and empty strings take kube-proxy's defaults, exactly where
// kube-proxy applies them. Our `bpf:` section is defaulted field by field where absent or null.

import type { ConntrackSettings } from '../host/conntrack-sysctls.js';
import { appendPortIfNeeded } from '../net/host-port.js';
import { parseIP } from '../net/ip.js';
import type { KubeProxyConfigurationFile } from './file.js';
import { DEFAULT_MAGLEV_TABLE_SIZE } from './maglev-table-size.js';
import type { BpfConfig } from './types.js';

/** The file after defaulting, durations in seconds; flags are applied to this, then it is validated. */
export interface KubeProxySettings {
  featureGates: Record<string, boolean>;
  clientConnection: {
    kubeconfig: string;
    acceptContentTypes: string;
    contentType: string;
    qps: number;
    burst: number;
  };
  logging: {
    format: string;
    flushFrequencySeconds: number;
    verbosity: number;
    vmodule: { filePattern: string; verbosity: number }[];
  };
  hostnameOverride: string;
  bindAddress: string;
  healthzBindAddress: string;
  metricsBindAddress: string;
  bindAddressHardFail: boolean;
  enableProfiling: boolean;
  showHiddenMetricsForVersion: string;
  /** As written; "" is resolved to bpf when converting. */
  mode: string;
  iptables: {
    masqueradeBit: number;
    masqueradeAll: boolean;
    localhostNodePorts: boolean;
    syncPeriodSeconds: number;
    minSyncPeriodSeconds: number;
  };
  ipvs: {
    syncPeriodSeconds: number;
    minSyncPeriodSeconds: number;
    scheduler: string;
    excludeCIDRs: string[];
    strictARP: boolean;
    tcpTimeoutSeconds: number;
    tcpFinTimeoutSeconds: number;
    udpTimeoutSeconds: number;
  };
  nftables: {
    masqueradeBit: number;
    masqueradeAll: boolean;
    syncPeriodSeconds: number;
    minSyncPeriodSeconds: number;
  };
  detectLocalMode: string;
  detectLocal: { bridgeInterface: string; interfaceNamePrefix: string };
  clusterCIDR: string;
  nodePortAddresses: string[];
  oomScoreAdj: number;
  conntrack: ConntrackSettings;
  configSyncPeriodSeconds: number;
  /** Mode-independent periods (top-level `syncPeriod`/`minSyncPeriod`, or --sync-period): override the mode's section. */
  syncPeriodSeconds: number | undefined;
  minSyncPeriodSeconds: number | undefined;
  /** Flag only (--master): the API server URL, overriding the kubeconfig's. */
  master: string;
  bpf: BpfConfig;
}

export const KUBE_PROXY_HEALTHZ_PORT = 10256;
export const KUBE_PROXY_METRICS_PORT = 10249;
/** qos.KubeProxyOOMScoreAdj */
export const KUBE_PROXY_OOM_SCORE_ADJ = -999;
/** component-base logsapi.LogFlushFreqDefault */
const LOG_FLUSH_FREQUENCY_SECONDS = 5;

export const DEFAULT_BPF_CONFIG: BpfConfig = {
  scheduler: 'random',
  // Cilium's default too: Maglev where consistency across nodes matters (traffic from outside
  // may reach any node), random for ClusterIPs, whose clients sit on the node that picks.
  maglevFrontends: 'external',
  maglevTableSize: DEFAULT_MAGLEV_TABLE_SIZE,
  // Empty: found by the agent (src/dataplanes/bpf/discover.ts) rather than named, since CNIs name
  // their pod veths differently and a node's uplink can be anything.
  podInterfaces: [],
  externalInterfaces: [],
  xdpMode: 'off',
  pinPath: '/sys/fs/bpf/kube-bpf-proxy',
  socketLB: 'host',
  hostRouting: 'auto',
  cgroupPath: '',
  mapSizes: {
    services: 65536,
    backends: 262144,
    // 48 bytes per CPU each: 768 KiB per CPU (docs/bpf-datapath.md, "Per-CPU counter memory").
    backendCounters: 16384,
    backendSlots: 1048576,
    conntrack: 524288,
    affinity: 65536,
    sourceRanges: 16384,
    // An evicted entry makes replies to an unconnected UDP socket (a resolver) come from the
    // backend's address, which the socket drops: room for the sockets of a busy node.
    socketReverse: 131072,
  },
  conntrackGCIntervalSeconds: 30,
  // Above the bursts real clients open (with 2,000 a second per CPU, a request of the
  // end-to-end test's burst timed out), well below what a flood sends (docs/bpf-datapath.md,
  // "New-flow rate limit").
  newFlowsPerSecondPerCpu: 20000,
  metricsMaxBackends: 1000,
};

function defaultBpf(section: KubeProxyConfigurationFile['bpf']): BpfConfig {
  const d = DEFAULT_BPF_CONFIG;
  const s = section ?? {};
  const sizes = s.mapSizes ?? {};
  return {
    scheduler: s.scheduler ?? d.scheduler,
    maglevFrontends: s.maglevFrontends ?? d.maglevFrontends,
    maglevTableSize: s.maglevTableSize ?? d.maglevTableSize,
    podInterfaces: s.podInterfaces ?? [...d.podInterfaces],
    externalInterfaces: s.externalInterfaces ?? [...d.externalInterfaces],
    xdpMode: s.xdpMode ?? d.xdpMode,
    pinPath: s.pinPath ?? d.pinPath,
    socketLB: s.socketLB ?? d.socketLB,
    hostRouting: s.hostRouting ?? d.hostRouting,
    cgroupPath: s.cgroupPath ?? d.cgroupPath,
    mapSizes: {
      services: sizes.services ?? d.mapSizes.services,
      backends: sizes.backends ?? d.mapSizes.backends,
      backendCounters: sizes.backendCounters ?? d.mapSizes.backendCounters,
      backendSlots: sizes.backendSlots ?? d.mapSizes.backendSlots,
      conntrack: sizes.conntrack ?? d.mapSizes.conntrack,
      affinity: sizes.affinity ?? d.mapSizes.affinity,
      sourceRanges: sizes.sourceRanges ?? d.mapSizes.sourceRanges,
      socketReverse: sizes.socketReverse ?? d.mapSizes.socketReverse,
    },
    conntrackGCIntervalSeconds: s.conntrackGCIntervalSeconds ?? d.conntrackGCIntervalSeconds,
    newFlowsPerSecondPerCpu: s.newFlowsPerSecondPerCpu ?? d.newFlowsPerSecondPerCpu,
    metricsMaxBackends: s.metricsMaxBackends ?? d.metricsMaxBackends,
  };
}

/** Go's zero value means "unset" for these fields: 0, "" and absent all take the default. */
function orDefault<T>(value: T | undefined, fallback: T): T {
  return value === undefined || value === 0 || value === '' ? fallback : value;
}

export function applyKubeProxyDefaults(file: KubeProxyConfigurationFile): KubeProxySettings {
  const bindAddress = orDefault(file.bindAddress, '0.0.0.0');
  // Like kube-proxy, the healthz and metrics defaults follow the family of bindAddress.
  const ipv4Bind = parseIP(bindAddress)?.family !== 'IPv6';
  const anyAddress = ipv4Bind ? '0.0.0.0' : '[::]';
  const loopback = ipv4Bind ? '127.0.0.1' : '[::1]';
  const address = (value: string | undefined, defaultHost: string, port: number) =>
    value ? appendPortIfNeeded(value, port) : `${defaultHost}:${port}`;
  const cc = file.clientConnection ?? {};
  const log = file.logging ?? {};
  const ipt = file.iptables ?? {};
  const ipvs = file.ipvs ?? {};
  const nft = file.nftables ?? {};
  const ct = file.conntrack ?? {};
  return {
    featureGates: { ...(file.featureGates ?? {}) },
    clientConnection: {
      kubeconfig: cc.kubeconfig ?? '',
      acceptContentTypes: cc.acceptContentTypes ?? '',
      contentType: orDefault(cc.contentType, 'application/vnd.kubernetes.protobuf'),
      qps: orDefault(cc.qps, 5),
      burst: orDefault(cc.burst, 10),
    },
    logging: {
      format: orDefault(log.format, 'text'),
      flushFrequencySeconds: orDefault(log.flushFrequency, LOG_FLUSH_FREQUENCY_SECONDS),
      verbosity: log.verbosity ?? 0,
      vmodule: (log.vmodule ?? []).map((v) => ({
        filePattern: v.filePattern ?? '',
        verbosity: v.verbosity ?? 0,
      })),
    },
    hostnameOverride: file.hostnameOverride ?? '',
    bindAddress,
    healthzBindAddress: address(file.healthzBindAddress, anyAddress, KUBE_PROXY_HEALTHZ_PORT),
    metricsBindAddress: address(file.metricsBindAddress, loopback, KUBE_PROXY_METRICS_PORT),
    bindAddressHardFail: file.bindAddressHardFail ?? false,
    enableProfiling: file.enableProfiling ?? false,
    showHiddenMetricsForVersion: file.showHiddenMetricsForVersion ?? '',
    mode: file.mode ?? '',
    iptables: {
      masqueradeBit: ipt.masqueradeBit ?? 14,
      masqueradeAll: ipt.masqueradeAll ?? false,
      localhostNodePorts: ipt.localhostNodePorts ?? true,
      syncPeriodSeconds: orDefault(ipt.syncPeriod, 30),
      minSyncPeriodSeconds: orDefault(ipt.minSyncPeriod, 1),
    },
    ipvs: {
      syncPeriodSeconds: orDefault(ipvs.syncPeriod, 30),
      // kube-proxy gives ipvs.minSyncPeriod no default: 0s stays 0s.
      minSyncPeriodSeconds: ipvs.minSyncPeriod ?? 0,
      scheduler: ipvs.scheduler ?? '',
      excludeCIDRs: ipvs.excludeCIDRs ?? [],
      strictARP: ipvs.strictARP ?? false,
      tcpTimeoutSeconds: ipvs.tcpTimeout ?? 0,
      tcpFinTimeoutSeconds: ipvs.tcpFinTimeout ?? 0,
      udpTimeoutSeconds: ipvs.udpTimeout ?? 0,
    },
    nftables: {
      masqueradeBit: nft.masqueradeBit ?? 14,
      masqueradeAll: nft.masqueradeAll ?? false,
      syncPeriodSeconds: orDefault(nft.syncPeriod, 30),
      minSyncPeriodSeconds: orDefault(nft.minSyncPeriod, 1),
    },
    detectLocalMode: file.detectLocalMode ?? '',
    detectLocal: {
      bridgeInterface: file.detectLocal?.bridgeInterface ?? '',
      interfaceNamePrefix: file.detectLocal?.interfaceNamePrefix ?? '',
    },
    clusterCIDR: file.clusterCIDR ?? '',
    nodePortAddresses: file.nodePortAddresses ?? [],
    oomScoreAdj: file.oomScoreAdj ?? KUBE_PROXY_OOM_SCORE_ADJ,
    conntrack: {
      // Pointers in kube-proxy: only null takes the default; an explicit 0 means "leave the kernel's value".
      maxPerCore: ct.maxPerCore ?? 32768,
      min: ct.min ?? 131072,
      tcpEstablishedTimeoutSeconds: ct.tcpEstablishedTimeout ?? 24 * 3600,
      tcpCloseWaitTimeoutSeconds: ct.tcpCloseWaitTimeout ?? 3600,
      tcpBeLiberal: ct.tcpBeLiberal ?? false,
      udpTimeoutSeconds: ct.udpTimeout ?? 0,
      udpStreamTimeoutSeconds: ct.udpStreamTimeout ?? 0,
    },
    configSyncPeriodSeconds: orDefault(file.configSyncPeriod, 15 * 60),
    syncPeriodSeconds: orDefault(file.syncPeriod, undefined),
    minSyncPeriodSeconds: orDefault(file.minSyncPeriod, undefined),
    master: '',
    bpf: defaultBpf(file.bpf),
  };
}
