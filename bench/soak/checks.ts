// The soak's verdicts, as pure functions of what it recorded: the traffic ledger, the churn's
// events and pods, and the nodes' samples. Each check passes or fails with one line saying why.

import type { ChurnEvent, ChurnKind, Incarnation } from './churn.js';
import { countWithin, FLOW_MAPS, type NodeSample, PLANNED_MAPS } from './metrics.js';
import type { BackendSeen, Failure, Stream, StreamPace } from './traffic.js';

export interface CheckResult {
  name: string;
  passed: boolean;
  detail: string;
}

/** How far the last half's median may lie from the first half's. */
export const FLAT_TOLERANCE = 0.05;
/** Samples this soon after an agent started are left out of the flatness checks: under the soak's
 * traffic an agent's RSS grows for its first two minutes or so (92 → 104 MiB), then stays. */
export const WARM_UP_MS = 120_000;
/** Slack for file descriptors and timers in flight at the moment of a sample (sockets, a request's timer). */
const FD_SLACK = 8;
/** The client stamps an answer when it arrives, and the soak a deletion once the API server has
 * answered: an answer from a pod killed at the end of its grace period may read this much later. */
const STAMP_SLACK_MS = 500;
const TIMER_SLACK = 5;

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
};

/**
 * A failure is excused only on a long-lived flow (kept-alive connection, connected UDP socket)
 * whose backend had been deleted before it, and no later than `flowEndMs` after that deletion: the
 * flow ends with its pod, as it would with kube-proxy, and then the next request must find a live
 * backend (once the pod is gone after its grace period, the proxy forgets the flow: kube-proxy
 * deletes a UDP flow's conntrack entry when its endpoint goes). Without the bound, a connected
 * socket stuck on a dead pod would fail every request for the rest of an hour, each one excused by
 * the same deletion. Every other failure counts: the stable Service's backends stay ready throughout
 * and the churned one always keeps Ready endpoints.
 */
export function excused(
  failure: Failure,
  stream: Stream,
  removedAt: ReadonlyMap<string, number>,
  flowEndMs: number,
): boolean {
  if (stream.kind !== 'keepalive' && stream.kind !== 'udp-stream') return false;
  const removed = failure.lastBackend ? removedAt.get(failure.lastBackend) : undefined;
  return removed !== undefined && removed <= failure.at && failure.at <= removed + flowEndMs;
}

export function removalTimes(incarnations: readonly Incarnation[]): Map<string, number> {
  return new Map(incarnations.flatMap((i) => (i.removedAt === null ? [] : [[i.name, i.removedAt]])));
}

/** The failures the check counts: all but the excused ones. */
export function countedFailures(
  streams: readonly Stream[],
  failures: readonly Failure[],
  incarnations: readonly Incarnation[],
  flowEndMs: number,
): Failure[] {
  const removedAt = removalTimes(incarnations);
  return failures.filter((f) => !excused(f, streams[f.stream]!, removedAt, flowEndMs));
}

/** How long after its pod's deletion each excused failure came, the latest: what the bound allows. */
export function latestExcused(
  streams: readonly Stream[],
  failures: readonly Failure[],
  incarnations: readonly Incarnation[],
  flowEndMs: number,
): number {
  const removedAt = removalTimes(incarnations);
  const after = failures
    .filter((f) => excused(f, streams[f.stream]!, removedAt, flowEndMs))
    .map((f) => f.at - (removedAt.get(f.lastBackend ?? '') ?? f.at));
  return Math.max(0, ...after);
}

export function checkFailedRequests(
  streams: readonly Stream[],
  requests: readonly number[],
  failures: readonly Failure[],
  incarnations: readonly Incarnation[],
  flowEndMs: number,
): CheckResult {
  const total = requests.reduce((a, b) => a + b, 0);
  const counted = countedFailures(streams, failures, incarnations, flowEndMs);
  const excusedCount = failures.length - counted.length;
  const latest = latestExcused(streams, failures, incarnations, flowEndMs);
  const byStream = new Map<string, number>();
  for (const f of counted) {
    const key = `${streams[f.stream]?.name}: ${f.error}`;
    byStream.set(key, (byStream.get(key) ?? 0) + 1);
  }
  const worst = [...byStream]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 5)
    .map(([k, n]) => `${n}× ${k}`);
  return {
    name: 'zero failed requests to backends that stayed ready',
    passed: total > 0 && counted.length === 0,
    detail: `${counted.length} of ${total} requests failed (${excusedCount} more on long-lived flows whose pod was deleted${excusedCount ? `, the latest ${(latest / 1000).toFixed(1)} s after its deletion, within ${flowEndMs / 1000} s` : ''})${worst.length ? `: ${worst.join('; ')}` : ''}`,
  };
}

/**
 * Every stream kept sending from the start to the end of the churn: no gap between two of its
 * requests' ends (nor from the start to its first, nor from its last to the end) longer than
 * `boundMs`, and no client process that exited before it was stopped. A client that died or hung
 * would otherwise stop adding failures, and the failure count would read as clean.
 */
export function checkStreamsRan(
  streams: readonly Stream[],
  pace: readonly StreamPace[],
  end: number,
  boundMs: number,
  clientExits: readonly string[],
): CheckResult {
  const gaps = streams.map((s, i) => {
    const p = pace[i];
    const tail = p ? end - p.last : Number.POSITIVE_INFINITY;
    const longest = Math.max(p?.longest ?? Number.POSITIVE_INFINITY, tail);
    const at = p && tail > p.longest ? p.last : (p?.longestAt ?? 0);
    return { name: s.name, longest, at };
  });
  const worst = gaps.reduce(
    (a, b) => (b.longest > a.longest ? b : a),
    gaps[0] ?? { name: '-', longest: 0, at: 0 },
  );
  const stalled = gaps.filter((g) => g.longest > boundMs);
  return {
    name: 'every stream kept sending until the end',
    passed: streams.length > 0 && stalled.length === 0 && clientExits.length === 0,
    detail: `the longest pause between two requests' ends ${(worst.longest / 1000).toFixed(1)} s (${worst.name}; bound ${boundMs / 1000} s)${stalled.length ? `; stalled: ${stalled.map((g) => `${g.name} ${(g.longest / 1000).toFixed(1)} s`).join(', ')}` : ''}${clientExits.length ? `; clients that exited: ${clientExits.join('; ')}` : ''}`,
  };
}

export function checkLateAnswers(
  backends: ReadonlyMap<string, BackendSeen>,
  incarnations: readonly Incarnation[],
  graceMs: number,
): CheckResult {
  let latest = 0;
  const late: string[] = [];
  for (const inc of incarnations) {
    const seen = backends.get(inc.name);
    if (inc.removedAt === null || !seen || seen.last < inc.removedAt) continue;
    const after = seen.last - inc.removedAt;
    latest = Math.max(latest, after);
    if (after > graceMs + STAMP_SLACK_MS) late.push(`${inc.name} ${(after / 1000).toFixed(1)} s after`);
  }
  const removed = incarnations.filter((i) => i.removedAt !== null).length;
  return {
    name: 'no request reaches a backend later than the termination grace after its removal',
    passed: late.length === 0,
    detail: `${removed} pods deleted; the latest answer from one came ${(latest / 1000).toFixed(1)} s after its deletion (grace ${graceMs / 1000} s)${late.length ? `; late: ${late.join(', ')}` : ''}`,
  };
}

/** One agent process: its node, its pid and its start time (a pid alone may come back). */
export const processKey = (s: NodeSample): string => `${s.node}/${s.pid}/${s.startedAt ?? ''}`;

/** The last sample of each agent process: its histograms are cumulative over its life. */
function lastPerProcess(samples: readonly NodeSample[]): NodeSample[] {
  const last = new Map<string, NodeSample>();
  for (const s of samples) if (s.up && s.pid !== null) last.set(processKey(s), s);
  return [...last.values()];
}

/** Observations of kube-proxy's network programming histogram above `boundSeconds` (a bucket bound). */
export function programmingOverBound(
  samples: readonly NodeSample[],
  boundSeconds: number,
): {
  total: number;
  over: number;
} {
  let total = 0;
  let over = 0;
  for (const s of lastPerProcess(samples)) {
    const all = countWithin(s.programming ?? [], Number.POSITIVE_INFINITY);
    const within = countWithin(s.programming ?? [], boundSeconds);
    total += all;
    over += all - within;
  }
  return { total, over };
}

const SERVICE_KINDS: readonly ChurnKind[] = ['service-create', 'service-change', 'service-delete'];
/** An error of the probe itself (the data plane never showed the change), not of the API server. */
const PROBE_ERROR = /did not show it/;

export function checkProgramming(
  events: readonly ChurnEvent[],
  samples: readonly NodeSample[],
  boundSeconds: number,
): CheckResult {
  const probed = events.filter(
    (e) => SERVICE_KINDS.includes(e.kind) && (e.ok || PROBE_ERROR.test(e.error ?? '')),
  );
  const slow = probed.filter((e) => !e.ok || (e.ms ?? 0) > boundSeconds * 1000);
  const slowest = Math.max(0, ...probed.map((e) => e.ms ?? 0));
  const { total, over } = programmingOverBound(samples, boundSeconds);
  return {
    name: 'every change reaches the kernel within its bound',
    passed: probed.length > 0 && slow.length === 0 && over === 0,
    detail: `${probed.length} Service changes seen by a pod's traffic, the slowest after ${(slowest / 1000).toFixed(1)} s, ${slow.length} over ${boundSeconds} s; kubeproxy_network_programming_duration_seconds: ${over} of ${total} observations over ${boundSeconds} s`,
  };
}

/**
 * What is wrong with a node's maps at the end: each planned map as planned, the {service, backend}
 * pairs one per slot (writer.ts writes a pair for each planned slot), flows gone, Maglev as at the
 * start (the same Services are left at the end).
 */
export function mapProblems(baseline: NodeSample, final: NodeSample): string[] {
  const problems: string[] = [];
  const kernel = final.kernel ?? {};
  for (const key of PLANNED_MAPS) {
    if (kernel[key] !== final.plan?.[key]) problems.push(`${key} ${kernel[key]} (plan ${final.plan?.[key]})`);
  }
  if (kernel.affinityMatch !== kernel.slots)
    problems.push(`affinityMatch ${kernel.affinityMatch} (slots ${kernel.slots})`);
  for (const key of FLOW_MAPS) if ((kernel[key] ?? 0) !== 0) problems.push(`${key} ${kernel[key]}`);
  if (kernel.maglev !== baseline.kernel?.maglev)
    problems.push(`maglev ${kernel.maglev} (at the start ${baseline.kernel?.maglev})`);
  return problems;
}

/** The maps found full during the run, by node, with the first time (minutes from `from`). */
export function fullMaps(samples: readonly NodeSample[], from: number): string[] {
  const first = new Map<string, number>();
  for (const s of samples)
    for (const map of s.full ?? []) if (!first.has(`${s.node}: ${map}`)) first.set(`${s.node}: ${map}`, s.t);
  return [...first].map(([what, t]) => `${what} full at ${((t - from) / 60_000).toFixed(1)} min`);
}

export function checkMaps(
  baselines: readonly NodeSample[],
  finals: readonly NodeSample[],
  samples: readonly NodeSample[],
  from: number,
): CheckResult {
  const problems = finals.flatMap((final) => {
    const baseline = baselines.find((b) => b.node === final.node);
    return baseline
      ? mapProblems(baseline, final).map((p) => `${final.node}: ${p}`)
      : [`${final.node}: no baseline`];
  });
  problems.push(...fullMaps(samples, from));
  const summary = finals
    .map((f) => `${f.node} ${PLANNED_MAPS.map((k) => `${k} ${f.kernel?.[k]}`).join(', ')}`)
    .join('; ');
  return {
    name: 'BPF map occupancy returns to what the final state needs',
    passed: finals.length > 0 && problems.length === 0,
    detail: problems.length
      ? problems.join('; ')
      : `${summary}; flows, affinity, fragments and socket reverse entries empty; no map full during the run`,
  };
}

/** What grew on a node between its first settled sample and its last: pins, fds, timers, the port reservation. */
export function leakProblems(baseline: NodeSample, final: NodeSample, bpf: boolean): string[] {
  const problems: string[] = [];
  const b = baseline.fds;
  const f = final.fds;
  if (!b || !f) problems.push('no file descriptor counts');
  else {
    for (const kind of ['bpfMaps', 'bpfProgs', 'bpfLinks'] as const)
      if (f[kind] !== b[kind]) problems.push(`${kind} fds ${b[kind]} → ${f[kind]}`);
    if (f.total > b.total + FD_SLACK) problems.push(`fds ${b.total} → ${f.total}`);
  }
  if ((final.timers ?? 0) > (baseline.timers ?? 0) + TIMER_SLACK)
    problems.push(`timers ${baseline.timers} → ${final.timers}`);
  if (bpf && final.pins !== baseline.pins) problems.push(`pinned objects ${baseline.pins} → ${final.pins}`);
  if (bpf && final.reservedPorts !== baseline.reservedPorts)
    problems.push(`ip_local_reserved_ports "${baseline.reservedPorts}" → "${final.reservedPorts}"`);
  return problems;
}

export function checkLeaks(
  baselines: readonly NodeSample[],
  finals: readonly NodeSample[],
  bpf: boolean,
  netns: { before: number; after: number },
): CheckResult {
  const problems = finals.flatMap((final) => {
    const baseline = baselines.find((b) => b.node === final.node);
    return baseline ? leakProblems(baseline, final, bpf).map((p) => `${final.node}: ${p}`) : [];
  });
  if (netns.after !== netns.before) problems.push(`network namespaces ${netns.before} → ${netns.after}`);
  const summary = finals
    .map(
      (f) =>
        `${f.node} ${f.pins ?? '-'} pins, ${f.fds?.total} fds (${f.fds?.bpfLinks} links), ${f.timers} timers`,
    )
    .join('; ');
  return {
    name: 'no pinned object, link, netns, fd or timer leaks',
    passed: finals.length > 0 && problems.length === 0,
    detail: problems.length ? problems.join('; ') : `${summary}; ${netns.after} network namespaces`,
  };
}

/** The warm samples of a field: the agent up and past its warm-up, per node. */
export function warmSeries(samples: readonly NodeSample[], field: 'rssBytes' | 'lagP50Seconds') {
  const started = new Map<string, number>();
  const out: { node: string; t: number; value: number }[] = [];
  for (const s of samples) {
    if (!s.up || s.pid === null) continue;
    const key = processKey(s);
    if (!started.has(key)) started.set(key, s.t);
    const value = s[field];
    if (value !== undefined && s.t - (started.get(key) ?? s.t) >= WARM_UP_MS)
      out.push({ node: s.node, t: s.t, value });
  }
  return out;
}

/** The last half's median against the first half's, per node, over [from, to]. */
export function checkFlat(
  samples: readonly NodeSample[],
  field: 'rssBytes' | 'lagP50Seconds',
  from: number,
  to: number,
): CheckResult {
  const mid = (from + to) / 2;
  const series = warmSeries(samples, field).filter((p) => p.t >= from && p.t <= to);
  const nodes = [...new Set(series.map((p) => p.node))].sort();
  const problems: string[] = [];
  const figures = nodes.map((node) => {
    const first = series.filter((p) => p.node === node && p.t < mid).map((p) => p.value);
    const last = series.filter((p) => p.node === node && p.t >= mid).map((p) => p.value);
    if (first.length === 0 || last.length === 0) {
      problems.push(`${node}: no warm samples in a half`);
      return `${node}: -`;
    }
    const ratio = median(last) / median(first);
    // Growth fails, not a fall: the agent's RSS is a sawtooth (it grows about 1 MiB every 5 s under
    // the soak's traffic until a major collection gives back 10-15 MiB), and in a 5-minute run the
    // two 90 s halves may fall on either side of one (a fifth run on 2026-12-07: -9.4%).
    if (ratio - 1 > FLAT_TOLERANCE) problems.push(node);
    const unit =
      field === 'rssBytes'
        ? (v: number) => `${(v / 2 ** 20).toFixed(1)} MiB`
        : (v: number) => `${(v * 1000).toFixed(2)} ms`;
    return `${node}: ${unit(median(first))} → ${unit(median(last))} (${((ratio - 1) * 100).toFixed(1)}%)`;
  });
  return {
    name:
      field === 'rssBytes'
        ? 'RSS flat (the median of the last half at most 5% above the first half)'
        : 'event-loop lag flat (p50, the median of the last half at most 5% above the first half)',
    passed: nodes.length > 0 && problems.length === 0,
    detail:
      nodes.length === 0
        ? `no samples past an agent's first ${WARM_UP_MS / 60_000} minutes: too short a run to judge`
        : figures.join('; ') + (problems.some((p) => p.includes(':')) ? `; ${problems.join('; ')}` : ''),
  };
}

export function checkChurn(events: readonly ChurnEvent[], kinds: readonly ChurnKind[]): CheckResult {
  const counts = kinds.map((k) => [k, events.filter((e) => e.kind === k && e.ok).length] as const);
  const missing = counts.filter(([, n]) => n === 0).map(([k]) => k);
  const failed = events.filter(
    (e) => !e.ok && !SERVICE_KINDS.includes(e.kind) && e.kind !== 'scale-up' && e.kind !== 'scale-down',
  );
  return {
    name: 'every churn source ran, and every disruption recovered',
    passed: missing.length === 0 && failed.length === 0,
    detail: `${counts.map(([k, n]) => `${n} ${k}`).join(', ')}${missing.length ? `; never: ${missing.join(', ')}` : ''}${failed.length ? `; failed: ${failed.map((e) => `${e.kind} ${e.detail}: ${e.error}`).join('; ')}` : ''}`,
  };
}

/** GC passes over the whole soak (every agent process's last count), against one per interval. */
export function checkConntrackGC(
  samples: readonly NodeSample[],
  durationMs: number,
  intervalSeconds: number,
): CheckResult {
  const perNode = new Map<string, number>();
  for (const s of lastPerProcess(samples)) perNode.set(s.node, (perNode.get(s.node) ?? 0) + (s.gcRuns ?? 0));
  // Half the passes an uninterrupted agent makes: each restart begins a new interval.
  const expected = Math.floor(durationMs / (intervalSeconds * 1000) / 2);
  return {
    name: 'conntrack GC ran throughout',
    passed: perNode.size > 0 && [...perNode.values()].every((runs) => runs >= expected),
    detail: `${[...perNode].map(([node, runs]) => `${node}: ${runs} passes`).join('; ')} (at least ${expected} expected)`,
  };
}
