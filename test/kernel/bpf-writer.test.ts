import { rmSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { dumpMap } from '../../native/libbpf/map.js';
import type { ProxyDecisions } from '../../src/brain/types.js';
import { IdAllocator } from '../../src/dataplanes/bpf/ids.js';
import { KernelStore, readMaglevTable } from '../../src/dataplanes/bpf/kernel-store.js';
import { ifAddr6Val, MAPS, svc4Key, svcVal, u32Codec } from '../../src/dataplanes/bpf/layout.js';
import { buildMaglevTable } from '../../src/dataplanes/bpf/maglev.js';
import { type LoadedObject, loadPinnedObject } from '../../src/dataplanes/bpf/object.js';
import { type BpfPlan, planBpf } from '../../src/dataplanes/bpf/plan.js';
import { frontendName } from '../../src/dataplanes/bpf/types.js';
import { MapWriter } from '../../src/dataplanes/bpf/writer.js';
import { silentLogger } from '../../src/logger.js';
import { bpfConfig, decisions, ep, servicePort } from '../support/bpf-fixtures.js';
import { describeRoot } from '../support/privileges.js';

const M = 251;
const pinPath = `/sys/fs/bpf/kbp-test-writer-${process.pid}`;
const mapSizes = { ...bpfConfig().mapSizes, conntrack: 1024, affinity: 1024 };

function manifest(webIps: string[]): ProxyDecisions {
  return decisions([
    servicePort('ns', 'web', {
      type: 'LoadBalancer',
      nodePort: 30080,
      externallyAccessible: true,
      loadBalancerIPs: ['198.51.100.7'],
      loadBalancerSourceRanges: ['203.0.113.0/24'],
      sessionAffinityTimeoutSeconds: 600,
      schedulerAnnotation: 'maglev',
      endpoints: webIps.map((ip, i) => ep(ip, 8080, { isLocal: i === 0 })),
    }),
    servicePort('ns', 'dns', {
      clusterIP: '10.96.0.53',
      protocol: 'UDP',
      port: 53,
      endpoints: [ep('10.1.0.53', 53)],
    }),
    servicePort('ns', 'empty', { clusterIP: '10.96.0.99' }),
  ]);
}

interface Agent {
  lb: LoadedObject;
  store: KernelStore;
  writer: MapWriter;
  ids: { serviceIds: IdAllocator; backendIds: IdAllocator };
  plan(d: ProxyDecisions): BpfPlan;
}

/** What the agent does at start-up: load (reusing pinned maps), read the maps, seed the allocators. */
async function startAgent(): Promise<Agent> {
  const lb = await loadPinnedObject({ pinPath, mapSizes, log: silentLogger });
  const store = new KernelStore(lb.fd, lb.capacity);
  const writer = new MapWriter(store, { maglevTableSize: M, graceMs: 0 });
  const restored = writer.restore();
  const ids = {
    serviceIds: new IdAllocator('service', 1, lb.capacity.svcStats - 1, 3_600_000),
    backendIds: new IdAllocator('backend', 1, lb.capacity.backendStats - 1, 3_600_000),
  };
  for (const [k, id] of restored.serviceIds) ids.serviceIds.restore(k, id);
  for (const [k, id] of restored.backendIds) ids.backendIds.restore(k, id);
  const agent: Agent = {
    lb,
    store,
    writer,
    ids,
    plan: (d) => {
      const p = planBpf(
        d,
        {
          defaultScheduler: 'random',
          maglevFrontends: 'external',
          families: store.families,
          capacity: {
            frontends: lb.capacity.svc4,
            backends: lb.capacity.backends4 - 1,
            slots: Math.floor(lb.capacity.slots / 2),
            sourceRanges: lb.capacity.srcRange4,
          },
          nowMs: Date.now(),
        },
        agent.ids,
      );
      agent.ids = p;
      return p;
    },
  };
  return agent;
}

describeRoot('bpf writer against the loaded object', () => {
  let agent: Agent;
  beforeAll(async () => {
    agent = await startAgent();
  });
  afterAll(() => {
    agent?.lb.close();
    rmSync(pinPath, { recursive: true, force: true });
  });

  it('writes a plan that reads back entry for entry', async () => {
    const plan = agent.plan(manifest(['10.1.0.1', '10.1.0.2', '10.1.0.3']));
    const result = await agent.writer.apply(plan);
    expect(result.failures).toEqual([]);
    const state = agent.store.read();
    const frontends = new Map(
      state.frontends.map((f) => [`${f.key.protocol}/${f.key.address}:${f.key.port}`, f.value]),
    );
    expect([...frontends.keys()].sort()).toEqual([
      'TCP/0.0.0.0:30080',
      'TCP/10.96.0.10:80',
      'TCP/10.96.0.99:80',
      'TCP/198.51.100.7:80',
      'UDP/10.96.0.53:53',
    ]);
    expect(frontends.get('TCP/198.51.100.7:80')).toMatchObject({
      kind: 'LoadBalancer',
      count: 3,
      localCount: 1,
      scheduler: 'maglev',
      action: 'forward',
      affinityTimeoutSeconds: 600,
      checksSourceRanges: true,
    });
    expect(frontends.get('TCP/10.96.0.99:80')).toMatchObject({ action: 'reject', count: 0 });
    // Every planned slot is there, in the live generation, local backend first.
    for (const f of plan.frontends) {
      const slots = state.slots
        .filter((s) => s.serviceId === f.serviceId && s.gen === 0)
        .sort((a, b) => a.slot - b.slot)
        .map((s) => s.backendId);
      expect(slots).toEqual(f.backendIds);
    }
    expect(state.backends.map((b) => `${b.address}:${b.port}${b.isLocal ? ' local' : ''}`).sort()).toEqual([
      '10.1.0.1:8080 local',
      '10.1.0.2:8080',
      '10.1.0.3:8080',
      '10.1.0.53:53',
    ]);
    // The Maglev table in the kernel is the one the builder makes for these backends.
    const lbFrontend = plan.frontends.find((f) => f.kind === 'LoadBalancer')!;
    const members = lbFrontend.backendIds.map((id) => ({
      name: plan.backends.find((b) => b.id === id)!.name,
      id,
    }));
    const mglv = dumpMap(agent.lb.fd.maglev, 4, 4);
    const index = mglv.keys.findIndex((k) => u32Codec.decode(k) === lbFrontend.serviceId);
    expect(readMaglevTable(u32Codec.decode(mglv.values[index]!))).toEqual(buildMaglevTable(members, M));
    expect(state.sourceRanges).toEqual([
      { serviceId: lbFrontend.serviceId, family: 'IPv4', cidr: '203.0.113.0/24' },
    ]);
    expect(state.affinityMatches.filter((m) => m.serviceId === lbFrontend.serviceId)).toHaveLength(3);
  });

  it('flips to a new generation when backends change and cleans the old one up', async () => {
    const result = await agent.writer.apply(agent.plan(manifest(['10.1.0.1', '10.1.0.4'])));
    expect(result.failures).toEqual([]);
    agent.writer.flushDeferred(true);
    const state = agent.store.read();
    const web = state.frontends.filter((f) => f.key.port === 80 && f.key.address !== '10.96.0.99');
    expect(web.map((f) => [f.value.gen, f.value.count])).toEqual(web.map(() => [1, 2]));
    expect(
      state.slots.filter((s) => s.gen === 0 && web.some((f) => f.value.serviceId === s.serviceId)),
    ).toEqual([]);
    expect(state.backends.map((b) => b.address).sort()).toEqual(['10.1.0.1', '10.1.0.4', '10.1.0.53']);
  });

  it('restores ids after a restart and rewrites nothing for the same decisions', async () => {
    const before = agent.store.read();
    const maglevIds = dumpMap(agent.lb.fd.maglev, 4, 4).values.map((v) => u32Codec.decode(v));
    agent.lb.close();
    agent = await startAgent();
    expect(agent.lb.reused.map((r) => r.name)).toContain('svc4');
    const plan = agent.plan(manifest(['10.1.0.1', '10.1.0.4']));
    const byName = new Map(
      before.frontends.map((f) => [
        `${f.key.protocol}/${f.key.address}:${f.key.port}/${f.key.scope}`,
        f.value.serviceId,
      ]),
    );
    for (const f of plan.frontends) {
      expect(f.serviceId).toBe(byName.get(`${f.key.protocol}/${f.key.address}:${f.key.port}/${f.key.scope}`));
    }
    for (const b of plan.backends) {
      expect(before.backends.find((x) => x.address === b.address && x.port === b.port)?.id).toBe(b.id);
    }
    const result = await agent.writer.apply(plan);
    expect(result).toMatchObject({ written: 0, deleted: 0, maglevTables: 0, failures: [] });
    // The same inner tables are still installed (no swap happened).
    expect(dumpMap(agent.lb.fd.maglev, 4, 4).values.map((v) => u32Codec.decode(v))).toEqual(maglevIds);
    expect(agent.store.read()).toEqual(before);
  });

  it('programs a dual-stack Service in both families in one apply, reads both back, restores both', async () => {
    const v4 = manifest(['10.1.0.1', '10.1.0.4']);
    const v6 = decisions(
      [
        servicePort('ns', 'web', {
          family: 'IPv6',
          clusterIP: 'fd00::10',
          type: 'LoadBalancer',
          nodePort: 30080,
          externallyAccessible: true,
          loadBalancerIPs: ['2001:db8::7'],
          loadBalancerSourceRanges: ['2001:db8:1::/48'],
          endpoints: [ep('fd00:1::1', 8080, { isLocal: true }), ep('fd00:1::2', 8080)],
        }),
      ],
      { family: 'IPv6', nodeIP: 'fd00::1' },
    );
    const both: ProxyDecisions = { ...v4, families: [...v4.families, ...v6.families] };
    const plan = agent.plan(both);
    expect(plan.problems).toEqual([]);
    expect((await agent.writer.apply(plan)).failures).toEqual([]);
    const state = agent.store.read();
    const ofFamily = (family: string) =>
      state.frontends
        .filter((f) => f.key.family === family)
        .map((f) => frontendName(f.key))
        .sort();
    expect(ofFamily('IPv6')).toEqual(['TCP/[2001:db8::7]:80', 'TCP/[::]:30080', 'TCP/[fd00::10]:80']);
    expect(ofFamily('IPv4')).toHaveLength(5);
    const lb6 = plan.frontends.find((f) => f.kind === 'LoadBalancer' && f.key.family === 'IPv6')!;
    expect(state.frontends.find((f) => frontendName(f.key) === lb6.name)?.value).toMatchObject({
      count: 2,
      localCount: 1,
      checksSourceRanges: true,
    });
    expect(
      state.backends
        .filter((b) => b.family === 'IPv6')
        .map((b) => `${b.address}:${b.port}${b.isLocal ? ' local' : ''}`)
        .sort(),
    ).toEqual(['fd00:1::1:8080 local', 'fd00:1::2:8080']);
    expect(state.sourceRanges.filter((r) => r.family === 'IPv6')).toEqual([
      { serviceId: lb6.serviceId, family: 'IPv6', cidr: '2001:db8:1::/48' },
    ]);
    // A restarted agent finds both families' ids and has nothing to write.
    agent.lb.close();
    agent = await startAgent();
    expect(await agent.writer.apply(agent.plan(both))).toMatchObject({
      written: 0,
      deleted: 0,
      failures: [],
    });
    expect(agent.store.read()).toEqual(state);
  });

  it('keeps each interface`s SNAT source of both families: written, changed, gone, and kept across a restart', async () => {
    const { store } = agent;
    const byIfindex = (entries: [number, string][]) => new Map(entries);
    store.setInterfaceAddresses({
      IPv4: byIfindex([
        [2, '192.168.1.10'],
        [3, '10.0.9.1'],
      ]),
      IPv6: byIfindex([
        [2, 'fd00:1::10'],
        [4, '2001:db8::4'],
      ]),
    });
    const raw6 = dumpMap(agent.lb.fd.ifAddrs6, 4, ifAddr6Val.size);
    // The value is the struct of types.h, key the ifindex.
    expect(
      raw6.keys.map((k, i) => [u32Codec.decode(k), ifAddr6Val.decode(raw6.values[i]!).addr]).sort(),
    ).toEqual([
      [2, 'fd00:1::10'],
      [4, '2001:db8::4'],
    ]);
    // An address changes, an interface goes, another gets its first IPv6 address.
    store.setInterfaceAddresses({
      IPv4: byIfindex([[2, '192.168.1.10']]),
      IPv6: byIfindex([
        [2, 'fd00:1::11'],
        [3, 'fd00:3::1'],
      ]),
    });
    const held = store.interfaceAddresses();
    expect([...held.IPv4].sort()).toEqual([[2, '192.168.1.10']]);
    expect([...held.IPv6].sort()).toEqual([
      [2, 'fd00:1::11'],
      [3, 'fd00:3::1'],
    ]);
    // Pinned: a restarted agent finds them.
    agent.lb.close();
    agent = await startAgent();
    expect(agent.store.interfaceAddresses()).toEqual(held);
    agent.store.setInterfaceAddresses({ IPv4: new Map(), IPv6: new Map() });
    expect(agent.store.interfaceAddresses()).toEqual({ IPv4: new Map(), IPv6: new Map() });
  });

  it('reports a full map with its name, capacity and setting, and keeps the rest', async () => {
    const fd = agent.lb.fd;
    const tiny = new KernelStore(fd, { ...agent.lb.capacity });
    // Fill the slot map to its capacity with entries of an id nothing uses.
    const capacity = agent.lb.capacity.slots;
    const used = dumpMap(fd.slots, MAPS.slots.keySize, MAPS.slots.valueSize).keys.length;
    const filler = Array.from({ length: capacity - used }, (_, slot) => ({
      serviceId: 60_000,
      slot,
      gen: 0,
      backendId: 1,
      backend: { family: 'IPv4' as const, address: '10.1.0.1', port: 80 },
    }));
    tiny.upsertSlots(filler);
    try {
      const writer = new MapWriter(tiny, { maglevTableSize: M, graceMs: 0 });
      writer.restore();
      const result = await writer.apply(agent.plan(manifest(['10.1.0.1', '10.1.0.4', '10.1.0.5'])));
      expect(result.failures.length).toBeGreaterThan(0);
      expect(result.failures[0]!.error).toContain(
        `BPF map kbp_slot_v2 is full (capacity ${capacity} entries); raise bpf.mapSizes.backendSlots`,
      );
      // The UDP service did not change and is still served.
      const dns = dumpMap(fd.svc4, 8, 24).keys.findIndex((k) => svc4Key.decode(k).port === 53);
      expect(dns).toBeGreaterThanOrEqual(0);
      expect(svcVal.decode(dumpMap(fd.svc4, 8, 24).values[dns]!).count).toBe(1);
    } finally {
      tiny.deleteSlots(filler);
    }
  });
});
