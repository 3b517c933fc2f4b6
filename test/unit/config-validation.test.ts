import { describe, expect, test } from 'vitest';
import type { ConfigFlags } from '../../src/config/flags.js';
import { formatProblems, loadConfig } from '../../src/config/load.js';

const HEADER = 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n';

/** The problems of loading `body` (after the header) as "path: message" lines. */
function problemsOf(body: string, flags: ConfigFlags = {}, header = HEADER): string[] {
  const result = loadConfig({ fileText: header + body, fileName: 'config.conf', flags });
  if (result.ok) return [];
  return formatProblems(result.problems).split('\n');
}

describe('kube-proxy validation rules, each reported at its field path', () => {
  test.each([
    ['iptables:\n  masqueradeBit: 40\n', 'iptables.masqueradeBit: must be between 0 and 31, got 40'],
    ['iptables:\n  masqueradeBit: -1\n', 'iptables.masqueradeBit: must be between 0 and 31, got -1'],
    [
      'mode: nftables\nnftables:\n  masqueradeBit: 32\n',
      'nftables.masqueradeBit: must be between 0 and 31, got 32',
    ],
    ['iptables:\n  syncPeriod: -5s\n', 'iptables.syncPeriod: must be greater than 0, got -5s'],
    [
      'iptables:\n  minSyncPeriod: -1s\n',
      'iptables.minSyncPeriod: must be greater than or equal to 0, got -1s',
    ],
    [
      'iptables:\n  syncPeriod: 10s\n  minSyncPeriod: 1m\n',
      'iptables.syncPeriod: must be greater than or equal to iptables.minSyncPeriod (1m0s), got 10s',
    ],
    [
      'mode: ipvs\nipvs:\n  syncPeriod: 10s\n  minSyncPeriod: 20s\n',
      'ipvs.syncPeriod: must be greater than or equal to ipvs.minSyncPeriod (20s), got 10s',
    ],
    ['syncPeriod: -1s\n', 'syncPeriod: must be greater than 0, got -1s'],
    ['configSyncPeriod: -1m\n', 'configSyncPeriod: must be greater than 0, got -1m0s'],
    ['clusterCIDR: 10.0.0.0/33\n', 'clusterCIDR: "10.0.0.0/33" is not a valid CIDR'],
    ['clusterCIDR: 10.0.0.0/8,10.1.0.0/16\n', 'clusterCIDR: must contain at most one IPv4 and one IPv6 CIDR'],
    [
      'nodePortAddresses: [10.0.0.0/8, nonsense]\n',
      'nodePortAddresses[1]: must be a valid CIDR, got "nonsense"',
    ],
    [
      'nodePortAddresses: [primary, 10.0.0.0/8]\n',
      'nodePortAddresses[0]: "primary" cannot be combined with CIDRs',
    ],
    ['bindAddress: 300.1.1.1\n', 'bindAddress: must be a valid IP address, got "300.1.1.1"'],
    ['healthzBindAddress: "localhost:10256"\n', 'healthzBindAddress: must have a valid IP, got "localhost"'],
    [
      'metricsBindAddress: "127.0.0.1:99999"\n',
      'metricsBindAddress: must have a port in [1, 65535], got "99999"',
    ],
    ['metricsBindAddress: "not an address"\n', 'metricsBindAddress: must be IP:port, got "not an address"'],
    ['mode: userspace\n', 'mode: must be one of bpf, iptables, nftables, ipvs or "" (bpf), got "userspace"'],
    [
      'mode: kernelspace\n',
      "mode: kernelspace is kube-proxy's Windows mode; kube-bpf-proxy runs on Linux: use bpf, iptables, nftables or ipvs",
    ],
    [
      'detectLocalMode: PodCIDR\n',
      'detectLocalMode: must be one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or "" (ClusterCIDR), got "PodCIDR"',
    ],
    [
      'detectLocalMode: BridgeInterface\n',
      'detectLocal.bridgeInterface: must not be empty when detectLocalMode is BridgeInterface',
    ],
    [
      'detectLocalMode: InterfaceNamePrefix\n',
      'detectLocal.interfaceNamePrefix: must not be empty when detectLocalMode is InterfaceNamePrefix',
    ],
    [
      'mode: ipvs\nipvs:\n  scheduler: fastest\n',
      'ipvs.scheduler: must be one of rr, wrr, lc, wlc, lblc, lblcr, sh, dh, sed, nq, mh or "" (rr), got "fastest"',
    ],
    [
      'mode: ipvs\nipvs:\n  excludeCIDRs: [10.0.0.1]\n',
      'ipvs.excludeCIDRs[0]: must be a valid CIDR, got "10.0.0.1"',
    ],
    [
      'mode: ipvs\nipvs:\n  tcpTimeout: -1s\n',
      'ipvs.tcpTimeout: must be greater than or equal to 0, got -1s',
    ],
    [
      'mode: ipvs\nipvs:\n  tcpFinTimeout: -1s\n',
      'ipvs.tcpFinTimeout: must be greater than or equal to 0, got -1s',
    ],
    [
      'mode: ipvs\nipvs:\n  udpTimeout: -1s\n',
      'ipvs.udpTimeout: must be greater than or equal to 0, got -1s',
    ],
    ['conntrack:\n  maxPerCore: -1\n', 'conntrack.maxPerCore: must be greater than or equal to 0, got -1'],
    ['conntrack:\n  min: -1\n', 'conntrack.min: must be greater than or equal to 0, got -1'],
    [
      'conntrack:\n  tcpEstablishedTimeout: -1h\n',
      'conntrack.tcpEstablishedTimeout: must be greater than or equal to 0, got -1h0m0s',
    ],
    [
      'conntrack:\n  tcpCloseWaitTimeout: -1s\n',
      'conntrack.tcpCloseWaitTimeout: must be greater than or equal to 0, got -1s',
    ],
    ['conntrack:\n  udpTimeout: -1s\n', 'conntrack.udpTimeout: must be greater than or equal to 0, got -1s'],
    [
      'conntrack:\n  udpStreamTimeout: -1s\n',
      'conntrack.udpStreamTimeout: must be greater than or equal to 0, got -1s',
    ],
    [
      'clientConnection:\n  burst: -1\n',
      'clientConnection.burst: must be greater than or equal to 0, got -1',
    ],
    ['featureGates:\n  NoSuchGate: true\n', 'featureGates.NoSuchGate: unrecognized feature gate'],
    ['logging:\n  format: xml\n', 'logging.format: must be one of text, json, got "xml"'],
    ['logging:\n  flushFrequency: -1s\n', 'logging.flushFrequency: must be greater than 0, got -1s'],
    [
      'logging:\n  format: json\n  vmodule: [{filePattern: proxier, verbosity: 4}]\n',
      'logging.vmodule: is only supported with the text log format',
    ],
    [
      'logging:\n  vmodule: [{filePattern: "a=b", verbosity: 4}]\n',
      'logging.vmodule[0].filePattern: must not contain "=" or ","',
    ],
    ['oomScoreAdj: -1001\n', 'oomScoreAdj: must be between -1000 and 1000, got -1001'],
    [
      'showHiddenMetricsForVersion: "latest"\n',
      'showHiddenMetricsForVersion: must be empty or a version such as "1.32", got "latest"',
    ],
  ])('%j', (body, problem) => {
    expect(problemsOf(body)).toEqual([problem]);
  });

  test('per-mode sections are checked only in their mode, as kube-proxy does', () => {
    expect(problemsOf('nftables:\n  masqueradeBit: 32\n')).toEqual([]);
    expect(problemsOf('ipvs:\n  scheduler: fastest\n  tcpTimeout: -1s\n')).toEqual([]);
  });

  test('a value set by a flag is reported at its field, naming the flag', () => {
    expect(problemsOf('', { 'sync-period': '0s' })).toEqual([
      'syncPeriod: must be greater than 0, got 0s (set by --sync-period)',
    ]);
    expect(problemsOf('', { 'iptables-masquerade-bit': '33' })).toEqual([
      'iptables.masqueradeBit: must be between 0 and 31, got 33 (set by --iptables-masquerade-bit)',
    ]);
    expect(problemsOf('', { 'feature-gates': ['Bogus=true'] })).toEqual([
      'featureGates.Bogus: unrecognized feature gate (set by --feature-gates)',
    ]);
  });
});

describe('our bpf: section', () => {
  test.each([
    [
      'bpf:\n  maglevTableSize: 16384\n',
      'bpf.maglevTableSize: Maglev table size 16384 is not prime (e.g. 16381, 32749, 65521)',
    ],
    ['bpf:\n  maglevTableSize: 2000003\n', 'bpf.maglevTableSize: Maglev table size 2000003 exceeds 1048573'],
    ['bpf:\n  mapSizes:\n    conntrack: 0\n', 'bpf.mapSizes.conntrack: must be at least 1, got 0'],
    [
      'bpf:\n  externalInterfaces: [eth0, "a/b"]\n',
      'bpf.externalInterfaces[1]: must be an interface name of at most 15 characters, optionally ending in "*", got "a/b"',
    ],
    ['bpf:\n  pinPath: bpf/here\n', 'bpf.pinPath: must be an absolute path, got "bpf/here"'],
    ['bpf:\n  conntrackGCIntervalSeconds: 0\n', 'bpf.conntrackGCIntervalSeconds: must be at least 1, got 0'],
    ['bpf:\n  scheduler: wrr\n', 'bpf.scheduler: must be one of random, rr, maglev; got string "wrr"'],
    ['bpf:\n  xdpMode: on\n', 'bpf.xdpMode: must be one of native, generic, off; got boolean true'],
    ['bpf:\n  socketLB: pods\n', 'bpf.socketLB: must be one of host, all, off; got string "pods"'],
    [
      'bpf:\n  hostRouting: legacy\n',
      'bpf.hostRouting: must be one of auto, bpf, stack; got string "legacy"',
    ],
    [
      'bpf:\n  cgroupPath: sys/fs/cgroup\n',
      'bpf.cgroupPath: must be an absolute path or empty, got "sys/fs/cgroup"',
    ],
  ])('%j', (body, problem) => {
    expect(problemsOf(body)).toEqual([problem]);
  });

  test('absent or null fields take the defaults; 0 is a value (metricsMaxBackends 0 = none)', () => {
    const result = loadConfig({
      fileText: `${HEADER}bpf:\n  scheduler: null\n  metricsMaxBackends: 0\n  maglevTableSize: 65521\n`,
      flags: {},
    });
    expect(
      result.ok && [
        result.config.bpf.scheduler,
        result.config.bpf.metricsMaxBackends,
        result.config.bpf.maglevTableSize,
      ],
    ).toEqual(['random', 0, 65521]);
  });

  test('empty interface lists are valid: the agent finds the interfaces', () => {
    expect(problemsOf('bpf:\n  podInterfaces: []\n  externalInterfaces: []\n')).toEqual([]);
  });
});

describe('shape of the file', () => {
  test('an unknown field is an error at its path, at any depth', () => {
    expect(problemsOf('iptables:\n  masqueradBit: 14\n')).toEqual(['iptables.masqueradBit: unknown field']);
    expect(problemsOf('proxyMode: ipvs\n')).toEqual(['proxyMode: unknown field']);
    expect(problemsOf('logging:\n  options:\n    text:\n      bufferSize: 1\n')).toEqual([
      'logging.options.text.bufferSize: unknown field',
    ]);
    expect(problemsOf('bpf:\n  mapSizes:\n    service: 10\n')).toEqual([
      'bpf.mapSizes.service: unknown field',
    ]);
  });

  test('field names are case-sensitive, as in kube-proxy strict decoding', () => {
    expect(problemsOf('MasqueradeAll: true\n')).toEqual(['MasqueradeAll: unknown field']);
  });

  test('wrong or missing apiVersion and kind', () => {
    expect(
      problemsOf('', {}, 'apiVersion: kubeproxy.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n'),
    ).toEqual([
      'apiVersion: must be kubeproxy.config.k8s.io/v1alpha1, got "kubeproxy.config.k8s.io/v1beta1"',
    ]);
    expect(
      problemsOf('', {}, 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n'),
    ).toEqual(['kind: must be KubeProxyConfiguration, got "KubeletConfiguration"']);
    expect(problemsOf('mode: iptables\n', {}, '')).toEqual([
      'apiVersion: must be kubeproxy.config.k8s.io/v1alpha1, got nothing',
      'kind: must be KubeProxyConfiguration, got nothing',
    ]);
  });

  test('wrong types', () => {
    expect(problemsOf('iptables:\n  masqueradeBit: "14"\n')).toEqual([
      'iptables.masqueradeBit: must be an integer, got string "14"',
    ]);
    expect(problemsOf('iptables:\n  syncPeriod: 30\n')).toEqual([
      'iptables.syncPeriod: must be a duration string such as "30s", got number 30',
    ]);
    expect(problemsOf('iptables:\n  syncPeriod: 30 seconds\n')).toEqual([
      'iptables.syncPeriod: unknown unit " seconds" in duration "30 seconds"',
    ]);
    expect(problemsOf('nodePortAddresses: 10.0.0.0/8\n')).toEqual([
      'nodePortAddresses: must be a list, got string "10.0.0.0/8"',
    ]);
    expect(problemsOf('featureGates:\n  ServiceTrafficDistribution: maybe\n')).toEqual([
      'featureGates.ServiceTrafficDistribution: must be true or false, got string "maybe"',
    ]);
    expect(problemsOf('conntrack: []\n')).toEqual(['conntrack: must be an object, got a list']);
    expect(problemsOf('oomScoreAdj: 3000000000\n')).toEqual([
      'oomScoreAdj: must be an integer in [-2147483648, 2147483647], got number 3000000000',
    ]);
    expect(problemsOf('logging:\n  options:\n    json:\n      infoBufferSize: lots\n')).toEqual([
      'logging.options.json.infoBufferSize: must be a quantity such as "0" or "5Mi", got string "lots"',
    ]);
  });

  test('YAML syntax errors and empty files name the file', () => {
    const broken = problemsOf('iptables:\n  masqueradeBit: 14\n masqueradeAll: true\n');
    expect(broken.length).toBeGreaterThan(0);
    expect(broken.every((line) => line.startsWith('config.conf: '))).toBe(true);
    expect(problemsOf('mode: iptables\nmode: ipvs\n')[0]).toMatch(/^config\.conf: Map keys must be unique/);
    expect(problemsOf('- mode: iptables\n', {}, '')).toEqual([
      'config.conf: must hold a KubeProxyConfiguration object, got a list',
    ]);
    expect(problemsOf('', {}, '')).toEqual([
      'config.conf: is empty; expected a KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1)',
    ]);
  });

  test('accepted for compatibility: Windows and legacy fields', () => {
    expect(
      problemsOf(
        'portRange: "30000-32767"\nwindowsRunAsService: false\nwinkernel:\n  networkName: x\n  enableDSR: true\nbindAddressHardFail: true\n',
      ),
    ).toEqual([]);
  });
});

describe('flags', () => {
  test('bad flag values are reported with the flag name', () => {
    expect(
      problemsOf('', {
        'iptables-masquerade-bit': 'fourteen',
        'masquerade-all': 'maybe',
        'sync-period': '30',
        'kube-api-qps': 'fast',
        'feature-gates': ['A=true,B'],
        'bpf-scheduler': 'wrr',
        'no-such-flag': 'x',
      }),
    ).toEqual([
      '--no-such-flag: unknown flag',
      '--masquerade-all: must be true or false, got "maybe"',
      '--iptables-masquerade-bit: must be an integer, got "fourteen"',
      '--sync-period: missing unit in duration "30"',
      '--feature-gates: must be a list of Gate=true|false pairs, got "B"',
      '--kube-api-qps: must be a number, got "fast"',
      '--bpf-scheduler: must be one of random, rr, maglev; got "wrr"',
    ]);
  });
});

describe('every problem at once', () => {
  test('decoding, flag and validation problems are all reported together', () => {
    const body = `mode: kernelspace
iptables:
  masqueradeBit: 40
  masqueradBit: 3
  syncPeriod: 1m
  minSyncPeriod: 2m
clusterCIDR: 10.0.0.0/8,bad
nodePortAddresses: [primary, 10.0.0.0/8]
healthzBindAddress: "0.0.0.0:0"
detectLocalMode: BridgeInterface
conntrack:
  min: -1
  udpTimeout: 5
featureGates:
  Unheard: true
bpf:
  maglevTableSize: 1000
  unknownKnob: 1
`;
    expect(problemsOf(body, { 'kube-api-burst': '-5' })).toEqual([
      'iptables.masqueradBit: unknown field',
      'conntrack.udpTimeout: must be a duration string such as "30s", got number 5',
      'bpf.unknownKnob: unknown field',
      'featureGates.Unheard: unrecognized feature gate',
      'iptables.masqueradeBit: must be between 0 and 31, got 40',
      'conntrack.min: must be greater than or equal to 0, got -1',
      "mode: kernelspace is kube-proxy's Windows mode; kube-bpf-proxy runs on Linux: use bpf, iptables, nftables or ipvs",
      'clientConnection.burst: must be greater than or equal to 0, got -5 (set by --kube-api-burst)',
      'iptables.syncPeriod: must be greater than or equal to iptables.minSyncPeriod (2m0s), got 1m0s',
      'healthzBindAddress: must have a port in [1, 65535], got "0"',
      'nodePortAddresses[0]: "primary" cannot be combined with CIDRs',
      'detectLocal.bridgeInterface: must not be empty when detectLocalMode is BridgeInterface',
      'clusterCIDR: "bad" is not a valid CIDR',
      'bpf.maglevTableSize: Maglev table size 1000 is not prime (e.g. 16381, 32749, 65521)',
    ]);
  });
});
