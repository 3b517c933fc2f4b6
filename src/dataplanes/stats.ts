// What the data planes report for the metrics: read by metrics/ once per scrape. The data planes
// implement these; keeping counters monotonic when an id is reused or the agent restarts is the
// provider's job (it knows the ids).

import type { IPFamily, Protocol } from '../model/types.js';

/** Counters arrive as the maps hold them (u64 as bigint) or already converted. */
export type CounterValue = number | bigint;

export interface TrafficCounters {
  newConnections: CounterValue;
  forwardPackets: CounterValue;
  forwardBytes: CounterValue;
  replyPackets: CounterValue;
  replyBytes: CounterValue;
  /** Packets to this service (or backend) dropped or rejected, for any reason. */
  droppedPackets: CounterValue;
}

export interface ServiceTraffic extends TrafficCounters {
  namespace: string;
  name: string;
  /** "" for an unnamed port. */
  portName: string;
  protocol: Protocol;
  family: IPFamily;
  /** Which entry the packets matched: ClusterIP, NodePort, LoadBalancer or ExternalIP. */
  frontend: string;
}

export interface BackendTraffic extends TrafficCounters {
  family: IPFamily;
  /** "ip:port" ("[ip6]:port"); backends are shared by every service port that selects them. */
  backend: string;
}

export interface BpfStats {
  services: ServiceTraffic[];
  /** Backends with counters of their own. */
  backends: BackendTraffic[];
  /** Backends whose id is past the per-CPU counter map (bpf.mapSizes.backendCounters): counted in
   * their services' series only. */
  backendsNotCounted: number;
  /** kbp_drops_v1, by reason name (e.g. "no_endpoints", "source_range"). */
  drops: { reason: string; packets: CounterValue; bytes: CounterValue }[];
  /** kbp_fragst_v1: IPv4 and IPv6 fragments the tc programs saw, by event ("first", "later_known",
   * "later_unknown": passed untouched, "record_failed"). */
  fragments: { event: string; packets: CounterValue }[];
  /** Every map the data plane owns, by pinned name. */
  maps: { name: string; entries: number; capacity: number }[];
  conntrackEntries: { family: IPFamily; entries: number }[];
  conntrackGC: {
    runs: CounterValue;
    scannedEntries: CounterValue;
    deletedEntries: CounterValue;
    seconds: number;
  };
}

export interface BpfStatsProvider {
  /** Called once per scrape. */
  read(): BpfStats | Promise<BpfStats>;
}

/**
 * Per-family counters a rule-mode data plane keeps (iptables: IptablesDataplane.stats). They are
 * read at scrape time; the data plane keeps them monotonic for the life of the process.
 */
export interface RuleModeStats {
  restoreFailures?: number;
  partialRestoreFailures?: number;
  /** Rules owned per table after the last successful sync. */
  rulesTotal?: { filter: number; nat: number };
  /** Rules written per table by the last successful sync. */
  rulesLast?: { filter: number; nat: number };
  nftablesSyncFailures?: number;
  nftablesCleanupFailures?: number;
}

/** iptables mode: the packets kube-proxy's nfacct counters saw (absent: no such counter). */
export interface NfacctPackets {
  ctStateInvalidDropped?: number | undefined;
  localhostNodePortsAccepted?: number | undefined;
}

export interface RuleModeStatsProvider {
  stats(family: IPFamily): RuleModeStats | undefined;
  /** iptables mode only, as kube-proxy registers these metrics only there. */
  nfacctPackets?(): Promise<NfacctPackets>;
}
