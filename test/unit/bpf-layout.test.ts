import { describe, expect, it } from 'vitest';
import {
  aff4Key,
  affVal,
  backend4,
  backend6,
  config,
  ct4Key,
  ct4Val,
  ct6Val,
  dropStats,
  MAPS,
  perCpuValueSize,
  rrVal,
  STRUCTS,
  slotKey,
  srcRange4Key,
  sumPerCpu,
  svc4Key,
  svc6Key,
  svcVal,
  trafficStats,
  u32Codec,
} from '../../src/dataplanes/bpf/layout.js';

// Sizes as asserted by _Static_assert in bpf/maps.h.
const C_SIZES: Record<string, number> = {
  kbp_svc4_key: 8,
  kbp_svc6_key: 20,
  kbp_svc_val: 24,
  kbp_slot_key: 8,
  kbp_backend4: 8,
  kbp_backend6: 20,
  kbp_ct4_key: 16,
  kbp_ct4_val: 32,
  kbp_ct6_key: 40,
  kbp_ct6_val: 56,
  kbp_aff4_key: 8,
  kbp_aff6_key: 20,
  kbp_aff_val: 16,
  kbp_aff_match_key: 8,
  kbp_srcr4_key: 12,
  kbp_srcr6_key: 24,
  kbp_rr_val: 8,
  kbp_traffic_stats: 48,
  kbp_drop_stats: 16,
  kbp_svc_drop_key: 8,
  kbp_config: 36,
  kbp_node6_key: 16,
  kbp_sockcfg: 16,
  kbp_sockrev4_key: 16,
  kbp_sockrev4_val: 12,
};

describe('bpf map layouts', () => {
  it('states the sizes maps.h asserts, for every struct', () => {
    expect(Object.fromEntries(STRUCTS.map((s) => [s.cName, s.size]))).toEqual(C_SIZES);
  });

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
