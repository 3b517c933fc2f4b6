import { describe, expect, it } from 'vitest';
import { IdAllocator } from '../../src/dataplanes/bpf/ids.js';
import { type BpfPlan, frontendName, planBpf } from '../../src/dataplanes/bpf/plan.js';
import {
  type AffinityMatch,
  type BackendEntry,
  type FrontendEntry,
  type MaglevKey,
  MapFullError,
  type MapStore,
  type SlotEntry,
  type SlotKey,
  type SourceRange,
  type StoredState,
} from '../../src/dataplanes/bpf/store.js';
import { MapWriter } from '../../src/dataplanes/bpf/writer.js';
import type { ServicePortDecision } from '../../src/proxy/types.js';
import { decisions, ep, servicePort } from '../support/bpf-fixtures.js';

const M = 251;

/** The maps in memory. Every call is recorded, and after each one a reader walks every frontend
 * the way the datapath does and records what it could not resolve. */
class MemoryStore implements MapStore {
  readonly families = ['IPv4' as const];
  frontends = new Map<string, FrontendEntry>();
  slots = new Map<string, SlotEntry>();
  backends = new Map<number, BackendEntry>();
  maglev = new Map<string, { key: MaglevKey; table: Uint32Array }>();
  matches = new Map<string, AffinityMatch>();
  ranges = new Map<string, SourceRange>();
  ops: string[] = [];
  readerErrors: string[] = [];
  slotCapacity = Number.POSITIVE_INFINITY;

  private record(op: string, n: number) {
    this.ops.push(`${op} ${n}`);
    this.checkReader(op);
  }

  checkReader(after: string) {
    for (const f of this.frontends.values()) {
      const { serviceId, gen, count } = f.value;
      for (let slot = 0; slot < count; slot++) {
        const s = this.slots.get(`${serviceId}/${gen}/${slot}`);
        if (!s)
          this.readerErrors.push(`after ${after}: ${frontendName(f.key)} slot ${slot} gen ${gen} missing`);
        else if (!this.backends.has(s.backendId))
          this.readerErrors.push(`after ${after}: slot names missing backend ${s.backendId}`);
      }
    }
    for (const m of this.maglev.values()) {
      for (const id of new Set(m.table)) {
        if (!this.backends.has(id))
          this.readerErrors.push(`after ${after}: Maglev names missing backend ${id}`);
      }
    }
  }

  upsertBackends(entries: readonly BackendEntry[]) {
    for (const b of entries) this.backends.set(b.id, b);
    this.record('upsertBackends', entries.length);
  }
  deleteBackends(entries: readonly Pick<BackendEntry, 'id'>[]) {
    for (const b of entries) this.backends.delete(b.id);
    this.record('deleteBackends', entries.length);
  }
  upsertSlots(entries: readonly SlotEntry[]) {
    const added = entries.filter((s) => !this.slots.has(`${s.serviceId}/${s.gen}/${s.slot}`)).length;
    if (this.slots.size + added > this.slotCapacity) {
      this.ops.push(`upsertSlots failed ${entries.length}`);
      throw new MapFullError('kbp_slot_v1', this.slotCapacity, 'bpf.mapSizes.backendSlots');
    }
    for (const s of entries) this.slots.set(`${s.serviceId}/${s.gen}/${s.slot}`, s);
    this.record('upsertSlots', entries.length);
  }
  deleteSlots(keys: readonly SlotKey[]) {
    for (const k of keys) this.slots.delete(`${k.serviceId}/${k.gen}/${k.slot}`);
    this.record('deleteSlots', keys.length);
  }
  setMaglev(key: MaglevKey, table: Uint32Array) {
    this.maglev.set(`${key.serviceId}`, { key, table });
    this.record('setMaglev', 1);
  }
  deleteMaglev(keys: readonly MaglevKey[]) {
    for (const k of keys) this.maglev.delete(`${k.serviceId}`);
    this.record('deleteMaglev', keys.length);
  }
  upsertAffinityMatches(entries: readonly AffinityMatch[]) {
    for (const m of entries) this.matches.set(`${m.serviceId}/${m.backendId}`, m);
    this.record('upsertAffinityMatches', entries.length);
  }
  deleteAffinityMatches(entries: readonly AffinityMatch[]) {
    for (const m of entries) this.matches.delete(`${m.serviceId}/${m.backendId}`);
    this.record('deleteAffinityMatches', entries.length);
  }
  upsertSourceRanges(entries: readonly SourceRange[]) {
    for (const r of entries) this.ranges.set(`${r.serviceId}/${r.cidr}`, r);
    this.record('upsertSourceRanges', entries.length);
  }
  deleteSourceRanges(entries: readonly SourceRange[]) {
    for (const r of entries) this.ranges.delete(`${r.serviceId}/${r.cidr}`);
    this.record('deleteSourceRanges', entries.length);
  }
  resetServiceStats(ids: readonly number[]) {
    this.record('resetServiceStats', ids.length);
  }
  resetBackendStats(ids: readonly number[]) {
    this.record('resetBackendStats', ids.length);
  }
  upsertFrontends(entries: readonly FrontendEntry[]) {
    for (const f of entries) this.frontends.set(frontendName(f.key), f);
    this.record('upsertFrontends', entries.length);
  }
  deleteFrontends(keys: readonly FrontendEntry['key'][]) {
    for (const k of keys) this.frontends.delete(frontendName(k));
    this.record('deleteFrontends', keys.length);
  }
  read(): StoredState {
    return {
      frontends: [...this.frontends.values()],
      slots: [...this.slots.values()],
      backends: [...this.backends.values()],
      maglev: [...this.maglev.values()].map((m) => ({
        key: m.key,
        backendIds: [...new Set(m.table)],
        size: m.table.length,
      })),
      affinityMatches: [...this.matches.values()],
      sourceRanges: [...this.ranges.values()],
    };
  }
}

class Clock {
  ms = 0;
  slept: number[] = [];
  now = () => this.ms;
  sleep = async (ms: number) => {
    this.slept.push(ms);
    this.ms += ms;
  };
}

function setup() {
  const store = new MemoryStore();
  const clock = new Clock();
  const writer = new MapWriter(store, {
    maglevTableSize: M,
    graceMs: 500,
    now: clock.now,
    sleep: clock.sleep,
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

const web = (ips: string[], extra: Partial<ServicePortDecision> = {}) =>
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
      'setMaglev 1',
      'setMaglev 1',
      'upsertAffinityMatches 4',
      'resetServiceStats 2',
      'upsertFrontends 2',
    ]);
    expect(result).toMatchObject({ written: 12, maglevTables: 2, failures: [], degraded: [] });
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
    expect(again).toMatchObject({ written: 0, deleted: 0, maglevTables: 0 });
  });

  it('publishes a new generation before the flip and removes the old one only after the grace period', async () => {
    const { store, clock, writer, plan } = setup();
    await writer.apply(plan([web(['10.1.0.1', '10.1.0.2'], { schedulerAnnotation: 'maglev' })]));
    store.ops = [];
    clock.ms = 10_000;
    await writer.apply(plan([web(['10.1.0.1', '10.1.0.3'], { schedulerAnnotation: 'maglev' })]));
    expect(store.ops).toEqual([
      'resetBackendStats 1',
      'upsertBackends 1',
      'upsertSlots 4',
      'setMaglev 1',
      'setMaglev 1',
      'upsertFrontends 2',
    ]);
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

  it('waits for pending deletions before flipping a generation again', async () => {
    const { store, clock, writer, plan } = setup();
    await writer.apply(plan([web(['10.1.0.1'])]));
    clock.ms = 1_000;
    await writer.apply(plan([web(['10.1.0.1', '10.1.0.2'])]));
    clock.ms += 100;
    store.ops = [];
    await writer.apply(plan([web(['10.1.0.2'])]));
    expect(clock.slept).toEqual([400]);
    expect(store.ops.slice(0, 1)).toEqual(['deleteSlots 2']);
    // Generation 0 is live again (one slot per frontend); generation 1 (two each) waits for its grace.
    expect(store.slots.size).toBe(6);
    expect([...store.frontends.values()].every((f) => f.value.gen === 0)).toBe(true);
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
    expect(store.ops).toEqual(['deleteFrontends 3']);
    clock.ms += 500;
    writer.flushDeferred();
    expect(store.ops.slice(1)).toEqual([
      'deleteSlots 3',
      'deleteMaglev 3',
      'deleteAffinityMatches 3',
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
          'TCP/10.96.0.1:80: BPF map kbp_slot_v1 is full (capacity 5 entries); raise bpf.mapSizes.backendSlots',
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
      sleep: clock.sleep,
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

  it('cleans up what a crashed writer left behind without disturbing the live generation', async () => {
    const first = setup();
    await first.writer.apply(first.plan([web(['10.1.0.1'])]));
    // A crash after the new generation and a new backend were written, before the flip.
    first.store.upsertBackends([
      { id: 9, family: 'IPv4', address: '10.1.0.9', port: 8080, isLocal: false, terminating: false },
    ]);
    first.store.upsertSlots([{ serviceId: 1, slot: 0, gen: 1, backendId: 9 }]);
    const clock = new Clock();
    const writer = new MapWriter(first.store, {
      maglevTableSize: M,
      graceMs: 500,
      now: clock.now,
      sleep: clock.sleep,
    });
    writer.restore();
    first.store.ops = [];
    const plan = planBpf(
      decisions([web(['10.1.0.1'])]),
      {
        defaultScheduler: 'random',
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
