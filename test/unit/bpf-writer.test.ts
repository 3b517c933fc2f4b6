import { describe, expect, it } from 'vitest';
import type { ServicePortDecision } from '../../src/brain/types.js';
import { IdAllocator } from '../../src/dataplanes/bpf/ids.js';
import { buildMaglevTable } from '../../src/dataplanes/bpf/maglev.js';
import { type BpfPlan, planBpf } from '../../src/dataplanes/bpf/plan.js';
import { frontendName } from '../../src/dataplanes/bpf/types.js';
import { MapWriter } from '../../src/dataplanes/bpf/writer.js';
import { decisions, ep, servicePort } from '../support/bpf-fixtures.js';
import { MemoryStore } from '../support/memory-store.js';

const M = 251;

class Clock {
  ms = 0;
  now = () => this.ms;
}

function setup() {
  const store = new MemoryStore();
  const clock = new Clock();
  const writer = new MapWriter(store, {
    maglevTableSize: M,
    graceMs: 500,
    now: clock.now,
  });
  let ids = {
    serviceIds: new IdAllocator('service', 1, 100, 60_000),
    backendIds: new IdAllocator('backend', 1, 100, 60_000),
  };
  const plan = (sps: ServicePortDecision[]): BpfPlan => {
    const p = planBpf(
      decisions(sps),
      {
        defaultScheduler: 'random',
        maglevFrontends: 'external',
        families: ['IPv4'],
        capacity: { frontends: 100, backends: 100, slots: 100, sourceRanges: 100 },
        nowMs: clock.ms,
      },
      ids,
    );
    ids = p;
    return p;
  };
  return { store, clock, writer, plan };
}

const web = (ips: string[], extra: Parameters<typeof servicePort>[2] = {}) =>
  servicePort('ns', 'web', {
    type: 'NodePort',
    nodePort: 30080,
    externallyAccessible: true,
    endpoints: ips.map((ip, i) => ep(ip, 8080, { isLocal: i === 0 })),
    ...extra,
  });

describe('MapWriter publication order', () => {
  it('writes backends, slots, Maglev, matches, then frontends, and nothing when nothing changed', async () => {
    const { store, writer, plan } = setup();
    const result = await writer.apply(
      plan([
        web(['10.1.0.1', '10.1.0.2'], { schedulerAnnotation: 'maglev', sessionAffinityTimeoutSeconds: 30 }),
      ]),
    );
    // Two frontends (ClusterIP, NodePort on every node address), two slots each.
    expect(store.ops).toEqual([
      'resetBackendStats 2',
      'upsertBackends 2',
      'upsertSlots 4',
      // The two frontends have the same backends: one table, read by both.
      `installMaglevTable ${M}`,
      'shareMaglevTable 1',
      'upsertAffinityMatches 4',
      'resetServiceStats 2',
      'upsertFrontends 2',
    ]);
    expect(result).toMatchObject({
      written: 12,
      maglevTables: 1,
      maglevEntries: M + 2,
      failures: [],
      degraded: [],
    });
    expect(store.maglevTables.size).toBe(1);
    expect(
      [...store.frontends.values()].map((f) => [
        frontendName(f.key),
        f.value.count,
        f.value.localCount,
        f.value.gen,
      ]),
    ).toEqual([
      ['TCP/0.0.0.0:30080', 2, 1, 0],
      ['TCP/10.96.0.10:80', 2, 1, 0],
    ]);
    expect(store.readerErrors).toEqual([]);

    store.ops = [];
    const again = await writer.apply(
      plan([
        web(['10.1.0.1', '10.1.0.2'], { schedulerAnnotation: 'maglev', sessionAffinityTimeoutSeconds: 30 }),
      ]),
    );
    expect(store.ops).toEqual([]);
    expect(again).toMatchObject({ written: 0, deleted: 0, maglevTables: 0, maglevEntries: 0 });
  });

  it('publishes a new generation before the flip and removes the old one only after the grace period', async () => {
    const { store, clock, writer, plan } = setup();
    await writer.apply(plan([web(['10.1.0.1', '10.1.0.2'], { schedulerAnnotation: 'maglev' })]));
    store.ops = [];
    clock.ms = 10_000;
    const tableBefore = [...store.maglevTables.values()][0]!.slice();
    const changed = await writer.apply(
      plan([web(['10.1.0.1', '10.1.0.3'], { schedulerAnnotation: 'maglev' })]),
    );
    // The shared table is rewritten in place, only where the owner changed: the entries of the
    // backend that left (about half of them here), nothing else.
    const tableAfter = buildMaglevTable(
      [
        { name: '10.1.0.1:8080', id: 1 },
        { name: '10.1.0.3:8080', id: 3 },
      ],
      M,
    );
    const moved = tableAfter.filter((id, i) => id !== tableBefore[i]).length;
    expect(moved).toBeGreaterThanOrEqual(tableBefore.filter((id) => id === 2).length);
    expect(moved).toBeLessThan(M);
    expect(store.ops).toEqual([
      'resetBackendStats 1',
      'upsertBackends 1',
      'upsertSlots 4',
      `writeMaglevEntries ${moved}`,
      'upsertAffinityMatches 2',
      'upsertFrontends 2',
      // A backend's {backend, service} pairs go at the flip: affinity and SYN re-selection
      // stop choosing it at once.
      'deleteAffinityMatches 2',
    ]);
    expect(changed).toMatchObject({ maglevTables: 1, maglevEntries: moved });
    expect([...store.maglevTables.values()]).toEqual([tableAfter]);
    expect([...store.frontends.values()].every((f) => f.value.gen === 1)).toBe(true);
    // The old generation and the departed backend are still there for readers of the old value.
    expect(store.slots.size).toBe(8);
    expect([...store.backends.keys()].sort()).toEqual([1, 2, 3]);

    store.ops = [];
    clock.ms += 499;
    expect(writer.flushDeferred()).toBe(0);
    clock.ms += 1;
    expect(writer.flushDeferred()).toBe(5);
    expect(store.ops).toEqual(['deleteSlots 4', 'deleteBackends 1']);
    expect(store.slots.size).toBe(4);
    expect(store.readerErrors).toEqual([]);
  });

  it('flips the two scopes of a service together: internal entries before the all entries naming them', async () => {
    const { store, clock, writer, plan } = setup();
    const split = (externalPolicyLocal: boolean) =>
      web(['10.1.0.1', '10.1.0.2'], {
        externalPolicyLocal,
        loadBalancerIPs: ['198.51.100.9'],
        type: 'LoadBalancer',
      });
    await writer.apply(plan([split(false)]));
    clock.ms += 1000;
    await writer.apply(plan([split(true)]));
    const frontends = [...store.frontends.values()];
    expect(frontends.filter((f) => f.key.scope === 'internal').length).toBeGreaterThan(0);
    expect(frontends.filter((f) => f.value.hasInternalScope).length).toBeGreaterThan(0);
    // And back: the all entries stop naming their siblings before the siblings go.
    clock.ms += 1000;
    await writer.apply(plan([split(false)]));
    expect([...store.frontends.values()].some((f) => f.key.scope === 'internal')).toBe(false);
    expect(store.readerErrors).toEqual([]);
  });

  it('publishes a change at once while the previous one waits out its grace period', async () => {
    const { store, clock, writer, plan } = setup();
    await writer.apply(plan([web(['10.1.0.1'])]));
    clock.ms = 1_000;
    await writer.apply(plan([web(['10.1.0.1', '10.1.0.2'])]));
    clock.ms += 100;
    store.ops = [];
    await writer.apply(plan([web(['10.1.0.2'])]));
    // Nothing was deleted first: generation 0 (one slot per frontend) is still in its grace
    // period, so the new list went into generation 2, and generation 1 (two each) waits too.
    expect(store.ops.some((op) => op.startsWith('delete') && !op.startsWith('deleteAffinity'))).toBe(false);
    expect([...store.frontends.values()].map((f) => f.value.gen)).toEqual([2, 2]);
    expect(store.slots.size).toBe(8);
    expect(writer.nextDeferredDue()).toBe(1_500);
    clock.ms = 1_500;
    expect(writer.flushDeferred()).toBe(2);
    clock.ms = 1_600;
    // Generation 1 and the backend that left.
    expect(writer.flushDeferred()).toBe(5);
    expect([...store.slots.values()].map((s) => s.gen)).toEqual([2, 2]);
    expect(store.readerErrors).toEqual([]);
  });

  it('keeps a generation waiting out its grace period when a change is undone within it', async () => {
    const { store, clock, writer, plan } = setup();
    // 10.1.0.1 keeps its id while it is away: another service still uses it.
    const keep = servicePort('ns', 'keep', { clusterIP: '10.96.0.77', endpoints: [ep('10.1.0.1', 8080)] });
    const lists = [['10.1.0.1', '10.1.0.2'], ['10.1.0.2'], ['10.1.0.1', '10.1.0.2']];
    await writer.apply(plan([web(lists[0]!), keep]));
    clock.ms = 1_000;
    await writer.apply(plan([web(lists[1]!), keep]));
    clock.ms += 10;
    store.ops = [];
    await writer.apply(plan([web(lists[2]!), keep]));
    // Generation 0 still holds the list: no slot is written, the flip goes back to it, and its
    // deletion is cancelled; generation 1 goes after its grace period.
    // (The backends are written for their local flag: web's first endpoint is its local one.)
    expect(store.ops).toEqual(['upsertBackends 2', 'upsertAffinityMatches 2', 'upsertFrontends 2']);
    const webIds = new Set(
      [...store.frontends.values()]
        .filter((f) => f.key.address !== '10.96.0.77')
        .map((f) => f.value.serviceId),
    );
    const webGens = () =>
      [...store.slots.values()].filter((s) => webIds.has(s.serviceId)).map((s) => `${s.gen}/${s.backendId}`);
    expect(
      [...store.frontends.values()].filter((f) => webIds.has(f.value.serviceId)).map((f) => f.value.gen),
    ).toEqual([0, 0]);
    clock.ms += 1_000;
    writer.flushDeferred();
    expect(webGens().sort()).toEqual(['0/1', '0/1', '0/2', '0/2']);
    expect(store.readerErrors).toEqual([]);
  });

  it('shares a table between services with the same backends, and leaves it alone when one moves', async () => {
    const { store, clock, writer, plan } = setup();
    const svc = (name: string, ip: string, ips: string[]) =>
      servicePort('ns', name, {
        clusterIP: ip,
        schedulerAnnotation: 'maglev',
        endpoints: ips.map((e) => ep(e, 80)),
      });
    const both = ['10.1.0.1', '10.1.0.2', '10.1.0.3'];
    await writer.apply(plan([svc('a', '10.96.0.1', both), svc('b', '10.96.0.2', both)]));
    expect(store.maglevTables.size).toBe(1);
    const shared = [...store.maglevTables.values()][0]!.slice();
    clock.ms = 1_000;
    store.ops = [];
    const moved = plan([svc('a', '10.96.0.1', both), svc('b', '10.96.0.2', ['10.1.0.1', '10.1.0.2'])]);
    const result = await writer.apply(moved);
    // a still reads the three-backend table, untouched; b gets a table of its own.
    expect(store.ops.filter((op) => op.includes('Maglev'))).toEqual([`installMaglevTable ${M}`]);
    expect(result).toMatchObject({ maglevTables: 1, maglevEntries: M + 1 });
    const byService = store.maglevByService();
    const a = moved.frontends.find((f) => f.serviceName === 'a')!.serviceId;
    expect(byService.get(a)).toEqual(shared);
    expect(store.maglevTables.size).toBe(2);
    // b back to the three: it shares a's table again, and its own is freed.
    clock.ms = 2_000;
    store.ops = [];
    await writer.apply(plan([svc('a', '10.96.0.1', both), svc('b', '10.96.0.2', both)]));
    expect(store.ops.filter((op) => op.includes('Maglev'))).toEqual(['shareMaglevTable 1']);
    expect(store.maglevTables.size).toBe(1);
    expect(store.readerErrors).toEqual([]);
  });

  it('runs out of free generations only after 255 changes within one grace period', async () => {
    const { store, clock, writer, plan } = setup();
    // 300 different lists of two out of 20 backends another service keeps (their ids stay).
    const pool = Array.from({ length: 20 }, (_, i) => `10.2.0.${i + 1}`);
    const keep = servicePort('ns', 'keep', {
      clusterIP: '10.96.0.77',
      endpoints: pool.map((ip) => ep(ip, 8080)),
    });
    const pairs = pool.flatMap((a) => pool.filter((b) => b !== a).map((b) => [a, b]));
    for (const pair of pairs.slice(0, 300)) {
      clock.ms += 1;
      await writer.apply(plan([web(pair), keep]));
      expect(store.readerErrors).toEqual([]);
    }
    const webIds = new Set(
      [...store.frontends.values()]
        .filter((f) => f.key.port !== 80 || f.key.address !== '10.96.0.77')
        .map((f) => f.value.serviceId),
    );
    const gens = new Set([...store.slots.values()].filter((s) => webIds.has(s.serviceId)).map((s) => s.gen));
    expect(Math.max(...gens)).toBe(255);
    // The generation due soonest was rewritten, never the live one: readers never saw a hole.
    expect(store.readerErrors).toEqual([]);
  });

  it('removes a service: frontends at the flip, the rest after the grace period', async () => {
    const { store, clock, writer, plan } = setup();
    const other = servicePort('ns', 'other', { clusterIP: '10.96.0.99', endpoints: [ep('10.1.0.9', 80)] });
    await writer.apply(
      plan([
        web(['10.1.0.1'], {
          type: 'LoadBalancer',
          loadBalancerIPs: ['198.51.100.1'],
          loadBalancerSourceRanges: ['203.0.113.0/24'],
          sessionAffinityTimeoutSeconds: 60,
          schedulerAnnotation: 'maglev',
        }),
        other,
      ]),
    );
    expect(store.ranges.size).toBe(1);
    store.ops = [];
    await writer.apply(plan([other]));
    expect(store.ops).toEqual(['deleteFrontends 3', 'deleteAffinityMatches 3']);
    clock.ms += 500;
    writer.flushDeferred();
    expect(store.ops.slice(2)).toEqual([
      'deleteSlots 3',
      'deleteMaglev 3',
      'deleteSourceRanges 1',
      'deleteBackends 1',
    ]);
    expect([...store.frontends.keys()]).toEqual(['TCP/10.96.0.99:80']);
    expect(store.slots.size + store.backends.size).toBe(2);
    expect(store.readerErrors).toEqual([]);
  });

  it('keeps the previous state of a service that does not fit and programs the others', async () => {
    const { store, clock, writer, plan } = setup();
    const a = (ips: string[]) =>
      servicePort('ns', 'a', { clusterIP: '10.96.0.1', endpoints: ips.map((ip) => ep(ip, 80)) });
    const b = (ips: string[]) =>
      servicePort('ns', 'b', { clusterIP: '10.96.0.2', endpoints: ips.map((ip) => ep(ip, 80)) });
    await writer.apply(plan([a(['10.1.0.1']), b(['10.2.0.1'])]));
    clock.ms = 1_000;
    store.slotCapacity = 5;
    const result = await writer.apply(
      plan([a(['10.1.0.1', '10.1.0.2', '10.1.0.3', '10.1.0.4']), b(['10.2.0.2'])]),
    );
    expect(result.failures).toEqual([
      {
        servicePortName: 'ns/a',
        error:
          'TCP/10.96.0.1:80: BPF map kbp_slot_v2 is full (capacity 5 entries); raise bpf.mapSizes.backendSlots',
      },
    ]);
    const gens = Object.fromEntries(
      [...store.frontends.values()].map((f) => [f.key.address, [f.value.gen, f.value.count]]),
    );
    expect(gens).toEqual({ '10.96.0.1': [0, 1], '10.96.0.2': [1, 1] });
    clock.ms += 500;
    writer.flushDeferred();
    // a keeps its slot and backend; b's old generation and backend are gone.
    expect([...store.slots.keys()].sort()).toEqual(['1/0/0', '2/1/0']);
    expect(store.readerErrors).toEqual([]);
  });
});

describe('MapWriter resync', () => {
  it('repairs entries deleted behind its back on a full sync, and only then', async () => {
    const { store, writer, plan } = setup();
    await writer.apply(plan([web(['10.1.0.1'])]));
    store.slots.clear();
    store.ops = [];
    await writer.apply(plan([web(['10.1.0.1'])]));
    expect(store.ops).toEqual([]);
    writer.resync();
    await writer.apply(plan([web(['10.1.0.1'])]));
    // The live generation lost its slots: a complete new one is written, then the flip.
    expect(store.ops).toEqual(['upsertSlots 2', 'upsertFrontends 2']);
    // Broken until the flip (the test broke it), whole after it.
    store.readerErrors = [];
    store.checkReader('the repair');
    expect(store.readerErrors).toEqual([]);
    expect([...store.frontends.values()].every((f) => f.value.gen === 1 && f.value.count === 1)).toBe(true);
  });
});

describe('MapWriter restart', () => {
  it('restores ids from the maps and rewrites nothing for the same decisions', async () => {
    const first = setup();
    const sps = [
      web(['10.1.0.1', '10.1.0.2'], { schedulerAnnotation: 'maglev', sessionAffinityTimeoutSeconds: 30 }),
      servicePort('ns', 'dns', {
        clusterIP: '10.96.0.53',
        protocol: 'UDP',
        port: 53,
        endpoints: [ep('10.1.0.7', 53)],
      }),
    ];
    const p1 = first.plan(sps);
    await first.writer.apply(p1);

    const clock = new Clock();
    const writer = new MapWriter(first.store, {
      maglevTableSize: M,
      graceMs: 500,
      now: clock.now,
    });
    const restored = writer.restore();
    const serviceIds = new IdAllocator('service', 1, 100, 60_000);
    const backendIds = new IdAllocator('backend', 1, 100, 60_000);
    for (const [k, id] of restored.serviceIds) expect(serviceIds.restore(k, id)).toBe(true);
    for (const [k, id] of restored.backendIds) expect(backendIds.restore(k, id)).toBe(true);
    const p2 = planBpf(
      decisions(sps),
      {
        defaultScheduler: 'random',
        maglevFrontends: 'external',
        families: ['IPv4'],
        capacity: { frontends: 100, backends: 100, slots: 100, sourceRanges: 100 },
        nowMs: 0,
      },
      { serviceIds, backendIds },
    );
    expect(p2.frontends.map((f) => f.serviceId)).toEqual(p1.frontends.map((f) => f.serviceId));
    expect(p2.backends).toEqual(p1.backends);
    first.store.ops = [];
    const result = await writer.apply(p2);
    expect(first.store.ops).toEqual([]);
    expect(result.written).toBe(0);
  });

  it('merges the one-table-per-frontend Maglev layout of an older agent into one table per backend set', async () => {
    const first = setup();
    await first.writer.apply(first.plan([web(['10.1.0.1', '10.1.0.2'], { schedulerAnnotation: 'maglev' })]));
    // What an older agent left: each frontend with a copy of its own.
    for (const [serviceId, table] of first.store.maglevByService())
      first.store.installMaglevTable({ serviceId }, table);
    expect(first.store.maglevTables.size).toBe(2);
    const writer = new MapWriter(first.store, { maglevTableSize: M, graceMs: 500, now: () => 0 });
    writer.restore();
    first.store.ops = [];
    await writer.apply(first.plan([web(['10.1.0.1', '10.1.0.2'], { schedulerAnnotation: 'maglev' })]));
    expect(first.store.ops).toEqual(['shareMaglevTable 1']);
    expect(first.store.maglevTables.size).toBe(1);
    expect(first.store.readerErrors).toEqual([]);
  });

  it('cleans up what a crashed writer left behind without disturbing the live generation', async () => {
    const first = setup();
    await first.writer.apply(first.plan([web(['10.1.0.1'])]));
    // A crash after the new generation and a new backend were written, before the flip.
    first.store.upsertBackends([
      { id: 9, family: 'IPv4', address: '10.1.0.9', port: 8080, isLocal: false, terminating: false },
    ]);
    first.store.upsertSlots([
      {
        serviceId: 1,
        slot: 0,
        gen: 1,
        backendId: 9,
        backend: { family: 'IPv4', address: '10.1.0.9', port: 8080 },
      },
    ]);
    const clock = new Clock();
    const writer = new MapWriter(first.store, {
      maglevTableSize: M,
      graceMs: 500,
      now: clock.now,
    });
    writer.restore();
    first.store.ops = [];
    const plan = planBpf(
      decisions([web(['10.1.0.1'])]),
      {
        defaultScheduler: 'random',
        maglevFrontends: 'external',
        families: ['IPv4'],
        capacity: { frontends: 100, backends: 100, slots: 100, sourceRanges: 100 },
        nowMs: 0,
      },
      {
        serviceIds: new IdAllocator('service', 1, 100, 1),
        backendIds: new IdAllocator('backend', 1, 100, 1),
      },
    );
    await writer.apply(plan);
    expect(first.store.ops).toEqual([]);
    clock.ms = 500;
    writer.flushDeferred();
    expect(first.store.ops).toEqual(['deleteSlots 1', 'deleteBackends 1']);
    expect(first.store.readerErrors).toEqual([]);
  });
});
