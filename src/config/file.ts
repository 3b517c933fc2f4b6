// The configuration file: kube-proxy's KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1,
// every field of kube-proxy v1.33) plus our `bpf:` section. Decoding only checks shape and types;
// kube-proxy's defaulting and validation run afterwards (defaults.ts, validate.ts).

import { parseDocument } from 'yaml';
import {
  boolean,
  type Decoded,
  type Decoder,
  describeValue,
  duration,
  int32,
  list,
  map,
  number,
  object,
  oneOf,
  type Problem,
  string,
  uint32,
} from './decode.js';
import { nanosecondsToSeconds } from './duration.js';
import type { BpfConfig } from './types.js';

export const API_VERSION = 'kubeproxy.config.k8s.io/v1alpha1';
export const KIND = 'KubeProxyConfiguration';

/** logging.flushFrequency is a TimeOrMetaDuration: integer nanoseconds or a duration string. */
const flushFrequency: Decoder<number> = (value, path, problems) => {
  if (typeof value === 'number' && Number.isInteger(value)) return nanosecondsToSeconds(BigInt(value));
  if (typeof value === 'number') {
    problems.push({
      path,
      message: `must be integer nanoseconds or a duration string, got ${describeValue(value)}`,
    });
    return undefined;
  }
  return duration(value, path, problems);
};

// resource.Quantity: a decimal number with an optional SI, binary (Ki…Ei) or exponent suffix.
const QUANTITY = /^[+-]?(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$/;
const quantity: Decoder<string> = (value, path, problems) => {
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  if (typeof value === 'string' && QUANTITY.test(value)) return value;
  problems.push({ path, message: `must be a quantity such as "0" or "5Mi", got ${describeValue(value)}` });
  return undefined;
};

// Unquoted `off` is the boolean false in YAML 1.1 (the dialect kube-proxy reads), so take it as "off".
function oneOfOrOff<T extends string>(choices: readonly T[]): Decoder<T | 'off'> {
  const choice = oneOf<T | 'off'>([...choices, 'off']);
  return (value, path, problems) => (value === false ? 'off' : choice(value, path, problems));
}
const xdpMode = oneOfOrOff<BpfConfig['xdpMode']>(['native', 'generic']);
const socketLB = oneOfOrOff<BpfConfig['socketLB']>(['host', 'all']);

const outputRouting = object({ splitStream: boolean, infoBufferSize: quantity });

const bpfSection = object({
  scheduler: oneOf<BpfConfig['scheduler']>(['random', 'rr', 'maglev']),
  maglevFrontends: oneOf<BpfConfig['maglevFrontends']>(['external', 'all']),
  maglevTableSize: uint32,
  podInterfaces: list(string),
  externalInterfaces: list(string),
  xdpMode,
  pinPath: string,
  socketLB,
  hostRouting: oneOf<BpfConfig['hostRouting']>(['auto', 'bpf', 'stack']),
  cgroupPath: string,
  mapSizes: object({
    services: uint32,
    backends: uint32,
    backendCounters: uint32,
    backendSlots: uint32,
    conntrack: uint32,
    affinity: uint32,
    sourceRanges: uint32,
    socketReverse: uint32,
  }),
  conntrackGCIntervalSeconds: uint32,
  newFlowsPerSecondPerCpu: uint32,
  metricsMaxBackends: uint32,
});

export const kubeProxyConfiguration = object({
  apiVersion: string,
  kind: string,
  featureGates: map(boolean),
  clientConnection: object({
    kubeconfig: string,
    acceptContentTypes: string,
    contentType: string,
    qps: number,
    burst: int32,
  }),
  logging: object({
    format: string,
    flushFrequency,
    verbosity: uint32,
    vmodule: list(object({ filePattern: string, verbosity: uint32 })),
    options: object({ text: outputRouting, json: outputRouting }),
  }),
  hostnameOverride: string,
  bindAddress: string,
  healthzBindAddress: string,
  metricsBindAddress: string,
  bindAddressHardFail: boolean,
  enableProfiling: boolean,
  showHiddenMetricsForVersion: string,
  mode: string,
  iptables: object({
    masqueradeBit: int32,
    masqueradeAll: boolean,
    localhostNodePorts: boolean,
    syncPeriod: duration,
    minSyncPeriod: duration,
  }),
  ipvs: object({
    syncPeriod: duration,
    minSyncPeriod: duration,
    scheduler: string,
    excludeCIDRs: list(string),
    strictARP: boolean,
    tcpTimeout: duration,
    tcpFinTimeout: duration,
    udpTimeout: duration,
  }),
  nftables: object({
    masqueradeBit: int32,
    masqueradeAll: boolean,
    syncPeriod: duration,
    minSyncPeriod: duration,
  }),
  winkernel: object({
    networkName: string,
    sourceVip: string,
    enableDSR: boolean,
    rootHnsEndpointName: string,
    forwardHealthCheckVip: boolean,
  }),
  detectLocalMode: string,
  detectLocal: object({ bridgeInterface: string, interfaceNamePrefix: string }),
  clusterCIDR: string,
  nodePortAddresses: list(string),
  oomScoreAdj: int32,
  conntrack: object({
    maxPerCore: int32,
    min: int32,
    tcpEstablishedTimeout: duration,
    tcpCloseWaitTimeout: duration,
    tcpBeLiberal: boolean,
    udpTimeout: duration,
    udpStreamTimeout: duration,
  }),
  configSyncPeriod: duration,
  portRange: string,
  windowsRunAsService: boolean,
  // Not in kube-proxy's v1alpha1 (its internal type has them since 1.31): mode-independent periods.
  syncPeriod: duration,
  minSyncPeriod: duration,
  bpf: bpfSection,
});

/** The file as written: every field optional, durations in seconds. */
export type KubeProxyConfigurationFile = NonNullable<Decoded<typeof kubeProxyConfiguration>>;

/**
 * Parses YAML or JSON text (YAML 1.1, as kube-proxy's sigs.k8s.io/yaml reads it: `yes`/`off` are
 * booleans) and decodes it. `source` names the file in problems about the document as a whole.
 */
export function decodeConfigurationFile(
  text: string,
  source: string,
): { file: KubeProxyConfigurationFile; problems: Problem[] } {
  const problems: Problem[] = [];
  const document = parseDocument(text, { version: '1.1' });
  if (document.errors.length > 0) {
    // The first line says what and where ("… at line 3, column 2:"); the rest is a code frame.
    for (const error of document.errors) {
      problems.push({ path: source, message: (error.message.split('\n')[0] ?? '').replace(/:$/, '') });
    }
    return { file: {}, problems };
  }
  const value: unknown = document.toJS();
  if (value === null || value === undefined) {
    problems.push({ path: source, message: `is empty; expected a ${KIND} (${API_VERSION})` });
    return { file: {}, problems };
  }
  if (typeof value !== 'object' || Array.isArray(value)) {
    problems.push({ path: source, message: `must hold a ${KIND} object, got ${describeValue(value)}` });
    return { file: {}, problems };
  }
  const file = kubeProxyConfiguration(value, '', problems) ?? {};
  if (file.apiVersion !== API_VERSION && !problems.some((p) => p.path === 'apiVersion')) {
    problems.push({
      path: 'apiVersion',
      message: `must be ${API_VERSION}, got ${file.apiVersion === undefined ? 'nothing' : JSON.stringify(file.apiVersion)}`,
    });
  }
  if (file.kind !== KIND && !problems.some((p) => p.path === 'kind')) {
    problems.push({
      path: 'kind',
      message: `must be ${KIND}, got ${file.kind === undefined ? 'nothing' : JSON.stringify(file.kind)}`,
    });
  }
  return { file, problems };
}
