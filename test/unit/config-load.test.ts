import { describe, expect, test } from 'vitest';
import { CONFIGZ_GROUP, configzView } from '../../src/config/configz.js';
import { type LoadResult, loadConfig } from '../../src/config/load.js';
import type { ProxyConfig } from '../../src/config/types.js';

// `config.conf` of the kube-proxy ConfigMap that kubeadm (v1.31-v1.33) writes, verbatim.
const KUBEADM_CONFIG_CONF = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
`;

function expectOk(result: LoadResult): ProxyConfig {
  if (!result.ok)
    throw new Error(
      `unexpected problems:\n${result.problems.map((p) => `${p.path}: ${p.message}`).join('\n')}`,
    );
  return result.config;
}

const HEADER = 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n';

describe('the kubeadm config.conf, unchanged', () => {
  const config = expectOk(loadConfig({ fileText: KUBEADM_CONFIG_CONF, fileName: 'config.conf', flags: {} }));

  // Expected values are kube-proxy's documented defaults (kube-proxy v1.37.2's
  // pkg/proxy/apis/config/v1alpha1/defaults.go and what kubeadm's ConfigMap sets), written out here rather
  // than taken from our defaults table.
  test('nulls, zero durations and empty strings take kube-proxy defaults', () => {
    expect(config.bindAddress).toBe('0.0.0.0');
    expect(config.healthzBindAddress).toBe('0.0.0.0:10256');
    expect(config.metricsBindAddress).toBe('127.0.0.1:10249');
    expect(config.masqueradeBit).toBe(14);
    expect(config.masqueradeAll).toBe(false);
    expect(config.localhostNodePorts).toBe(true);
    expect(config.syncPeriodSeconds).toBe(30);
    expect(config.minSyncPeriodSeconds).toBe(1);
    expect(config.configSyncPeriodSeconds).toBe(15 * 60);
    expect(config.conntrack).toEqual({
      maxPerCore: 32768,
      min: 131072,
      tcpEstablishedTimeoutSeconds: 24 * 3600,
      tcpCloseWaitTimeoutSeconds: 3600,
      tcpBeLiberal: false,
      udpTimeoutSeconds: 0,
      udpStreamTimeoutSeconds: 0,
    });
    expect(config.oomScoreAdj).toBe(-999);
    expect(config.clientConnection).toEqual({
      kubeconfig: '/var/lib/kube-proxy/kubeconfig.conf',
      acceptContentTypes: '',
      contentType: 'application/vnd.kubernetes.protobuf',
      qps: 5,
      burst: 10,
    });
    expect(config.detectLocalMode).toBe('ClusterCIDR');
    expect(config.ipvs.scheduler).toBe('rr');
    expect(config.logging).toEqual({ format: 'text', verbosity: 0, flushFrequencySeconds: 5 });
    expect(config.nodePortAddresses).toEqual([]);
  });

  test('the values it does set are kept', () => {
    expect(config.clusterCIDRs).toEqual(['10.244.0.0/16']);
    expect(config.hostnameOverride).toBe('');
    expect(config.featureGates).toEqual({});
  });

  test('mode "" is bpf for us (kube-proxy would pick iptables), with the bpf defaults', () => {
    expect(config.mode).toBe('bpf');
    expect(config.bpf.scheduler).toBe('random');
    expect(config.bpf.maglevTableSize).toBe(16381);
    expect(config.bpf.maglevFrontends).toBe('external');
    expect(config.bpf.pinPath).toBe('/sys/fs/bpf/kube-bpf-proxy');
    expect(config.bpf.xdpMode).toBe('off');
    // Empty lists: the agent finds the interfaces.
    expect(config.bpf.externalInterfaces).toEqual([]);
    expect(config.bpf.podInterfaces).toEqual([]);
    expect(config.bpf.mapSizes).toEqual({
      services: 65536,
      backends: 262144,
      backendCounters: 16384,
      backendSlots: 1048576,
      conntrack: 524288,
      affinity: 65536,
      sourceRanges: 16384,
      socketReverse: 131072,
    });
    expect(config.bpf.conntrackGCIntervalSeconds).toBe(30);
    expect(config.bpf.metricsMaxBackends).toBe(1000);
  });

  test('the same file as JSON loads to the same configuration', async () => {
    const { parse } = await import('yaml');
    const json = JSON.stringify(parse(KUBEADM_CONFIG_CONF));
    expect(expectOk(loadConfig({ fileText: json, fileName: 'config.json', flags: {} }))).toEqual(config);
  });
});

describe('defaults without any file', () => {
  test('flags alone give the same defaults as an empty configuration', () => {
    const fromNothing = expectOk(loadConfig({ flags: {} }));
    const fromHeader = expectOk(loadConfig({ fileText: HEADER, flags: {} }));
    expect(fromNothing).toEqual(fromHeader);
    expect(fromNothing.syncPeriodSeconds).toBe(30);
  });

  test('an IPv6 bindAddress moves the healthz and metrics defaults to [::] and [::1]', () => {
    const config = expectOk(loadConfig({ fileText: `${HEADER}bindAddress: "::"\n`, flags: {} }));
    expect(config.healthzBindAddress).toBe('[::]:10256');
    expect(config.metricsBindAddress).toBe('[::1]:10249');
  });

  test('a bare IP for healthz/metrics gets the default port', () => {
    const config = expectOk(
      loadConfig({
        fileText: `${HEADER}healthzBindAddress: 10.0.0.1\nmetricsBindAddress: "::"\n`,
        flags: {},
      }),
    );
    expect(config.healthzBindAddress).toBe('10.0.0.1:10256');
    expect(config.metricsBindAddress).toBe('[::]:10249');
  });

  test('explicit zero conntrack timeouts stay zero (leave the kernel value); null takes the default', () => {
    const config = expectOk(
      loadConfig({
        fileText: `${HEADER}conntrack:\n  tcpEstablishedTimeout: 0s\n  tcpCloseWaitTimeout: null\n  maxPerCore: 0\n`,
        flags: {},
      }),
    );
    expect(config.conntrack.tcpEstablishedTimeoutSeconds).toBe(0);
    expect(config.conntrack.tcpCloseWaitTimeoutSeconds).toBe(3600);
    expect(config.conntrack.maxPerCore).toBe(0);
  });

  test('YAML 1.1 booleans, as kube-proxy reads them', () => {
    const config = expectOk(
      loadConfig({ fileText: `${HEADER}iptables:\n  masqueradeAll: yes\nbpf:\n  xdpMode: off\n`, flags: {} }),
    );
    expect(config.masqueradeAll).toBe(true);
    expect(config.bpf.xdpMode).toBe('off');
  });

  test('bpf.socketLB: host by default, a bare off is "off", and --bpf-socket-lb sets it', () => {
    expect(expectOk(loadConfig({ fileText: HEADER, flags: {} })).bpf).toMatchObject({
      socketLB: 'host',
      cgroupPath: '',
    });
    expect(
      expectOk(loadConfig({ fileText: `${HEADER}bpf:\n  socketLB: off\n`, flags: {} })).bpf.socketLB,
    ).toBe('off');
    expect(
      expectOk(loadConfig({ fileText: HEADER, flags: { 'bpf-socket-lb': 'all', 'bpf-cgroup-path': '/cg' } }))
        .bpf,
    ).toMatchObject({ socketLB: 'all', cgroupPath: '/cg' });
  });

  test('bpf.hostRouting: auto by default, and --bpf-host-routing sets it', () => {
    expect(expectOk(loadConfig({ fileText: HEADER, flags: {} })).bpf.hostRouting).toBe('auto');
    expect(
      expectOk(loadConfig({ fileText: `${HEADER}bpf:\n  hostRouting: stack\n`, flags: {} })).bpf.hostRouting,
    ).toBe('stack');
    expect(
      expectOk(loadConfig({ fileText: HEADER, flags: { 'bpf-host-routing': 'bpf' } })).bpf.hostRouting,
    ).toBe('bpf');
  });

  test('logging.flushFrequency accepts integer nanoseconds and duration strings', () => {
    const ns = expectOk(
      loadConfig({ fileText: `${HEADER}logging:\n  flushFrequency: 2000000000\n`, flags: {} }),
    );
    const text = expectOk(loadConfig({ fileText: `${HEADER}logging:\n  flushFrequency: 2s\n`, flags: {} }));
    expect(ns.logging.flushFrequencySeconds).toBe(2);
    expect(text.logging.flushFrequencySeconds).toBe(2);
  });
});

describe('mode-specific sections resolve for the chosen mode', () => {
  const file = `${HEADER}iptables:
  masqueradeBit: 10
  masqueradeAll: true
  syncPeriod: 20s
  minSyncPeriod: 2s
nftables:
  masqueradeBit: 11
  syncPeriod: 40s
  minSyncPeriod: 4s
ipvs:
  syncPeriod: 50s
  scheduler: lc
`;
  const load = (mode: string) => expectOk(loadConfig({ fileText: `${file}mode: ${mode}\n`, flags: {} }));

  test('bpf reads iptables:', () => {
    const c = load('bpf');
    expect([c.masqueradeBit, c.masqueradeAll, c.syncPeriodSeconds, c.minSyncPeriodSeconds]).toEqual([
      10,
      true,
      20,
      2,
    ]);
  });

  test('iptables reads iptables:', () => {
    const c = load('iptables');
    expect([c.masqueradeBit, c.syncPeriodSeconds, c.minSyncPeriodSeconds, c.localhostNodePorts]).toEqual([
      10,
      20,
      2,
      true,
    ]);
  });

  test('nftables reads nftables:, defaults nodePortAddresses to primary, no localhost NodePorts', () => {
    const c = load('nftables');
    expect([c.masqueradeBit, c.masqueradeAll, c.syncPeriodSeconds, c.minSyncPeriodSeconds]).toEqual([
      11,
      false,
      40,
      4,
    ]);
    expect(c.nodePortAddresses).toEqual(['primary']);
    expect(c.localhostNodePorts).toBe(false);
  });

  test('ipvs reads ipvs: for periods (minSyncPeriod has no default) and iptables: for masquerading', () => {
    const c = load('ipvs');
    expect([c.syncPeriodSeconds, c.minSyncPeriodSeconds, c.ipvs.scheduler]).toEqual([50, 0, 'lc']);
    expect([c.masqueradeBit, c.masqueradeAll]).toEqual([10, true]);
  });

  test('top-level syncPeriod/minSyncPeriod override the section in every mode', () => {
    for (const mode of ['bpf', 'nftables', 'ipvs']) {
      const c = expectOk(
        loadConfig({ fileText: `${file}mode: ${mode}\nsyncPeriod: 1m\nminSyncPeriod: 500ms\n`, flags: {} }),
      );
      expect([c.syncPeriodSeconds, c.minSyncPeriodSeconds]).toEqual([60, 0.5]);
    }
  });
});

describe('flags override the file', () => {
  const file = `${HEADER}mode: iptables
hostnameOverride: from-file
clusterCIDR: 10.244.0.0/16
iptables:
  masqueradeBit: 10
  syncPeriod: 20s
featureGates:
  ServiceTrafficDistribution: true
  PreferSameTrafficDistribution: false
bpf:
  scheduler: rr
  mapSizes:
    conntrack: 1000
`;

  test('only the flags given change anything', () => {
    const c = expectOk(
      loadConfig({
        fileText: file,
        flags: {
          'proxy-mode': 'bpf',
          'hostname-override': 'node-a',
          'cluster-cidr': '10.0.0.0/8,fd00::/64',
          'iptables-masquerade-bit': '12',
          'masquerade-all': true,
          'nodeport-addresses': ['10.0.0.0/8', '192.168.0.0/16'],
          'feature-gates': ['PreferSameTrafficDistribution=true'],
          'bpf-scheduler': 'maglev',
          'bpf-map-size-conntrack': '2000',
          'bpf-pod-interfaces': ['veth*,cali*'],
          'conntrack-tcp-timeout-established': '1h2m3.5s',
          'kube-api-qps': '50.5',
          'iptables-localhost-nodeports': 'false',
          master: 'https://127.0.0.1:6443',
          v: '4',
        },
      }),
    );
    expect(c.mode).toBe('bpf');
    expect(c.hostnameOverride).toBe('node-a');
    expect(c.clusterCIDRs).toEqual(['10.0.0.0/8', 'fd00::/64']);
    expect(c.masqueradeBit).toBe(12);
    expect(c.masqueradeAll).toBe(true);
    expect(c.localhostNodePorts).toBe(false);
    expect(c.nodePortAddresses).toEqual(['10.0.0.0/8', '192.168.0.0/16']);
    expect(c.featureGates).toEqual({ ServiceTrafficDistribution: true, PreferSameTrafficDistribution: true });
    expect(c.bpf.scheduler).toBe('maglev');
    expect(c.bpf.mapSizes.conntrack).toBe(2000);
    expect(c.bpf.mapSizes.services).toBe(65536);
    expect(c.bpf.podInterfaces).toEqual(['veth*', 'cali*']);
    expect(c.conntrack.tcpEstablishedTimeoutSeconds).toBe(3723.5);
    expect(c.clientConnection.qps).toBe(50.5);
    expect(c.master).toBe('https://127.0.0.1:6443');
    expect(c.logging.verbosity).toBe(4);
    // Untouched by flags: from the file.
    expect(c.syncPeriodSeconds).toBe(20);
  });

  test('--sync-period and the per-mode alias: the alias of the running mode wins, as in kube-proxy', () => {
    const generic = expectOk(loadConfig({ fileText: file, flags: { 'sync-period': '45s' } }));
    expect(generic.syncPeriodSeconds).toBe(45);
    const both = expectOk(
      loadConfig({ fileText: file, flags: { 'sync-period': '45s', 'iptables-sync-period': '50s' } }),
    );
    expect(both.syncPeriodSeconds).toBe(50);
    // --ipvs-sync-period only matters in ipvs mode.
    const otherMode = expectOk(loadConfig({ fileText: file, flags: { 'ipvs-sync-period': '50s' } }));
    expect(otherMode.syncPeriodSeconds).toBe(20);
    const ipvs = expectOk(
      loadConfig({ fileText: file, flags: { 'proxy-mode': 'ipvs', 'ipvs-sync-period': '50s' } }),
    );
    expect(ipvs.syncPeriodSeconds).toBe(50);
  });

  test('--iptables-sync-period beats a top-level syncPeriod in the file', () => {
    const c = expectOk(
      loadConfig({ fileText: `${file}syncPeriod: 1m\n`, flags: { 'iptables-sync-period': '40s' } }),
    );
    expect(c.syncPeriodSeconds).toBe(40);
  });

  test('an empty --metrics-bind-address disables the server; a bare IP gets the port', () => {
    const c = expectOk(
      loadConfig({ fileText: file, flags: { 'metrics-bind-address': '', 'healthz-bind-address': '::1' } }),
    );
    expect(c.metricsBindAddress).toBe('');
    expect(c.healthzBindAddress).toBe('[::1]:10256');
  });
});

describe('/configz', () => {
  test('wraps the configuration under kubeproxy.config.k8s.io with Go durations', () => {
    const config = expectOk(loadConfig({ fileText: KUBEADM_CONFIG_CONF, flags: {} }));
    const view = configzView(config)[CONFIGZ_GROUP] as Record<string, unknown>;
    expect(view.apiVersion).toBe('kubeproxy.config.k8s.io/v1alpha1');
    expect(view.kind).toBe('KubeProxyConfiguration');
    expect(view.iptables).toEqual({
      masqueradeAll: false,
      masqueradeBit: 14,
      localhostNodePorts: true,
      syncPeriod: '30s',
      minSyncPeriod: '1s',
    });
    expect(view.configSyncPeriod).toBe('15m0s');
    expect((view.conntrack as Record<string, unknown>).tcpEstablishedTimeout).toBe('24h0m0s');
    expect(JSON.parse(JSON.stringify(configzView(config)))).toEqual(configzView(config));
  });

  test('the view loads back as a file to the same configuration, in every mode', () => {
    for (const mode of ['bpf', 'iptables', 'nftables', 'ipvs']) {
      const config = expectOk(
        loadConfig({
          fileText: KUBEADM_CONFIG_CONF,
          flags: {
            'proxy-mode': mode,
            'sync-period': '1m30s',
            'min-sync-period': '250ms',
            'feature-gates': ['ServiceTrafficDistribution=true'],
            'conntrack-udp-timeout': '30s',
          },
        }),
      );
      const text = JSON.stringify(configzView(config)[CONFIGZ_GROUP]);
      expect(expectOk(loadConfig({ fileText: text, flags: {} }))).toEqual(config);
    }
  });
});
