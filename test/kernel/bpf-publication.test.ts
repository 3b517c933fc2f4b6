// Publication through the agent's own writer and store into the loaded object, with the programs
// run (BPF_PROG_TEST_RUN) against what was published: the node configuration flips as a whole
// generation, a two-scope service's internal entry is live before the entry that sends pods to
// it, affinity lets go of a removed backend at the flip, not after the grace period, changes in
// quick succession are each published at once, and frontends with the same backends read one
// Maglev table, rewritten in place where its entries moved.

import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dumpMap, mapLookup, mapUpdate } from '../../native/libbpf/map.js';
import { testRun } from '../../native/libbpf/test-run.js';
import type { ProxyDecisions } from '../../src/brain/types.js';
import { maglevIndex } from '../../src/dataplanes/bpf/flow-hash.js';
import { encodeFrontendKey } from '../../src/dataplanes/bpf/frontend-codec.js';
import { IdAllocator } from '../../src/dataplanes/bpf/ids.js';
import {
  CONFIG_GRACE_MS,
  KernelStore,
  liveConfigGen,
  readMaglevTable,
} from '../../src/dataplanes/bpf/kernel-store.js';
import { type BpfConfigValue, config, PROGRAMS, svc4Key, u32Codec } from '../../src/dataplanes/bpf/layout.js';
import { buildMaglevTable } from '../../src/dataplanes/bpf/maglev.js';
import { type LoadedObject, loadPinnedObject } from '../../src/dataplanes/bpf/object.js';
import { type PlanOptions, planBpf } from '../../src/dataplanes/bpf/plan.js';
import type { FrontendEntry } from '../../src/dataplanes/bpf/store.js';
import { MapWriter } from '../../src/dataplanes/bpf/writer.js';
import { silentLogger } from '../../src/logger.js';
import { buildPacket, IPPROTO_TCP, parsePacket, TCP } from '../../src/net/packets.js';
import { bpfConfig, decisions, ep, servicePort } from '../support/bpf-fixtures.js';
import { describeRoot } from '../support/privileges.js';

const pinPath = `/sys/fs/bpf/hdp-pub-${process.pid}`;
const mapSizes = { ...bpfConfig().mapSizes, conntrack: 1024, affinity: 1024 };

const NODE_CONFIG: BpfConfigValue = {
  snatAddr4: '192.168.50.1',
  snatAddr6: '::',
  snatPortMin: 61000,
  snatPortMax: 61999,
  maglevSize: 251,
  hashSeed: 0x1234abcd,
  nodeportMin: 30000,
  nodeportMax: 32767,
  newFlowRate: 0,
};

describeRoot('publication into the loaded object', () => {
  let lb: LoadedObject;
  let store: KernelStore;
  let writer: MapWriter;
  let ids: ReturnType<typeof planBpf>;
  /** Called before each upsertFrontends reaches the kernel. */
  let beforeFrontends: (entries: readonly FrontendEntry[]) => void = () => {};

  const plan = (d: ProxyDecisions, options: Partial<PlanOptions> = {}) => {
    ids = planBpf(
      d,
      {
        ...options,
        defaultScheduler: options.defaultScheduler ?? 'random',
        maglevFrontends: 'external',
        families: store.families,
        capacity: { frontends: 1024, backends: 1024, slots: 4096, sourceRanges: 1024 },
        nowMs: Date.now(),
      },
      ids ?? {
        serviceIds: new IdAllocator('service', 1, lb.capacity.svcStats - 1, 3_600_000),
        backendIds: new IdAllocator('backend', 1, lb.capacity.backendStats - 1, 3_600_000),
      },
    );
    return ids;
  };

  beforeAll(async () => {
    lb = await loadPinnedObject({ pinPath, mapSizes, log: silentLogger });
    store = new KernelStore(lb.fd, lb.capacity);
    const upsert = store.upsertFrontends.bind(store);
    store.upsertFrontends = (entries) => {
      beforeFrontends(entries);
      upsert(entries);
    };
    // The agent's grace period: the tests look right after a flip, well within it.
    writer = new MapWriter(store, { maglevTableSize: 251, graceMs: 1000 });
    store.writeConfig(NODE_CONFIG);
  });
  afterAll(() => {
    lb?.close();
    rmSync(pinPath, { recursive: true, force: true });
  });

  const CLIENT = '10.244.1.10';
  let nextPort = 30000;
  const syn = (daddr: string, saddr = CLIENT) =>
    buildPacket({ saddr, daddr, proto: IPPROTO_TCP, sport: nextPort++, dport: 80, tcpFlags: TCP.SYN });
  const fromPod = (frame: Buffer) => testRun(lb.prog(PROGRAMS.tcFromPod), { data: frame });

  describe('the node configuration', () => {
    it('is written into the generation the programs do not read, then flipped', () => {
      const slot = (gen: number) => {
        const value = Buffer.alloc(config.size);
        mapLookup(lb.fd.config, u32Codec.encode(gen), value);
        return config.decode(value);
      };
      const live = liveConfigGen(lb.fd);
      expect(slot(live)).toEqual(NODE_CONFIG);
      const next = { ...NODE_CONFIG, nodeportMin: 31000 };
      store.writeConfig(next);
      expect(liveConfigGen(lb.fd)).toBe(live ^ 1);
      expect(slot(live ^ 1)).toEqual(next);
      // The generation programs may still be reading was not touched.
      expect(slot(live)).toEqual(NODE_CONFIG);
      expect(store.readConfig()).toEqual(next);
      // ... and is not rewritten before the grace period is over.
      expect(store.configGraceRemainingMs()).toBeGreaterThan(0);
      expect(store.configGraceRemainingMs()).toBeLessThanOrEqual(CONFIG_GRACE_MS);
      store.writeConfig(NODE_CONFIG);
    });

    it('the programs read the live generation only', async () => {
      // NodePort 30300 on the node address: served only while the live config's NodePort range
      // covers it; the other generation's range never applies.
      const web = servicePort('ns', 'np', {
        clusterIP: '10.96.3.1',
        type: 'NodePort',
        nodePort: 30300,
        externallyAccessible: true,
        endpoints: [ep('10.244.2.31', 8080, { isLocal: true })],
      });
      await writer.apply(plan(decisions([web])));
      const nodePortFrame = () =>
        buildPacket({
          saddr: CLIENT,
          daddr: '192.168.50.1',
          proto: IPPROTO_TCP,
          sport: nextPort++,
          dport: 30300,
          tcpFlags: TCP.SYN,
        });
      mapUpdate(lb.fd.nodeAddrs4, Buffer.from([192, 168, 50, 1]), u32Codec.encode(1));
      expect(parsePacket(fromPod(nodePortFrame()).dataOut).daddr).toBe('10.244.2.31');
      // A range that excludes the port, written to the other generation but not flipped.
      const off = { ...NODE_CONFIG, nodeportMin: 31000, nodeportMax: 31000 };
      mapUpdate(lb.fd.config, u32Codec.encode(liveConfigGen(lb.fd) ^ 1), config.encode(off));
      expect(parsePacket(fromPod(nodePortFrame()).dataOut).daddr).toBe('10.244.2.31');
      await new Promise((resolve) => setTimeout(resolve, store.configGraceRemainingMs()));
      store.writeConfig(off);
      expect(parsePacket(fromPod(nodePortFrame()).dataOut).daddr).toBe('192.168.50.1');
      await new Promise((resolve) => setTimeout(resolve, store.configGraceRemainingMs()));
      store.writeConfig(NODE_CONFIG);
    });
  });

  it('a two-scope service: the internal entry is live before the entry that sends pods to it', async () => {
    const lbService = (externalPolicyLocal: boolean) =>
      servicePort('ns', 'split', {
        clusterIP: '10.96.4.1',
        type: 'LoadBalancer',
        loadBalancerIPs: ['198.51.100.41'],
        externallyAccessible: true,
        externalPolicyLocal,
        endpoints: [ep('10.244.2.41', 8080, { isLocal: true }), ep('10.244.9.41', 8080, { isLocal: false })],
      });
    await writer.apply(plan(decisions([lbService(false)])));
    const seen: string[] = [];
    beforeFrontends = (entries) => {
      for (const f of entries) {
        if (f.key.scope !== 'all' || !f.value.hasInternalScope) continue;
        const sibling = svc4Key.encode(encodeFrontendKey({ ...f.key, scope: 'internal' }));
        seen.push(
          `${f.key.address}: sibling ${mapLookup(lb.fd.svc4, sibling, Buffer.alloc(24)) ? 'live' : 'missing'}`,
        );
      }
    };
    try {
      const result = await writer.apply(plan(decisions([lbService(true)])));
      expect(result.failures).toEqual([]);
    } finally {
      beforeFrontends = () => {};
    }
    expect(seen).toEqual(['198.51.100.41: sibling live']);
    // Pods reach both endpoints through the internal entry; outside traffic only the local one.
    const podPicks = new Set<string>();
    for (let i = 0; i < 32; i++) podPicks.add(parsePacket(fromPod(syn('198.51.100.41')).dataOut).daddr);
    expect([...podPicks].sort()).toEqual(['10.244.2.41', '10.244.9.41']);
  });

  it('affinity lets go of a removed backend at the flip, before the grace period', async () => {
    const sticky = (ips: string[]) =>
      servicePort('ns', 'sticky', {
        clusterIP: '10.96.5.1',
        sessionAffinityTimeoutSeconds: 600,
        endpoints: ips.map((ip) => ep(ip, 8080, { isLocal: true })),
      });
    await writer.apply(plan(decisions([sticky(['10.244.2.51', '10.244.2.52'])])));
    const client = '10.244.1.51';
    const first = parsePacket(fromPod(syn('10.96.5.1', client)).dataOut).daddr;
    for (let i = 0; i < 5; i++)
      expect(parsePacket(fromPod(syn('10.96.5.1', client)).dataOut).daddr).toBe(first);
    const remaining = first === '10.244.2.51' ? '10.244.2.52' : '10.244.2.51';
    await writer.apply(plan(decisions([sticky([remaining])])));
    // The old generation and the backend entry are still there (grace period); the pair is not.
    for (let i = 0; i < 5; i++)
      expect(parsePacket(fromPod(syn('10.96.5.1', client)).dataOut).daddr).toBe(remaining);
  });

  it('publishes changes in quick succession at once, each served as soon as it is written', async () => {
    const quick = (ip: string) =>
      servicePort('ns', 'quick', { clusterIP: '10.96.6.1', endpoints: [ep(ip, 8080, { isLocal: true })] });
    await writer.apply(plan(decisions([quick('10.244.2.61')])));
    const servedBy = () => parsePacket(fromPod(syn('10.96.6.1')).dataOut).daddr;
    expect(servedBy()).toBe('10.244.2.61');
    const latencies: number[] = [];
    for (const ip of ['10.244.2.62', '10.244.2.63']) {
      const started = performance.now();
      const result = await writer.apply(plan(decisions([quick(ip)])));
      latencies.push(performance.now() - started);
      expect(result.failures).toEqual([]);
      expect(servedBy()).toBe(ip);
    }
    // Within the 1 s grace period of the first change: three generations are in the map.
    const quickId = ids.frontends.find((f) => f.servicePortName === 'ns/quick')!.serviceId;
    const slots = store.read().slots.filter((s) => s.serviceId === quickId);
    expect(slots.map((s) => s.gen).sort()).toEqual([0, 1, 2]);
    console.log(
      `back-to-back publication (grace period 1000 ms): second change ${latencies[0]!.toFixed(1)} ms, third ${latencies[1]!.toFixed(1)} ms`,
    );
  });

  it('Maglev: external frontends with the same backends read one table, rewritten in place', async () => {
    const web = (ips: string[]) =>
      servicePort('ns', 'mg', {
        clusterIP: '10.96.7.1',
        type: 'LoadBalancer',
        nodePort: 30700,
        loadBalancerIPs: ['198.51.100.71'],
        externallyAccessible: true,
        endpoints: ips.map((ip) => ep(ip, 8080)),
      });
    const tables = () => {
      const outer = dumpMap(lb.fd.maglev, 4, 4);
      return new Map(outer.keys.map((k, i) => [u32Codec.decode(k), u32Codec.decode(outer.values[i]!)]));
    };
    const ips = ['10.244.3.1', '10.244.3.2', '10.244.3.3', '10.244.3.4'];
    const first = plan(decisions([web(ips)]), { defaultScheduler: 'maglev' });
    await writer.apply(first);
    const ofKind = (p: typeof first, kind: string) => p.frontends.find((f) => f.kind === kind)!;
    const [lbId, npId, cipId] = ['LoadBalancer', 'NodePort', 'ClusterIP'].map(
      (k) => ofKind(first, k).serviceId,
    );
    expect(ofKind(first, 'ClusterIP').scheduler).toBe('random');
    const before = tables();
    expect(before.has(cipId!)).toBe(false);
    expect(before.get(lbId!)).toBe(before.get(npId!));
    const tableId = before.get(lbId!)!;

    const second = plan(decisions([web(ips.slice(1))]), { defaultScheduler: 'maglev' });
    const result = await writer.apply(second);
    // Same inner map, a quarter of its entries rewritten (those of the backend that left).
    expect(tables().get(lbId!)).toBe(tableId);
    expect(tables().get(npId!)).toBe(tableId);
    const members = ofKind(second, 'LoadBalancer').backendIds.map((id) => ({
      name: second.backends.find((b) => b.id === id)!.name,
      id,
    }));
    const table = buildMaglevTable(members, 251);
    expect(readMaglevTable(tableId)).toEqual(table);
    expect(result.maglevEntries).toBeLessThan(251 / 2);
    expect(result.maglevEntries).toBeGreaterThan(0);
    // The datapath picks what the new table says.
    const byId = new Map(second.backends.map((b) => [b.id, b.address]));
    for (let i = 0; i < 20; i++) {
      const sport = nextPort;
      const got = parsePacket(fromPod(syn('198.51.100.71')).dataOut).daddr;
      expect(got).toBe(byId.get(table[maglevIndex(CLIENT, sport, 80, 6, NODE_CONFIG.hashSeed, 251)]!));
    }
  });
});
