import { describe, expect, it } from 'vitest';
import { enumMismatches } from '../../src/dataplanes/bpf/btf-check.js';
import { perCpuValueSize, sumPerCpu } from '../../src/dataplanes/bpf/codec.js';
import {
  ACTION,
  ALGORITHM,
  aff4Key,
  affVal,
  BE_F,
  backend4,
  backend6,
  CT_F,
  config,
  ct4Key,
  ct4Val,
  ct6Val,
  DROP_REASON,
  dropStats,
  ENUMS,
  type EnumLayout,
  HOST_IF,
  MAPS,
  rrVal,
  SCOPE,
  SOCK_SCOPE,
  STRUCTS,
  SVC_F,
  slotKey,
  slotVal4,
  slotVal6,
  srcRange4Key,
  svc4Key,
  svc6Key,
  svcVal,
  TCP_FLAG,
  trafficStats,
  u32Codec,
} from '../../src/dataplanes/bpf/layout.js';

describe('bpf map layouts', () => {
  it('keeps fields and padding inside the struct and apart from each other', () => {
    for (const s of STRUCTS) {
      const covered = new Uint8Array(s.size);
      for (const [name, field] of Object.entries(s.fields)) {
        for (let i = field.offset; i < field.offset + field.size; i++) {
          expect(covered[i], `${s.cName}.${name} overlaps`).toBe(0);
          covered[i] = 1;
        }
      }
      for (const offset of Object.values(s.padding)) expect(covered[offset], `${s.cName} padding`).toBe(0);
    }
  });

  it('writes addresses and ports in network order, ids in host order', () => {
    const key = svc4Key.encode({ addr: '10.96.0.10', port: 80, proto: 6, scope: 1 });
    expect([...key]).toEqual([10, 96, 0, 10, 0, 80, 6, 1]);
    const slot = slotKey.encode({ svcId: 0x01020304, slot: 0x0506, gen: 7 });
    expect([...slot]).toEqual([4, 3, 2, 1, 6, 5, 7, 0]);
    expect([...u32Codec.encode(258)]).toEqual([2, 1, 0, 0]);
    expect([...backend4.encode({ addr: '192.168.1.2', port: 8080, flags: 3 })]).toEqual([
      192, 168, 1, 2, 0x1f, 0x90, 3, 0,
    ]);
    // kbp_slot_val: the id, the port, then the address, an IPv4 one in the first 4 of 16 bytes.
    expect([...slotVal4.encode({ backendId: 258, port: 8080, addr: '192.168.1.2' })]).toEqual([
      2,
      1,
      0,
      0,
      0x1f,
      0x90,
      0,
      0,
      192,
      168,
      1,
      2,
      ...Array(12).fill(0),
    ]);
    const slot6 = slotVal6.encode({ backendId: 7, port: 443, addr: 'fd00::1' });
    expect(slot6.length).toBe(24);
    expect([...slot6.subarray(8, 10)]).toEqual([0xfd, 0]);
    expect(slotVal6.decode(slot6)).toEqual({ backendId: 7, port: 443, addr: 'fd00::1' });
    expect(slotVal4.decode(slot6).backendId).toBe(7);
  });

  it('round-trips every value it encodes', () => {
    const cases: [{ encode(v: never): Buffer; decode(b: Buffer): unknown }, unknown][] = [
      [svc4Key, { addr: '0.0.0.0', port: 30080, proto: 17, scope: 0 }],
      [svc6Key, { addr: 'fd00::10', port: 443, proto: 6, scope: 1 }],
      [
        svcVal,
        {
          svcId: 65535,
          count: 3,
          localCount: 1,
          flags: 0xc1,
          affinityTimeoutS: 10800,
          gen: 1,
          algorithm: 2,
          action: 0,
        },
      ],
      [backend6, { addr: '2001:db8::1', port: 53, flags: 1 }],
      [ct4Key, { saddr: '10.0.0.1', daddr: '10.96.0.1', sport: 40000, dport: 443, proto: 6 }],
      [
        ct4Val,
        {
          lastSeenNs: 123456789012345n,
          xlateSaddr: '10.0.0.1',
          xlateDaddr: '10.244.1.5',
          xlateSport: 40000,
          xlateDport: 8443,
          svcId: 7,
          backendId: 9,
          flags: 3,
          tcpFlags: 0x13,
        },
      ],
      [
        ct6Val,
        {
          lastSeenNs: 1n,
          xlateSaddr: 'fd00::1',
          xlateDaddr: 'fd00::2',
          xlateSport: 1,
          xlateDport: 2,
          svcId: 3,
          backendId: 4,
          flags: 0,
          tcpFlags: 2,
        },
      ],
      [aff4Key, { client: '1.2.3.4', svcId: 12 }],
      [affVal, { lastUsedNs: 99n, backendId: 5 }],
      [srcRange4Key, { prefixlen: 56, svcId: 4, addr: '203.0.113.0' }],
      [rrVal, { next: 41 }],
      [
        config,
        {
          snatAddr4: '192.168.0.10',
          snatAddr6: '::',
          snatPortMin: 61000,
          snatPortMax: 65000,
          maglevSize: 16381,
          hashSeed: 0xdeadbeef,
          nodeportMin: 30000,
          nodeportMax: 32767,
          newFlowRate: 20000,
        },
      ],
      [dropStats, { packets: 2n, bytes: 120n }],
    ];
    for (const [codec, value] of cases) expect(codec.decode(codec.encode(value as never))).toEqual(value);
  });

  it('packs batches back to back and decodes at an offset', () => {
    const values = [
      { svcId: 1, slot: 0, gen: 0 },
      { svcId: 1, slot: 1, gen: 0 },
      { svcId: 2, slot: 0, gen: 1 },
    ];
    const buf = slotKey.encodeMany(values);
    expect(buf.length).toBe(24);
    expect(values.map((_, i) => slotKey.decode(buf, i * 8))).toEqual(values);
  });

  it('rejects addresses of the wrong family', () => {
    expect(() => svc4Key.encode({ addr: 'fd00::1', port: 1, proto: 6, scope: 0 })).toThrow(/IPv4/);
    expect(() => backend6.encode({ addr: '10.0.0.1', port: 1, flags: 0 })).toThrow(/IPv6/);
  });

  it('sums per-CPU counters with 8-byte strides', () => {
    const cpus = 3;
    const buf = Buffer.alloc(perCpuValueSize(trafficStats.size, cpus));
    for (let cpu = 0; cpu < cpus; cpu++) {
      trafficStats.encodeInto(buf, cpu * 48, {
        newConns: 1n,
        fwdPackets: BigInt(cpu + 1),
        fwdBytes: 100n,
        replyPackets: 0n,
        replyBytes: 0n,
        drops: BigInt(cpu),
      });
    }
    expect(sumPerCpu(trafficStats, buf, cpus)).toEqual({
      newConns: 3n,
      fwdPackets: 6n,
      fwdBytes: 300n,
      replyPackets: 0n,
      replyBytes: 0n,
      drops: 3n,
    });
    expect(perCpuValueSize(36, 2)).toBe(80);
  });

  it('names every map with a version suffix that fits the kernel name limit', () => {
    for (const m of Object.values(MAPS)) {
      expect(m.name).toMatch(/^kbp_[a-z0-9]+_v\d+$/);
      expect(m.name.length).toBeLessThanOrEqual(15);
    }
  });
});

// The sizes, offsets and enum values themselves are proven against the object's BTF
// (test/kernel/bpf-layout.test.ts, and the agent at start-up); this proves the check.
describe('the BTF check of the constants', () => {
  /** BTF as an object agreeing with layout.ts would have it, with `change` applied. */
  function btf(change: (enums: Map<string, Map<string, number>>) => void = () => {}) {
    const enums = new Map(ENUMS.map((e) => [e.cName, new Map(e.members.map((m) => [m.cName, m.value]))]));
    enums.get('kbp_drop_reason')!.set('KBP_DROP_MAX', 16);
    change(enums);
    return (cName: string) => {
      const values = enums.get(cName);
      return values ? { values: [...values].map(([name, value]) => ({ name, value })) } : null;
    };
  }

  it('pairs every constant table with its C enum', () => {
    expect(ENUMS.map((e) => `${e.tsName} ${e.cName}`)).toEqual([
      'SCOPE kbp_scope',
      'ALGORITHM kbp_algorithm',
      'ACTION kbp_action',
      'SVC_F kbp_svc_flags',
      'BE_F kbp_backend_flags',
      'CT_F kbp_ct_flags',
      'TCP_FLAG kbp_tcp_flags',
      'DROP_REASON kbp_drop_reason',
      'SOCK_SCOPE kbp_sock_scope',
      'HOST_IF kbp_host_if',
    ]);
    const names = (e: EnumLayout) => Object.fromEntries(e.members.map((m) => [m.key, m.cName]));
    const byName = new Map(ENUMS.map((e) => [e.tsName, e]));
    expect(names(byName.get('ALGORITHM')!)).toEqual({
      random: 'KBP_ALG_RANDOM',
      rr: 'KBP_ALG_RR',
      maglev: 'KBP_ALG_MAGLEV',
    });
    expect(names(byName.get('SVC_F')!).EXTERNAL_IP).toBe('KBP_SVC_F_EXTERNAL_IP');
    expect(names(byName.get('DROP_REASON')!)).toMatchObject({
      noLocalEndpoints: 'KBP_DROP_NO_LOCAL_ENDPOINTS',
      noSnatAddress: 'KBP_DROP_NO_SNAT_ADDR',
      snatPortsExhausted: 'KBP_DROP_SNAT_PORTS',
      conntrackInsert: 'KBP_DROP_CT_INSERT',
    });
    const tables = {
      SCOPE,
      ALGORITHM,
      ACTION,
      SVC_F,
      BE_F,
      CT_F,
      TCP_FLAG,
      DROP_REASON,
      SOCK_SCOPE,
      HOST_IF,
    };
    for (const e of ENUMS) {
      expect(Object.fromEntries(e.members.map((m) => [m.key, m.value]))).toEqual(
        tables[e.tsName as keyof typeof tables],
      );
    }
  });

  it('finds nothing when the object agrees', () => {
    expect(enumMismatches(btf())).toEqual([]);
  });

  it('names a value that differs from the object', () => {
    const wrong = btf((enums) => enums.get('kbp_ct_flags')!.set('KBP_CT_F_ROUTE', 32));
    expect(enumMismatches(wrong)).toEqual([
      'enum kbp_ct_flags: KBP_CT_F_ROUTE is 32 in BTF, layout.ts CT_F.ROUTE is 16',
    ]);
  });

  it('names a missing enum, a missing enumerator and one layout.ts does not know', () => {
    const changed = btf((enums) => {
      enums.delete('kbp_sock_scope');
      enums.get('kbp_drop_reason')!.delete('KBP_DROP_FIB');
      enums.get('kbp_backend_flags')!.set('KBP_BE_F_DRAINING', 4);
    });
    expect(enumMismatches(changed)).toEqual([
      'enum kbp_backend_flags: KBP_BE_F_DRAINING (4) is not in layout.ts BE_F',
      'enum kbp_drop_reason: KBP_DROP_FIB is not in BTF (layout.ts DROP_REASON.fib)',
      "enum kbp_sock_scope: not in the object's BTF (layout.ts SOCK_SCOPE)",
    ]);
  });
});
