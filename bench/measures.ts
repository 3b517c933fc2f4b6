// What the benchmark measures, and the shape of every sample it records.

import { QUIET_COLLECTION_DELAY_MS } from '../src/host/heap.js';
import type { IPFamily } from '../src/net/ip.js';
import type { BenchMode } from './kernel-probe.js';
import type { Histogram, Summary } from './stats.js';

export type MeasureId =
  | 'coldStartMs'
  | 'firstSyncMs'
  | 'endpointChangeMs'
  | 'changeSyncMs'
  | 'agentRssMiB'
  | 'agentSettledRssMiB'
  | 'agentPeakRssMiB'
  | 'crrPerSec'
  | 'tcpConnectUs'
  | 'udpRttUs'
  | 'wrkReqPerSec'
  | 'cpuPerConnUs'
  | 'cpuPerConnSaturatedUs'
  | 'cpuPerRequestUs';

export interface MeasureInfo {
  title: string;
  unit: string;
  better: 'lower' | 'higher';
  /** Latencies pool every request of every run (histograms); the rest take one value per run. */
  pooled: boolean;
  /**
   * "data": measured with traffic through the Service (also in the direct mode, which has no
   * proxy: its tables compare each mode with direct); "control": the proxy's programming and memory.
   */
  plane: 'control' | 'data';
}

export const MEASURES: Record<MeasureId, MeasureInfo> = {
  coldStartMs: {
    title: 'Program N services from cold (proxy start to its first full sync)',
    unit: 'ms',
    better: 'lower',
    pooled: false,
    plane: 'control',
  },
  firstSyncMs: {
    title: "First full sync (the proxy's own sync duration)",
    unit: 'ms',
    better: 'lower',
    pooled: false,
    plane: 'control',
  },
  endpointChangeMs: {
    title: 'One EndpointSlice change to the kernel showing it',
    unit: 'ms',
    better: 'lower',
    pooled: false,
    plane: 'control',
  },
  changeSyncMs: {
    title: "Sync of one EndpointSlice change (the proxy's own sync duration)",
    unit: 'ms',
    better: 'lower',
    pooled: false,
    plane: 'control',
  },
  agentRssMiB: {
    title: 'Proxy memory after the first sync (VmRSS)',
    unit: 'MiB',
    better: 'lower',
    pooled: false,
    plane: 'control',
  },
  agentSettledRssMiB: {
    title: 'Proxy memory settled (VmRSS 13 s after the first sync)',
    unit: 'MiB',
    better: 'lower',
    pooled: false,
    plane: 'control',
  },
  agentPeakRssMiB: {
    title: 'Proxy peak memory up to its first sync (VmHWM)',
    unit: 'MiB',
    better: 'lower',
    pooled: false,
    plane: 'control',
  },
  crrPerSec: {
    title: 'New connections per second (connect, one request, close)',
    unit: 'conn/s',
    better: 'higher',
    pooled: false,
    plane: 'data',
  },
  tcpConnectUs: {
    title: 'First-packet latency of new TCP connections (connect time)',
    unit: 'µs',
    better: 'lower',
    pooled: true,
    plane: 'data',
  },
  udpRttUs: {
    title: 'UDP request/response, new socket (first packet) each',
    unit: 'µs',
    better: 'lower',
    pooled: true,
    plane: 'data',
  },
  wrkReqPerSec: {
    title: 'Keep-alive HTTP throughput (wrk, 2 connections)',
    unit: 'req/s',
    better: 'higher',
    pooled: false,
    plane: 'data',
  },
  cpuPerConnUs: {
    title: 'CPU per new connection at a fixed offered load (system time)',
    unit: 'µs',
    better: 'lower',
    pooled: false,
    plane: 'data',
  },
  cpuPerConnSaturatedUs: {
    title: 'CPU per new connection at saturation (system time)',
    unit: 'µs',
    better: 'lower',
    pooled: false,
    plane: 'data',
  },
  cpuPerRequestUs: {
    title: 'CPU per keep-alive request at saturation (system time, wrk)',
    unit: 'µs',
    better: 'lower',
    pooled: false,
    plane: 'data',
  },
};

/** Settled memory is read this long after the first sync: past our agent's collection once quiet
 * (src/host/heap.ts), with a margin for the pages it frees to be unmapped. */
export const SETTLED_AFTER_FIRST_SYNC_MS = QUIET_COLLECTION_DELAY_MS + 3000;

export const MEASURE_IDS = Object.keys(MEASURES) as MeasureId[];

export interface Sample {
  measure: MeasureId;
  mode: BenchMode;
  /** The measured Services' family (absent from runs before IPv6 cells: IPv4). */
  family?: IPFamily;
  services: number;
  rep: number;
  /** One value per run (for pooled measures: that run's median). */
  value: number;
  /** Pooled measures: this run's distribution and its own median/p99. */
  summary?: Summary;
  histogram?: Histogram;
  /** Requests that failed (timeouts, resets) in this run; never silently dropped. */
  errors?: number;
  attempts?: number;
  /**
   * iptables modes, on the new-connection sample: where the measured Service's rule sits in nat
   * KUBE-SERVICES (1-based) among its rules. Ours writes the Services in name order (the measured
   * one last); the real kube-proxy in Go map order, so its position differs run to run.
   */
  kubeServicesPosition?: { rule: number; of: number };
  /** Modes whose rules go through iptables (and ipvs's companion rules): the backend that held them. */
  iptablesBackend?: string;
  /** The paced load's CPU sample: the connections per second it reached (of the offered rate). */
  achievedPerSec?: number;
}

export interface BpfCostSample {
  program: string;
  /** The packet's family (absent from runs before the IPv6 rows: IPv4). */
  family?: IPFamily;
  /** Services in the map. */
  services: number;
  round: number;
  nsPerPacket: number;
  /** The trivial program measured the same way, whose median this row's is reported against
   * (absent from runs before the floor ratios). */
  floor?: string;
}

/** A cell that could not be measured (agent failed to start, traffic all failing): kept, with why. */
export interface CellFailure {
  mode: BenchMode;
  family?: IPFamily;
  services: number;
  rep: number;
  error: string;
}
