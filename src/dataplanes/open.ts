// Opens the data plane that --proxy-mode names: each mode's open<Mode>Dataplane, with what the
// metrics read from it and the conntrack reconcile the rule modes need.

import type { Dataplane } from '../brain/dataplane.js';
import type { NodeEnv } from '../brain/types.js';
import type { ProxyConfig, ProxyMode } from '../config/types.js';
import { runCommand } from '../host/command.js';
import type { Logger } from '../logger.js';
import { openBpfDataplane } from './bpf/dataplane.js';
import { ConntrackReconciler, withConntrackCleanup } from './conntrack.js';
import type { BpfStatsProvider, RuleModeStatsProvider } from './stats.js';

export interface OpenedDataplane {
  dataplane: Dataplane;
  /** What the host's iptables can do (the iptables renderer needs it; other modes report it as probed). */
  iptables: NodeEnv['iptables'];
  /** Rule modes: their failure and rule counters, read by the metrics at scrape time. */
  ruleStats?: RuleModeStatsProvider;
  /** bpf: traffic counters and map fill levels, read by the metrics at scrape time. */
  bpfStats?: BpfStatsProvider;
}

type Opener = (config: ProxyConfig, log: Logger) => Promise<OpenedDataplane>;

/** The rule modes leave stale UDP flows to netfilter's conntrack, so they reconcile it after syncs. */
const reconciled = (dataplane: Dataplane, log: Logger): Dataplane =>
  withConntrackCleanup(dataplane, new ConntrackReconciler({ exec: runCommand, log }));

// The rule modes' code is imported when such a mode opens (the three cost ~60 ms of start-up).
// bpf's is not: its open must start the BPF load within the call, before run.ts reads the source.
const OPENERS: Record<ProxyMode, Opener> = {
  bpf: async (config, log) => {
    const dataplane = await openBpfDataplane(config, log);
    // The bpf data plane writes no iptables rules: what the host's iptables can do does not matter.
    return { dataplane, iptables: { randomFully: true, nfacct: false }, bpfStats: dataplane };
  },
  iptables: async (config, log) => {
    const { openIptablesDataplane } = await import('./iptables/dataplane.js');
    const dataplane = await openIptablesDataplane({ config, log });
    log.info({ backend: dataplane.backend, ...dataplane.capabilities }, 'iptables backend chosen');
    return { dataplane: reconciled(dataplane, log), iptables: dataplane.capabilities, ruleStats: dataplane };
  },
  ipvs: async (config, log) => {
    const { openIpvsDataplane } = await import('./ipvs/dataplane.js');
    const dataplane = await openIpvsDataplane({ config });
    log.info(
      { backend: dataplane.backend, ...dataplane.capabilities },
      'iptables backend chosen for the ipvs companion rules',
    );
    return { dataplane: reconciled(dataplane, log), iptables: dataplane.capabilities, ruleStats: dataplane };
  },
  nftables: async (_config, log) => {
    const { openNftablesDataplane } = await import('./nftables/dataplane.js');
    const dataplane = await openNftablesDataplane();
    // nftables mode masquerades fully-random and has no nfacct counters, whatever iptables can do.
    return {
      dataplane: reconciled(dataplane, log),
      iptables: { randomFully: true, nfacct: false },
      ruleStats: dataplane,
    };
  },
};

export async function openDataplane(config: ProxyConfig, log: Logger): Promise<OpenedDataplane> {
  return OPENERS[config.mode](config, log.child({ dataplane: config.mode }));
}
