// Command-line flags: kube-proxy's names where one exists, ours under --bpf-*. Registration is
// commander's; reading keeps only what the user actually set; applying writes each flag onto the
// defaulted settings the way kube-proxy binds it, and records which fields a flag set so that
// validation can say so. Values arrive as text and are parsed by flag-spec.ts, so a bad flag is
// reported with every other problem instead of aborting the command line.

import { type Command, Option } from 'commander';
import { appendPortIfNeeded } from '../net/host-port.js';
import { childPath, type Problem } from './decode.js';
import {
  DEFAULT_BPF_CONFIG,
  KUBE_PROXY_HEALTHZ_PORT,
  KUBE_PROXY_METRICS_PORT,
  type KubeProxySettings,
} from './defaults.js';
import { type FlagKind, type FlagSpec, flag } from './flag-spec.js';
import { periodSectionOf } from './mode.js';
import type { BpfConfig } from './types.js';

/** What the user set on the command line, by long flag name without dashes. */
export type ConfigFlags = Readonly<Record<string, string | boolean | readonly string[]>>;

/** The section the running mode reads its periods from (see mode.ts). */
function periodSection(settings: KubeProxySettings) {
  return periodSectionOf(settings.mode);
}

const BPF = DEFAULT_BPF_CONFIG;

// Order matters where kube-proxy's does: --proxy-mode first (other flags depend on the mode), and
// the generic --sync-period/--min-sync-period before the deprecated per-mode ones, which kube-proxy
// applies last.
const FLAG_SPECS: readonly FlagSpec[] = [
  flag(
    'proxy-mode',
    'string',
    'Which proxy mode to use: bpf (default), iptables, nftables or ipvs',
    (s, v) => {
      s.mode = v;
      return 'mode';
    },
  ),
  flag(
    'hostname-override',
    'string',
    'If non-empty, used as the name of this node instead of the hostname',
    (s, v) => {
      s.hostnameOverride = v;
      return 'hostnameOverride';
    },
  ),
  flag('bind-address', 'string', "The node's primary IP unless 0.0.0.0 or :: (default 0.0.0.0)", (s, v) => {
    s.bindAddress = v;
    return 'bindAddress';
  }),
  flag('bind-address-hard-fail', 'bool', 'Fail if a bind address cannot be bound', (s, v) => {
    s.bindAddressHardFail = v;
    return 'bindAddressHardFail';
  }),
  flag(
    'healthz-bind-address',
    'string',
    'IP:port for the health check server (default 0.0.0.0:10256; a bare IP gets port 10256; empty disables)',
    (s, v) => {
      s.healthzBindAddress = v === '' ? '' : appendPortIfNeeded(v, KUBE_PROXY_HEALTHZ_PORT);
      return 'healthzBindAddress';
    },
  ),
  flag(
    'metrics-bind-address',
    'string',
    'IP:port for the metrics server (default 127.0.0.1:10249; a bare IP gets port 10249; empty disables)',
    (s, v) => {
      s.metricsBindAddress = v === '' ? '' : appendPortIfNeeded(v, KUBE_PROXY_METRICS_PORT);
      return 'metricsBindAddress';
    },
  ),
  flag(
    'cluster-cidr',
    'string',
    'The pod CIDR range(s) of the cluster, comma-separated (one per family)',
    (s, v) => {
      s.clusterCIDR = v;
      return 'clusterCIDR';
    },
  ),
  flag(
    'nodeport-addresses',
    'list',
    'CIDRs of the node addresses NodePorts accept, or "primary" (default: all local addresses)',
    (s, v) => {
      s.nodePortAddresses = v;
      return 'nodePortAddresses';
    },
  ),
  flag('masquerade-all', 'bool', 'SNAT all traffic sent via Service cluster IPs', (s, v) => {
    s.iptables.masqueradeAll = v;
    s.nftables.masqueradeAll = v;
    return ['iptables.masqueradeAll', 'nftables.masqueradeAll'];
  }),
  flag(
    'iptables-masquerade-bit',
    'int32',
    'The fwmark bit marking packets to SNAT, in [0, 31] (default 14)',
    (s, v) => {
      s.iptables.masqueradeBit = v;
      return 'iptables.masqueradeBit';
    },
  ),
  flag(
    'iptables-localhost-nodeports',
    'bool',
    'Accept NodePort connections on 127.0.0.1 (iptables and bpf modes; default true)',
    (s, v) => {
      s.iptables.localhostNodePorts = v;
      return 'iptables.localhostNodePorts';
    },
  ),
  flag('sync-period', 'duration', 'How often the full state is re-applied (default 30s)', (s, v) => {
    s.syncPeriodSeconds = v;
    return 'syncPeriod';
  }),
  flag('min-sync-period', 'duration', 'Minimum time between syncs (default 1s; 0s in ipvs mode)', (s, v) => {
    s.minSyncPeriodSeconds = v;
    return 'minSyncPeriod';
  }),
  flag(
    'iptables-sync-period',
    'duration',
    'Deprecated alias of --sync-period for every mode but ipvs',
    (s, v) => {
      s.iptables.syncPeriodSeconds = v;
      const section = periodSection(s);
      if (section === 'ipvs') return 'iptables.syncPeriod';
      s[section].syncPeriodSeconds = v;
      s.syncPeriodSeconds = undefined;
      return [...new Set(['iptables.syncPeriod', `${section}.syncPeriod`])];
    },
  ),
  flag(
    'iptables-min-sync-period',
    'duration',
    'Deprecated alias of --min-sync-period for every mode but ipvs',
    (s, v) => {
      s.iptables.minSyncPeriodSeconds = v;
      const section = periodSection(s);
      if (section === 'ipvs') return 'iptables.minSyncPeriod';
      s[section].minSyncPeriodSeconds = v;
      s.minSyncPeriodSeconds = undefined;
      return [...new Set(['iptables.minSyncPeriod', `${section}.minSyncPeriod`])];
    },
  ),
  flag('ipvs-sync-period', 'duration', 'Deprecated alias of --sync-period in ipvs mode', (s, v) => {
    s.ipvs.syncPeriodSeconds = v;
    if (periodSection(s) === 'ipvs') s.syncPeriodSeconds = undefined;
    return 'ipvs.syncPeriod';
  }),
  flag('ipvs-min-sync-period', 'duration', 'Deprecated alias of --min-sync-period in ipvs mode', (s, v) => {
    s.ipvs.minSyncPeriodSeconds = v;
    if (periodSection(s) === 'ipvs') s.minSyncPeriodSeconds = undefined;
    return 'ipvs.minSyncPeriod';
  }),
  flag('ipvs-scheduler', 'string', 'The ipvs scheduler (default rr)', (s, v) => {
    s.ipvs.scheduler = v;
    return 'ipvs.scheduler';
  }),
  flag('ipvs-strict-arp', 'bool', 'Set arp_ignore=1 and arp_announce=2 (ipvs mode)', (s, v) => {
    s.ipvs.strictARP = v;
    return 'ipvs.strictARP';
  }),
  flag(
    'ipvs-exclude-cidrs',
    'list',
    'CIDRs whose ipvs virtual servers are left alone when cleaning up',
    (s, v) => {
      s.ipvs.excludeCIDRs = v;
      return 'ipvs.excludeCIDRs';
    },
  ),
  flag(
    'ipvs-tcp-timeout',
    'duration',
    'Timeout of idle ipvs TCP connections (0 leaves the kernel value)',
    (s, v) => {
      s.ipvs.tcpTimeoutSeconds = v;
      return 'ipvs.tcpTimeout';
    },
  ),
  flag(
    'ipvs-tcpfin-timeout',
    'duration',
    'Timeout of ipvs TCP connections after FIN (0 leaves the kernel value)',
    (s, v) => {
      s.ipvs.tcpFinTimeoutSeconds = v;
      return 'ipvs.tcpFinTimeout';
    },
  ),
  flag('ipvs-udp-timeout', 'duration', 'Timeout of ipvs UDP packets (0 leaves the kernel value)', (s, v) => {
    s.ipvs.udpTimeoutSeconds = v;
    return 'ipvs.udpTimeout';
  }),
  flag('kubeconfig', 'string', 'Path to a kubeconfig file (default: in-cluster configuration)', (s, v) => {
    s.clientConnection.kubeconfig = v;
    return 'clientConnection.kubeconfig';
  }),
  flag('master', 'string', 'The API server URL (overrides the kubeconfig)', (s, v) => {
    s.master = v;
    return 'master';
  }),
  flag(
    'detect-local-mode',
    'string',
    'How to tell local traffic: ClusterCIDR (default), NodeCIDR, BridgeInterface, InterfaceNamePrefix',
    (s, v) => {
      s.detectLocalMode = v;
      return 'detectLocalMode';
    },
  ),
  flag(
    'pod-bridge-interface',
    'string',
    'The bridge of the pods, with --detect-local-mode=BridgeInterface',
    (s, v) => {
      s.detectLocal.bridgeInterface = v;
      return 'detectLocal.bridgeInterface';
    },
  ),
  flag(
    'pod-interface-name-prefix',
    'string',
    'The interface name prefix of the pods, with --detect-local-mode=InterfaceNamePrefix',
    (s, v) => {
      s.detectLocal.interfaceNamePrefix = v;
      return 'detectLocal.interfaceNamePrefix';
    },
  ),
  flag(
    'feature-gates',
    'gates',
    'Gate=true|false pairs, comma-separated; merged over the file featureGates',
    (s, v) => {
      Object.assign(s.featureGates, v);
      return Object.keys(v).map((gate) => childPath('featureGates', gate));
    },
  ),
  flag(
    'conntrack-max-per-core',
    'int32',
    'Conntrack entries per CPU (default 32768; 0 leaves the limit)',
    (s, v) => {
      s.conntrack.maxPerCore = v;
      return 'conntrack.maxPerCore';
    },
  ),
  flag(
    'conntrack-min',
    'int32',
    'Minimum conntrack entries, whatever the CPU count (default 131072)',
    (s, v) => {
      s.conntrack.min = v;
      return 'conntrack.min';
    },
  ),
  flag(
    'conntrack-tcp-timeout-established',
    'duration',
    'Idle timeout of established TCP (default 24h0m0s)',
    (s, v) => {
      s.conntrack.tcpEstablishedTimeoutSeconds = v;
      return 'conntrack.tcpEstablishedTimeout';
    },
  ),
  flag(
    'conntrack-tcp-timeout-close-wait',
    'duration',
    'Conntrack timeout of CLOSE_WAIT (default 1h0m0s)',
    (s, v) => {
      s.conntrack.tcpCloseWaitTimeoutSeconds = v;
      return 'conntrack.tcpCloseWaitTimeout';
    },
  ),
  flag(
    'conntrack-tcp-be-liberal',
    'bool',
    'Set nf_conntrack_tcp_be_liberal=1 (no INVALID drop rule)',
    (s, v) => {
      s.conntrack.tcpBeLiberal = v;
      return 'conntrack.tcpBeLiberal';
    },
  ),
  flag(
    'conntrack-udp-timeout',
    'duration',
    'Conntrack timeout of unreplied UDP (0 leaves the kernel value)',
    (s, v) => {
      s.conntrack.udpTimeoutSeconds = v;
      return 'conntrack.udpTimeout';
    },
  ),
  flag(
    'conntrack-udp-timeout-stream',
    'duration',
    'Conntrack timeout of UDP streams (0 leaves the kernel value)',
    (s, v) => {
      s.conntrack.udpStreamTimeoutSeconds = v;
      return 'conntrack.udpStreamTimeout';
    },
  ),
  flag(
    'config-sync-period',
    'duration',
    'How often informers resync from the API server (default 15m0s)',
    (s, v) => {
      s.configSyncPeriodSeconds = v;
      return 'configSyncPeriod';
    },
  ),
  flag('kube-api-qps', 'float', 'Queries per second to the API server (default 5)', (s, v) => {
    s.clientConnection.qps = v;
    return 'clientConnection.qps';
  }),
  flag('kube-api-burst', 'int32', 'Burst of queries to the API server (default 10)', (s, v) => {
    s.clientConnection.burst = v;
    return 'clientConnection.burst';
  }),
  flag(
    'kube-api-content-type',
    'string',
    'Content type of requests (default application/vnd.kubernetes.protobuf)',
    (s, v) => {
      s.clientConnection.contentType = v;
      return 'clientConnection.contentType';
    },
  ),
  flag('profiling', 'bool', 'Sets enableProfiling: profiling handlers on the metrics server', (s, v) => {
    s.enableProfiling = v;
    return 'enableProfiling';
  }),
  flag(
    'oom-score-adj',
    'int32',
    'The oom_score_adj of this process, in [-1000, 1000] (default -999)',
    (s, v) => {
      s.oomScoreAdj = v;
      return 'oomScoreAdj';
    },
  ),
  flag(
    'show-hidden-metrics-for-version',
    'string',
    'Accepted for compatibility; we hide no metrics',
    (s, v) => {
      s.showHiddenMetricsForVersion = v;
      return 'showHiddenMetricsForVersion';
    },
  ),
  flag(
    'v',
    'uint32',
    'Log verbosity: 0 info, 1-3 debug, 4 and up trace',
    (s, v) => {
      s.logging.verbosity = v;
      return 'logging.verbosity';
    },
    { short: 'v' },
  ),
  flag('logging-format', 'string', 'Log format: text (default) or json', (s, v) => {
    s.logging.format = v;
    return 'logging.format';
  }),
  flag('log-flush-frequency', 'duration', 'Maximum time between log flushes (default 5s)', (s, v) => {
    s.logging.flushFrequencySeconds = v;
    return 'logging.flushFrequency';
  }),
  flag(
    'bpf-scheduler',
    'string',
    `Default backend choice: random, rr or maglev (default ${BPF.scheduler})`,
    (s, v) => {
      s.bpf.scheduler = v as BpfConfig['scheduler'];
      return 'bpf.scheduler';
    },
    { choices: ['random', 'rr', 'maglev'] },
  ),
  flag(
    'bpf-maglev-frontends',
    'string',
    `Frontends the default scheduler maglev applies to: external (NodePort, LoadBalancer, externalIPs; ClusterIPs random) or all (default ${BPF.maglevFrontends})`,
    (s, v) => {
      s.bpf.maglevFrontends = v as BpfConfig['maglevFrontends'];
      return 'bpf.maglevFrontends';
    },
    { choices: ['external', 'all'] },
  ),
  flag(
    'bpf-maglev-table-size',
    'uint32',
    `Maglev table size, a prime (default ${BPF.maglevTableSize})`,
    (s, v) => {
      s.bpf.maglevTableSize = v;
      return 'bpf.maglevTableSize';
    },
  ),
  flag(
    'bpf-pod-interfaces',
    'list',
    'Patterns of pod-facing interfaces, trailing * for a prefix (default: the host ends of veths that are not external)',
    (s, v) => {
      s.bpf.podInterfaces = v;
      return 'bpf.podInterfaces';
    },
  ),
  flag(
    'bpf-external-interfaces',
    'list',
    'Patterns of external interfaces, trailing * for a prefix (default: the devices holding a node IP, of the default routes, and overlays)',
    (s, v) => {
      s.bpf.externalInterfaces = v;
      return 'bpf.externalInterfaces';
    },
  ),
  flag(
    'bpf-xdp-mode',
    'string',
    `XDP on external interfaces: native, generic or off (default ${BPF.xdpMode})`,
    (s, v) => {
      s.bpf.xdpMode = v as BpfConfig['xdpMode'];
      return 'bpf.xdpMode';
    },
    { choices: ['native', 'generic', 'off'] },
  ),
  flag(
    'bpf-pin-path',
    'string',
    `bpffs directory for pinned maps and links (default ${BPF.pinPath})`,
    (s, v) => {
      s.bpf.pinPath = v;
      return 'bpf.pinPath';
    },
  ),
  flag(
    'bpf-socket-lb',
    'string',
    `Socket-level load balancing on the cgroup hooks: host (the node's own network namespace), all (pods too) or off (default ${BPF.socketLB})`,
    (s, v) => {
      s.bpf.socketLB = v as BpfConfig['socketLB'];
      return 'bpf.socketLB';
    },
    { choices: ['host', 'all', 'off'] },
  ),
  flag(
    'bpf-host-routing',
    'string',
    `Pods' service flows past the node's stack (local pods; other nodes' pods where safe): auto (where the node allows it), bpf or stack (default ${BPF.hostRouting})`,
    (s, v) => {
      s.bpf.hostRouting = v as BpfConfig['hostRouting'];
      return 'bpf.hostRouting';
    },
    { choices: ['auto', 'bpf', 'stack'] },
  ),
  flag(
    'bpf-cgroup-path',
    'string',
    'cgroup v2 directory the socket hooks attach to (default: the cgroup2 root, from /proc/self/mountinfo)',
    (s, v) => {
      s.bpf.cgroupPath = v;
      return 'bpf.cgroupPath';
    },
  ),
  ...(Object.keys(BPF.mapSizes) as (keyof BpfConfig['mapSizes'])[]).map((map) =>
    flag(
      `bpf-map-size-${map.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`,
      'uint32',
      `Capacity of the ${map} map (default ${BPF.mapSizes[map]})`,
      (s, v) => {
        s.bpf.mapSizes[map] = v;
        return `bpf.mapSizes.${map}`;
      },
    ),
  ),
  flag(
    'bpf-conntrack-gc-interval-seconds',
    'uint32',
    `Seconds between conntrack garbage collections (default ${BPF.conntrackGCIntervalSeconds})`,
    (s, v) => {
      s.bpf.conntrackGCIntervalSeconds = v;
      return 'bpf.conntrackGCIntervalSeconds';
    },
  ),
  flag(
    'bpf-metrics-max-backends',
    'uint32',
    `Per-backend metric series for at most this many backends, 0 for none (default ${BPF.metricsMaxBackends})`,
    (s, v) => {
      s.bpf.metricsMaxBackends = v;
      return 'bpf.metricsMaxBackends';
    },
  ),
];

const CONFIG_FLAG = 'config';

/** Every flag name this module understands, --config included. */
export const CONFIG_FLAG_NAMES: readonly string[] = [CONFIG_FLAG, ...FLAG_SPECS.map((spec) => spec.name)];

const VALUE_NAMES: Record<FlagKind, string> = {
  string: 'string',
  bool: 'bool',
  int32: 'int',
  uint32: 'int',
  float: 'number',
  duration: 'duration',
  list: 'list',
  gates: 'Gate=bool,...',
};

function optionFor(spec: FlagSpec): Option {
  const long = `--${spec.name}`;
  const names = spec.short ? `-${spec.short}, ${long}` : long;
  if (spec.kind === 'bool') return new Option(`${names} [bool]`, spec.description);
  const option = new Option(`${names} <${VALUE_NAMES[spec.kind]}>`, spec.description);
  // Repeating a list flag adds to it, as pflag's string slices do.
  if (spec.kind === 'list' || spec.kind === 'gates') {
    option.argParser((value: string, previous: string[] | undefined) => [...(previous ?? []), value]);
  }
  return option;
}

/** Adds --config and every configuration flag to a command. */
export function registerConfigFlags(command: Command): Command {
  command.addOption(new Option('--config <path>', 'A KubeProxyConfiguration file (YAML or JSON)'));
  for (const spec of FLAG_SPECS) command.addOption(optionFor(spec));
  return command;
}

/** The configuration flags the user set (from the command line or the environment), after parsing. */
export function readConfigFlags(command: Command): ConfigFlags {
  const flags: Record<string, string | boolean | readonly string[]> = {};
  for (const option of command.options) {
    const name = option.long?.replace(/^--/, '');
    if (!name || !CONFIG_FLAG_NAMES.includes(name)) continue;
    const key = option.attributeName();
    const source = command.getOptionValueSource(key);
    if (source === undefined || source === 'default') continue;
    flags[name] = command.getOptionValue(key);
  }
  return flags;
}

/**
 * Writes the flags onto defaulted settings (mutating them) and returns, per file path, the flag
 * that set it. Unknown flag names and unparsable values become problems.
 */
export function applyConfigFlags(
  settings: KubeProxySettings,
  flags: ConfigFlags,
  problems: Problem[],
): Map<string, string> {
  const origins = new Map<string, string>();
  for (const name of Object.keys(flags)) {
    if (!CONFIG_FLAG_NAMES.includes(name)) problems.push({ path: `--${name}`, message: 'unknown flag' });
  }
  for (const spec of FLAG_SPECS) {
    const raw = flags[spec.name];
    if (raw === undefined) continue;
    for (const path of spec.apply(raw, settings, problems)) origins.set(path, `--${spec.name}`);
  }
  return origins;
}
