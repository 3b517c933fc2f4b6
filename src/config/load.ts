// Entry point of the config module: file text + flags → a validated ProxyConfig, or every problem.
// Same pipeline as kube-proxy: decode (strict) → default → flags on top → validate → resolve the
// mode-specific sections into one flat configuration.

import { readFile } from 'node:fs/promises';
import type { Problem } from './decode.js';
import { applyKubeProxyDefaults, type KubeProxySettings } from './defaults.js';
import { decodeConfigurationFile, type KubeProxyConfigurationFile } from './file.js';
import { applyConfigFlags, type ConfigFlags } from './flags.js';
import { ineffectiveSettingWarnings } from './ineffective.js';
import { effectiveMode, masqueradeSectionOf, periodSectionOf } from './mode.js';
import type { DetectLocalMode, ProxyConfig, ProxyMode } from './types.js';
import { validateSettings } from './validate.js';

export type LoadResult =
  /** `warnings`: accepted settings that take no effect here, for the agent to log at start-up. */
  { ok: true; config: ProxyConfig; warnings: string[] } | { ok: false; problems: Problem[] };

export interface LoadInput {
  /** The KubeProxyConfiguration text (YAML or JSON); absent means flags and defaults only. */
  fileText?: string;
  /** Names the file in problems about the document as a whole. */
  fileName?: string;
  flags: ConfigFlags;
}

/** Resolves validated settings into the flat configuration, picking the sections the mode reads. */
export function toProxyConfig(settings: KubeProxySettings): ProxyConfig {
  const mode = effectiveMode(settings.mode) as ProxyMode;
  const periods = settings[periodSectionOf(mode)];
  const masquerade = settings[masqueradeSectionOf(mode)];
  return {
    mode,
    featureGates: { ...settings.featureGates },
    hostnameOverride: settings.hostnameOverride,
    bindAddress: settings.bindAddress,
    healthzBindAddress: settings.healthzBindAddress,
    metricsBindAddress: settings.metricsBindAddress,
    enableProfiling: settings.enableProfiling,
    bindAddressHardFail: settings.bindAddressHardFail,
    oomScoreAdj: settings.oomScoreAdj,
    logging: {
      format: settings.logging.format as ProxyConfig['logging']['format'],
      verbosity: settings.logging.verbosity,
      flushFrequencySeconds: settings.logging.flushFrequencySeconds,
    },
    clusterCIDRs: settings.clusterCIDR === '' ? [] : settings.clusterCIDR.split(','),
    // kube-proxy's nftables mode defaults an empty list to the node's primary IPs (KEP-3866).
    nodePortAddresses:
      mode === 'nftables' && settings.nodePortAddresses.length === 0
        ? ['primary']
        : [...settings.nodePortAddresses],
    detectLocalMode: (settings.detectLocalMode || 'ClusterCIDR') as DetectLocalMode,
    detectLocal: { ...settings.detectLocal },
    masqueradeBit: masquerade.masqueradeBit,
    masqueradeAll: masquerade.masqueradeAll,
    // nftables mode never accepts NodePort connections on localhost.
    localhostNodePorts: mode === 'nftables' ? false : settings.iptables.localhostNodePorts,
    syncPeriodSeconds: settings.syncPeriodSeconds ?? periods.syncPeriodSeconds,
    minSyncPeriodSeconds: settings.minSyncPeriodSeconds ?? periods.minSyncPeriodSeconds,
    configSyncPeriodSeconds: settings.configSyncPeriodSeconds,
    ipvs: {
      scheduler: settings.ipvs.scheduler || 'rr',
      excludeCIDRs: [...settings.ipvs.excludeCIDRs],
      strictARP: settings.ipvs.strictARP,
      tcpTimeoutSeconds: settings.ipvs.tcpTimeoutSeconds,
      tcpFinTimeoutSeconds: settings.ipvs.tcpFinTimeoutSeconds,
      udpTimeoutSeconds: settings.ipvs.udpTimeoutSeconds,
    },
    conntrack: { ...settings.conntrack },
    clientConnection: { ...settings.clientConnection },
    master: settings.master,
    bpf: {
      ...settings.bpf,
      podInterfaces: [...settings.bpf.podInterfaces],
      externalInterfaces: [...settings.bpf.externalInterfaces],
      mapSizes: { ...settings.bpf.mapSizes },
    },
  };
}

export function loadConfig(input: LoadInput): LoadResult {
  const problems: Problem[] = [];
  let file: KubeProxyConfigurationFile = {};
  if (input.fileText !== undefined) {
    const decoded = decodeConfigurationFile(input.fileText, input.fileName ?? 'config');
    file = decoded.file;
    problems.push(...decoded.problems);
  }
  const settings = applyKubeProxyDefaults(file);
  const origins = applyConfigFlags(settings, input.flags, problems);
  problems.push(...validateSettings(settings, origins));
  if (problems.length > 0) return { ok: false, problems };
  const warnings = ineffectiveSettingWarnings(file, settings, origins);
  return { ok: true, config: toProxyConfig(settings), warnings };
}

/** Reads `path` (when given) and loads it with the flags on top. */
export async function loadConfigFile(path: string | undefined, flags: ConfigFlags): Promise<LoadResult> {
  if (path === undefined) return loadConfig({ flags });
  let fileText: string;
  try {
    fileText = await readFile(path, 'utf8');
  } catch (error) {
    return {
      ok: false,
      problems: [{ path: '--config', message: `cannot read ${path}: ${(error as Error).message}` }],
    };
  }
  return loadConfig({ fileText, fileName: path, flags });
}

/** One line per problem, as the CLI prints them. */
export function formatProblems(problems: readonly Problem[]): string {
  return problems.map((p) => `${p.path}: ${p.message}`).join('\n');
}
