// kube-proxy's validation (pkg/proxy/apis/config/validation), run on the defaulted settings with
// the flags applied, plus the checks of our `bpf:` section. Every problem is reported, each with
// the path of the field in the file; a value that came from a flag says which flag.

import { splitHostPort } from '../net/host-port.js';
import { parseCIDR, parseIP } from '../net/ip.js';
import type { Problem } from './decode.js';
import type { KubeProxySettings } from './defaults.js';
import { formatGoDuration } from './duration.js';
import { maglevTableSizeProblem } from './maglev-table-size.js';
import { effectiveMode, periodSectionOf } from './mode.js';
import { PROXY_MODES } from './types.js';

/**
 * Feature gates kube-proxy v1.33 reads (or that its libraries register). kube-proxy rejects gates
 * it does not know; so do we, with this narrower list: a gate that only matters to other
 * Kubernetes components has no effect on a proxy and is reported so the file can be cleaned up.
 */
export const KNOWN_FEATURE_GATES: readonly string[] = [
  'AllAlpha',
  'AllBeta',
  'ClientsAllowCBOR',
  'ClientsPreferCBOR',
  'ComponentSLIs',
  'ContextualLogging',
  'InOrderInformers',
  'InformerResourceVersion',
  'KubeProxyDrainingTerminatingNodes',
  'LoadBalancerIPMode',
  'LoggingAlphaOptions',
  'LoggingBetaOptions',
  'MultiCIDRServiceAllocator',
  'NFTablesProxyMode',
  'PreferSameTrafficDistribution',
  'ServiceTrafficDistribution',
  'StrictIPCIDRValidation',
  'TopologyAwareHints',
  'WatchListClient',
  'WinDSR',
  'WinOverlay',
];

/** kube-proxy's accepted ipvs schedulers; "" means rr. */
export const IPVS_SCHEDULERS: readonly string[] = [
  'rr',
  'wrr',
  'lc',
  'wlc',
  'lblc',
  'lblcr',
  'sh',
  'dh',
  'sed',
  'nq',
  'mh',
];

export const DETECT_LOCAL_MODES: readonly string[] = [
  'ClusterCIDR',
  'NodeCIDR',
  'BridgeInterface',
  'InterfaceNamePrefix',
];

export const LOG_FORMATS: readonly string[] = ['text', 'json'];

const MAX_INT32 = 2 ** 31 - 1;
/** IFNAMSIZ - 1 */
const MAX_INTERFACE_NAME = 15;

/** An interface name, or a prefix followed by "*"; the kernel forbids "/", ":" and whitespace in names. */
function isInterfacePattern(pattern: string): boolean {
  const name = pattern.endsWith('*') ? pattern.slice(0, -1) : pattern;
  if (name.length > MAX_INTERFACE_NAME || /[/:*\s]/.test(name)) return false;
  return pattern.endsWith('*') || (name !== '' && name !== '.' && name !== '..');
}

/** How each section's checks report: the problem list, with the flag that set a value. */
interface Checks {
  report(path: string, message: string): void;
  notNegative(path: string, value: number, show?: (v: number) => string): void;
  cidr(path: string, text: string): void;
}

const d = formatGoDuration;

export function validateSettings(
  settings: KubeProxySettings,
  origins: ReadonlyMap<string, string>,
): Problem[] {
  const problems: Problem[] = [];
  const report = (path: string, message: string) => {
    const flag = origins.get(path);
    problems.push({ path, message: flag ? `${message} (set by ${flag})` : message });
  };
  const c: Checks = {
    report,
    notNegative: (path, value, show = String) => {
      if (value < 0) report(path, `must be greater than or equal to 0, got ${show(value)}`);
    },
    cidr: (path, text) => {
      if (!parseCIDR(text)) report(path, `must be a valid CIDR, got ${JSON.stringify(text)}`);
    },
  };
  const mode = effectiveMode(settings.mode);
  checkGatesAndMarks(c, settings, mode);
  if (mode === 'ipvs') checkIpvs(c, settings);
  checkConntrack(c, settings);
  checkMode(c, settings, mode);
  c.notNegative('clientConnection.burst', settings.clientConnection.burst);
  checkPeriods(c, settings);
  checkAddresses(c, settings);
  checkMetricsAndLocalDetection(c, settings);
  checkLogging(c, settings);
  if (settings.oomScoreAdj < -1000 || settings.oomScoreAdj > 1000) {
    report('oomScoreAdj', `must be between -1000 and 1000, got ${settings.oomScoreAdj}`);
  }
  checkBpf(c, settings);
  return problems;
}

function checkGatesAndMarks({ report }: Checks, settings: KubeProxySettings, mode: string): void {
  for (const gate of Object.keys(settings.featureGates)) {
    if (!KNOWN_FEATURE_GATES.includes(gate)) report(`featureGates.${gate}`, 'unrecognized feature gate');
  }
  const masqueradeBit = (path: string, bit: number) => {
    if (bit < 0 || bit > 31) report(path, `must be between 0 and 31, got ${bit}`);
  };
  // kube-proxy checks iptables.masqueradeBit in every mode, nftables.masqueradeBit in nftables mode.
  masqueradeBit('iptables.masqueradeBit', settings.iptables.masqueradeBit);
  if (mode === 'nftables') masqueradeBit('nftables.masqueradeBit', settings.nftables.masqueradeBit);
}

function checkIpvs({ report, notNegative, cidr }: Checks, settings: KubeProxySettings): void {
  notNegative('ipvs.tcpTimeout', settings.ipvs.tcpTimeoutSeconds, d);
  notNegative('ipvs.tcpFinTimeout', settings.ipvs.tcpFinTimeoutSeconds, d);
  notNegative('ipvs.udpTimeout', settings.ipvs.udpTimeoutSeconds, d);
  for (const [i, text] of settings.ipvs.excludeCIDRs.entries()) cidr(`ipvs.excludeCIDRs[${i}]`, text);
  const scheduler = settings.ipvs.scheduler;
  if (scheduler !== '' && !IPVS_SCHEDULERS.includes(scheduler)) {
    report(
      'ipvs.scheduler',
      `must be one of ${IPVS_SCHEDULERS.join(', ')} or "" (rr), got ${JSON.stringify(scheduler)}`,
    );
  }
}

function checkConntrack({ notNegative }: Checks, settings: KubeProxySettings): void {
  const ct = settings.conntrack;
  notNegative('conntrack.maxPerCore', ct.maxPerCore);
  notNegative('conntrack.min', ct.min);
  notNegative('conntrack.tcpEstablishedTimeout', ct.tcpEstablishedTimeoutSeconds, d);
  notNegative('conntrack.tcpCloseWaitTimeout', ct.tcpCloseWaitTimeoutSeconds, d);
  notNegative('conntrack.udpTimeout', ct.udpTimeoutSeconds, d);
  notNegative('conntrack.udpStreamTimeout', ct.udpStreamTimeoutSeconds, d);
}

function checkMode({ report }: Checks, settings: KubeProxySettings, mode: string): void {
  if (settings.mode === 'kernelspace') {
    report(
      'mode',
      "kernelspace is kube-proxy's Windows mode; kube-bpf-proxy runs on Linux: use bpf, iptables, nftables or ipvs",
    );
  } else if (!(PROXY_MODES as readonly string[]).includes(mode)) {
    report(
      'mode',
      `must be one of ${PROXY_MODES.join(', ')} or "" (bpf), got ${JSON.stringify(settings.mode)}`,
    );
  }
}

function checkPeriods({ report, notNegative }: Checks, settings: KubeProxySettings): void {
  const section = periodSectionOf(settings.mode);
  const syncPath = settings.syncPeriodSeconds === undefined ? `${section}.syncPeriod` : 'syncPeriod';
  const minSyncPath =
    settings.minSyncPeriodSeconds === undefined ? `${section}.minSyncPeriod` : 'minSyncPeriod';
  const sync = settings.syncPeriodSeconds ?? settings[section].syncPeriodSeconds;
  const minSync = settings.minSyncPeriodSeconds ?? settings[section].minSyncPeriodSeconds;
  if (sync <= 0) report(syncPath, `must be greater than 0, got ${d(sync)}`);
  notNegative(minSyncPath, minSync, d);
  if (sync > 0 && minSync > sync) {
    report(syncPath, `must be greater than or equal to ${minSyncPath} (${d(minSync)}), got ${d(sync)}`);
  }
  if (settings.configSyncPeriodSeconds <= 0) {
    report('configSyncPeriod', `must be greater than 0, got ${d(settings.configSyncPeriodSeconds)}`);
  }
}

function checkAddresses({ report, cidr }: Checks, settings: KubeProxySettings): void {
  if (!parseIP(settings.bindAddress)) {
    report('bindAddress', `must be a valid IP address, got ${JSON.stringify(settings.bindAddress)}`);
  }
  const hostPort = (path: string, text: string) => {
    if (text === '') return;
    const parts = splitHostPort(text);
    if (!parts) {
      report(path, `must be IP:port, got ${JSON.stringify(text)}`);
      return;
    }
    if (!parseIP(parts.host)) report(path, `must have a valid IP, got ${JSON.stringify(parts.host)}`);
    const port = /^\d+$/.test(parts.port) ? Number(parts.port) : Number.NaN;
    if (!(port >= 1 && port <= 65535))
      report(path, `must have a port in [1, 65535], got ${JSON.stringify(parts.port)}`);
  };
  hostPort('healthzBindAddress', settings.healthzBindAddress);
  hostPort('metricsBindAddress', settings.metricsBindAddress);

  const nodePortAddresses = settings.nodePortAddresses;
  for (const [i, text] of nodePortAddresses.entries()) {
    if (text === 'primary') {
      if (nodePortAddresses.length !== 1) {
        report(`nodePortAddresses[${i}]`, '"primary" cannot be combined with CIDRs');
      }
      break;
    }
    cidr(`nodePortAddresses[${i}]`, text);
  }
}

function checkMetricsAndLocalDetection({ report }: Checks, settings: KubeProxySettings): void {
  if (
    settings.showHiddenMetricsForVersion !== '' &&
    !/^\d+\.\d+$/.test(settings.showHiddenMetricsForVersion)
  ) {
    report(
      'showHiddenMetricsForVersion',
      `must be empty or a version such as "1.32", got ${JSON.stringify(settings.showHiddenMetricsForVersion)}`,
    );
  }

  const detectLocalMode = settings.detectLocalMode;
  if (detectLocalMode !== '' && !DETECT_LOCAL_MODES.includes(detectLocalMode)) {
    report(
      'detectLocalMode',
      `must be one of ${DETECT_LOCAL_MODES.join(', ')} or "" (ClusterCIDR), got ${JSON.stringify(detectLocalMode)}`,
    );
  }
  if (detectLocalMode === 'BridgeInterface' && settings.detectLocal.bridgeInterface === '') {
    report('detectLocal.bridgeInterface', 'must not be empty when detectLocalMode is BridgeInterface');
  }
  if (detectLocalMode === 'InterfaceNamePrefix' && settings.detectLocal.interfaceNamePrefix === '') {
    report(
      'detectLocal.interfaceNamePrefix',
      'must not be empty when detectLocalMode is InterfaceNamePrefix',
    );
  }

  if (settings.clusterCIDR !== '') {
    const families = new Set<string>();
    let valid = 0;
    for (const text of settings.clusterCIDR.split(',')) {
      const parsed = parseCIDR(text);
      if (!parsed) {
        report('clusterCIDR', `${JSON.stringify(text)} is not a valid CIDR`);
        continue;
      }
      valid++;
      families.add(parsed.family);
    }
    if (valid > families.size) report('clusterCIDR', 'must contain at most one IPv4 and one IPv6 CIDR');
  }
}

function checkLogging({ report }: Checks, settings: KubeProxySettings): void {
  const logging = settings.logging;
  if (logging.flushFrequencySeconds <= 0) {
    report('logging.flushFrequency', `must be greater than 0, got ${d(logging.flushFrequencySeconds)}`);
  }
  if (!LOG_FORMATS.includes(logging.format)) {
    report(
      'logging.format',
      `must be one of ${LOG_FORMATS.join(', ')}, got ${JSON.stringify(logging.format)}`,
    );
  }
  if (logging.verbosity > MAX_INT32)
    report('logging.verbosity', `must be at most ${MAX_INT32}, got ${logging.verbosity}`);
  if (logging.vmodule.length > 0 && logging.format !== 'text') {
    report('logging.vmodule', 'is only supported with the text log format');
  }
  logging.vmodule.forEach((entry, i) => {
    if (entry.filePattern === '') report(`logging.vmodule[${i}].filePattern`, 'must not be empty');
    if (/[=,]/.test(entry.filePattern))
      report(`logging.vmodule[${i}].filePattern`, 'must not contain "=" or ","');
    if (entry.verbosity > MAX_INT32)
      report(`logging.vmodule[${i}].verbosity`, `must be at most ${MAX_INT32}`);
  });
}

function checkBpf({ report }: Checks, settings: KubeProxySettings): void {
  const bpf = settings.bpf;
  // The table builder owns the rule (prime, and a size it can build).
  const maglevProblem = maglevTableSizeProblem(bpf.maglevTableSize);
  if (maglevProblem) report('bpf.maglevTableSize', maglevProblem);
  const interfacePatterns = (path: string, patterns: string[]) =>
    patterns.forEach((pattern, i) => {
      if (!isInterfacePattern(pattern)) {
        report(
          `${path}[${i}]`,
          `must be an interface name of at most ${MAX_INTERFACE_NAME} characters, optionally ending in "*", got ${JSON.stringify(pattern)}`,
        );
      }
    });
  interfacePatterns('bpf.podInterfaces', bpf.podInterfaces);
  interfacePatterns('bpf.externalInterfaces', bpf.externalInterfaces);
  if (!bpf.pinPath.startsWith('/'))
    report('bpf.pinPath', `must be an absolute path, got ${JSON.stringify(bpf.pinPath)}`);
  if (bpf.cgroupPath !== '' && !bpf.cgroupPath.startsWith('/'))
    report('bpf.cgroupPath', `must be an absolute path or empty, got ${JSON.stringify(bpf.cgroupPath)}`);
  for (const [map, size] of Object.entries(bpf.mapSizes)) {
    if (size < 1) report(`bpf.mapSizes.${map}`, `must be at least 1, got ${size}`);
  }
  if (bpf.conntrackGCIntervalSeconds < 1) {
    report('bpf.conntrackGCIntervalSeconds', `must be at least 1, got ${bpf.conntrackGCIntervalSeconds}`);
  }
}
