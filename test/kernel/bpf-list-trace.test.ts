import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { testRun } from '../../native/libbpf/test-run.js';
import type { ServicePortDecision } from '../../src/brain/types.js';
import { listCommand } from '../../src/cli/list.js';
import { formatTrace, parseTraceInput, traceCommand } from '../../src/cli/trace.js';
import { loadConfig } from '../../src/config/load.js';
import type { ProxyConfig } from '../../src/config/types.js';
import { BpfDataplane } from '../../src/dataplanes/bpf/dataplane.js';
import type { FrontendView } from '../../src/dataplanes/bpf/inspect-list.js';
import { PROGRAMS } from '../../src/dataplanes/bpf/layout.js';
import { silentLogger } from '../../src/logger.js';
import { buildPacket, IPPROTO_TCP, IPPROTO_UDP, parsePacket, TCP } from '../../src/net/packets.js';
import { decisions, ep, servicePort } from '../support/bpf-fixtures.js';
import { describeRoot } from '../support/privileges.js';

const pinPath = `/sys/fs/bpf/kbp-test-list-${process.pid}`;
const CLIENT = '10.2.0.9';
const OUTSIDE = '198.18.0.7';

function config(): ProxyConfig {
  const loaded = loadConfig({ flags: {} });
  if (!loaded.ok) throw new Error('default config does not load');
  const c = loaded.config;
  c.bpf = {
    ...c.bpf,
    pinPath,
    // The default (host) would attach the socket hooks at the machine's cgroup2 root; this test
    // lists and traces the tc and XDP programs only.
    socketLB: 'off',
    podInterfaces: [],
    externalInterfaces: [],
    maglevTableSize: 251,
    mapSizes: {
      services: 256,
      backends: 256,
      // Eight backends below: the last id handed out (8) has no counters of its own.
      backendCounters: 8,
      backendSlots: 1024,
      conntrack: 1024,
      affinity: 256,
      sourceRanges: 64,
      socketReverse: 64,
    },
  };
  return c;
}

function services(udpBackends: string[]): ServicePortDecision[] {
  return [
    servicePort('ns', 'web', {
      clusterIP: '10.96.0.10',
      schedulerAnnotation: 'rr',
      endpoints: [ep('10.1.0.1', 8080), ep('10.1.0.2', 8080)],
    }),
    servicePort('ns', 'hash', {
      clusterIP: '10.96.0.11',
      schedulerAnnotation: 'maglev',
      endpoints: [ep('10.1.0.3', 8080), ep('10.1.0.4', 8080), ep('10.1.0.5', 8080)],
    }),
    servicePort('ns', 'fw', {
      type: 'LoadBalancer',
      clusterIP: '10.96.0.12',
      externallyAccessible: true,
      loadBalancerIPs: ['203.0.113.10'],
      loadBalancerSourceRanges: ['198.18.0.0/24'],
      sessionAffinityTimeoutSeconds: 600,
      endpoints: [ep('10.1.0.6', 8080)],
    }),
    servicePort('ns', 'empty', { clusterIP: '10.96.0.13' }),
    servicePort('ns', 'dns', {
      clusterIP: '10.96.0.53',
      protocol: 'UDP',
      port: 53,
      // Round robin: the UDP flows below alternate between the two backends.
      schedulerAnnotation: 'rr',
      endpoints: udpBackends.map((ip) => ep(ip, 53)),
    }),
  ];
}

describeRoot('list and trace on a live data plane', () => {
  let dp: BpfDataplane;
  let namesDir: string;
  let namesFile: string;
  const send = (
    prog: string,
    saddr: string,
    daddr: string,
    dport: number,
    opts: { sport: number; proto?: number; flags?: number },
  ) =>
    parsePacket(
      testRun(dp.lb.prog(prog), {
        data: buildPacket({
          saddr,
          daddr,
          proto: (opts.proto ?? IPPROTO_TCP) as typeof IPPROTO_TCP,
          sport: opts.sport,
          dport,
          tcpFlags: opts.flags ?? TCP.SYN,
        }),
      }).dataOut,
    );
  const trace = (src: string, dst: string, proto: string, extra: { from?: string; syn?: boolean } = {}) =>
    JSON.parse(
      traceCommand({
        pinPath,
        source: src,
        destination: dst,
        protocol: proto,
        from: extra.from ?? 'pod',
        syn: extra.syn ?? true,
        output: 'json',
        namesFile,
      }),
    );

  beforeAll(async () => {
    namesDir = mkdtempSync(join(tmpdir(), 'kbp-names-'));
    namesFile = join(namesDir, 'names.json');
    dp = await BpfDataplane.open(config(), silentLogger, {
      watchInterfaces: false,
      conntrackGC: false,
      namesFile,
    });
    await dp.sync(decisions(services(['10.1.0.53', '10.1.0.54'])), {
      changedServices: new Set(),
      full: true,
      reason: 'first sync',
    });
  });
  afterAll(async () => {
    await dp?.close();
    rmSync(pinPath, { recursive: true, force: true });
    rmSync(namesDir, { recursive: true, force: true });
  });

  it('traces what a new flow gets and the datapath agrees (rr, Maglev)', () => {
    const rr = trace(`${CLIENT}:40001`, '10.96.0.10:80', 'tcp');
    expect(rr).toMatchObject({ verdict: 'translate', servicePort: 'ns/web', deterministic: false });
    const got = send(PROGRAMS.tcFromPod, CLIENT, '10.96.0.10', 80, { sport: 40001 });
    expect(rr.backend).toBe(`${got.daddr}:${got.dport}`);
    // The counter moved on: the next flow goes to the other backend.
    const next = trace(`${CLIENT}:40002`, '10.96.0.10:80', 'tcp');
    expect(next.backend).not.toBe(rr.backend);

    for (const sport of [41000, 41001, 41002, 41003]) {
      const m = trace(`${CLIENT}:${sport}`, '10.96.0.11:80', 'tcp');
      expect(m).toMatchObject({ verdict: 'translate', deterministic: true });
      const out = send(PROGRAMS.tcFromPod, CLIENT, '10.96.0.11', 80, { sport });
      expect(m.backend).toBe(`${out.daddr}:${out.dport}`);
    }
  });

  it('traces a tracked flow, and its replies, to the backend it has', () => {
    const t = trace(`${CLIENT}:40001`, '10.96.0.10:80', 'tcp', { syn: false });
    expect(t.verdict).toBe('translate');
    expect(t.steps[0].result).toMatch(/packet of a tracked flow/);
    const [host, port] = t.backend.split(':');
    const reply = trace(`${host}:${port}`, `${CLIENT}:40001`, 'tcp', { syn: false });
    expect(reply.steps[0].result).toMatch(/reply of a tracked flow/);
    expect(reply.backend).toBe('10.96.0.10:80');
  });

  it('traces drops, rejects, source ranges, affinity and packets that are not ours', () => {
    expect(trace(`${CLIENT}:1000`, '10.96.0.13:80', 'tcp')).toMatchObject({
      verdict: 'reject',
      servicePort: 'ns/empty',
    });
    expect(trace(`${CLIENT}:1000`, '10.96.0.99:80', 'tcp')).toMatchObject({
      verdict: 'pass',
      frontend: null,
    });
    expect(trace(`${OUTSIDE}:1000`, '10.96.0.10:80', 'tcp', { from: 'external' }).verdict).toBe('pass');
    expect(trace('192.0.2.1:1000', '203.0.113.10:80', 'tcp', { from: 'external' }).verdict).toBe('drop');
    const allowed = trace(`${OUTSIDE}:1000`, '203.0.113.10:80', 'tcp', { from: 'external' });
    expect(allowed).toMatchObject({ verdict: 'translate', candidates: ['10.1.0.6:8080'] });
    expect(allowed.steps.map((s: { step: string }) => s.step)).toContain('affinity');
    const text = formatTrace(
      parseTraceInput({
        source: `${OUTSIDE}:1000`,
        destination: '203.0.113.10:80',
        protocol: 'tcp',
        from: 'external',
        syn: true,
      }),
      allowed,
    );
    expect(text).toMatch(/source ranges +198\.18\.0\.7 is inside loadBalancerSourceRanges/);
    expect(() =>
      parseTraceInput({ source: 'x', destination: '1.2.3.4:80', protocol: 'tcp', from: 'pod', syn: true }),
    ).toThrow(/SRC must be/);
  });

  it('lists frontends, backends and counters from the pinned maps', async () => {
    const listed = JSON.parse(await listCommand({ pinPath, output: 'json', namesFile }));
    expect(Array.isArray(listed.attachments)).toBe(true);
    const views = listed.frontends as FrontendView[];
    const web = views.find((v) => v.frontend === 'TCP/10.96.0.10:80')!;
    expect(web).toMatchObject({
      kind: 'ClusterIP',
      servicePort: 'ns/web',
      scheduler: 'rr',
      action: 'forward',
    });
    expect(web.stats.connections).toBe(1);
    expect(web.stats.inPackets).toBe(1);
    expect(web.backends.map((b) => `${b.address}:${b.port}`).sort()).toEqual([
      '10.1.0.1:8080',
      '10.1.0.2:8080',
    ]);
    expect(web.backends.reduce((n, b) => n + (b.stats?.connections ?? 0), 0)).toBe(1);
    const lb = views.find((v) => v.frontend === 'TCP/203.0.113.10:80')!;
    expect(lb.flags).toEqual(['affinity=600s', 'source-ranges']);
    expect(views.find((v) => v.servicePort === 'ns/empty')!.action).toBe('reject');
    // Backend id 8 is past kbp_best_v1: listed without counters, left out of the per-backend
    // metrics and counted in the gauge; its traffic is in its service's counters.
    const uncounted = views.flatMap((v) => v.backends).filter((b) => b.stats === null);
    expect(uncounted.map((b) => b.id)).toEqual([8]);
    const metrics = dp.read();
    expect(metrics.backendsNotCounted).toBe(1);
    expect(metrics.backends).toHaveLength(7);
    const text = await listCommand({ pinPath, output: 'table', namesFile });
    const row = text
      .split('\n')
      .find((l) => l.includes(`-> ${uncounted[0]!.address}:${uncounted[0]!.port}`))!;
    expect(row.trim().split(/ +/).slice(-6)).toEqual(['-', '-', '-', '-', '-', '-']);
    expect(text.split('\n')[0]).toMatch(/^FRONTEND +KIND +SERVICE +SCHEDULER +CONNS +INPKTS/);
    expect(text).toMatch(/TCP\/10\.96\.0\.11:80 +ClusterIP +ns\/hash +maglev +4 +4/);
    expect(text).toMatch(/ {2}-> 10\.1\.0\.6:8080/);
    // The metrics see the same counters.
    const stats = dp.read();
    expect(stats.services.find((s) => s.name === 'hash')!.newConnections).toBe(4n);
  });

  it('collects conntrack and deletes UDP flows towards a removed backend', async () => {
    for (const sport of [5000, 5001, 5002, 5003]) {
      send(PROGRAMS.tcFromPod, CLIENT, '10.96.0.53', 53, { sport, proto: IPPROTO_UDP });
    }
    const [tcp, udp] = await dp.collectConntrack();
    // Five TCP flows (one rr, four Maglev) and four UDP flows, two entries each.
    expect(tcp!.scanned).toBe(2 * 5);
    expect(udp!.scanned).toBe(2 * 4);
    const backendOf = (sport: number) =>
      trace(`${CLIENT}:${sport}`, '10.96.0.53:53', 'udp').backend as string;
    const before = [5000, 5001, 5002, 5003].map(backendOf);
    const kept = before[0]!;
    await dp.sync(decisions(services([kept.split(':')[0]!])), {
      changedServices: new Set(['ns/dns']),
      full: false,
      reason: 'changed Services',
    });
    const after = (await dp.collectConntrack())[1]!;
    expect(new Set(before).size).toBe(2);
    expect(after.scanned).toBe(2 * before.filter((b) => b === kept).length);
    for (const [i, sport] of [5000, 5001, 5002, 5003].entries()) {
      const t = trace(`${CLIENT}:${sport}`, '10.96.0.53:53', 'udp');
      expect(t.steps[0].result.startsWith('packet of a tracked flow')).toBe(before[i] === kept);
    }
  });

  it('a dual-stack Service: the agent programs both families, trace takes IPv6 tuples and the datapath agrees', async () => {
    const v4 = decisions(services(['10.1.0.53']));
    const v6 = decisions(
      [
        servicePort('ns', 'hash', {
          family: 'IPv6',
          clusterIP: 'fd00::11',
          schedulerAnnotation: 'maglev',
          endpoints: [ep('fd00:1::3', 8080), ep('fd00:1::4', 8080), ep('fd00:1::5', 8080)],
        }),
      ],
      { family: 'IPv6', nodeIP: 'fd00::1' },
    );
    await dp.sync(
      { ...v4, families: [...v4.families, ...v6.families] },
      {
        changedServices: new Set(),
        full: true,
        reason: 'first sync',
      },
    );
    const client6 = 'fd00:2::9';
    for (const sport of [42000, 42001, 42002, 42003]) {
      const t = trace(`[${client6}]:${sport}`, '[fd00::11]:80', 'tcp');
      expect(t).toMatchObject({ verdict: 'translate', servicePort: 'ns/hash', deterministic: true });
      const out = send(PROGRAMS.tcFromPod, client6, 'fd00::11', 80, { sport });
      expect(t.backend).toBe(`[${out.daddr}]:${out.dport}`);
      const tracked = trace(`[${client6}]:${sport}`, '[fd00::11]:80', 'tcp', { syn: false });
      expect(tracked.steps[0].result).toMatch(/packet of a tracked flow/);
    }
    // The IPv4 frontend of the same Service is still served.
    expect(trace(`${CLIENT}:43000`, '10.96.0.11:80', 'tcp')).toMatchObject({ verdict: 'translate' });
    expect(await listCommand({ pinPath, output: 'table', namesFile })).toMatch(
      /TCP\/\[fd00::11\]:80 +ClusterIP +ns\/hash/,
    );
    expect(() =>
      parseTraceInput({
        source: `${CLIENT}:1`,
        destination: '[fd00::11]:80',
        protocol: 'tcp',
        from: 'pod',
        syn: true,
      }),
    ).toThrow(/one family/);
  });
});
