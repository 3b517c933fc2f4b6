// What the soak's samples of a node hold, and how the agent's /metrics text is read into one: the
// Prometheus text format's samples, and the few series a sample keeps.

import { MAPS } from '../../src/dataplanes/bpf/layout.js';

/** Maps the agent's plan sizes: at the end they hold exactly what its plan says. */
export const PLANNED_MAPS = ['svc4', 'svc6', 'slots', 'backends4', 'backends6'] as const;
/**
 * Maps of flows, datagrams and sockets: empty once traffic has stopped and their timeouts have
 * passed. The socket hooks' reverse maps (kbp_sockrev*) and their index lose a socket's entries
 * when it closes (kbp_sock_release): every client socket is closed by then.
 */
export const FLOW_MAPS = [
  'ct4Tcp',
  'ct4Any',
  'ct6Tcp',
  'ct6Any',
  'affinity4',
  'affinity6',
  'fragments4',
  'fragments6',
  'sockRev4',
  'sockRev6',
  'sockIdx',
] as const;
/** The maps whose occupancy the soak follows (arrays and per-CPU counters have fixed sizes). */
export const COUNTED_MAPS = [
  ...PLANNED_MAPS,
  'maglev',
  'affinityMatch',
  ...FLOW_MAPS,
] as const satisfies readonly (keyof typeof MAPS)[];
export type CountedMap = (typeof COUNTED_MAPS)[number];

export interface FdCounts {
  total: number;
  bpfMaps: number;
  bpfProgs: number;
  bpfLinks: number;
  sockets: number;
}

export interface NodeSample {
  /** Date.now() */
  t: number;
  node: string;
  pid: number | null;
  /** The agent's metrics answered. */
  up: boolean;
  /** process_start_time_seconds: with the pid, which agent process this is (pids wrap: a node's
   * pid_max is often 32768, and an hour of the soak's own commands goes through more). */
  startedAt?: number;
  /** The machine's 1-minute load average (/proc/loadavg) when the sample was taken: the soak shares
   * two cores with whatever else runs, and the report shows how busy they were. */
  load1?: number;
  rssBytes?: number;
  /** nodejs_eventloop_lag_p50_seconds / _p99_: between two scrapes, with prom-client's 10 ms
   * timer resolution included (an idle loop reads about 10.1 ms). */
  lagP50Seconds?: number;
  lagP99Seconds?: number;
  timers?: number;
  plan?: Partial<Record<CountedMap, number>>;
  gcRuns?: number;
  /** kubeproxy_network_programming_duration_seconds: cumulative count per upper bound, and +Inf;
   * only the bounds whose count differs from the bound below (compactBuckets). */
  programming?: { le: number; count: number }[];
  fds?: FdCounts;
  kernel?: Partial<Record<CountedMap, number>>;
  /** Counted maps found at their capacity (max_entries) in this sample: an LRU map that full evicts
   * live flows, which the end, once the flows drained, would never show. */
  full?: CountedMap[];
  pins?: number;
  reservedPorts?: string;
  /** kube_bpf_proxy_drops_total by reason (bpf mode): which rejects and drops a failure met. */
  drops?: Record<string, number>;
  /** ICMP and ICMPv6 destination unreachables sent (Icmp OutDestUnreachs, Icmp6OutDestUnreachs)
   * by the node's namespaces and its pods': who answered a datagram with "port unreachable". */
  unreachSent?: Record<string, { v4: number; v6: number }>;
}

interface MetricLine {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (comments skipped). */
export function parseMetrics(text: string): MetricLine[] {
  const out: MetricLine[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** Icmp OutDestUnreachs and Icmp6OutDestUnreachs, from /proc/net/snmp and /proc/net/snmp6 read in one. */
export function unreachablesSent(text: string): { v4: number; v6: number } {
  const v6 = /^Icmp6OutDestUnreachs\s+(\d+)/m.exec(text);
  const icmp = text.split('\n').filter((l) => l.startsWith('Icmp:'));
  const names = icmp[0]?.split(/\s+/) ?? [];
  const values = icmp[1]?.split(/\s+/) ?? [];
  const at = names.indexOf('OutDestUnreachs');
  return { v4: at < 0 ? 0 : Number(values[at]), v6: Number(v6?.[1] ?? 0) };
}

/**
 * A cumulative histogram without the bounds that add nothing: each kept bound's count differs from
 * the kept bound below it, and +Inf is always kept. kube-proxy's network programming histogram has
 * about 60 bounds, nearly all with the count of the one below; an hour's samples keep a few each.
 * The count within any bound is the count of the largest kept bound at or below it (countWithin).
 */
export function compactBuckets(
  buckets: readonly { le: number; count: number }[],
): { le: number; count: number }[] {
  const sorted = [...buckets].sort((a, b) => a.le - b.le);
  return sorted.filter(
    (b, i) => b.le === Number.POSITIVE_INFINITY || b.count !== (i === 0 ? 0 : sorted[i - 1]!.count),
  );
}

/** Observations at or below `le` in a histogram compacted by compactBuckets. */
export function countWithin(buckets: readonly { le: number; count: number }[], le: number): number {
  return buckets.filter((b) => b.le <= le).at(-1)?.count ?? 0;
}

/** The facts a sample takes from the agent's metrics. */
export function readAgentMetrics(text: string): Omit<NodeSample, 't' | 'node' | 'pid' | 'up'> {
  const lines = parseMetrics(text);
  const one = (name: string, labels: Record<string, string> = {}) =>
    lines.find((l) => l.name === name && Object.entries(labels).every(([k, v]) => l.labels[k] === v))?.value;
  const plan: Partial<Record<CountedMap, number>> = {};
  for (const key of COUNTED_MAPS) {
    const value = one('kube_bpf_proxy_map_entries', { map: MAPS[key].name });
    if (value !== undefined) plan[key] = value;
  }
  const buckets = new Map<number, number>();
  for (const l of lines.filter((x) => x.name === 'kubeproxy_network_programming_duration_seconds_bucket')) {
    const le = l.labels.le === '+Inf' ? Number.POSITIVE_INFINITY : Number(l.labels.le);
    buckets.set(le, (buckets.get(le) ?? 0) + l.value);
  }
  const gcRuns = one('kube_bpf_proxy_conntrack_gc_runs_total');
  const drops: Record<string, number> = {};
  for (const l of lines.filter((x) => x.name === 'kube_bpf_proxy_drops_total'))
    drops[l.labels.reason ?? ''] = l.value;
  const startedAt = one('process_start_time_seconds');
  return {
    ...(startedAt !== undefined ? { startedAt } : {}),
    rssBytes: one('process_resident_memory_bytes'),
    lagP50Seconds: one('nodejs_eventloop_lag_p50_seconds'),
    lagP99Seconds: one('nodejs_eventloop_lag_p99_seconds'),
    timers: one('nodejs_active_resources', { type: 'Timeout' }) ?? 0,
    plan,
    ...(gcRuns !== undefined ? { gcRuns } : {}),
    ...(Object.keys(drops).length > 0 ? { drops } : {}),
    programming: compactBuckets([...buckets].map(([le, count]) => ({ le, count }))),
  };
}
