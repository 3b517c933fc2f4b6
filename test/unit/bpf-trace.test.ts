import { describe, expect, it } from 'vitest';
import { type TraceInput, type TraceMaps, traceFlow } from '../../src/dataplanes/bpf/inspect-trace.js';
import { CT_F, TCP_FLAG } from '../../src/dataplanes/bpf/layout.js';
import type { BackendEntry, FrontendValue } from '../../src/dataplanes/bpf/store.js';
import { frontendName } from '../../src/dataplanes/bpf/types.js';

const value = (v: Partial<FrontendValue>): FrontendValue => ({
  serviceId: 1,
  count: 2,
  localCount: 0,
  gen: 0,
  scheduler: 'random',
  action: 'forward',
  kind: 'ClusterIP',
  localOnly: false,
  hasInternalScope: false,
  affinityTimeoutSeconds: 0,
  checksSourceRanges: false,
  ...v,
});

const backend = (id: number, address: string, extra: Partial<BackendEntry> = {}): BackendEntry => ({
  id,
  family: 'IPv4',
  address,
  port: 8080,
  isLocal: false,
  terminating: false,
  ...extra,
});

/** The maps a trace reads, in memory: frontends by name, slots by service id. */
function maps(over: Partial<TraceMaps> & { frontends?: Record<string, FrontendValue> } = {}): TraceMaps {
  const backends = new Map([1, 2, 3].map((id) => [id, backend(id, `10.1.0.${id}`)]));
  const slots: Record<number, number[]> = { 1: [1, 2], 2: [3], 3: [1, 2, 3] };
  return {
    conntrack: () => null,
    frontend: (k) => over.frontends?.[frontendName(k)] ?? null,
    isNodeAddress: (a) => a === '192.168.1.10',
    config: () => ({
      snatAddr4: '192.168.1.10',
      snatAddr6: '::',
      snatPortMin: 61000,
      snatPortMax: 65535,
      maglevSize: 7,
      hashSeed: 1,
      nodeportMin: 30000,
      nodeportMax: 32767,
      newFlowRate: 0,
    }),
    slot: (svc, _gen, slot) => slots[svc]?.[slot] ?? 0,
    backend: (id) => backends.get(id) ?? null,
    sourceAllowed: () => true,
    affinity: () => null,
    affinityMatches: () => true,
    rrNext: () => null,
    maglevTable: () => null,
    ...over,
  };
}

const input = (i: Partial<TraceInput> = {}): TraceInput => ({
  saddr: '10.2.0.9',
  sport: 40000,
  daddr: '10.96.0.10',
  dport: 80,
  protocol: 'TCP',
  from: 'pod',
  syn: true,
  ...i,
});

const names = new Map([[1, 'ns/web']]);

describe('traceFlow', () => {
  it('lists the candidates of a random choice and says it is not deterministic', () => {
    const r = traceFlow(input(), maps({ frontends: { 'TCP/10.96.0.10:80': value({}) } }), names);
    expect(r).toMatchObject({
      verdict: 'translate',
      servicePort: 'ns/web',
      deterministic: false,
      candidates: ['10.1.0.1:8080', '10.1.0.2:8080'],
    });
  });

  it('finds a NodePort on every node address through the node address map, within the NodePort range', () => {
    const m = maps({
      frontends: { 'TCP/0.0.0.0:30080': value({ kind: 'NodePort', serviceId: 2, count: 1 }) },
    });
    const r = traceFlow(input({ daddr: '192.168.1.10', dport: 30080, from: 'external' }), m, names);
    expect(r).toMatchObject({ frontend: 'TCP/*:30080', candidates: ['10.1.0.3:8080'] });
    expect(
      traceFlow(input({ daddr: '192.168.1.11', dport: 30080, from: 'external' }), m, names).verdict,
    ).toBe('pass');
  });

  it('uses the pods entry of a two-scope frontend only for traffic from pods', () => {
    const m = maps({
      frontends: {
        'TCP/203.0.113.1:80': value({
          kind: 'LoadBalancer',
          serviceId: 2,
          count: 1,
          localOnly: true,
          hasInternalScope: true,
        }),
        'TCP/203.0.113.1:80/internal': value({ kind: 'LoadBalancer', serviceId: 3, count: 3 }),
      },
    });
    expect(traceFlow(input({ daddr: '203.0.113.1', from: 'pod' }), m, names).candidates).toHaveLength(3);
    expect(traceFlow(input({ daddr: '203.0.113.1', from: 'external' }), m, names).candidates).toEqual([
      '10.1.0.3:8080',
    ]);
  });

  it('keeps a client on its affinity backend while the entry is young and the backend still serves', () => {
    const fe = { 'TCP/10.96.0.10:80': value({ affinityTimeoutSeconds: 60 }) };
    const young = maps({ frontends: fe, affinity: () => ({ backendId: 2, ageNs: 10_000_000_000n }) });
    expect(traceFlow(input(), young, names)).toMatchObject({ backend: '10.1.0.2:8080', deterministic: true });
    const old = maps({ frontends: fe, affinity: () => ({ backendId: 2, ageNs: 61_000_000_000n }) });
    expect(traceFlow(input(), old, names).backend).toBeNull();
    const gone = maps({
      frontends: fe,
      affinity: () => ({ backendId: 2, ageNs: 1n }),
      affinityMatches: () => false,
    });
    expect(traceFlow(input(), gone, names).backend).toBeNull();
  });

  it('follows a tracked flow, and lets a new SYN on a closed flow choose again', () => {
    const ct = {
      lastSeenNs: 0n,
      xlateSaddr: '10.2.0.9',
      xlateDaddr: '10.1.0.1',
      xlateSport: 40000,
      xlateDport: 8080,
      svcId: 1,
      backendId: 1,
      flags: 0,
      tcpFlags: TCP_FLAG.SYN | TCP_FLAG.ACK,
    };
    const fe = { 'TCP/10.96.0.10:80': value({}) };
    expect(
      traceFlow(input({ syn: false }), maps({ frontends: fe, conntrack: () => ct }), names),
    ).toMatchObject({
      verdict: 'translate',
      backend: '10.1.0.1:8080',
      deterministic: true,
    });
    const closed = { ...ct, tcpFlags: ct.tcpFlags | TCP_FLAG.FIN };
    const again = traceFlow(input({ syn: true }), maps({ frontends: fe, conntrack: () => closed }), names);
    expect(again.steps[0]!.result).toMatch(/choose again/);
    expect(again.candidates).toHaveLength(2);
    const reply = { ...ct, flags: CT_F.REPLY, xlateSaddr: '10.96.0.10', xlateSport: 80 };
    expect(traceFlow(input({ syn: false }), maps({ conntrack: () => reply }), names).backend).toBe(
      '10.96.0.10:80',
    );
  });

  it('predicts the Maglev entry and the next rr slot', () => {
    const table = Uint32Array.from([1, 2, 1, 2, 1, 2, 1]);
    const m = maps({
      frontends: { 'TCP/10.96.0.10:80': value({ scheduler: 'maglev' }) },
      maglevTable: () => table,
    });
    const r = traceFlow(input(), m, names);
    expect(r.deterministic).toBe(true);
    expect(['10.1.0.1:8080', '10.1.0.2:8080']).toContain(r.backend);
    const rr = maps({ frontends: { 'TCP/10.96.0.10:80': value({ scheduler: 'rr' }) }, rrNext: () => 5 });
    expect(traceFlow(input(), rr, names)).toMatchObject({ backend: '10.1.0.2:8080', deterministic: false });
  });

  it('drops, rejects, and leaves ClusterIPs alone from outside', () => {
    const fe = (v: Partial<FrontendValue>) => ({ 'TCP/10.96.0.10:80': value(v) });
    expect(traceFlow(input(), maps({ frontends: fe({ action: 'reject', count: 0 }) }), names).verdict).toBe(
      'reject',
    );
    expect(traceFlow(input(), maps({ frontends: fe({ action: 'drop', count: 0 }) }), names).verdict).toBe(
      'drop',
    );
    const ranges = maps({ frontends: fe({ checksSourceRanges: true }), sourceAllowed: () => false });
    expect(traceFlow(input(), ranges, names).verdict).toBe('drop');
    expect(traceFlow(input({ from: 'external' }), maps({ frontends: fe({}) }), names)).toMatchObject({
      verdict: 'pass',
      frontend: null,
    });
  });
});
