// The /configz view: kube-proxy serves {"kubeproxy.config.k8s.io": <configuration>}. Ours is the
// resolved configuration written back in v1alpha1 vocabulary (camelCase, Go duration strings,
// every default filled in), so it can be read by a person, diffed against a ConfigMap, and loaded
// again as a file. Only the mode sections the running mode reads are shown, holding the values in
// force.

import { formatGoDuration } from './duration.js';
import { API_VERSION, KIND } from './file.js';
import type { ProxyConfig } from './types.js';

export const CONFIGZ_GROUP = 'kubeproxy.config.k8s.io';

export function configzView(config: ProxyConfig): Record<string, unknown> {
  const d = formatGoDuration;
  const periods = { syncPeriod: d(config.syncPeriodSeconds), minSyncPeriod: d(config.minSyncPeriodSeconds) };
  const masquerade = { masqueradeAll: config.masqueradeAll, masqueradeBit: config.masqueradeBit };
  const iptables = { ...masquerade, localhostNodePorts: config.localhostNodePorts };
  const modeSections: Record<string, unknown> =
    config.mode === 'nftables'
      ? { nftables: { ...masquerade, ...periods } }
      : config.mode === 'ipvs'
        ? {
            iptables,
            ipvs: {
              ...periods,
              scheduler: config.ipvs.scheduler,
              excludeCIDRs: config.ipvs.excludeCIDRs,
              strictARP: config.ipvs.strictARP,
              tcpTimeout: d(config.ipvs.tcpTimeoutSeconds),
              tcpFinTimeout: d(config.ipvs.tcpFinTimeoutSeconds),
              udpTimeout: d(config.ipvs.udpTimeoutSeconds),
            },
          }
        : { iptables: { ...iptables, ...periods } };
  const ct = config.conntrack;
  return {
    [CONFIGZ_GROUP]: {
      apiVersion: API_VERSION,
      kind: KIND,
      featureGates: config.featureGates,
      clientConnection: config.clientConnection,
      logging: {
        format: config.logging.format,
        flushFrequency: d(config.logging.flushFrequencySeconds),
        verbosity: config.logging.verbosity,
      },
      hostnameOverride: config.hostnameOverride,
      bindAddress: config.bindAddress,
      healthzBindAddress: config.healthzBindAddress,
      metricsBindAddress: config.metricsBindAddress,
      bindAddressHardFail: config.bindAddressHardFail,
      enableProfiling: config.enableProfiling,
      mode: config.mode,
      ...modeSections,
      detectLocalMode: config.detectLocalMode,
      detectLocal: config.detectLocal,
      clusterCIDR: config.clusterCIDRs.join(','),
      nodePortAddresses: config.nodePortAddresses,
      oomScoreAdj: config.oomScoreAdj,
      conntrack: {
        maxPerCore: ct.maxPerCore,
        min: ct.min,
        tcpEstablishedTimeout: d(ct.tcpEstablishedTimeoutSeconds),
        tcpCloseWaitTimeout: d(ct.tcpCloseWaitTimeoutSeconds),
        tcpBeLiberal: ct.tcpBeLiberal,
        udpTimeout: d(ct.udpTimeoutSeconds),
        udpStreamTimeout: d(ct.udpStreamTimeoutSeconds),
      },
      configSyncPeriod: d(config.configSyncPeriodSeconds),
      bpf: config.bpf,
    },
  };
}
