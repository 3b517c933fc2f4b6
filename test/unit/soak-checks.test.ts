// The soak's verdicts (bench/soak/checks.ts), its reading of the agent's metrics
// (bench/soak/metrics.ts) and its start line (bench/soak/traffic.ts), on recorded data: what
// passes, what fails, and what is excused.

import { describe, expect, it } from 'vitest';
import {
  checkFailedRequests,
  checkFlat,
  checkLateAnswers,
  checkMaps,
  checkStreamsRan,
  excused,
  leakProblems,
  mapProblems,
  programmingOverBound,
  WARM_UP_MS,
} from '../../bench/soak/checks.js';
import type { Incarnation } from '../../bench/soak/churn.js';
import {
  compactBuckets,
  countWithin,
  type NodeSample,
  readAgentMetrics,
  unreachablesSent,
} from '../../bench/soak/metrics.js';
import { type Failure, type Stream, startProbes, TrafficLedger } from '../../bench/soak/traffic.js';

const stream = (kind: Stream['kind'], service: Stream['service'] = 'churn'): Stream => ({
  ns: 'p-ca',
  name: `pod ca → ClusterIP ${service} ${kind}`,
  service,
  family: 'IPv4',
  target: '10.96.0.20:80',
  kind,
  intervalMs: 300,
  timeoutMs: 3000,
  count: 100,
});

const incarnation = (name: string, removedAt: number | null): Incarnation => ({
  name,
  slot: name.split('-')[0]!,
  node: 'node-a',
  readyAt: 0,
  removedAt,
});

const sample = (over: Partial<NodeSample>): NodeSample => ({
  t: 0,
  node: 'node-a',
  pid: 10,
  up: true,
  ...over,
});

describe('failed requests', () => {
  const removed = new Map([['wa1-3', 1000]]);
  const failure = (at: number, lastBackend: string | null): Failure => ({
    stream: 0,
    at,
    error: 'ECONNRESET',
    lastBackend,
  });

  const flowEnd = 50_000;

  it('excuses a long-lived flow whose pod was deleted before it failed, nothing else', () => {
    expect(excused(failure(1500, 'wa1-3'), stream('keepalive'), removed, flowEnd)).toBe(true);
    expect(excused(failure(1500, 'wa1-3'), stream('udp-stream'), removed, flowEnd)).toBe(true);
    // Before the deletion, or on a new connection, or after a backend that stayed: counted.
    expect(excused(failure(900, 'wa1-3'), stream('keepalive'), removed, flowEnd)).toBe(false);
    expect(excused(failure(1500, 'wa1-3'), stream('new'), removed, flowEnd)).toBe(false);
    expect(excused(failure(1500, 'sa'), stream('keepalive'), removed, flowEnd)).toBe(false);
  });

  it('excuses a long-lived flow only until its pod is gone and the proxy forgot it', () => {
    // A connected UDP socket still on its pod long after the pod went fails every request: each
    // would be excused by the same deletion for the rest of an hour without the bound.
    expect(excused(failure(1000 + flowEnd, 'wa1-3'), stream('udp-stream'), removed, flowEnd)).toBe(true);
    expect(excused(failure(1001 + flowEnd, 'wa1-3'), stream('udp-stream'), removed, flowEnd)).toBe(false);
    const stuck = Array.from({ length: 30 }, (_, i) => failure(1500 + i * 2300, 'wa1-3'));
    const result = checkFailedRequests(
      [stream('udp-stream')],
      [100],
      stuck,
      [incarnation('wa1-3', 1000)],
      flowEnd,
    );
    expect(result.passed).toBe(false);
    expect(result.detail).toMatch(
      /^8 of 100 requests failed \(22 more on long-lived flows whose pod was deleted, the latest 48\.8 s after its deletion, within 50 s\)/,
    );
  });

  it('passes with every failure excused, fails on one that is not', () => {
    const streams = [stream('keepalive'), stream('new', 'stable')];
    const incarnations = [incarnation('wa1-3', 1000)];
    const excusedOnly = [failure(1500, 'wa1-3')];
    expect(checkFailedRequests(streams, [50, 50], excusedOnly, incarnations, flowEnd).passed).toBe(true);
    const counted = [...excusedOnly, { stream: 1, at: 2000, error: 'timeout', lastBackend: 'sa' }];
    const result = checkFailedRequests(streams, [50, 50], counted, incarnations, flowEnd);
    expect(result.passed).toBe(false);
    expect(result.detail).toMatch(/^1 of 100 requests failed \(1 more/);
    expect(result.detail).toContain('stable new: timeout');
  });

  it('fails when no request was made at all', () => {
    expect(checkFailedRequests([stream('new')], [0], [], [], flowEnd).passed).toBe(false);
  });
});

describe('every stream kept sending', () => {
  const line = (s: number, t: number) => ({ s, t, b: 'sa', e: null });

  it('passes streams that kept their pace to the end, fails one whose client stopped or hung', () => {
    const streams = [stream('new'), stream('udp', 'stable')];
    const ledger = new TrafficLedger(streams, 0);
    for (let t = 300; t <= 60_000; t += 300) ledger.record(0, line(0, t));
    for (let t = 300; t <= 20_000; t += 300) ledger.record(1, line(1, t));
    // The second stream's client died at 20 s: no more failures from it, and none counted.
    expect(checkFailedRequests(streams, ledger.requests, ledger.failures, [], 50_000).passed).toBe(true);
    const result = checkStreamsRan(streams, ledger.pace, 60_000, 15_000, []);
    expect(result.passed).toBe(false);
    expect(result.detail).toContain('stalled: pod ca → ClusterIP stable udp 40.2 s');
    // Both kept going, with one pause of 12 s in the middle: within the bound.
    for (let t = 32_000; t <= 60_000; t += 300) ledger.record(1, line(1, t));
    const ok = checkStreamsRan(streams, ledger.pace, 60_000, 15_000, []);
    expect(ok).toMatchObject({ passed: true });
    expect(ok.detail).toMatch(
      /^the longest pause between two requests' ends 12\.2 s \(pod ca → ClusterIP stable udp;/,
    );
    // A client that exited before it was stopped fails the check however its streams look.
    expect(checkStreamsRan(streams, ledger.pace, 60_000, 15_000, ['p-ca: 1']).passed).toBe(false);
  });
});

describe('answers after a deletion', () => {
  it('fails on an answer later than the grace period, passes within it', () => {
    const incarnations = [incarnation('wa1-3', 10_000), incarnation('wb2-4', null)];
    const within = new Map([
      ['wa1-3', { first: 0, last: 25_000, requests: 9 }],
      ['wb2-4', { first: 0, last: 90_000, requests: 9 }],
    ]);
    expect(checkLateAnswers(within, incarnations, 20_000).passed).toBe(true);
    const late = new Map([['wa1-3', { first: 0, last: 31_000, requests: 9 }]]);
    const result = checkLateAnswers(late, incarnations, 20_000);
    expect(result.passed).toBe(false);
    expect(result.detail).toContain('wa1-3 21.0 s after');
  });
});

describe('network programming', () => {
  const histogram = (within: number, all: number) => [
    { le: 30, count: within },
    { le: Number.POSITIVE_INFINITY, count: all },
  ];

  it('adds up the last reading of each agent process, over the bound', () => {
    const samples = [
      sample({ pid: 10, programming: histogram(3, 3) }),
      sample({ pid: 10, programming: histogram(8, 9) }),
      sample({ pid: 11, programming: histogram(4, 4) }),
      sample({ node: 'node-b', pid: 10, programming: histogram(5, 5) }),
    ];
    expect(programmingOverBound(samples, 30)).toEqual({ total: 18, over: 1 });
  });

  it('tells agent processes apart by their start time when a pid comes back', () => {
    // pid_max 32768 and an hour of the soak's own commands: a restarted agent may get an old pid.
    const samples = [
      sample({ pid: 10, startedAt: 100, programming: histogram(2, 3) }),
      sample({ pid: 10, startedAt: 900, programming: histogram(4, 4) }),
    ];
    expect(programmingOverBound(samples, 30)).toEqual({ total: 7, over: 1 });
  });

  it('keeps only the bounds that add to the histogram, and reads any bound from them', () => {
    const full = [0, 0.25, 0.5, 1, 2, 3, 30, 31, Infinity].map((le) => ({
      le,
      count: le < 0.5 ? 0 : le < 2 ? 3 : le < 31 ? 5 : 6,
    }));
    const compact = compactBuckets(full);
    expect(compact).toEqual([
      { le: 0.5, count: 3 },
      { le: 2, count: 5 },
      { le: 31, count: 6 },
      { le: Infinity, count: 6 },
    ]);
    for (const { le, count } of full) expect(countWithin(compact, le)).toBe(count);
    expect(programmingOverBound([sample({ programming: compact })], 30)).toEqual({ total: 6, over: 1 });
  });
});

describe("the agent's metrics", () => {
  it('reads its start, RSS, lag, timers, planned map entries, GC passes, drops and the programming histogram', () => {
    const text = [
      'process_start_time_seconds 1796620100',
      '# HELP process_resident_memory_bytes Resident memory size in bytes.',
      'process_resident_memory_bytes 73400320',
      'nodejs_eventloop_lag_p50_seconds 0.010125',
      'nodejs_eventloop_lag_p99_seconds 0.0125',
      'nodejs_active_resources{type="Timeout"} 7',
      'nodejs_active_resources{type="TCPSocketWrap"} 3',
      'kube_bpf_proxy_map_entries{map="kbp_svc4_v1"} 12',
      'kube_bpf_proxy_map_entries{map="kbp_slot_v2"} 40',
      'kube_bpf_proxy_conntrack_gc_runs_total 6',
      'kube_bpf_proxy_drops_total{reason="no_endpoints"} 2',
      'kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="30"} 4',
      'kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv6",le="30"} 3',
      'kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="+Inf"} 5',
      'kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv6",le="+Inf"} 3',
    ].join('\n');
    expect(readAgentMetrics(text)).toEqual({
      startedAt: 1796620100,
      rssBytes: 73400320,
      lagP50Seconds: 0.010125,
      lagP99Seconds: 0.0125,
      timers: 7,
      plan: { svc4: 12, slots: 40 },
      gcRuns: 6,
      drops: { no_endpoints: 2 },
      programming: [
        { le: 30, count: 7 },
        { le: Number.POSITIVE_INFINITY, count: 8 },
      ],
    });
  });
});

describe('the start line', () => {
  it("probes every stream's target from its namespace in its protocol: both families, UDP and TCP", () => {
    // The 2026-12-07 CI rehearsal's two failures were the first requests of node-a's IPv6 UDP
    // streams to the churned Service: node-a had programmed its IPv4 EndpointSlice, not yet its
    // IPv6 one, when the soak started on an IPv4 TCP answer alone.
    const v6 = (kind: Stream['kind'], ns: string) => ({
      ...stream(kind),
      ns,
      family: 'IPv6' as const,
      target: '[fd00:10:96::20]:53',
    });
    const streams = [
      stream('new'),
      stream('keepalive'),
      v6('udp-stream', 'p-ca'),
      v6('udp', 'n-node-a'),
      v6('udp', 'n-node-a'),
      { ...stream('datagram'), ns: 'client', target: '10.10.0.1:30053' },
    ];
    expect(startProbes(streams)).toEqual([
      { ns: 'p-ca', target: '10.96.0.20:80', proto: 'tcp' },
      { ns: 'p-ca', target: '[fd00:10:96::20]:53', proto: 'udp' },
      { ns: 'n-node-a', target: '[fd00:10:96::20]:53', proto: 'udp' },
      { ns: 'client', target: '10.10.0.1:30053', proto: 'udp' },
    ]);
  });
});

describe("a namespace's ICMP counters", () => {
  it('reads the destination unreachables sent from /proc/net/snmp and /proc/net/snmp6 read in one', () => {
    const text = [
      'Ip: Forwarding DefaultTTL',
      'Ip: 1 64',
      'Icmp: InMsgs InErrors OutMsgs OutDestUnreachs',
      'Icmp: 9 0 7 3',
      'Icmp6InMsgs                     \t4',
      'Icmp6OutDestUnreachs            \t5',
    ].join('\n');
    expect(unreachablesSent(text)).toEqual({ v4: 3, v6: 5 });
  });
});

describe('what the end must look like', () => {
  const planned = { svc4: 10, svc6: 10, slots: 30, backends4: 6, backends6: 6 };

  it('maps: planned ones as planned, a pair per slot, flow maps empty, Maglev as at the start', () => {
    const start = sample({ kernel: { ...planned, maglev: 4 } });
    const end = { ...planned, affinityMatch: 30, maglev: 4 };
    expect(mapProblems(start, sample({ plan: planned, kernel: { ...end, ct4Tcp: 0, sockRev4: 0 } }))).toEqual(
      [],
    );
    // The socket hooks' reverse entries and their index go with their sockets, closed by the end.
    expect(
      mapProblems(
        start,
        sample({
          plan: planned,
          kernel: { ...end, slots: 31, maglev: 5, ct6Any: 2, sockRev6: 3, sockIdx: 1 },
        }),
      ),
    ).toEqual([
      'slots 31 (plan 30)',
      'affinityMatch 30 (slots 31)',
      'ct6Any 2',
      'sockRev6 3',
      'sockIdx 1',
      'maglev 5 (at the start 4)',
    ]);
  });

  it('maps: fails on a map found full during the run, though it drained by the end', () => {
    const start = sample({ kernel: { ...planned, maglev: 0 } });
    const end = sample({ t: 600_000, plan: planned, kernel: { ...planned, affinityMatch: 30, maglev: 0 } });
    expect(checkMaps([start], [end], [start, end], 0).passed).toBe(true);
    const full = sample({ t: 90_000, kernel: { ...planned, ct4Any: 65_536 }, full: ['ct4Any'] });
    const result = checkMaps([start], [end], [start, full, { ...full, t: 95_000 }, end], 0);
    expect(result).toEqual({ name: result.name, passed: false, detail: 'node-a: ct4Any full at 1.5 min' });
  });

  it('leaks: BPF fds exactly, other fds and timers within slack, pins and the port reservation exactly', () => {
    const fds = { total: 40, bpfMaps: 30, bpfProgs: 4, bpfLinks: 3, sockets: 2 };
    const start = sample({ fds, timers: 6, pins: 50, reservedPorts: '30000-32767' });
    expect(
      leakProblems(
        start,
        sample({ fds: { ...fds, total: 45 }, timers: 9, pins: 50, reservedPorts: '30000-32767' }),
        true,
      ),
    ).toEqual([]);
    expect(
      leakProblems(
        start,
        sample({ fds: { ...fds, total: 60, bpfLinks: 4 }, timers: 20, pins: 51, reservedPorts: '' }),
        true,
      ),
    ).toEqual([
      'bpfLinks fds 3 → 4',
      'fds 40 → 60',
      'timers 6 → 20',
      'pinned objects 50 → 51',
      'ip_local_reserved_ports "30000-32767" → ""',
    ]);
  });
});

describe('flat over time', () => {
  const MiB = 2 ** 20;
  const series = (values: number[], pid = 10) =>
    values.map((v, i) => sample({ t: WARM_UP_MS + i * 10_000, pid, rssBytes: v * MiB }));

  it('compares the medians of the halves, leaving out each process warm-up', () => {
    const flat = [sample({ t: 0, rssBytes: 10 * MiB }), ...series([70, 71, 70, 72, 71, 71])];
    expect(checkFlat(flat, 'rssBytes', WARM_UP_MS - 10_000, WARM_UP_MS + 60_000).passed).toBe(true);
    const growing = [sample({ t: 0, rssBytes: 10 * MiB }), ...series([70, 71, 72, 80, 82, 84])];
    const result = checkFlat(growing, 'rssBytes', WARM_UP_MS - 10_000, WARM_UP_MS + 60_000);
    expect(result.passed).toBe(false);
    expect(result.detail).toBe('node-a: 71.0 MiB → 82.0 MiB (15.5%)');
    // A major collection in the last half: a fall, not a leak.
    const falling = [sample({ t: 0, rssBytes: 10 * MiB }), ...series([112, 114, 113, 100, 102, 101])];
    expect(checkFlat(falling, 'rssBytes', WARM_UP_MS - 10_000, WARM_UP_MS + 60_000).passed).toBe(true);
  });

  it('fails, saying why, when no sample is past the warm-up', () => {
    const young = series([70, 71, 72]).map((s) => ({ ...s, t: s.t - WARM_UP_MS }));
    const result = checkFlat(young, 'rssBytes', 0, 60_000);
    expect(result).toMatchObject({ passed: false, detail: expect.stringContaining('too short a run') });
  });
});
