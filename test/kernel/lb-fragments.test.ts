// Fragments through bpf/lb.o (bpf/frag.h) with BPF_PROG_TEST_RUN, once per family (IPv4's IP id
// and header options; IPv6's Fragment header behind the unfragmentable extension headers): every
// fragment of a datagram gets the translation of its first fragment, in both directions, on the
// routed (SNAT) path too; a fragment whose first one was not seen passes untouched and is counted.

import { beforeAll, describe, expect, it } from 'vitest';
import { mapLookup, mapUpdate } from '../../native/libbpf/map.js';
import { possibleCpus } from '../../native/libbpf/probe.js';
import { perCpuValueSize, sumPerCpu } from '../../src/dataplanes/bpf/codec.js';
import {
  BE_F,
  fragStats,
  ip4Codec,
  ip6Codec,
  PROGRAMS,
  SVC_F,
  u32Codec,
} from '../../src/dataplanes/bpf/layout.js';
import { Lab } from '../../src/lab/netns.js';
import {
  buildPacket,
  ETH_HLEN,
  fragmentPacket,
  IPPROTO_TCP,
  IPPROTO_UDP,
  IPV6_EXT,
  type ParsedPacket,
  parsePacket,
  reassemble,
  TCP,
} from '../../src/net/packets.js';
import { FAMILY_CASES, type FamilyCase } from '../support/families.js';
import { macOf, NEIGHBOURS } from '../support/fib-lab.js';
import {
  type LoadedLb,
  lbInRoutingNamespace,
  run,
  TC_ACT_REDIRECT,
  TC_ACT_UNSPEC,
  TEST_CONFIG,
  writeFrontend,
  XDP_PASS,
} from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

const { tcFromPod: TC_POD, tcFromExternal: TC_EXT, tcEgress: TC_EGRESS, xdpFromExternal: XDP_EXT } = PROGRAMS;

/** IPv4 options every fragment repeats: NOP, NOP, NOP, EOL, then a router alert. */
const OPTIONS = Buffer.from([1, 1, 1, 0, 0x94, 4, 0, 0]);

/** A family's addresses, and what every fragment repeats before its data. */
function familyOf({ A, v4 }: FamilyCase) {
  return {
    v4,
    CLIENT: A('10.244.1.10'),
    OUTSIDE: A(NEIGHBOURS.outside.ip),
    NODE: A('192.168.50.1'),
    SNAT: v4 ? TEST_CONFIG.snatAddr4 : TEST_CONFIG.snatAddr6,
    DNS: { vip: A('10.96.0.53'), port: 53, backend: A('10.244.2.6'), backendPort: 5353 },
    WEB: { vip: A('10.96.0.10'), port: 80, backend: A('10.244.2.5'), backendPort: 8080 },
    NODEPORT: { port: 30053, backend: A(NEIGHBOURS.remoteBackend.ip), backendPort: 5353 },
    /** The most data a fragment carries on a 1,500-byte link (IPv6: after its 40 + 8 bytes of
     * headers; a routed IPv6 packet too big is answered, never sent on). */
    chunk: v4 ? 1480 : 1448,
    /** The TTL / hop limit's byte. */
    ttlAt: ETH_HLEN + (v4 ? 8 : 7),
    /** IPv4 options, or IPv6 hop-by-hop and routing headers (the unfragmentable part). */
    repeated: v4 ? { ipOptions: OPTIONS } : { extHeaders: [IPV6_EXT.HOPOPTS, IPV6_EXT.ROUTING] },
    /** The bytes before a fragment's data (its headers). */
    headerLen: (f: Buffer) => (v4 ? (f[ETH_HLEN]! & 0x0f) * 4 : parsePacket(f).ihlLen),
  };
}

let lb: LoadedLb;
let nextId = 0x100;
let nextPort = 41000;

/** A datagram of `size` payload bytes (a recognisable pattern) with a fresh IP id (IPv6: the id its
 * fragments will carry, `ids` says which). */
function datagram(
  saddr: string,
  daddr: string,
  sport: number,
  dport: number,
  size: number,
  extra: {
    proto?: typeof IPPROTO_TCP | typeof IPPROTO_UDP;
    ipOptions?: Buffer;
    extHeaders?: number[];
    ipId?: number;
  } = {},
) {
  const payload = Buffer.alloc(size);
  for (let i = 0; i < size; i++) payload[i] = (i * 7 + 3) & 0xff;
  const ipId = extra.ipId ?? nextId++;
  const frame = buildPacket({
    saddr,
    daddr,
    proto: extra.proto ?? IPPROTO_UDP,
    sport,
    dport,
    tcpFlags: TCP.ACK,
    payload,
    ipOptions: extra.ipOptions,
    extHeaders: extra.extHeaders,
    dontFragment: false,
    ipId,
  });
  ids.set(frame, ipId);
  return frame;
}

/** The IPv6 Fragment header id of each datagram (IPv4's is in its header). */
const ids = new WeakMap<Buffer, number>();
const fragments = (frame: Buffer, chunk: number) => fragmentPacket(frame, chunk, ids.get(frame));

function fragCounters() {
  const buf = Buffer.alloc(perCpuValueSize(fragStats.size, possibleCpus()));
  mapLookup(lb.fd.fragStats, u32Codec.encode(0), buf);
  return sumPerCpu(fragStats, buf, possibleCpus());
}

function countersSince(before: ReturnType<typeof fragCounters>) {
  const now = fragCounters();
  return {
    first: now.first - before.first,
    laterKnown: now.laterKnown - before.laterKnown,
    laterUnknown: now.laterUnknown - before.laterUnknown,
  };
}

/** Runs each fragment through `prog`; expects `retval` for all, returns the outputs. */
function runAll(prog: string, frags: Buffer[], retval: number): Buffer[] {
  return frags.map((f, i) => {
    const out = run(lb, prog, f);
    expect(out.retval, `fragment ${i}`).toBe(retval);
    expect(out.dataOut.length, `fragment ${i} length`).toBe(f.length);
    return out.dataOut;
  });
}

/** The datagram the outputs reassemble to: valid checksums, the payload as sent. */
function expectReassembled(outs: Buffer[], sent: Buffer): ParsedPacket {
  for (const [i, o] of outs.entries())
    expect(parsePacket(o).ipChecksumOk, `fragment ${i} IP checksum`).toBe(true);
  const whole = parsePacket(reassemble(outs));
  expect(whole.l4ChecksumOk, 'reassembled L4 checksum').toBe(true);
  const p = parsePacket(sent);
  const hdr = p.proto === IPPROTO_TCP ? 20 : 8;
  expect(whole.l4.subarray(hdr).equals(p.l4.subarray(hdr)), 'payload').toBe(true);
  return whole;
}

describeRoot('bpf/lb.o fragments (BPF_PROG_TEST_RUN)', () => {
  const lab = new Lab(`kbpfrag${process.pid}`);
  lbInRoutingNamespace(lab, (loaded) => {
    lb = loaded;
  });

  describe.each(FAMILY_CASES)('$family', (family) => {
    const { v4, CLIENT, OUTSIDE, NODE, SNAT, DNS, WEB, NODEPORT, chunk, ttlAt, repeated, headerLen } =
      familyOf(family);
    const base = v4 ? 0 : 10;
    beforeAll(() => {
      writeFrontend(lb, {
        svcId: base + 1,
        addr: DNS.vip,
        port: DNS.port,
        proto: IPPROTO_UDP,
        backends: [{ id: base + 1, addr: DNS.backend, port: DNS.backendPort, flags: BE_F.LOCAL }],
      });
      writeFrontend(lb, {
        svcId: base + 2,
        addr: WEB.vip,
        port: WEB.port,
        proto: IPPROTO_TCP,
        backends: [{ id: base + 2, addr: WEB.backend, port: WEB.backendPort, flags: BE_F.LOCAL }],
      });
      writeFrontend(lb, {
        svcId: base + 3,
        addr: v4 ? '0.0.0.0' : '::',
        port: NODEPORT.port,
        proto: IPPROTO_UDP,
        flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
        backends: [{ id: base + 3, addr: NODEPORT.backend, port: NODEPORT.backendPort }],
      });
      if (v4) mapUpdate(lb.fd.nodeAddrs4, ip4Codec.encode(NODE), u32Codec.encode(1));
      else mapUpdate(lb.fd.nodeAddrs6, ip6Codec.encode(NODE), u32Codec.encode(1));
    });

    it('a 3,000-byte UDP datagram to a ClusterIP: every fragment goes to the backend, the first with the backend port', () => {
      const sport = nextPort++;
      const sent = datagram(CLIENT, DNS.vip, sport, DNS.port, 3000);
      const frags = fragments(sent, chunk);
      expect(frags).toHaveLength(3);
      const start = fragCounters();
      const outs = runAll(TC_POD, frags, TC_ACT_UNSPEC);
      for (const o of outs) expect(parsePacket(o)).toMatchObject({ saddr: CLIENT, daddr: DNS.backend });
      expect(parsePacket(outs[0]!)).toMatchObject({ sport, dport: DNS.backendPort });
      // Later fragments: only the IP header changed (addresses, and IPv4's checksum).
      for (let i = 1; i < 3; i++) {
        const at = ETH_HLEN + headerLen(frags[i]!);
        expect(outs[i]!.subarray(at).equals(frags[i]!.subarray(at)), `fragment ${i}`).toBe(true);
      }
      expect(expectReassembled(outs, sent)).toMatchObject({
        daddr: DNS.backend,
        sport,
        dport: DNS.backendPort,
      });
      expect(countersSince(start)).toEqual({ first: 1n, laterKnown: 2n, laterUnknown: 0n });
    });

    it('the fragmented reply, header options or extension headers in each fragment, leaves with the service address at egress', () => {
      const sport = nextPort++;
      run(
        lb,
        TC_POD,
        buildPacket({ saddr: CLIENT, daddr: DNS.vip, proto: IPPROTO_UDP, sport, dport: DNS.port }),
      );
      const reply = datagram(DNS.backend, CLIENT, DNS.backendPort, sport, 4000, repeated);
      const frags = fragments(reply, chunk - 8);
      expect(frags).toHaveLength(3);
      // At ingress from the backend's pod the reply crosses the stack untranslated ...
      const atIngress = runAll(TC_POD, frags, TC_ACT_UNSPEC);
      for (const [i, o] of atIngress.entries()) expect(o.equals(frags[i]!), `fragment ${i}`).toBe(true);
      // ... and every fragment gets the VIP back on its way out.
      const outs = runAll(TC_EGRESS, frags, TC_ACT_UNSPEC);
      for (const [i, o] of outs.entries()) {
        expect(parsePacket(o)).toMatchObject({ saddr: DNS.vip, daddr: CLIENT });
        expect(headerLen(o), `fragment ${i}`).toBe(headerLen(frags[i]!));
        expect(headerLen(o), `fragment ${i}`).toBe(v4 ? 28 : 40 + 8 + 8 + 8);
      }
      expect(expectReassembled(outs, reply)).toMatchObject({ sport: DNS.port, dport: sport });
    });

    it('a fragmented TCP segment follows its flow', () => {
      const sport = nextPort++;
      run(
        lb,
        TC_POD,
        buildPacket({ saddr: CLIENT, daddr: WEB.vip, proto: IPPROTO_TCP, sport, dport: WEB.port }),
      );
      const sent = datagram(CLIENT, WEB.vip, sport, WEB.port, 2500, { proto: IPPROTO_TCP });
      const outs = runAll(TC_POD, fragments(sent, chunk), TC_ACT_UNSPEC);
      for (const o of outs) expect(parsePacket(o).daddr).toBe(WEB.backend);
      expect(expectReassembled(outs, sent)).toMatchObject({ dport: WEB.backendPort, tcpFlags: TCP.ACK });
    });

    it('a later fragment before its first one passes untouched and is counted; another datagram`s id is not its own', () => {
      const sport = nextPort++;
      const sent = datagram(CLIENT, DNS.vip, sport, DNS.port, 3000);
      const [first, middle, last] = fragments(sent, chunk) as [Buffer, Buffer, Buffer];
      const start = fragCounters();
      const early = run(lb, TC_POD, last);
      expect(early.retval).toBe(TC_ACT_UNSPEC);
      expect(early.dataOut.equals(last)).toBe(true);
      expect(countersSince(start)).toEqual({ first: 0n, laterKnown: 0n, laterUnknown: 1n });

      expect(parsePacket(run(lb, TC_POD, first).dataOut)).toMatchObject({
        daddr: DNS.backend,
        dport: 5353,
      });
      // The same id from another source is another datagram: not translated.
      const ipId = parsePacket(first).ipId;
      const other = datagram(family.A('10.244.1.99'), DNS.vip, sport, DNS.port, 3000, { ipId });
      const stranger = fragments(other, chunk)[1]!;
      expect(run(lb, TC_POD, stranger).dataOut.equals(stranger)).toBe(true);
      expect(parsePacket(run(lb, TC_POD, middle).dataOut).daddr).toBe(DNS.backend);
      expect(countersSince(start)).toEqual({ first: 1n, laterKnown: 1n, laterUnknown: 2n });
    });

    it('fragments of a datagram to no service pass untouched', () => {
      const sent = datagram(CLIENT, family.A('10.244.2.9'), nextPort++, 9999, 3000);
      const frags = fragments(sent, chunk);
      const outs = runAll(TC_POD, frags, TC_ACT_UNSPEC);
      for (const [i, o] of outs.entries()) expect(o.equals(frags[i]!), `fragment ${i}`).toBe(true);
    });

    it('a NodePort datagram to a remote backend: every fragment gets the same SNAT address and port and the same route; so does the reply', () => {
      const sport = nextPort++;
      const sent = datagram(OUTSIDE, NODE, sport, NODEPORT.port, 4000);
      const frags = fragments(sent, chunk);
      const outs = runAll(TC_EXT, frags, TC_ACT_REDIRECT);
      for (const [i, o] of outs.entries()) {
        expect(parsePacket(o), `fragment ${i}`).toMatchObject({ saddr: SNAT, daddr: NODEPORT.backend });
        expect(macOf(o, 0), `fragment ${i}`).toBe(NEIGHBOURS.remoteBackend.mac);
        expect(o[ttlAt], `fragment ${i} TTL`).toBe(63);
      }
      const whole = expectReassembled(outs, sent);
      expect(whole.dport).toBe(NODEPORT.backendPort);
      expect(whole.sport).toBeGreaterThanOrEqual(TEST_CONFIG.snatPortMin);
      expect(whole.sport).toBeLessThanOrEqual(TEST_CONFIG.snatPortMax);

      const reply = datagram(NODEPORT.backend, SNAT, NODEPORT.backendPort, whole.sport, 3000);
      const back = runAll(TC_EXT, fragments(reply, chunk), TC_ACT_REDIRECT);
      for (const o of back) {
        expect(parsePacket(o)).toMatchObject({ saddr: NODE, daddr: OUTSIDE });
        expect(macOf(o, 0)).toBe(NEIGHBOURS.outside.mac);
      }
      expect(expectReassembled(back, reply)).toMatchObject({ sport: NODEPORT.port, dport: sport });
    });

    it('XDP leaves fragments to tc, even those of a tracked flow', () => {
      const sport = nextPort++;
      const whole = buildPacket({
        saddr: OUTSIDE,
        daddr: NODE,
        proto: IPPROTO_UDP,
        sport,
        dport: NODEPORT.port,
      });
      // IPv4: creates the flow and leaves routing to tc.
      expect(run(lb, XDP_EXT, whole).retval).toBe(XDP_PASS);
      const frags = fragments(datagram(OUTSIDE, NODE, sport, NODEPORT.port, 3000), chunk);
      const start = fragCounters();
      for (const [i, f] of frags.entries()) {
        const out = run(lb, XDP_EXT, f);
        expect(out.retval, `fragment ${i}`).toBe(XDP_PASS);
        expect(out.dataOut.equals(f), `fragment ${i}`).toBe(true);
      }
      expect(countersSince(start)).toEqual({ first: 0n, laterKnown: 0n, laterUnknown: 0n });
      const outs = runAll(TC_EXT, frags, TC_ACT_REDIRECT);
      for (const o of outs) expect(parsePacket(o).saddr).toBe(SNAT);
    });
  });

  it('an IPv6 atomic fragment (offset 0, no more fragments) is a whole datagram: translated, not recorded', () => {
    const { CLIENT, DNS } = familyOf(FAMILY_CASES.find((f) => !f.v4)!);
    const sport = nextPort++;
    const atomic = buildPacket({
      saddr: CLIENT,
      daddr: DNS.vip,
      proto: IPPROTO_UDP,
      sport,
      dport: DNS.port,
      payload: Buffer.from('whole'),
      extHeaders: [IPV6_EXT.FRAGMENT],
    });
    atomic.writeUInt16BE(0, ETH_HLEN + 40 + 2); // offset 0, M clear
    const start = fragCounters();
    const out = run(lb, TC_POD, atomic);
    expect(parsePacket(out.dataOut)).toMatchObject({
      daddr: DNS.backend,
      dport: DNS.backendPort,
      l4ChecksumOk: true,
    });
    expect(countersSince(start)).toEqual({ first: 0n, laterKnown: 0n, laterUnknown: 0n });
  });
});
