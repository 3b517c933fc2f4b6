// The benchmark's pure parts: statistics, the generated manifests, ratios and the report, the
// SVG charts and the parsers of its tools' output.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadTargets } from '../../bench/cell.js';
import { benchOptions } from '../../bench/cli.js';
import { parseSystemUs, pinned, placement, usPerUnit } from '../../bench/cpu.js';
import {
  ALL_MODES,
  benchCells,
  benchMatrix,
  plotFiles,
  reportInput,
  resultFamilies,
  unavailableModes,
} from '../../bench/harness.js';
import { guestBenchArgs, guestEnvironment, LAB_TIMEOUT_SCALE } from '../../bench/ipvs-lab.js';
import { MEASURE_IDS, MEASURES, type Sample } from '../../bench/measures.js';
import { chartSvg, chartWidth, linearTicks, stackedSvg } from '../../bench/plot.js';
import {
  aggregate,
  aggregateBpfCost,
  bpfCostTable,
  bpfPairs,
  directRatioTable,
  excessRatio,
  findAggregate,
  floorRatio,
  goalResults,
  goalsTable,
  iptablesBackendLines,
  kubeProxyPairs,
  markdownReport,
  ratio,
  ratioTable,
  valuesTable,
} from '../../bench/report.js';
import { measureCharts } from '../../bench/run-plots.js';
import {
  backendPodIP,
  changedEndpointIP,
  cidrInFamily,
  clusterIP,
  DUAL_STACK_CLUSTER_CIDR,
  endpointSlice,
  inFamily,
  manifestFiles,
  measuredService,
  SERVICE_CIDRS,
  SERVICE_TCP_PORT,
  SERVICE_UDP_PORT,
  serviceObject,
  TCP_TARGET_PORT,
  UDP_TARGET_PORT,
  validateScenario,
} from '../../bench/scenario.js';
import { histogram, histogramPercentile, mergeHistograms, percentile, summarize } from '../../bench/stats.js';
import { parseColumns, parseLoadgen, parseWrk } from '../../bench/tools.js';
import { inCgroup } from '../../src/lab/netns.js';
import { ChangeTracker } from '../../src/model/tracker.js';
import { cidrContains, parseCIDR, parseIP } from '../../src/net/ip.js';
import { readManifests } from '../../src/sources/manifests.js';

describe('stats', () => {
  it('nearest-rank percentiles', () => {
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(xs, 50)).toBe(50);
    expect(percentile(xs, 99)).toBe(99);
    expect(percentile([7], 99)).toBe(7);
    expect(summarize([3, 1, 2])).toEqual({ median: 2, p99: 3, n: 3 });
    expect(Number.isNaN(percentile([], 50))).toBe(true);
  });

  it('pooled histograms stay within 2 % of the exact percentiles', () => {
    const a = Array.from({ length: 1000 }, (_, i) => 20 + i * 0.37);
    const b = Array.from({ length: 500 }, (_, i) => 300 + i * 3.1);
    const pooled = mergeHistograms([histogram(a), histogram(b)]);
    for (const p of [50, 90, 99]) {
      const exact = percentile([...a, ...b], p);
      const approx = histogramPercentile(pooled, p);
      expect(approx).toBeLessThanOrEqual(exact * 1.0001);
      expect(approx).toBeGreaterThan(exact / 1.021);
    }
  });
});

describe('scenario', () => {
  it('N services with E endpoints each, the last one measured (and the only one with UDP)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kbp-bench-unit-'));
    try {
      for (const [name, text] of Object.entries(manifestFiles({ services: 300, endpoints: 4 })))
        writeFileSync(join(dir, name), text);
      const tracker = new ChangeTracker('node');
      tracker.apply(readManifests([dir]).events);
      const state = tracker.state();
      expect(state.services.size).toBe(300);
      expect(state.endpointSlices.size).toBe(300);
      const last = measuredService({ services: 300, endpoints: 4 });
      const service = state.services.get(`bench/${last.name}`);
      expect(service?.clusterIP).toBe(last.ip);
      expect(service?.ports.map((p) => p.protocol)).toEqual(['TCP', 'UDP']);
      expect(state.services.get('bench/svc-00000')?.ports.map((p) => p.protocol)).toEqual(['TCP']);
      for (const slice of state.endpointSlices.values()) expect(slice.endpoints).toHaveLength(4);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an IPv6 scenario: single-stack IPv6 Services and slices, other objects than IPv4 ones', () => {
    const scenario = { services: 300, endpoints: 4, family: 'IPv6' as const };
    const dir = mkdtempSync(join(tmpdir(), 'kbp-bench-unit-'));
    try {
      for (const [name, text] of Object.entries(manifestFiles(scenario)))
        writeFileSync(join(dir, name), text);
      const tracker = new ChangeTracker('node');
      tracker.apply(readManifests([dir]).events);
      const state = tracker.state();
      expect(state.services.size).toBe(300);
      const last = measuredService(scenario);
      expect(last).toEqual({ index: 299, name: 'svc6-00299', ip: 'fd00::a60:12d' });
      const service = state.services.get(`bench/${last.name}`);
      expect(service?.clusterIPs).toEqual([last.ip]);
      expect(service?.ports.map((p) => p.protocol)).toEqual(['TCP', 'UDP']);
      for (const slice of state.endpointSlices.values()) {
        expect(slice.addressType).toBe('IPv6');
        expect(slice.endpoints.map((e) => e.addresses[0])).toEqual([
          'fd00::af4:a',
          'fd00::af4:b',
          'fd00::af4:c',
          'fd00::af4:d',
        ]);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // IPv4 objects are unchanged, and never share a name with IPv6 ones.
    const v4 = { services: 1, endpoints: 1 };
    expect(serviceObject(0, v4)).toMatchObject({
      metadata: { name: 'svc-00000' },
      spec: { clusterIP: '10.96.0.2', ipFamilies: ['IPv4'] },
    });
    expect(endpointSlice(0, v4)).toMatchObject({ addressType: 'IPv4', metadata: { name: 'svc-00000-1' } });
    expect(serviceObject(0, { ...v4, family: 'IPv6' })).toMatchObject({
      metadata: { name: 'svc6-00000' },
      spec: { clusterIP: 'fd00::a60:2', clusterIPs: ['fd00::a60:2'], ipFamilies: ['IPv6'] },
    });
  });

  it("each IPv4 address of the layout has its IPv6 counterpart, inside the counterpart's CIDR", () => {
    expect(inFamily('IPv4', '10.244.0.5')).toBe('10.244.0.5');
    expect(inFamily('IPv6', '10.244.0.5')).toBe('fd00::af4:5');
    expect(cidrInFamily('IPv6', '10.244.0.0/16')).toBe('fd00::af4:0/112');
    expect(DUAL_STACK_CLUSTER_CIDR).toBe('10.244.0.0/16,fd00::af4:0/112');
    expect(SERVICE_CIDRS).toEqual(['10.96.0.0/16', 'fd00::a60:0/112']);
    const inside = (cidr: string, ip: string) => cidrContains(parseCIDR(cidr)!, parseIP(ip)!);
    for (const i of [0, 1000, 65_530]) expect(inside(SERVICE_CIDRS[1]!, clusterIP(i, 'IPv6'))).toBe(true);
    expect(inside(cidrInFamily('IPv6', '10.96.0.0/12'), clusterIP(99_999, 'IPv6'))).toBe(true);
    expect(changedEndpointIP(3, 'IPv6')).toBe('fd00::af4:67');
    expect(() => inFamily('IPv6', 'fd00::1')).toThrow(/not an IPv4 address/);
    expect(() => validateScenario({ services: 2 ** 20, endpoints: 10, family: 'IPv6' })).toThrow();
  });

  it('ClusterIPs are distinct and stay in 10.96.0.0/12; bad sizes are refused', () => {
    const ips = new Set(Array.from({ length: 100_000 }, (_, i) => clusterIP(i)));
    expect(ips.size).toBe(100_000);
    expect(clusterIP(0)).toBe('10.96.0.2');
    expect(clusterIP(254)).toBe('10.96.1.0');
    expect(clusterIP(99_999)).toBe('10.97.134.161');
    expect(() => validateScenario({ services: 0, endpoints: 10 })).toThrow();
    expect(() => validateScenario({ services: 10, endpoints: 33 })).toThrow();
    expect(() => validateScenario({ services: 2 ** 20, endpoints: 10 })).toThrow();
  });
});

describe('report', () => {
  const sample = (mode: Sample['mode'], measure: Sample['measure'], value: number, rep = 0): Sample => ({
    measure,
    mode,
    services: 1000,
    rep,
    value,
  });

  it('ratios are bpf ÷ other of the medians over runs', () => {
    const samples = [
      sample('bpf', 'crrPerSec', 9000),
      sample('bpf', 'crrPerSec', 11000, 1),
      sample('bpf', 'crrPerSec', 10000, 2),
      sample('iptables', 'crrPerSec', 5000),
      sample('iptables', 'crrPerSec', 4000, 1),
      sample('iptables', 'crrPerSec', 6000, 2),
    ];
    const aggregates = aggregate(samples);
    expect(ratio(aggregates, ['bpf', 'iptables'], 1000, 'crrPerSec')).toBe(2);
    expect(ratio(aggregates, ['bpf', 'nftables'], 1000, 'crrPerSec')).toBeNull();
    const input = {
      families: ['IPv4' as const],
      serviceCounts: [1000],
      aggregates,
      bpfCost: [],
      unavailable: [],
      failures: [],
    };
    const table = ratioTable({ ...input, modes: ['bpf', 'iptables'] }, [['bpf', 'iptables']]);
    expect(table).toContain('bpf ÷ iptables @ N=1,000');
    expect(table).toContain('2.00×');
  });

  it('each of our modes is compared with the real kube-proxy mode it re-implements, and bpf with both', () => {
    const modes = [
      'bpf',
      'iptables',
      'nftables',
      'ipvs',
      'kube-proxy-iptables',
      'kube-proxy-nftables',
      'kube-proxy-ipvs',
    ] as const;
    expect(kubeProxyPairs(modes)).toEqual([
      ['iptables', 'kube-proxy-iptables'],
      ['bpf', 'kube-proxy-iptables'],
      ['nftables', 'kube-proxy-nftables'],
      ['bpf', 'kube-proxy-nftables'],
      ['ipvs', 'kube-proxy-ipvs'],
      ['bpf', 'kube-proxy-ipvs'],
    ]);
    // The IPVS lab's run without bpf: ours against the real one only.
    expect(kubeProxyPairs(['ipvs', 'kube-proxy-ipvs', 'iptables', 'kube-proxy-iptables'])).toEqual([
      ['ipvs', 'kube-proxy-ipvs'],
      ['iptables', 'kube-proxy-iptables'],
    ]);
    expect(bpfPairs(modes)).toEqual([
      ['bpf', 'iptables'],
      ['bpf', 'nftables'],
      ['bpf', 'ipvs'],
    ]);
    expect(kubeProxyPairs(['iptables', 'nftables'])).toEqual([]);
    const aggregates = aggregate([
      sample('iptables', 'coldStartMs', 900),
      sample('kube-proxy-iptables', 'coldStartMs', 1200),
    ]);
    expect(ratio(aggregates, ['iptables', 'kube-proxy-iptables'], 1000, 'coldStartMs')).toBe(0.75);
  });

  it('the tables have a row for each family, the IPv6 ÷ IPv4 table a column for each mode', () => {
    const v6 = (s: Sample): Sample => ({ ...s, family: 'IPv6' });
    const samples = [
      sample('bpf', 'crrPerSec', 10000),
      sample('iptables', 'crrPerSec', 5000),
      v6(sample('bpf', 'crrPerSec', 9000)),
      v6(sample('iptables', 'crrPerSec', 3000)),
    ];
    const aggregates = aggregate(samples);
    expect(findAggregate(aggregates, 'bpf', 1000, 'crrPerSec')?.median).toBe(10000);
    expect(findAggregate(aggregates, 'bpf', 1000, 'crrPerSec', 'IPv6')?.median).toBe(9000);
    expect(ratio(aggregates, ['bpf', 'iptables'], 1000, 'crrPerSec', 'IPv6')).toBe(3);
    const input = {
      modes: ['bpf', 'iptables'] as Sample['mode'][],
      families: ['IPv4', 'IPv6'] as const,
      serviceCounts: [1000],
      aggregates,
      bpfCost: aggregateBpfCost([
        { program: 'tc (tracked flow)', services: 1, round: 0, nsPerPacket: 140 },
        { program: 'tc (tracked flow)', family: 'IPv6', services: 1, round: 0, nsPerPacket: 150 },
      ]),
      unavailable: [],
      failures: [{ mode: 'bpf' as const, family: 'IPv6' as const, services: 1000, rep: 0, error: 'boom' }],
    };
    const report = markdownReport({ ...input, families: [...input.families] }, '# run');
    const row = (title: string) => report.split('\n').filter((l) => l.startsWith(`| ${title} |`));
    expect(row('New connections per second (connect, one request, close)')).toEqual([
      '| New connections per second (connect, one request, close) | IPv4 | higher | 2.00× |',
      '| New connections per second (connect, one request, close) | IPv6 | higher | 3.00× |',
      // IPv6 ÷ IPv4 of bpf, then of iptables.
      '| New connections per second (connect, one request, close) | higher | 0.90× | 0.60× |',
    ]);
    expect(report).toContain('### IPv6 ÷ IPv4');
    expect(report).toContain(
      '| New connections per second (connect, one request, close) [conn/s] | IPv6 | 1,000 | 9,000 (9,000) | 3,000 (3,000) |',
    );
    expect(report).toContain('| tc (tracked flow) | IPv4 | 140 (140) |');
    expect(report).toContain('| tc (tracked flow) | IPv6 | 150 (150) |');
    expect(report).toContain('- bpf IPv6 N=1000 rep 0: boom');
    // One family: no IPv6 rows, no IPv6 ÷ IPv4 table.
    const v4only = markdownReport({ ...input, families: ['IPv4'] }, '# run');
    expect(v4only).not.toContain('| IPv6 | higher');
    expect(v4only).not.toContain('### IPv6 ÷ IPv4');
  });

  it("an older run's samples, without a family, are IPv4", () => {
    const aggregates = aggregate([sample('bpf', 'crrPerSec', 7000)]);
    expect(aggregates[0]?.family).toBe('IPv4');
    expect(resultFamilies({ aggregates: [] })).toEqual(['IPv4']);
    // Aggregates saved before the family existed.
    const saved = aggregates.map(({ family: _family, ...rest }) => rest) as typeof aggregates;
    expect(resultFamilies({ aggregates: saved })).toEqual(['IPv4']);
    expect(findAggregate(saved, 'bpf', 1000, 'crrPerSec')?.median).toBe(7000);
    const table = valuesTable({
      modes: ['bpf'],
      families: ['IPv4'],
      serviceCounts: [1000],
      aggregates: saved,
      bpfCost: [],
      unavailable: [],
      failures: [],
    });
    expect(table).toContain('| IPv4 | 1,000 | 7,000 (7,000) |');
    expect(
      bpfCostTable(
        aggregateBpfCost([{ program: 'xdp_tx (baseline)', services: 1, round: 0, nsPerPacket: 30 }]),
      ),
    ).toContain('| xdp_tx (baseline) | IPv4 | 30.0 (30.0) |');
  });

  it('reports each BPF_PROG_TEST_RUN row as a ratio to its floor, measured in one family', () => {
    const floor = 'xdp_tx (floor, one run per call)';
    const rows = aggregateBpfCost([
      { program: floor, family: 'IPv4', services: 1, round: 0, nsPerPacket: 100, floor },
      { program: floor, family: 'IPv4', services: 1000, round: 0, nsPerPacket: 50, floor },
      {
        program: 'XDP (new flow, one run per call)',
        family: 'IPv6',
        services: 1,
        round: 0,
        nsPerPacket: 720,
        floor,
      },
      {
        program: 'XDP (new flow, one run per call)',
        family: 'IPv6',
        services: 1000,
        round: 0,
        nsPerPacket: 400,
        floor,
      },
      { program: 'tc (tracked flow)', family: 'IPv4', services: 1, round: 0, nsPerPacket: 140 },
    ]);
    expect(floorRatio(rows, rows[2]!)).toBe(7.2);
    const table = bpfCostTable(rows);
    expect(table).toContain(
      '| XDP (new flow, one run per call) | IPv6 | 720 (720), 7.20× floor | 400 (400), 8.00× floor |',
    );
    expect(table).toContain(
      '| xdp_tx (floor, one run per call) | IPv4 | 100 (100), 1.00× floor | 50.0 (50.0), 1.00× floor |',
    );
    // Without a floor (runs before the ratios): the figure alone.
    expect(table).toContain('| tc (tracked flow) | IPv4 | 140 (140) | – |');
  });

  it('pooled measures take their percentiles over every request', () => {
    const fast = Array.from({ length: 99 }, () => 50);
    const h = histogram([...fast, 5000]);
    const agg = aggregate([{ ...sample('bpf', 'tcpConnectUs', 50), histogram: h }]);
    expect(agg[0]?.median).toBeGreaterThan(49);
    expect(agg[0]?.median).toBeLessThanOrEqual(50);
    expect(agg[0]?.p99).toBeLessThanOrEqual(50);
  });
});

describe('direct and CPU per request', () => {
  const at = (mode: Sample['mode'], services: number, measure: Sample['measure'], value: number): Sample => ({
    measure,
    mode,
    services,
    rep: 0,
    value,
  });
  const input = (samples: Sample[], modes: Sample['mode'][], serviceCounts: number[]) => ({
    modes,
    families: ['IPv4' as const],
    serviceCounts,
    aggregates: aggregate(samples),
    bpfCost: [],
    unavailable: [],
    failures: [],
  });

  it('direct loads the backend pods themselves, every one the Service lists, on their own ports', () => {
    const scenario = { services: 1000, endpoints: 3, family: 'IPv4' as const };
    const backends = [0, 1, 2].map((e) => backendPodIP(e));
    expect(loadTargets('direct', scenario)).toEqual({
      ips: backends.join(','),
      tcpPort: TCP_TARGET_PORT,
      udpPort: UDP_TARGET_PORT,
      wrkUrl: `http://${backends[0]}:${TCP_TARGET_PORT}/`,
    });
    // The Service's slice lists the same pods.
    const slice = endpointSlice(measuredService(scenario).index, scenario) as {
      endpoints: { addresses: string[] }[];
    };
    expect(slice.endpoints.flatMap((e) => e.addresses)).toEqual(backends);
    const v6 = loadTargets('direct', { ...scenario, family: 'IPv6' });
    expect(v6.ips.split(',')).toEqual([0, 1, 2].map((e) => backendPodIP(e, 'IPv6')));
    expect(v6.wrkUrl).toBe(`http://[${backendPodIP(0, 'IPv6')}]:${TCP_TARGET_PORT}/`);
    // Every other mode: the measured ClusterIP, the Service's ports.
    const { ip } = measuredService(scenario);
    expect(loadTargets('bpf', scenario)).toEqual({
      ips: ip,
      tcpPort: SERVICE_TCP_PORT,
      udpPort: SERVICE_UDP_PORT,
      wrkUrl: `http://${ip}:${SERVICE_TCP_PORT}/`,
    });
  });

  it('direct is a mode of every data-plane N, never of a control-plane one', () => {
    expect(ALL_MODES[0]).toBe('direct');
    const options = benchOptions(
      {
        modes: 'direct,bpf',
        services: '1',
        controlPlaneServices: '10000',
        families: 'IPv4',
        reps: '1',
        endpoints: '10',
        out: 'x',
        iptablesBackend: 'auto',
      },
      () => {},
    );
    expect(options.cell.offeredRate).toBe(1000);
    const cells = benchCells(benchMatrix(options, options.modes), 1).map(
      (c) => `${c.services} ${c.mode} ${c.dataPlane}`,
    );
    expect(cells).toEqual(['1 direct true', '1 bpf true', '10000 bpf false']);
    expect(() =>
      benchOptions(
        { modes: 'direct', endpoints: '10', out: 'x', iptablesBackend: 'auto', offeredRate: '0' },
        () => {},
      ),
    ).toThrow(/--offered-rate/);
  });

  it('the client and the backends run on separate CPUs, each command in its cgroup', () => {
    expect(placement(1)).toBeNull();
    expect(placement(2)).toEqual({ clientCpu: 0, backendCpu: 1 });
    expect(pinned(undefined, 'wrk', ['-t1'])).toEqual(['wrk', ['-t1']]);
    expect(pinned(0, 'wrk', ['-t1'])).toEqual(['taskset', ['-c', '0', 'wrk', '-t1']]);
    const [sh, args] = inCgroup('/sys/fs/cgroup/x/client', ...pinned(0, 'wrk', ['-t1']));
    expect(sh).toBe('sh');
    expect(args.slice(2)).toEqual(['sh', '/sys/fs/cgroup/x/client', 'taskset', '-c', '0', 'wrk', '-t1']);
    expect(args[1]).toContain('cgroup.procs');
  });

  it("CPU per unit is the cgroup's system time over the units done", () => {
    const stat = 'usage_usec 104122\nuser_usec 44051\nsystem_usec 60070\nnice_usec 0\n';
    expect(parseSystemUs(stat)).toBe(60070);
    expect(() => parseSystemUs('usage_usec 1\n')).toThrow(/system_usec/);
    expect(usPerUnit(60_000, 300)).toBe(200);
    expect(usPerUnit(60_000, 0)).toBeNaN();
    // The CPU measures are data-plane measures, lower is better.
    for (const m of ['cpuPerConnUs', 'cpuPerConnSaturatedUs', 'cpuPerRequestUs'] as const)
      expect(MEASURES[m]).toMatchObject({ plane: 'data', better: 'lower', pooled: false });
  });

  it('every data-plane table has a ÷ direct row, and the goals are judged on same-run ratios', () => {
    const samples = [1, 10_000].flatMap((n) => [
      at('direct', n, 'crrPerSec', 10_000),
      at('bpf', n, 'crrPerSec', n === 1 ? 9_900 : 9_700),
      at('direct', n, 'wrkReqPerSec', 20_000),
      at('bpf', n, 'wrkReqPerSec', 20_000),
      at('direct', n, 'cpuPerConnUs', 100),
      at('bpf', n, 'cpuPerConnUs', 110),
      at('kube-proxy-nftables', n, 'cpuPerConnUs', 150),
      at('kube-proxy-iptables', n, 'cpuPerConnUs', n === 1 ? 140 : 300),
      at('bpf', n, 'coldStartMs', 500),
    ]);
    const modes: Sample['mode'][] = ['direct', 'bpf', 'kube-proxy-iptables', 'kube-proxy-nftables'];
    const run = input(samples, modes, [1, 10_000]);
    const results = goalResults(run).map((g) => [
      `${g.goal.pair.join(' ÷ ')} ${g.goal.measure} @ ${g.services}`,
      g.ratio === null ? null : Number(g.ratio.toFixed(3)),
      g.reached,
      g.overDirect === null ? null : Number(g.overDirect.toFixed(3)),
    ]);
    expect(results).toEqual([
      ['bpf ÷ direct crrPerSec @ 1', 0.99, true, null],
      ['bpf ÷ direct crrPerSec @ 10000', 0.97, false, null],
      ['bpf ÷ direct wrkReqPerSec @ 1', 1, true, null],
      ['bpf ÷ direct wrkReqPerSec @ 10000', 1, true, null],
      // 110 ÷ 150: missed; of what each proxy adds over direct, bpf's is 10 ÷ 50.
      ['bpf ÷ kube-proxy-nftables cpuPerConnUs @ 1', 0.733, false, 0.2],
      ['bpf ÷ kube-proxy-iptables cpuPerConnUs @ 10000', 0.367, true, 0.05],
    ]);
    // Without kube-proxy's cells, its goals are listed as not measured; "every N" skips N without loads.
    const ours = goalResults(
      input(
        samples.filter((s) => !s.mode.startsWith('kube-proxy')),
        ['direct', 'bpf'],
        [1, 10_000, 100_000],
      ),
    );
    expect(ours.filter((g) => g.reached === null).map((g) => g.services)).toEqual([1, 10_000]);
    expect(ours.filter((g) => g.goal.measure === 'crrPerSec').map((g) => g.services)).toEqual([1, 10_000]);

    const report = markdownReport(run, '# run');
    expect(report).toContain('### Each mode ÷ direct');
    expect(report).toContain("### Issue 26's goals");
    expect(report).toMatch(
      /\| bpf ÷ kube-proxy-nftables, CPU per new connection at a fixed offered load .* ≤ 0\.7 \| 1 \| 0\.733× \| missed \| 0\.20× \|/,
    );
    // The values table: a ÷ direct row under every data-plane measure, none under control-plane ones.
    const values = valuesTable(run).split('\n');
    const crrRow = values.findIndex(
      (l) => l.startsWith('| New connections per second') && l.includes('| 10,000 |'),
    );
    expect(values[crrRow + 1]).toBe('| ↳ ÷ direct | IPv4 | 10,000 | 1.00× | 0.97× | – | – |');
    const coldRow = values.findIndex(
      (l) => l.startsWith('| Program N services from cold') && l.includes('| 1 |'),
    );
    expect(values[coldRow + 1]).not.toContain('÷ direct');
    // A ratio just under its bound is not printed as the bound: 9,790 ÷ 10,000 is 0.979×, missed.
    const close = input(
      [at('direct', 1, 'crrPerSec', 10_000), at('bpf', 1, 'crrPerSec', 9_790)],
      ['direct', 'bpf'],
      [1],
    );
    expect(goalsTable(close)).toContain('| 1 | 0.979× | missed |');
    // What a proxy adds over direct, against what the other adds; none when the other adds nothing.
    expect(excessRatio(110, 150, 100, false)).toBeCloseTo(0.2);
    expect(excessRatio(9_000, 8_000, 10_000, true)).toBeCloseTo(0.5);
    expect(excessRatio(110, 95, 100, false)).toBeNull();
    expect(excessRatio(110, 100, 100, false)).toBeNull();
    expect(excessRatio(110, 150, undefined, false)).toBeNull();
    const direct = directRatioTable(run);
    expect(direct).toContain('bpf ÷ direct @ N=10,000');
    expect(direct).not.toContain('direct ÷ direct');
    expect(direct).not.toContain('Program N services');
    // direct is no real kube-proxy and no rule mode: bpf ÷ direct sits among bpf's own ratios.
    expect(bpfPairs(modes)).toEqual([['bpf', 'direct']]);
  });

  it('each cell whose rules go through iptables says which backend held them', () => {
    const samples: Sample[] = [
      { ...at('iptables', 1, 'crrPerSec', 1), iptablesBackend: 'nft' },
      { ...at('iptables', 10_000, 'crrPerSec', 1), iptablesBackend: 'legacy' },
      { ...at('kube-proxy-iptables', 10_000, 'crrPerSec', 1), iptablesBackend: 'legacy' },
      at('bpf', 1, 'crrPerSec', 1),
    ];
    const run = input(samples, ['bpf', 'iptables', 'kube-proxy-iptables'], [1, 10_000]);
    expect(findAggregate(run.aggregates, 'iptables', 10_000, 'crrPerSec')?.iptablesBackends).toEqual([
      'legacy',
    ]);
    expect(findAggregate(run.aggregates, 'bpf', 1, 'crrPerSec')?.iptablesBackends).toBeUndefined();
    expect(iptablesBackendLines(run).sort()).toEqual([
      '- iptables N=1 IPv4: nft',
      '- iptables N=10,000 IPv4: legacy',
      '- kube-proxy-iptables N=10,000 IPv4: legacy',
    ]);
    expect(markdownReport(run, '# run')).toContain('### iptables backend of each cell');
  });
});

describe('modes and the IPVS lab', () => {
  const noIpvs = { available: false, reason: 'this kernel (6.18) has no IPVS' };
  const ipvs = { available: true, reason: 'IPVS present (/proc/net/ip_vs)' };
  const noControlPlane = 'the control-plane binaries are not built: bash scripts/install-control-plane.sh';

  it('kube-proxy-ipvs needs IPVS, as ipvs does, and the control plane, as the other real modes do', () => {
    expect(ALL_MODES).toContain('kube-proxy-ipvs');
    expect(unavailableModes(ALL_MODES, noIpvs, null)).toEqual([
      { mode: 'ipvs', reason: noIpvs.reason },
      { mode: 'kube-proxy-ipvs', reason: noIpvs.reason },
    ]);
    expect(unavailableModes(ALL_MODES, ipvs, noControlPlane)).toEqual([
      { mode: 'kube-proxy-iptables', reason: noControlPlane },
      { mode: 'kube-proxy-nftables', reason: noControlPlane },
      { mode: 'kube-proxy-ipvs', reason: noControlPlane },
    ]);
    // Without either, the kernel is the reason: the control plane would not make it run.
    expect(unavailableModes(['kube-proxy-ipvs', 'bpf'], noIpvs, noControlPlane)).toEqual([
      { mode: 'kube-proxy-ipvs', reason: noIpvs.reason },
    ]);
    expect(unavailableModes(ALL_MODES, ipvs, null)).toEqual([]);
  });

  it("the guest runs every requested mode, the real kube-proxy's too, with its bounds on waits scaled", () => {
    const options = benchOptions(
      {
        quick: true,
        modes: 'ipvs,kube-proxy-ipvs,iptables,kube-proxy-iptables',
        services: '1,100',
        endpoints: '3',
        reps: '2',
        seconds: '1',
        out: 'bench/results',
        iptablesBackend: 'auto',
        ipvsLab: true,
      },
      () => {},
    );
    expect(options.cell.timeoutScale).toBe(1);
    const args = guestBenchArgs(options);
    const flag = (name: string) => args[args.indexOf(name) + 1];
    expect(args[0]).toBe('bench');
    expect(flag('--modes')).toBe('ipvs,kube-proxy-ipvs,iptables,kube-proxy-iptables');
    expect(flag('--services')).toBe('1,100');
    expect(flag('--families')).toBe('IPv4,IPv6');
    expect(flag('--endpoints')).toBe('3');
    expect(flag('--reps')).toBe('2');
    expect(flag('--seconds')).toBe('1');
    expect(flag('--offered-rate')).toBe('500');
    expect(flag('--iptables-backend')).toBe('auto');
    expect(flag('--timeout-scale')).toBe(String(LAB_TIMEOUT_SCALE));
    expect(flag('--out')).toBe('/run/lab');
    expect(args).toContain('--quick');
    expect(args).not.toContain('--ipvs-lab');
    // What the guest is given, read back by the guest's own flag parsing.
    const guest = benchOptions(
      {
        modes: flag('--modes') as string,
        endpoints: flag('--endpoints') as string,
        timeoutScale: flag('--timeout-scale'),
        out: '/run/lab',
        iptablesBackend: 'auto',
      },
      () => {},
    );
    expect(guest.cell.timeoutScale).toBe(LAB_TIMEOUT_SCALE);
    expect(() =>
      benchOptions(
        { modes: 'ipvs', endpoints: '3', timeoutScale: '0', out: 'x', iptablesBackend: 'auto' },
        () => {},
      ),
    ).toThrow(/--timeout-scale/);
  });

  it("the guest's bench inherits PATH and where the control-plane binaries are cached, nothing else", () => {
    expect(
      guestEnvironment({ PATH: '/usr/sbin:/usr/bin', HOME: '/root', KBP_CACHE_DIR: '/cache', TERM: 'xterm' }),
    ).toEqual({ PATH: '/usr/sbin:/usr/bin', HOME: '/root', KBP_CACHE_DIR: '/cache' });
    expect(guestEnvironment({})).toEqual({});
  });
});

describe('the cell list', () => {
  it('N ascending, in each repetition every family, in each family every mode, rotated per repetition', () => {
    const options = benchOptions(
      {
        modes: 'bpf,iptables,kube-proxy-iptables',
        services: '1000,1',
        controlPlaneServices: '10000',
        reps: '2',
        endpoints: '10',
        out: 'x',
        iptablesBackend: 'auto',
      },
      () => {},
    );
    expect(options.families).toEqual(['IPv4', 'IPv6']);
    const cells = benchCells(benchMatrix(options, options.modes), options.reps);
    const line = (c: (typeof cells)[number]) =>
      `${c.services} ${c.rep} ${c.family} ${c.mode}${c.dataPlane ? '' : ' (control plane)'}`;
    expect(cells.map(line)).toEqual([
      '1 0 IPv4 bpf',
      '1 0 IPv4 iptables',
      '1 0 IPv4 kube-proxy-iptables',
      '1 0 IPv6 bpf',
      '1 0 IPv6 iptables',
      '1 0 IPv6 kube-proxy-iptables',
      '1 1 IPv4 iptables',
      '1 1 IPv4 kube-proxy-iptables',
      '1 1 IPv4 bpf',
      '1 1 IPv6 iptables',
      '1 1 IPv6 kube-proxy-iptables',
      '1 1 IPv6 bpf',
      ...['0 IPv4', '0 IPv6', '1 IPv4', '1 IPv6'].flatMap((repFamily) =>
        (repFamily.startsWith('0')
          ? ['bpf', 'iptables', 'kube-proxy-iptables']
          : ['iptables', 'kube-proxy-iptables', 'bpf']
        ).map((mode) => `1000 ${repFamily} ${mode}`),
      ),
      '10000 0 IPv4 bpf (control plane)',
      '10000 1 IPv4 bpf (control plane)',
    ]);
  });

  it('--families picks the families, IPv4 first, and refuses anything else', () => {
    const flags = { modes: 'bpf', endpoints: '10', out: 'x', iptablesBackend: 'auto' as const };
    expect(benchOptions({ ...flags, families: 'IPv6' }, () => {}).families).toEqual(['IPv6']);
    expect(benchOptions({ ...flags, families: 'IPv6, IPv4' }, () => {}).families).toEqual(['IPv4', 'IPv6']);
    expect(benchOptions({ ...flags, quick: true }, () => {}).families).toEqual(['IPv4', 'IPv6']);
    expect(() => benchOptions({ ...flags, families: 'IPv4,ipv7' }, () => {})).toThrow(/--families.*ipv7/);
    const cells = benchCells(
      benchMatrix(
        benchOptions({ ...flags, families: 'IPv6', services: '5', controlPlaneServices: '' }, () => {}),
        ['bpf'],
      ),
      1,
    );
    expect(cells).toEqual([{ services: 5, family: 'IPv6', rep: 0, mode: 'bpf', dataPlane: true }]);
  });

  it("--bpf-host-routing reaches the bpf modes' agent config; unset, the agent's default", () => {
    const flags = { modes: 'bpf', endpoints: '10', out: 'x', iptablesBackend: 'auto' as const };
    expect(benchOptions({ ...flags, bpfHostRouting: 'stack' }, () => {}).cell.hostRouting).toBe('stack');
    expect(benchOptions(flags, () => {}).cell).not.toHaveProperty('hostRouting');
  });

  it("a run's plots: each measure's of each family (IPv4's under the measure's own name), and the BPF cost", () => {
    const aggregates = aggregate([
      { measure: 'crrPerSec', mode: 'bpf', services: 1, rep: 0, value: 1 },
      { measure: 'crrPerSec', mode: 'bpf', family: 'IPv6', services: 1, rep: 0, value: 1 },
    ]);
    const files = plotFiles({ aggregates });
    expect(files).toEqual([...MEASURE_IDS, ...MEASURE_IDS.map((m) => `${m}-ipv6`), 'bpfCost']);
    expect(plotFiles({ aggregates: aggregates.slice(0, 1) })).toEqual([...MEASURE_IDS, 'bpfCost']);
    expect(
      reportInput({
        modes: ['bpf'],
        settings: { serviceCounts: [1], controlPlaneServiceCounts: [] },
        aggregates,
        bpfCost: [],
        unavailable: [],
        failures: [],
      } as unknown as Parameters<typeof reportInput>[0]).families,
    ).toEqual(['IPv4', 'IPv6']);
  });
});

describe('plot', () => {
  it('draws one line per series with log-scale x ticks and a legend', () => {
    const svg = chartSvg({
      title: 'conn/s <vs> N',
      xLabel: 'services',
      yLabel: 'conn/s',
      series: [
        { name: 'bpf', color: '#1b7837', points: [1, 1000, 30000].map((x) => ({ x, y: 5000 })) },
        {
          name: 'iptables',
          color: '#c51b7d',
          points: [1, 1000, 30000].map((x, i) => ({ x, y: 5000 - i * 1500 })),
        },
      ],
    });
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.match(/<path /g)).toHaveLength(2);
    expect(svg).toContain('conn/s &lt;vs&gt; N');
    for (const tick of ['>1<', '>10<', '>100<', '>1k<', '>10k<', '>100k<']) expect(svg).toContain(tick);
    expect(svg).toContain('>iptables<');
  });

  it('is as wide as its longest legend name needs, so no name is cut at the right edge', () => {
    const names = ['bpf median', 'kube-proxy-iptables median'];
    const svg = chartSvg({
      title: 't',
      xLabel: 'services',
      yLabel: 'conn/s',
      series: names.map((name) => ({ name, color: '#000', points: [{ x: 1, y: 1 }] })),
    });
    const width = Number(/<svg[^>]* width="(\d+)"/.exec(svg)?.[1]);
    const nameX = Number(/<text x="([\d.]+)"[^>]*>kube-proxy-iptables median</.exec(svg)?.[1]);
    // 26 characters of DejaVu Sans at 12 px are under 7.5 px each.
    expect(width - nameX).toBeGreaterThanOrEqual(26 * 7.5);
    expect(chartWidth(['bpf'])).toBeLessThan(chartWidth(names));
  });

  it("draws a time series of an hour's samples as a thin line in a wider plot, a few points with dots", () => {
    const series = (n: number) => ({
      name: 'node-a',
      color: '#000',
      points: Array.from({ length: n }, (_, i) => ({ x: i / 12, y: 100 + (i % 7) })),
    });
    const chart = { title: 't', xLabel: 'minutes', yLabel: 'MiB', xScale: 'linear' as const };
    const hour = chartSvg({ ...chart, plotWidth: 900, series: [series(720)] });
    expect(hour).not.toContain('<circle');
    expect(hour).toContain('stroke-width="1.5"');
    expect(Number(/<svg[^>]* width="(\d+)"/.exec(hour)?.[1])).toBe(chartWidth(['node-a'], 900));
    expect(chartWidth(['node-a'], 900)).toBe(chartWidth(['node-a']) + 450);
    const few = chartSvg({ ...chart, series: [series(12)] });
    expect(few.match(/<circle/g)).toHaveLength(12);
    // A rate whose last window is nearly empty stays on a linear axis when asked; only zeros (no
    // failed request) still get an axis up to 1.
    const rate = { name: 'answered', color: '#000', points: [100, 110, 0.4].map((y, x) => ({ x, y })) };
    expect(chartSvg({ ...chart, series: [rate] })).toContain('(log scale)');
    expect(chartSvg({ ...chart, yScale: 'linear', series: [rate] })).not.toContain('(log scale)');
    const zeros = chartSvg({ ...chart, series: [{ ...rate, points: [0, 0].map((y, x) => ({ x, y })) }] });
    expect(zeros).toMatch(/dominant-baseline="middle">1<\/text>/);
  });

  it('draws each spread as a whisker, a reference line, and stacks charts into one picture', () => {
    const chart = {
      title: 't',
      xLabel: 'services',
      yLabel: 'conn/s',
      reference: 1,
      series: [
        { name: 'bpf', color: '#1b7837', points: [{ x: 1, y: 5 }], spread: [{ x: 1, lo: 4, hi: 6 }] },
        { name: 'iptables', color: '#c51b7d', points: [{ x: 1, y: 5 }], spread: [{ x: 1, lo: 3, hi: 7 }] },
      ],
    };
    const svg = chartSvg(chart);
    const whiskers = [...svg.matchAll(/<path d="M([\d.]+),[\d.]+ H[\d.]+ M([\d.]+),/g)];
    expect(whiskers).toHaveLength(2);
    // Side by side at the same N, not on top of each other.
    expect(whiskers[0]![2]).not.toEqual(whiskers[1]![2]);
    expect(svg).toContain('stroke-dasharray="3 3"');
    const stacked = stackedSvg([chart, chart]);
    expect(stacked.match(/<svg /g)).toHaveLength(3);
    expect(Number(/^<svg[^>]* height="(\d+)"/.exec(stacked)?.[1])).toBe(
      2 * Number(/^<svg[^>]* height="(\d+)"/.exec(svg)?.[1]),
    );
  });

  it('gives a throughput its median and min–max over the repetitions, no p99, and the ratio to the real kube-proxy', () => {
    const sample = (mode: Sample['mode'], rep: number, value: number): Sample => ({
      measure: 'crrPerSec',
      mode,
      family: 'IPv4',
      services: 1,
      rep,
      value,
    });
    const samples = [
      sample('bpf', 0, 900),
      sample('bpf', 1, 1000),
      sample('bpf', 2, 1300),
      sample('kube-proxy-nftables', 0, 500),
      sample('kube-proxy-nftables', 1, 520),
    ];
    const run = {
      modes: ['bpf', 'kube-proxy-nftables'] as Sample['mode'][],
      samples,
      aggregates: aggregate(samples),
    };
    const [values, ratios] = measureCharts(run, [1], 'crrPerSec', 'IPv4');
    const bpf = values!.series.find((s) => s.name.startsWith('bpf'))!;
    expect(bpf.points).toEqual([{ x: 1, y: 1000 }]);
    expect(bpf.spread).toEqual([{ x: 1, lo: 900, hi: 1300 }]);
    expect(values!.series.some((s) => s.name.includes('p99'))).toBe(false);
    expect(ratios!.reference).toBe(1);
    expect(ratios!.series).toEqual([
      expect.objectContaining({ name: 'bpf ÷ kube-proxy-nftables', points: [{ x: 1, y: 2 }] }),
    ]);
    // No data, no panel lines (and no ratio panel).
    expect(measureCharts(run, [1], 'tcpConnectUs', 'IPv4')).toEqual([
      expect.objectContaining({ series: [] }),
    ]);
  });

  it('puts the top tick at or above the largest value, so every point stays inside the frame', () => {
    expect(linearTicks(0, 9980)).toEqual([0, 2000, 4000, 6000, 8000, 10000]);
    expect(linearTicks(0, 8000)).toEqual([0, 2000, 4000, 6000, 8000]);
    for (const hi of [1, 7.3, 99, 101, 4321, 9980, 123456])
      expect(linearTicks(0, hi).at(-1)).toBeGreaterThanOrEqual(hi);
  });
});

describe('tool output parsers', () => {
  it('wrk', () => {
    const out = `Running 3s test @ http://10.96.0.1:80/\n  1 threads and 2 connections\n  65347 requests in 3.00s, 6.30MB read\nRequests/sec:  21778.62\nTransfer/sec:      2.10MB\n`;
    expect(parseWrk(out)).toEqual({ requestsPerSec: 21778.62, requests: 65347, errors: 0 });
    expect(
      parseWrk(
        `${out}  Socket errors: connect 1, read 2, write 0, timeout 3\n  Non-2xx or 3xx responses: 4\n`,
      ).errors,
    ).toBe(10);
    expect(() => parseWrk('unable to connect')).toThrow();
  });

  it('loadgen', () => {
    expect(parseLoadgen('{"attempts":10,"errors":1,"elapsedUs":1000}\n')).toEqual({
      attempts: 10,
      errors: 1,
      elapsedUs: 1000,
    });
    expect(parseColumns('1.5 3.0\n2.5 4.0\n', 2)).toEqual([
      [1.5, 2.5],
      [3, 4],
    ]);
  });
});
