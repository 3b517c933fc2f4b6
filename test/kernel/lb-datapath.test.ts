// The load balancer programs of bpf/lb.o run on crafted packets with BPF_PROG_TEST_RUN; the maps
// are written through layout.ts's codecs, as the control plane's writer does.

import { beforeAll, describe, expect, it } from 'vitest';
import { BPF_F_INNER_MAP, BPF_MAP_TYPE_ARRAY } from '../../native/libbpf/constants.js';
import { createMap, mapDelete, mapLookup, mapUpdate, mapUpdateBatch } from '../../native/libbpf/map.js';
import { possibleCpus } from '../../native/libbpf/probe.js';
import { testRun } from '../../native/libbpf/test-run.js';
import { closeFd, ifNameToIndex } from '../../native/libc.js';
import { perCpuValueSize, sumPerCpu } from '../../src/dataplanes/bpf/codec.js';
import { collectConntrack } from '../../src/dataplanes/bpf/conntrack-gc.js';
import { maglevIndex } from '../../src/dataplanes/bpf/flow-hash.js';
import {
  ACTION,
  ALGORITHM,
  aff4Key,
  aff6Key,
  affMatchKey,
  affVal,
  BE_F,
  CT_F,
  ct4Key,
  ct4Val,
  ct6Key,
  ct6Val,
  DROP_REASON,
  dropStats,
  ifAddr6Val,
  ip4Codec,
  ip6Codec,
  PROGRAMS,
  rrVal,
  SCOPE,
  SVC_F,
  srcRange4Key,
  srcRange6Key,
  svcDropKey,
  TCP_FLAG,
  trafficStats,
  u8Codec,
  u32Codec,
} from '../../src/dataplanes/bpf/layout.js';
import { buildMaglevTable } from '../../src/dataplanes/bpf/maglev.js';
import { Lab } from '../../src/lab/netns.js';
import {
  buildIcmpError,
  buildNeighbourSolicitation,
  buildPacket,
  ETH_HLEN,
  IPPROTO_ICMP,
  IPPROTO_ICMPV6,
  IPPROTO_TCP,
  IPPROTO_UDP,
  IPV6_EXT,
  onesSum,
  parsePacket,
  quotedPacket,
  replyTo,
  TCP,
} from '../../src/net/packets.js';
import { FAMILY_CASES, itIPv4Only } from '../support/families.js';
import { macOf, NEIGHBOURS, OUTSIDE, SAME_SEGMENT_BACKEND } from '../support/fib-lab.js';
import {
  dropCount,
  LB_COMPAT_OBJECT_PATH,
  type LoadedLb,
  lbInRoutingNamespace,
  loadLb,
  run,
  runXdpOn,
  TC_ACT_REDIRECT,
  TC_ACT_SHOT,
  TC_ACT_UNSPEC,
  TEST_CONFIG,
  writeConfig,
  writeFrontend,
  XDP_DROP,
  XDP_PASS,
  XDP_TX,
} from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

const { tcFromPod: TC_POD, tcFromExternal: TC_EXT, xdpFromExternal: XDP_EXT, tcEgress: TC_EGRESS } = PROGRAMS;

const CLIENT = '10.244.1.10';

let lb: LoadedLb;
let nextSport = 20000;
/** A fresh client port per flow, so tests never share conntrack entries. */
const sport = () => nextSport++;

function tcp(saddr: string, daddr: string, dport: number, flags: number = TCP.SYN, src = sport()) {
  return buildPacket({ saddr, daddr, proto: IPPROTO_TCP, sport: src, dport, tcpFlags: flags });
}

function udp(saddr: string, daddr: string, dport: number, src = sport()) {
  return buildPacket({ saddr, daddr, proto: IPPROTO_UDP, sport: src, dport, payload: Buffer.from('hello') });
}

function expectValid(frame: Buffer) {
  const p = parsePacket(frame);
  expect(p.ipChecksumOk, 'IPv4 header checksum').toBe(true);
  expect(p.l4ChecksumOk, 'L4 checksum').toBe(true);
  return p;
}

function stats(map: number, id: number) {
  const buf = Buffer.alloc(perCpuValueSize(trafficStats.size, possibleCpus()));
  mapLookup(map, u32Codec.encode(id), buf);
  return sumPerCpu(trafficStats, buf, possibleCpus());
}

function serviceDrops(svcId: number, reason: number) {
  const buf = Buffer.alloc(perCpuValueSize(dropStats.size, possibleCpus()));
  if (!mapLookup(lb.fd.svcDrops, svcDropKey.encode({ svcId, reason }), buf)) return 0n;
  return sumPerCpu(dropStats, buf, possibleCpus()).packets;
}

const drops = (reason: number) => dropCount(lb, reason);

describeRoot('bpf/lb.o datapath (BPF_PROG_TEST_RUN)', () => {
  const lab = new Lab(`kbpdp${process.pid}`);
  lbInRoutingNamespace(lab, (loaded) => {
    lb = loaded;
  });

  describe.each(FAMILY_CASES)('DNAT and reverse NAT ($family)', ({ A, v4 }) => {
    const itV4 = itIPv4Only(v4);
    const ICMP = v4 ? IPPROTO_ICMP : IPPROTO_ICMPV6;
    beforeAll(() => {
      writeFrontend(lb, {
        svcId: 1,
        addr: A('10.96.0.10'),
        port: 80,
        proto: IPPROTO_TCP,
        backends: [{ id: 1, addr: A('10.244.2.5'), port: 8080, flags: BE_F.LOCAL }],
      });
      writeFrontend(lb, {
        svcId: 2,
        addr: A('10.96.0.53'),
        port: 53,
        proto: IPPROTO_UDP,
        backends: [{ id: 2, addr: A('10.244.2.6'), port: 5353, flags: BE_F.LOCAL }],
      });
    });

    it('tc rewrites a TCP SYN to the backend at ingress and the reply back to the VIP at egress, checksums valid', () => {
      const syn = tcp(A(CLIENT), A('10.96.0.10'), 80);
      const out = run(lb, TC_POD, syn);
      expect(out.retval).toBe(TC_ACT_UNSPEC);
      const p = expectValid(out.dataOut);
      expect(p).toMatchObject({
        saddr: A(CLIENT),
        daddr: A('10.244.2.5'),
        dport: 8080,
        sport: parsePacket(syn).sport,
      });

      // The reply crosses the stack untranslated (as netfilter and rp_filter expect it) ...
      const reply = replyTo(out.dataOut);
      const atIngress = run(lb, TC_POD, reply);
      expect(atIngress.retval).toBe(TC_ACT_UNSPEC);
      expect(atIngress.dataOut).toEqual(reply);
      // ... and gets the VIP back on its way out to the client.
      const back = run(lb, TC_EGRESS, reply);
      expect(back.retval).toBe(TC_ACT_UNSPEC);
      const r = expectValid(back.dataOut);
      expect(r).toMatchObject({ saddr: A('10.96.0.10'), sport: 80, daddr: A(CLIENT), dport: p.sport });
    });

    it('tc rewrites UDP both ways', () => {
      const out = run(lb, TC_POD, udp(A(CLIENT), A('10.96.0.53'), 53));
      const p = expectValid(out.dataOut);
      expect(p).toMatchObject({ daddr: A('10.244.2.6'), dport: 5353 });
      const back = expectValid(run(lb, TC_EGRESS, replyTo(out.dataOut)).dataOut);
      expect(back).toMatchObject({ saddr: A('10.96.0.53'), sport: 53, daddr: A(CLIENT) });
    });

    // IPv6 has no UDP without a checksum (RFC 8200).
    itV4('tc keeps a UDP checksum of 0 ("none") at 0', () => {
      const bare = buildPacket({
        saddr: A(CLIENT),
        daddr: A('10.96.0.53'),
        proto: IPPROTO_UDP,
        sport: sport(),
        dport: 53,
        udpNoChecksum: true,
      });
      const q = parsePacket(run(lb, TC_POD, bare).dataOut);
      expect(q.daddr).toBe(A('10.244.2.6'));
      expect(q.l4.readUInt16BE(6)).toBe(0);
      expect(q.ipChecksumOk).toBe(true);
    });

    itV4('honours IPv4 options (ihl > 5)', () => {
      const frame = buildPacket({
        saddr: A(CLIENT),
        daddr: A('10.96.0.10'),
        proto: IPPROTO_TCP,
        sport: sport(),
        dport: 80,
        ipOptions: Buffer.from([1, 1, 1, 0, 0x94, 4, 0, 0]),
      });
      const p = expectValid(run(lb, TC_POD, frame).dataOut);
      expect(p).toMatchObject({ ihlLen: 28, daddr: A('10.244.2.5'), dport: 8080 });
    });

    it('an ICMP error about a translated flow reaches the client in service terms (RELATED, egress)', () => {
      for (const [proto, vip, vport, backend, bport] of [
        [IPPROTO_UDP, A('10.96.0.53'), 53, A('10.244.2.6'), 5353],
        [IPPROTO_TCP, A('10.96.0.10'), 80, A('10.244.2.5'), 8080],
      ] as const) {
        const src = sport();
        const sent =
          proto === IPPROTO_UDP ? udp(A(CLIENT), vip, vport, src) : tcp(A(CLIENT), vip, vport, TCP.SYN, src);
        const out = run(lb, TC_POD, sent).dataOut;
        expect(parsePacket(out)).toMatchObject({ daddr: backend, dport: bport });
        // The backend's host answers the translated packet: port unreachable, quoting all of it.
        const error = buildIcmpError({ saddr: backend, daddr: A(CLIENT), quote: out.subarray(ETH_HLEN) });
        const back = run(lb, TC_EGRESS, error);
        const icmp = expectValid(back.dataOut);
        expect(icmp).toMatchObject({ proto: ICMP, saddr: vip, daddr: A(CLIENT) });
        // The quote is the packet as the client sent it, checksums included.
        const quote = expectValid(quotedPacket(back.dataOut));
        expect(quote).toMatchObject({ saddr: A(CLIENT), sport: src, daddr: vip, dport: vport });
        expect(quotedPacket(back.dataOut).subarray(ETH_HLEN)).toEqual(sent.subarray(ETH_HLEN));
      }
      // An error quoting a packet of no tracked flow passes untouched.
      const stranger = buildIcmpError({
        saddr: A('10.244.2.6'),
        daddr: A(CLIENT),
        quote: udp(A(CLIENT), A('10.244.2.6'), 5353, 1).subarray(ETH_HLEN),
      });
      expect(run(lb, TC_EGRESS, stranger).dataOut).toEqual(stranger);
    });

    it('an ICMP error from the client about a reply reaches the backend in its terms, through the stack (RELATED, ingress)', () => {
      const src = sport();
      const out = run(lb, TC_POD, udp(A(CLIENT), A('10.96.0.53'), 53, src)).dataOut;
      const sentByBackend = replyTo(out);
      const seenByClient = run(lb, TC_EGRESS, sentByBackend).dataOut;
      expect(parsePacket(seenByClient)).toMatchObject({ saddr: A('10.96.0.53'), sport: 53 });
      // The client's socket is gone: its host answers the reply with port unreachable.
      const error = buildIcmpError({
        saddr: A(CLIENT),
        daddr: A('10.96.0.53'),
        quote: seenByClient.subarray(ETH_HLEN),
      });
      const fwd = run(lb, TC_POD, error);
      expect(fwd.retval).toBe(TC_ACT_UNSPEC);
      expect(expectValid(fwd.dataOut)).toMatchObject({
        proto: ICMP,
        saddr: A(CLIENT),
        daddr: A('10.244.2.6'),
      });
      // The quote is the reply exactly as the backend sent it, checksums included.
      expect(quotedPacket(fwd.dataOut).subarray(ETH_HLEN)).toEqual(sentByBackend.subarray(ETH_HLEN));
      // The same error at egress is not the egress program's: untouched.
      expect(run(lb, TC_EGRESS, error).dataOut).toEqual(error);
    });

    itV4(
      'translates a BIG TCP packet (IPv4 tot_len 0 on a GSO skb), and leaves tot_len 0 alone otherwise',
      () => {
        const src = sport();
        run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.10'), 80, TCP.SYN, src));
        const big = buildPacket({
          saddr: A(CLIENT),
          daddr: A('10.96.0.10'),
          proto: IPPROTO_TCP,
          sport: src,
          dport: 80,
          tcpFlags: TCP.ACK,
          payload: Buffer.alloc(3000, 7),
        });
        big.writeUInt16BE(0, ETH_HLEN + 2);
        big.writeUInt16BE(0, ETH_HLEN + 10);
        big.writeUInt16BE(~onesSum(big.subarray(ETH_HLEN, ETH_HLEN + 20)) & 0xffff, ETH_HLEN + 10);
        // struct __sk_buff as BPF_PROG_TEST_RUN takes it: gso_segs at 164, gso_size at 176.
        const gso = (size: number) => {
          const ctx = Buffer.alloc(192);
          ctx.writeUInt32LE(size ? 3 : 0, 164);
          ctx.writeUInt32LE(size, 176);
          return ctx;
        };
        const out = testRun(lb.prog(TC_POD), { data: big, ctx: gso(1448) }).dataOut;
        expect(out.readUInt16BE(ETH_HLEN + 2)).toBe(0);
        expect(out.subarray(ETH_HLEN + 16, ETH_HLEN + 20)).toEqual(Buffer.from([10, 244, 2, 5]));
        expect(out.readUInt16BE(ETH_HLEN + 22)).toBe(8080);
        expect(onesSum(out.subarray(ETH_HLEN, ETH_HLEN + 20))).toBe(0xffff);
        // The TCP checksum, over the real length, stays valid.
        const l4 = out.subarray(ETH_HLEN + 20);
        const ph = Buffer.alloc(12);
        out.copy(ph, 0, ETH_HLEN + 12, ETH_HLEN + 20);
        ph[9] = IPPROTO_TCP;
        ph.writeUInt16BE(l4.length, 10);
        expect(onesSum(l4, onesSum(ph))).toBe(0xffff);
        // Not GSO: a tot_len of 0 is inconsistent, the packet passes untouched.
        expect(testRun(lb.prog(TC_POD), { data: big, ctx: gso(0) }).dataOut).toEqual(big);
      },
    );

    it('counts packets, bytes and connections per service and per backend', () => {
      const before = stats(lb.fd.svcStats, 1);
      const beBefore = stats(lb.fd.backendStats, 1);
      const syn = tcp(A(CLIENT), A('10.96.0.10'), 80);
      const out = run(lb, TC_POD, syn);
      run(lb, TC_EGRESS, replyTo(out.dataOut));
      const after = stats(lb.fd.svcStats, 1);
      expect(after.newConns - before.newConns).toBe(1n);
      expect(after.fwdPackets - before.fwdPackets).toBe(1n);
      expect(after.fwdBytes - before.fwdBytes).toBe(BigInt(syn.length));
      expect(after.replyPackets - before.replyPackets).toBe(1n);
      expect(stats(lb.fd.backendStats, 1).newConns - beBefore.newConns).toBe(1n);
    });
  });

  describe.each(FAMILY_CASES)(
    'external traffic (XDP and tc on external interfaces) ($family)',
    ({ A, v4 }) => {
      beforeAll(() => {
        writeFrontend(lb, {
          svcId: 10,
          addr: A('192.168.50.100'),
          port: 443,
          proto: IPPROTO_TCP,
          flags: SVC_F.EXTERNAL | SVC_F.LOADBALANCER,
          backends: [{ id: 10, addr: A('10.244.2.10'), port: 8443, flags: BE_F.LOCAL }],
        });
        writeFrontend(lb, {
          svcId: 11,
          addr: A('10.96.0.11'),
          port: 80,
          proto: IPPROTO_TCP,
          backends: [{ id: 11, addr: A('10.244.2.11'), port: 8080, flags: BE_F.LOCAL }],
        });
        // NodePort on every node address: one addr-0 frontend plus the node's addresses.
        writeFrontend(lb, {
          svcId: 12,
          addr: v4 ? '0.0.0.0' : '::',
          port: 30080,
          proto: IPPROTO_TCP,
          flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
          backends: [{ id: 12, addr: A('10.244.2.12'), port: 8080, flags: BE_F.LOCAL }],
        });
        for (const nodeIP of ['192.168.50.1', '192.168.60.1'])
          mapUpdate(
            v4 ? lb.fd.nodeAddrs4 : lb.fd.nodeAddrs6,
            (v4 ? ip4Codec : ip6Codec).encode(A(nodeIP)),
            u32Codec.encode(1),
          );
      });

      it('XDP DNATs a LoadBalancer IP to a local backend and reverses the reply, checksums valid', () => {
        const out = run(lb, XDP_EXT, tcp(A(OUTSIDE), A('192.168.50.100'), 443));
        expect(out.retval).toBe(XDP_PASS);
        const p = expectValid(out.dataOut);
        expect(p).toMatchObject({ saddr: A(OUTSIDE), daddr: A('10.244.2.10'), dport: 8443 });
        // The local backend's reply is translated on its way out of the external interface.
        const back = run(lb, TC_EGRESS, replyTo(out.dataOut));
        expect(expectValid(back.dataOut)).toMatchObject({
          saddr: A('192.168.50.100'),
          sport: 443,
          daddr: A(OUTSIDE),
        });
      });

      it('XDP keeps UDP checksums valid too', () => {
        writeFrontend(lb, {
          svcId: 13,
          addr: A('192.168.50.101'),
          port: 53,
          proto: IPPROTO_UDP,
          flags: SVC_F.EXTERNAL | SVC_F.EXTERNAL_IP,
          backends: [{ id: 13, addr: A('10.244.2.13'), port: 5353, flags: BE_F.LOCAL }],
        });
        const out = run(lb, XDP_EXT, udp(A(OUTSIDE), A('192.168.50.101'), 53));
        expect(expectValid(out.dataOut)).toMatchObject({ daddr: A('10.244.2.13'), dport: 5353 });
        const back = run(lb, TC_EGRESS, replyTo(out.dataOut));
        expect(expectValid(back.dataOut)).toMatchObject({ saddr: A('192.168.50.101'), sport: 53 });
      });

      it('serves a NodePort on each node address through the addr-0 entry, and on no other address', () => {
        for (const nodeIP of [A('192.168.50.1'), A('192.168.60.1')]) {
          const out = run(lb, TC_EXT, tcp(A(OUTSIDE), nodeIP, 30080));
          expect(out.retval).toBe(TC_ACT_UNSPEC);
          expect(expectValid(out.dataOut)).toMatchObject({ daddr: A('10.244.2.12'), dport: 8080 });
          // The reply crosses the stack from the backend's address and gets the node address as
          // its source only as it leaves (a node-address source arriving on a pod interface
          // would be a martian).
          const reply = replyTo(out.dataOut);
          expect(run(lb, TC_POD, reply).dataOut).toEqual(reply);
          const back = run(lb, TC_EGRESS, reply);
          expect(back.retval).toBe(TC_ACT_UNSPEC);
          expect(expectValid(back.dataOut)).toMatchObject({ saddr: nodeIP, sport: 30080, daddr: A(OUTSIDE) });
        }
        const other = tcp(A(OUTSIDE), A('192.168.70.1'), 30080);
        expect(run(lb, TC_EXT, other).dataOut).toEqual(other);
      });

      it('leaves ClusterIP traffic from outside untouched, but serves it from pods', () => {
        const frame = tcp(A(OUTSIDE), A('10.96.0.11'), 80);
        expect(run(lb, XDP_EXT, frame).dataOut).toEqual(frame);
        expect(run(lb, TC_EXT, frame).dataOut).toEqual(frame);
        expect(parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.11'), 80)).dataOut).daddr).toBe(
          A('10.244.2.11'),
        );
      });
    },
  );

  describe.each(FAMILY_CASES)('connection tracking ($family)', ({ A, v4 }) => {
    const itV4 = itIPv4Only(v4);
    const backends = [1, 2, 3, 4].map((i) => ({
      id: 100 + i,
      addr: A(`10.244.3.${i}`),
      port: 8080,
      flags: BE_F.LOCAL,
    }));
    beforeAll(() => {
      writeFrontend(lb, { svcId: 20, addr: A('10.96.0.20'), port: 80, proto: IPPROTO_TCP, backends });
    });

    it('keeps every packet of a flow on its backend while new flows spread (random)', () => {
      const chosen = new Set<string>();
      for (let flow = 0; flow < 24; flow++) {
        const src = sport();
        const first = parsePacket(
          run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.20'), 80, TCP.SYN, src)).dataOut,
        ).daddr;
        chosen.add(first);
        for (const flags of [TCP.SYN, TCP.ACK, TCP.ACK | TCP.PSH, TCP.FIN | TCP.ACK]) {
          expect(
            parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.20'), 80, flags, src)).dataOut).daddr,
          ).toBe(first);
        }
      }
      expect(chosen.size).toBeGreaterThan(1);
    });

    it('moves a new connection (SYN) off a removed or terminating backend, keeps established packets', () => {
      const src = sport();
      const first = parsePacket(
        run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.20'), 80, TCP.SYN, src)).dataOut,
      ).daddr;
      const removed = backends.find((b) => b.addr === first)!;
      const remaining = backends.filter((b) => b !== removed);
      writeFrontend(lb, {
        svcId: 20,
        addr: A('10.96.0.20'),
        port: 80,
        proto: IPPROTO_TCP,
        backends: remaining,
        gen: 1,
      });
      mapDelete(v4 ? lb.fd.backends4 : lb.fd.backends6, u32Codec.encode(removed.id));
      try {
        // An established packet keeps going to the old backend (kube-proxy keeps TCP conntrack).
        expect(
          parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.20'), 80, TCP.ACK, src)).dataOut).daddr,
        ).toBe(first);
        // A SYN on the same tuple is a new connection: it goes to a remaining backend.
        const again = parsePacket(
          run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.20'), 80, TCP.SYN, src)).dataOut,
        ).daddr;
        expect(remaining.map((b) => b.addr)).toContain(again);
      } finally {
        writeFrontend(lb, { svcId: 20, addr: A('10.96.0.20'), port: 80, proto: IPPROTO_TCP, backends });
      }
    });

    it('selects again for a SYN after the tracked flow closed', () => {
      writeFrontend(lb, {
        svcId: 21,
        addr: A('10.96.0.21'),
        port: 80,
        proto: IPPROTO_TCP,
        algorithm: ALGORITHM.rr,
        backends: backends.slice(0, 2),
      });
      mapUpdate(lb.fd.rr, u32Codec.encode(21), rrVal.encode({ next: 0 }));
      const src = sport();
      const a = parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.21'), 80, TCP.SYN, src)).dataOut).daddr;
      // A retransmitted SYN of the open flow keeps its backend (rr would move on).
      expect(
        parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.21'), 80, TCP.SYN, src)).dataOut).daddr,
      ).toBe(a);
      run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.21'), 80, TCP.RST, src));
      const b = parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.21'), 80, TCP.SYN, src)).dataOut).daddr;
      expect(b).not.toBe(a);
    });

    /** A backend's packet to the client (the reply direction). */
    const fromBackend = (backend: string, clientPort: number, flags: number) =>
      buildPacket({
        saddr: backend,
        daddr: A(CLIENT),
        proto: IPPROTO_TCP,
        sport: 8080,
        dport: clientPort,
        tcpFlags: flags,
      });
    const ctHas = (key: { saddr: string; daddr: string; sport: number; dport: number }) =>
      v4
        ? mapLookup(lb.fd.ct4Tcp, ct4Key.encode({ ...key, proto: IPPROTO_TCP }), Buffer.alloc(ct4Val.size))
        : mapLookup(lb.fd.ct6Tcp, ct6Key.encode({ ...key, proto: IPPROTO_TCP }), Buffer.alloc(ct6Val.size));

    it('GC keeps a half-closed flow past the closing timeout; FIN both ways or an RST closes it', async () => {
      // Only closing flows may go in these passes: other tests' flows keep their entries.
      const timeouts = {
        tcpSynSeconds: 3600,
        tcpEstablishedSeconds: 6 * 3600,
        tcpClosingSeconds: 10,
        otherSeconds: 3600,
      };
      const gcAt = (secondsLater: number) =>
        collectConntrack(
          v4 ? lb.fd.ct4Tcp : lb.fd.ct6Tcp,
          timeouts,
          undefined,
          () => process.hrtime.bigint() + BigInt(secondsLater) * 1_000_000_000n,
          async () => {},
        );
      const open = () => {
        const src = sport();
        const out = parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.20'), 80, TCP.SYN, src)).dataOut);
        run(lb, TC_EGRESS, fromBackend(out.daddr, src, TCP.SYN | TCP.ACK));
        run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.20'), 80, TCP.ACK, src));
        return { src, backend: out.daddr };
      };
      const half = open();
      const fwd = { saddr: A(CLIENT), daddr: A('10.96.0.20'), sport: half.src, dport: 80 };
      const rev = { saddr: half.backend, daddr: A(CLIENT), sport: 8080, dport: half.src };
      run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.20'), 80, TCP.FIN | TCP.ACK, half.src));
      await gcAt(11);
      expect(ctHas(fwd), 'half-closed forward entry').toBe(true);
      expect(ctHas(rev), 'half-closed reply entry').toBe(true);
      // The server closes its side too: now the closing timeout applies.
      run(lb, TC_EGRESS, fromBackend(half.backend, half.src, TCP.FIN | TCP.ACK));
      await gcAt(11);
      expect(ctHas(fwd)).toBe(false);
      expect(ctHas(rev)).toBe(false);

      const reset = open();
      run(lb, TC_EGRESS, fromBackend(reset.backend, reset.src, TCP.RST));
      await gcAt(11);
      expect(ctHas({ saddr: A(CLIENT), daddr: A('10.96.0.20'), sport: reset.src, dport: 80 })).toBe(false);
    });

    it('a SYN selects again when the backend left this service though it still serves another; the old reply entry goes', () => {
      const pair = backends.slice(0, 2);
      writeFrontend(lb, {
        svcId: 22,
        addr: A('10.96.0.22'),
        port: 80,
        proto: IPPROTO_TCP,
        algorithm: ALGORITHM.rr,
        backends: pair,
      });
      writeFrontend(lb, { svcId: 23, addr: A('10.96.0.23'), port: 80, proto: IPPROTO_TCP, backends: pair });
      mapUpdate(lb.fd.rr, u32Codec.encode(22), rrVal.encode({ next: 0 }));
      const src = sport();
      const first = parsePacket(
        run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.22'), 80, TCP.SYN, src)).dataOut,
      ).daddr;
      expect(first).toBe(pair[0]!.addr);
      writeFrontend(lb, {
        svcId: 22,
        addr: A('10.96.0.22'),
        port: 80,
        proto: IPPROTO_TCP,
        algorithm: ALGORITHM.rr,
        backends: [pair[1]!],
        gen: 1,
      });
      // Still in kbp_be4_v1 (service 23 uses it), no longer in service 22.
      expect(
        parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.22'), 80, TCP.ACK, src)).dataOut).daddr,
      ).toBe(first);
      expect(
        parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.22'), 80, TCP.SYN, src)).dataOut).daddr,
      ).toBe(pair[1]!.addr);
      expect(ctHas({ saddr: first, daddr: A(CLIENT), sport: 8080, dport: src }), 'old reply entry').toBe(
        false,
      );
      expect(ctHas({ saddr: pair[1]!.addr, daddr: A(CLIENT), sport: 8080, dport: src })).toBe(true);
    });

    it('two flows sharing a post-DNAT tuple: the second gets another source port, both replies are reversed right', () => {
      const shared = [{ id: 130, addr: A('10.244.3.30'), port: 8080, flags: BE_F.LOCAL }];
      writeFrontend(lb, { svcId: 24, addr: A('10.96.0.24'), port: 80, proto: IPPROTO_TCP, backends: shared });
      writeFrontend(lb, { svcId: 25, addr: A('10.96.0.25'), port: 80, proto: IPPROTO_TCP, backends: shared });
      const src = sport();
      const a = expectValid(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.24'), 80, TCP.SYN, src)).dataOut);
      const b = expectValid(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.25'), 80, TCP.SYN, src)).dataOut);
      expect(a).toMatchObject({ saddr: A(CLIENT), sport: src, daddr: A('10.244.3.30'), dport: 8080 });
      expect(b).toMatchObject({ saddr: A(CLIENT), daddr: A('10.244.3.30'), dport: 8080 });
      expect(b.sport).not.toBe(src);
      expect(b.sport).toBeGreaterThanOrEqual(TEST_CONFIG.snatPortMin);
      expect(b.sport).toBeLessThanOrEqual(TEST_CONFIG.snatPortMax);
      // Later packets of the second flow keep its port.
      expect(
        parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.25'), 80, TCP.ACK, src)).dataOut).sport,
      ).toBe(b.sport);
      const backA = expectValid(
        run(lb, TC_EGRESS, fromBackend(A('10.244.3.30'), src, TCP.SYN | TCP.ACK)).dataOut,
      );
      expect(backA).toMatchObject({ saddr: A('10.96.0.24'), sport: 80, daddr: A(CLIENT), dport: src });
      const backB = expectValid(
        run(lb, TC_EGRESS, fromBackend(A('10.244.3.30'), b.sport, TCP.SYN | TCP.ACK)).dataOut,
      );
      expect(backB).toMatchObject({ saddr: A('10.96.0.25'), sport: 80, daddr: A(CLIENT), dport: src });
    });

    itV4('records both entries with timestamps and TCP flags for userspace GC', () => {
      const src = sport();
      const before = process.hrtime.bigint();
      const out = parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.20'), 80, TCP.SYN, src)).dataOut);
      const after = process.hrtime.bigint();
      const fwd = Buffer.alloc(ct4Val.size);
      expect(
        mapLookup(
          lb.fd.ct4Tcp,
          ct4Key.encode({
            saddr: A(CLIENT),
            daddr: A('10.96.0.20'),
            sport: src,
            dport: 80,
            proto: IPPROTO_TCP,
          }),
          fwd,
        ),
      ).toBe(true);
      const f = ct4Val.decode(fwd);
      expect(f).toMatchObject({
        xlateDaddr: out.daddr,
        xlateDport: 8080,
        svcId: 20,
        tcpFlags: TCP_FLAG.SYN,
        flags: 0,
      });
      // CLOCK_MONOTONIC, as process.hrtime reads it (the coarse clock lags by up to a tick).
      expect(f.lastSeenNs).toBeGreaterThan(before - 20_000_000n);
      expect(f.lastSeenNs).toBeLessThanOrEqual(after);
      const rev = Buffer.alloc(ct4Val.size);
      const replyKey = { saddr: out.daddr, daddr: A(CLIENT), sport: 8080, dport: src, proto: IPPROTO_TCP };
      expect(mapLookup(lb.fd.ct4Tcp, ct4Key.encode(replyKey), rev)).toBe(true);
      expect(ct4Val.decode(rev)).toMatchObject({
        xlateSaddr: A('10.96.0.20'),
        xlateSport: 80,
        xlateDaddr: A(CLIENT),
        xlateDport: src,
        flags: CT_F.REPLY,
      });
    });
  });

  it('refuses new flows above the per-CPU rate and counts them; tracked flows go on', async () => {
    writeFrontend(lb, {
      svcId: 90,
      addr: '10.96.0.90',
      port: 80,
      proto: IPPROTO_TCP,
      backends: [{ id: 90, addr: '10.244.2.90', port: 8080, flags: BE_F.LOCAL }],
    });
    const established = sport();
    expect(
      parsePacket(run(lb, TC_POD, tcp(CLIENT, '10.96.0.90', 80, TCP.SYN, established)).dataOut).daddr,
    ).toBe('10.244.2.90');
    // A fresh window on every CPU, then a limit of 5 per CPU per second.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const limit = 5;
    writeConfig(lb, { newFlowRate: limit });
    try {
      const before = drops(DROP_REASON.newFlowRate);
      const before90 = serviceDrops(90, DROP_REASON.newFlowRate);
      // The run may move between CPUs: at most limit x CPUs get through within the second.
      const floods = 4 * limit * possibleCpus();
      let created = 0;
      let refused = 0;
      for (let i = 0; i < floods; i++) {
        const out = run(lb, TC_POD, tcp(`198.18.9.${(i % 250) + 1}`, '10.96.0.90', 80, TCP.SYN));
        if (out.retval === TC_ACT_SHOT) refused++;
        else created++;
        // The established flow keeps its backend all along.
        expect(
          parsePacket(run(lb, TC_POD, tcp(CLIENT, '10.96.0.90', 80, TCP.ACK, established)).dataOut).daddr,
        ).toBe('10.244.2.90');
      }
      expect(created).toBeGreaterThanOrEqual(limit);
      expect(created).toBeLessThanOrEqual(limit * possibleCpus());
      expect(refused).toBe(floods - created);
      expect(drops(DROP_REASON.newFlowRate) - before).toBe(BigInt(refused));
      expect(serviceDrops(90, DROP_REASON.newFlowRate) - before90).toBe(BigInt(refused));
      // The next second has room again.
      await new Promise((resolve) => setTimeout(resolve, 1100));
      expect(run(lb, TC_POD, tcp('198.18.9.251', '10.96.0.90', 80, TCP.SYN)).retval).toBe(TC_ACT_UNSPEC);
    } finally {
      writeConfig(lb);
    }
  });

  it('a SYN flood against one service: without the limit it evicts another service`s idle flow, with it not', () => {
    const floodWith = (newFlowRate: number) => {
      const small = loadLb({ ct4Tcp: 1024 });
      try {
        writeConfig(small, { newFlowRate });
        writeFrontend(small, {
          svcId: 1,
          addr: '10.96.1.1',
          port: 80,
          proto: IPPROTO_TCP,
          backends: [{ id: 1, addr: '10.244.2.11', port: 8080, flags: BE_F.LOCAL }],
        });
        writeFrontend(small, {
          svcId: 2,
          addr: '10.96.1.2',
          port: 80,
          proto: IPPROTO_TCP,
          backends: [{ id: 2, addr: '10.244.2.12', port: 8080, flags: BE_F.LOCAL }],
        });
        const idle = sport();
        run(small, TC_POD, tcp(CLIENT, '10.96.1.1', 80, TCP.SYN, idle));
        run(small, TC_POD, tcp(CLIENT, '10.96.1.1', 80, TCP.ACK, idle));
        // The flood's SYNs, each answered by the backend's SYN-ACK (which marks its reply entry
        // used, as a real backend's answers do).
        for (let i = 0; i < 16384; i++) {
          const client = `198.19.${i >> 8}.${i & 0xff}`;
          run(small, TC_POD, tcp(client, '10.96.1.2', 80, TCP.SYN, 1000));
          run(
            small,
            TC_EGRESS,
            buildPacket({
              saddr: '10.244.2.12',
              daddr: client,
              proto: IPPROTO_TCP,
              sport: 8080,
              dport: 1000,
              tcpFlags: TCP.SYN | TCP.ACK,
            }),
          );
        }
        const key = ct4Key.encode({
          saddr: CLIENT,
          daddr: '10.96.1.1',
          sport: idle,
          dport: 80,
          proto: IPPROTO_TCP,
        });
        return mapLookup(small.fd.ct4Tcp, key, Buffer.alloc(ct4Val.size));
      } finally {
        small.close();
      }
    };
    expect(floodWith(0), 'no limit: the idle flow was evicted').toBe(false);
    // The limit is per second and per CPU of wall time, and the flood's 32,768 test runs take
    // 5-25 s on a loaded machine: at 5 a second on every CPU the flood creates far fewer flows
    // than the table's 1,024 entries hold.
    expect(floodWith(5), 'limit: the idle flow kept its entry').toBe(true);
  });

  it('loads and runs with the 5.10 clock (kbp_coarse_clock = 0)', () => {
    const fine = loadLb({}, { coarseClock: false, sockSetRetval: false, hostRouting: false });
    try {
      writeConfig(fine);
      writeFrontend(fine, {
        svcId: 1,
        addr: '10.96.0.10',
        port: 80,
        proto: IPPROTO_TCP,
        backends: [{ id: 1, addr: '10.244.2.5', port: 8080, flags: BE_F.LOCAL }],
      });
      const before = process.hrtime.bigint();
      const src = sport();
      expect(parsePacket(run(fine, TC_POD, tcp(CLIENT, '10.96.0.10', 80, TCP.SYN, src)).dataOut).daddr).toBe(
        '10.244.2.5',
      );
      const fwd = Buffer.alloc(ct4Val.size);
      mapLookup(
        fine.fd.ct4Tcp,
        ct4Key.encode({ saddr: CLIENT, daddr: '10.96.0.10', sport: src, dport: 80, proto: IPPROTO_TCP }),
        fwd,
      );
      const seen = ct4Val.decode(fwd).lastSeenNs;
      expect(seen).toBeGreaterThanOrEqual(before);
      expect(seen).toBeLessThanOrEqual(process.hrtime.bigint());
    } finally {
      fine.close();
    }
  });

  describe.each(FAMILY_CASES)('backend choice ($family)', ({ A, v4 }) => {
    const backends = [1, 2, 3].map((i) => ({
      id: 200 + i,
      addr: A(`10.244.4.${i}`),
      port: 9000 + i,
      flags: BE_F.LOCAL,
    }));

    it('rr hands out the slots in order, one per new connection', () => {
      writeFrontend(lb, {
        svcId: 30,
        addr: A('10.96.0.30'),
        port: 80,
        proto: IPPROTO_TCP,
        algorithm: ALGORITHM.rr,
        backends,
      });
      mapUpdate(lb.fd.rr, u32Codec.encode(30), rrVal.encode({ next: 0 }));
      const order = Array.from(
        { length: 9 },
        () => parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.30'), 80)).dataOut).daddr,
      );
      const expected = Array.from({ length: 9 }, (_, i) => backends[i % 3]!.addr);
      expect(order).toEqual(expected);
    });

    it('maglev picks the backend the TS table holds at the flow hash index', () => {
      const m = TEST_CONFIG.maglevSize;
      const table = buildMaglevTable(
        backends.map((b) => ({ name: `${b.addr}:${b.port}`, id: b.id })),
        m,
      );
      const inner = createMap(BPF_MAP_TYPE_ARRAY, 'kbp_mglv_test', 4, 4, m, { mapFlags: BPF_F_INNER_MAP });
      try {
        const keys = u32Codec.encodeMany(Array.from({ length: m }, (_, i) => i));
        mapUpdateBatch(inner, keys, Buffer.from(table.buffer, table.byteOffset, table.byteLength), m);
        mapUpdate(lb.fd.maglev, u32Codec.encode(31), u32Codec.encode(inner));
      } finally {
        closeFd(inner); // the outer map holds the reference
      }
      writeFrontend(lb, {
        svcId: 31,
        addr: A('10.96.0.31'),
        port: 80,
        proto: IPPROTO_TCP,
        algorithm: ALGORITHM.maglev,
        backends,
      });
      const byId = new Map(backends.map((b) => [b.id, b.addr]));
      const seen = new Set<string>();
      for (let i = 0; i < 60; i++) {
        const src = sport();
        const got = parsePacket(
          run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.31'), 80, TCP.SYN, src)).dataOut,
        ).daddr;
        const index = maglevIndex(A(CLIENT), src, 80, IPPROTO_TCP, TEST_CONFIG.hashSeed, m);
        expect(got).toBe(byId.get(table[index]!));
        seen.add(got);
      }
      expect(seen.size).toBe(3);
    });

    it('ClientIP affinity keeps a client on its backend within the timeout and lets go after it', async () => {
      writeFrontend(lb, {
        svcId: 32,
        addr: A('10.96.0.32'),
        port: 80,
        proto: IPPROTO_TCP,
        algorithm: ALGORITHM.rr,
        flags: SVC_F.AFFINITY,
        affinityTimeoutS: 1,
        backends,
      });
      mapUpdate(lb.fd.rr, u32Codec.encode(32), rrVal.encode({ next: 0 }));
      for (const b of backends)
        mapUpdate(lb.fd.affinityMatch, affMatchKey.encode({ backendId: b.id, svcId: 32 }), u8Codec.encode(1));
      const client = A('10.244.1.32');
      const pick = () => parsePacket(run(lb, TC_POD, tcp(client, A('10.96.0.32'), 80)).dataOut).daddr;
      const first = pick();
      expect(first).toBe(backends[0]!.addr);
      for (let i = 0; i < 5; i++) expect(pick()).toBe(first); // rr alone would rotate
      const entry = Buffer.alloc(affVal.size);
      const affinity = v4
        ? mapLookup(lb.fd.affinity4, aff4Key.encode({ client, svcId: 32 }), entry)
        : mapLookup(lb.fd.affinity6, aff6Key.encode({ client, svcId: 32 }), entry);
      expect(affinity).toBe(true);
      expect(affVal.decode(entry).backendId).toBe(backends[0]!.id);

      await new Promise((resolve) => setTimeout(resolve, 1200));
      const after = pick();
      expect(after).toBe(backends[1]!.addr);
      expect(pick()).toBe(after);

      // A backend that left the service (no affinity-match entry) is not honoured.
      mapDelete(lb.fd.affinityMatch, affMatchKey.encode({ backendId: backends[1]!.id, svcId: 32 }));
      expect(pick()).toBe(backends[2]!.addr);
    });
  });

  describe.each(FAMILY_CASES)('policy ($family)', ({ A, v4 }) => {
    const itV4 = itIPv4Only(v4);
    it('drops sources outside loadBalancerSourceRanges (tc and XDP) and counts why', () => {
      writeFrontend(lb, {
        svcId: 40,
        addr: A('192.168.50.140'),
        port: 80,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.LOADBALANCER | SVC_F.SOURCE_RANGE,
        backends: [{ id: 40, addr: A('10.244.2.40'), port: 8080, flags: BE_F.LOCAL }],
      });
      mapUpdate(
        v4 ? lb.fd.srcRange4 : lb.fd.srcRange6,
        (v4 ? srcRange4Key : srcRange6Key).encode({
          prefixlen: 32 + (v4 ? 24 : 120),
          svcId: 40,
          addr: A('203.0.113.0'),
        }),
        u8Codec.encode(1),
      );
      const allowed = run(lb, XDP_EXT, tcp(A('203.0.113.99'), A('192.168.50.140'), 80));
      expect(allowed.retval).toBe(XDP_PASS);
      expect(parsePacket(allowed.dataOut).daddr).toBe(A('10.244.2.40'));

      const before = {
        all: drops(DROP_REASON.sourceRange),
        service: stats(lb.fd.svcStats, 40).drops,
        byReason: serviceDrops(40, DROP_REASON.sourceRange),
      };
      const refused = tcp(A('198.51.100.1'), A('192.168.50.140'), 80);
      expect(run(lb, XDP_EXT, refused).retval).toBe(XDP_DROP);
      expect(run(lb, TC_EXT, refused).retval).toBe(TC_ACT_SHOT);
      const dropped = 2n;
      expect(drops(DROP_REASON.sourceRange) - before.all).toBe(dropped);
      expect(stats(lb.fd.svcStats, 40).drops - before.service).toBe(dropped);
      expect(serviceDrops(40, DROP_REASON.sourceRange) - before.byReason).toBe(dropped);
      expect(serviceDrops(40, DROP_REASON.noEndpoints)).toBe(0n);
    });

    itV4('rejects a service without endpoints with ICMP port unreachable quoting the packet', () => {
      writeFrontend(lb, {
        svcId: 41,
        addr: A('10.96.0.41'),
        port: 80,
        proto: IPPROTO_TCP,
        backends: [],
        action: ACTION.reject,
      });
      const frame = tcp(A(CLIENT), A('10.96.0.41'), 80);
      const before = drops(DROP_REASON.noEndpoints);
      const out = run(lb, TC_POD, frame);
      expect(out.retval).toBe(TC_ACT_REDIRECT);
      const icmp = expectValid(out.dataOut);
      expect(icmp).toMatchObject({ proto: IPPROTO_ICMP, saddr: A('10.96.0.41'), daddr: A(CLIENT) });
      expect(icmp.l4[0]).toBe(3); // destination unreachable
      expect(icmp.l4[1]).toBe(3); // port unreachable
      expect(icmp.l4.subarray(8)).toEqual(frame.subarray(14, 14 + 20 + 8));
      expect(out.dataOut.subarray(0, 6)).toEqual(frame.subarray(6, 12)); // back to the sender's MAC
      expect(drops(DROP_REASON.noEndpoints) - before).toBe(1n);

      // UDP too.
      const u = udp(A(CLIENT), A('10.96.0.41'), 80);
      writeFrontend(lb, {
        svcId: 44,
        addr: A('10.96.0.41'),
        port: 80,
        proto: IPPROTO_UDP,
        backends: [],
        action: ACTION.reject,
      });
      expect(parsePacket(run(lb, TC_POD, u).dataOut).proto).toBe(IPPROTO_ICMP);
    });

    it('XDP leaves a reject to tc untouched, which answers it', () => {
      writeFrontend(lb, {
        svcId: 42,
        addr: A('192.168.50.142'),
        port: 80,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL,
        backends: [],
        action: ACTION.reject,
      });
      const ext = tcp(A(OUTSIDE), A('192.168.50.142'), 80);
      const before = drops(DROP_REASON.noEndpoints);
      const x = run(lb, XDP_EXT, ext);
      expect(x.retval).toBe(XDP_PASS);
      expect(x.dataOut).toEqual(ext);
      expect(drops(DROP_REASON.noEndpoints) - before).toBe(0n); // counted once, by tc
      const t = run(lb, TC_EXT, ext);
      expect(t.retval).toBe(TC_ACT_REDIRECT);
      expect(expectValid(t.dataOut)).toMatchObject({
        proto: v4 ? IPPROTO_ICMP : IPPROTO_ICMPV6,
        saddr: A('192.168.50.142'),
        daddr: A(OUTSIDE),
      });
      expect(drops(DROP_REASON.noEndpoints) - before).toBe(1n);
    });

    it('drops (not rejects) when endpoints exist but the traffic policy allows none', () => {
      writeFrontend(lb, {
        svcId: 43,
        addr: A('192.168.50.143'),
        port: 80,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.LOCAL_ONLY,
        backends: [],
        action: ACTION.drop,
      });
      expect(run(lb, TC_EXT, tcp(A(OUTSIDE), A('192.168.50.143'), 80)).retval).toBe(TC_ACT_SHOT);
      expect(run(lb, XDP_EXT, tcp(A(OUTSIDE), A('192.168.50.143'), 80)).retval).toBe(XDP_DROP);
    });

    it('externalTrafficPolicy=Local: outside traffic to local endpoints, pod traffic to the cluster ones', () => {
      const local = { id: 50, addr: A('10.244.2.50'), port: 8080, flags: BE_F.LOCAL };
      const remote = { id: 51, addr: A('10.244.9.51'), port: 8080 };
      writeFrontend(lb, {
        svcId: 50,
        addr: A('192.168.50.150'),
        port: 80,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.LOADBALANCER | SVC_F.LOCAL_ONLY | SVC_F.TWO_SCOPES,
        backends: [local],
      });
      writeFrontend(lb, {
        svcId: 51,
        addr: A('192.168.50.150'),
        port: 80,
        proto: IPPROTO_TCP,
        scope: SCOPE.internal,
        flags: SVC_F.EXTERNAL | SVC_F.LOADBALANCER,
        algorithm: ALGORITHM.rr,
        backends: [remote, local],
      });
      mapUpdate(lb.fd.rr, u32Codec.encode(51), rrVal.encode({ next: 0 }));
      for (let i = 0; i < 6; i++) {
        const out = parsePacket(run(lb, TC_EXT, tcp(A(OUTSIDE), A('192.168.50.150'), 80)).dataOut);
        expect(out).toMatchObject({ saddr: A(OUTSIDE), daddr: local.addr }); // client IP kept
      }
      const fromPods = Array.from(
        { length: 4 },
        () => parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('192.168.50.150'), 80)).dataOut).daddr,
      );
      // rr over the slots, the local one first (writeFrontend orders them as the planner does).
      expect(fromPods).toEqual([local.addr, remote.addr, local.addr, remote.addr]);
    });

    it('internalTrafficPolicy=Local: a ClusterIP frontend whose list is the local endpoints', () => {
      writeFrontend(lb, {
        svcId: 52,
        addr: A('10.96.0.52'),
        port: 80,
        proto: IPPROTO_TCP,
        flags: SVC_F.LOCAL_ONLY,
        backends: [{ id: 52, addr: A('10.244.2.52'), port: 8080, flags: BE_F.LOCAL }],
      });
      for (let i = 0; i < 5; i++)
        expect(parsePacket(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.52'), 80)).dataOut).daddr).toBe(
          A('10.244.2.52'),
        );
      writeFrontend(lb, {
        svcId: 53,
        addr: A('10.96.0.53'),
        port: 80,
        proto: IPPROTO_TCP,
        flags: SVC_F.LOCAL_ONLY,
        backends: [],
        action: ACTION.drop,
      });
      expect(run(lb, TC_POD, tcp(A(CLIENT), A('10.96.0.53'), 80)).retval).toBe(TC_ACT_SHOT);
    });
  });

  describe('IPv6 only', () => {
    const VIP = 'fd00::a60:3c';
    const BACKEND = 'fd00::af4:23c';
    const CLIENT6 = 'fd00::af4:10a';
    beforeAll(() => {
      writeFrontend(lb, {
        svcId: 60,
        addr: VIP,
        port: 80,
        proto: IPPROTO_TCP,
        backends: [{ id: 60, addr: BACKEND, port: 8080, flags: BE_F.LOCAL }],
      });
    });

    it('walks hop-by-hop, destination options and routing headers to the TCP header, and no further than four', () => {
      const src = sport();
      const spec = { saddr: CLIENT6, daddr: VIP, proto: IPPROTO_TCP, sport: src, dport: 80 } as const;
      const ext = [IPV6_EXT.HOPOPTS, IPV6_EXT.DSTOPTS, IPV6_EXT.ROUTING, IPV6_EXT.DSTOPTS];
      const out = run(lb, TC_POD, buildPacket({ ...spec, extHeaders: ext }));
      expect(out.retval).toBe(TC_ACT_UNSPEC);
      const p = expectValid(out.dataOut);
      expect(p).toMatchObject({ ihlLen: 40 + 8 * ext.length, daddr: BACKEND, dport: 8080, sport: src });
      // The extension headers are kept as they were.
      expect(out.dataOut.subarray(ETH_HLEN + 40, ETH_HLEN + p.ihlLen)).toEqual(
        buildPacket({ ...spec, extHeaders: ext }).subarray(ETH_HLEN + 40, ETH_HLEN + p.ihlLen),
      );
      const back = expectValid(run(lb, TC_EGRESS, replyTo(out.dataOut)).dataOut);
      expect(back).toMatchObject({ saddr: VIP, sport: 80, daddr: CLIENT6, dport: src });

      const tooDeep = buildPacket({ ...spec, sport: sport(), extHeaders: [...ext, IPV6_EXT.DSTOPTS] });
      expect(run(lb, TC_POD, tooDeep).dataOut).toEqual(tooDeep);
    });

    it('XDP walks the same extension headers to a LoadBalancer flow`s TCP header, and leaves a fifth to tc', () => {
      const lbIP = 'fd00::c0a8:32a6';
      writeFrontend(lb, {
        svcId: 63,
        addr: lbIP,
        port: 80,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.LOADBALANCER,
        backends: [{ id: 63, addr: BACKEND, port: 8080, flags: BE_F.LOCAL }],
      });
      const src = sport();
      const outside = 'fd00::cb00:7107';
      const ext = [IPV6_EXT.HOPOPTS, IPV6_EXT.ROUTING, IPV6_EXT.DSTOPTS, IPV6_EXT.DSTOPTS];
      const spec = {
        saddr: outside,
        daddr: lbIP,
        proto: IPPROTO_TCP,
        sport: src,
        dport: 80,
        extHeaders: ext,
      } as const;
      const frame = buildPacket(spec);
      const out = run(lb, XDP_EXT, frame);
      expect(out.retval).toBe(XDP_PASS);
      const p = expectValid(out.dataOut);
      expect(p).toMatchObject({ ihlLen: 40 + 8 * ext.length, saddr: outside, daddr: BACKEND, dport: 8080 });
      expect(out.dataOut.subarray(ETH_HLEN + 40, ETH_HLEN + p.ihlLen)).toEqual(
        frame.subarray(ETH_HLEN + 40, ETH_HLEN + p.ihlLen),
      );
      // Tracked: the next packet of the flow takes XDP's tracked path; the local backend's reply
      // gets the service address back at egress.
      const ack = run(lb, XDP_EXT, buildPacket({ ...spec, tcpFlags: TCP.ACK }));
      expect(expectValid(ack.dataOut)).toMatchObject({ daddr: BACKEND, dport: 8080, sport: src });
      const back = expectValid(run(lb, TC_EGRESS, replyTo(out.dataOut)).dataOut);
      expect(back).toMatchObject({ saddr: lbIP, sport: 80, daddr: outside, dport: src });

      const tooDeep = buildPacket({ ...spec, sport: sport(), extHeaders: [...ext, IPV6_EXT.HOPOPTS] });
      const x = run(lb, XDP_EXT, tooDeep);
      expect(x.retval).toBe(XDP_PASS);
      expect(x.dataOut).toEqual(tooDeep);
    });

    it('leaves neighbour discovery untouched in every program, and fragments to tc', () => {
      const solicitation = buildNeighbourSolicitation(CLIENT6, VIP);
      expect(parsePacket(solicitation)).toMatchObject({ proto: IPPROTO_ICMPV6, l4ChecksumOk: true });
      for (const prog of [TC_POD, TC_EXT, TC_EGRESS]) {
        const out = run(lb, prog, solicitation);
        expect(out.retval).toBe(TC_ACT_UNSPEC);
        expect(out.dataOut).toEqual(solicitation);
      }
      // A first fragment (offset 0, more fragments): XDP passes it untouched, tc translates it
      // (lb-fragments.test.ts follows whole datagrams).
      const src = sport();
      const fragment = buildPacket({
        saddr: CLIENT6,
        daddr: VIP,
        proto: IPPROTO_TCP,
        sport: src,
        dport: 80,
        extHeaders: [IPV6_EXT.FRAGMENT],
      });
      for (const frame of [solicitation, fragment]) {
        const x = run(lb, XDP_EXT, frame);
        expect(x.retval).toBe(XDP_PASS);
        expect(x.dataOut).toEqual(frame);
      }
      expect(parsePacket(run(lb, TC_POD, fragment).dataOut)).toMatchObject({
        daddr: BACKEND,
        dport: 8080,
        sport: src,
        fragOffset: 0,
        moreFragments: true,
      });
    });

    it('routes a NodePort flow to another node`s backend itself (SNAT, hop limit, MACs) and answers one too big with packet too big', async () => {
      const v6 = FAMILY_CASES.find((f) => f.family === 'IPv6')!;
      const nodeIP = v6.A('192.168.50.1');
      const remote = v6.A(NEIGHBOURS.remoteBackend.ip);
      const outside = v6.A(OUTSIDE);
      writeFrontend(lb, {
        svcId: 62,
        addr: '::',
        port: 30062,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
        backends: [{ id: 62, addr: remote, port: 8080 }],
      });
      mapUpdate(lb.fd.nodeAddrs6, ip6Codec.encode(nodeIP), u32Codec.encode(1));
      const syn = (payload = 0) =>
        buildPacket({
          saddr: outside,
          daddr: nodeIP,
          proto: IPPROTO_TCP,
          sport: sport(),
          dport: 30062,
          payload: Buffer.alloc(payload),
        });
      const out = run(lb, TC_EXT, syn());
      expect(out.retval).toBe(TC_ACT_REDIRECT);
      const p = expectValid(out.dataOut);
      expect(p).toMatchObject({ saddr: TEST_CONFIG.snatAddr6, daddr: remote, dport: 8080 });
      expect(p.sport).toBeGreaterThanOrEqual(TEST_CONFIG.snatPortMin);
      expect(out.dataOut[ETH_HLEN + 7]).toBe(63); // hop limit
      expect(macOf(out.dataOut, 0)).toBe(NEIGHBOURS.remoteBackend.mac);
      // The backend's reply comes back to the SNAT address and is routed to the client.
      const back = run(lb, TC_EXT, replyTo(out.dataOut));
      expect(back.retval).toBe(TC_ACT_REDIRECT);
      expect(expectValid(back.dataOut)).toMatchObject({ saddr: nodeIP, sport: 30062, daddr: outside });
      expect(macOf(back.dataOut, 0)).toBe(NEIGHBOURS.outside.mac);

      await lab.exec('fib', 'ip', ['link', 'set', 'r0', 'mtu', '1400']);
      try {
        const before = drops(DROP_REASON.fragNeeded);
        const frame = syn(1460);
        // XDP sets the flow up but cannot answer: it leaves the packet to tc untouched.
        const x = run(lb, XDP_EXT, frame);
        expect(x.retval).toBe(XDP_PASS);
        expect(x.dataOut).toEqual(frame);
        const big = run(lb, TC_EXT, frame);
        expect(big.retval).toBe(TC_ACT_REDIRECT);
        const icmp = expectValid(big.dataOut);
        expect(icmp).toMatchObject({ proto: IPPROTO_ICMPV6, saddr: nodeIP, daddr: outside });
        expect(icmp.l4[0]).toBe(2); // packet too big
        expect(icmp.l4.readUInt32BE(4)).toBe(1400); // the route's MTU
        expect(icmp.l4.subarray(8)).toEqual(frame.subarray(ETH_HLEN, ETH_HLEN + 48));
        expect(drops(DROP_REASON.fragNeeded) - before).toBe(1n);
      } finally {
        await lab.exec('fib', 'ip', ['link', 'set', 'r0', 'mtu', '1500']);
      }
    });

    it('a router`s packet too big about a SNATed flow reaches the client in its terms, forwarded by tc; the quote`s extension headers walked, a later fragment`s quote left', () => {
      const v6 = FAMILY_CASES.find((f) => f.family === 'IPv6')!;
      const nodeIP = v6.A('192.168.50.1');
      const outside = v6.A(OUTSIDE);
      const router = v6.A('10.244.9.254');
      const src = sport();
      const spec = { saddr: outside, daddr: nodeIP, proto: IPPROTO_TCP, sport: src, dport: 30062 } as const;
      const sent = buildPacket({ ...spec, extHeaders: [IPV6_EXT.DSTOPTS] });
      const out = run(lb, TC_EXT, sent);
      expect(out.retval).toBe(TC_ACT_REDIRECT);
      const snat = parsePacket(out.dataOut);
      // A router on the backend's path: packet too big to the SNAT address, quoting as much of the
      // packet as fits (RFC 4443: here, all of it).
      const error = buildIcmpError({
        saddr: router,
        daddr: snat.saddr,
        quote: out.dataOut.subarray(ETH_HLEN),
        type: 2,
        code: 0,
        mtu: 1280,
      });
      const back = run(lb, TC_EXT, error);
      expect(back.retval).toBe(TC_ACT_REDIRECT);
      const icmp = expectValid(back.dataOut);
      expect(icmp).toMatchObject({ proto: IPPROTO_ICMPV6, saddr: router, daddr: outside });
      expect(icmp.l4[0]).toBe(2);
      expect(icmp.l4.readUInt32BE(4)).toBe(1280); // the MTU as the router said
      expect(back.dataOut[ETH_HLEN + 7]).toBe(63); // forwarded by us
      expect(macOf(back.dataOut, 0)).toBe(NEIGHBOURS.outside.mac);
      // The quote is the client's packet exactly as it sent it, extension header and checksum
      // (but for the hop limit, one less since it left this node).
      const asSent = Buffer.from(sent);
      asSent[ETH_HLEN + 7] = 63;
      expect(quotedPacket(back.dataOut).subarray(ETH_HLEN)).toEqual(asSent.subarray(ETH_HLEN));

      // Time exceeded about the same flow: translated the same way.
      const expired = buildIcmpError({
        saddr: router,
        daddr: snat.saddr,
        quote: out.dataOut.subarray(ETH_HLEN, ETH_HLEN + snat.ihlLen + 8),
        type: 3,
        code: 0,
      });
      const fwd = run(lb, TC_EXT, expired);
      expect(fwd.retval).toBe(TC_ACT_REDIRECT);
      expect(expectValid(fwd.dataOut)).toMatchObject({ saddr: router, daddr: outside });
      expect(parsePacket(quotedPacket(fwd.dataOut))).toMatchObject({
        saddr: outside,
        sport: src,
        daddr: nodeIP,
      });

      // Not ours: an error quoting a later fragment (no ports), an informational message
      // (echo request, type 128), and one addressed elsewhere than the quoted packet's sender.
      // The quoted packet a first fragment: its ports are there, translated; a later one: not ours.
      const asFragment = (offset: number) => {
        const f = buildPacket({ ...snat, proto: IPPROTO_TCP, extHeaders: [IPV6_EXT.FRAGMENT] });
        f.writeUInt16BE(offset | 1, ETH_HLEN + 40 + 2);
        return buildIcmpError({
          saddr: router,
          daddr: snat.saddr,
          quote: f.subarray(ETH_HLEN),
          type: 2,
          mtu: 1280,
        });
      };
      const first = run(lb, TC_EXT, asFragment(0));
      expect(first.retval).toBe(TC_ACT_REDIRECT);
      expect(parsePacket(quotedPacket(first.dataOut))).toMatchObject({
        saddr: outside,
        sport: src,
        dport: 30062,
      });
      const strays = [
        asFragment(80),
        // Behind an extension header: not walked (yet), left to the stack.
        buildIcmpError({
          saddr: router,
          daddr: snat.saddr,
          quote: out.dataOut.subarray(ETH_HLEN),
          type: 2,
          mtu: 1280,
          extHeaders: [IPV6_EXT.HOPOPTS],
        }),
        buildIcmpError({
          saddr: router,
          daddr: snat.saddr,
          quote: out.dataOut.subarray(ETH_HLEN),
          type: 128,
        }),
        buildIcmpError({
          saddr: router,
          daddr: v6.A('10.244.9.1'),
          quote: out.dataOut.subarray(ETH_HLEN),
          type: 2,
        }),
      ];
      for (const stray of strays) {
        const r = run(lb, TC_EXT, stray);
        expect(r.retval).toBe(TC_ACT_UNSPEC);
        expect(r.dataOut).toEqual(stray);
      }
    });

    it('rejects a service without endpoints with ICMPv6 port unreachable quoting the packet and its extension headers', () => {
      const vip = 'fd00::a60:3d';
      writeFrontend(lb, { svcId: 61, addr: vip, port: 80, proto: IPPROTO_TCP, backends: [] });
      for (const extHeaders of [[], [IPV6_EXT.HOPOPTS, IPV6_EXT.DSTOPTS]]) {
        const frame = buildPacket({
          saddr: CLIENT6,
          daddr: vip,
          proto: IPPROTO_TCP,
          sport: sport(),
          dport: 80,
          extHeaders,
        });
        const before = drops(DROP_REASON.noEndpoints);
        const out = run(lb, TC_POD, frame);
        expect(out.retval).toBe(TC_ACT_REDIRECT);
        const icmp = expectValid(out.dataOut);
        expect(icmp).toMatchObject({ proto: IPPROTO_ICMPV6, saddr: vip, daddr: CLIENT6 });
        expect(icmp.l4[0]).toBe(1); // destination unreachable
        expect(icmp.l4[1]).toBe(4); // port unreachable
        const quoted = 40 + 8 * extHeaders.length + 8;
        expect(icmp.l4.subarray(8)).toEqual(frame.subarray(ETH_HLEN, ETH_HLEN + quoted));
        expect(out.dataOut.subarray(0, 6)).toEqual(frame.subarray(6, 12)); // back to the sender's MAC
        expect(drops(DROP_REASON.noEndpoints) - before).toBe(1n);
      }
      expect(serviceDrops(61, DROP_REASON.noEndpoints)).toBe(2n);
    });
  });

  describe.each(FAMILY_CASES)('routed flows from XDP, and the SNAT source ($family)', ({ A, v4 }) => {
    const nodeIP = A('192.168.50.1');
    const snatAddr = v4 ? TEST_CONFIG.snatAddr4 : TEST_CONFIG.snatAddr6;
    /** The TTL, or the hop limit. */
    const ttlAt = ETH_HLEN + (v4 ? 8 : 7);
    const outside = A(OUTSIDE);
    beforeAll(() => {
      // NodePorts to another node's backend, one behind r0 and one on the outside segment (r1).
      for (const [svcId, port, addr] of [
        [68, 30068, NEIGHBOURS.remoteBackend.ip],
        [69, 30069, SAME_SEGMENT_BACKEND.ip],
      ] as const)
        writeFrontend(lb, {
          svcId,
          addr: v4 ? '0.0.0.0' : '::',
          port,
          proto: IPPROTO_TCP,
          flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
          backends: [{ id: svcId, addr: A(addr), port: 8080 }],
        });
      mapUpdate(
        v4 ? lb.fd.nodeAddrs4 : lb.fd.nodeAddrs6,
        (v4 ? ip4Codec : ip6Codec).encode(nodeIP),
        u32Codec.encode(1),
      );
    });

    it('XDP sends a routed flow back out with XDP_TX when the FIB picks the interface it came in on', () => {
      const outsideIf = ifNameToIndex('r1');
      const src = sport();
      const out = runXdpOn(lb, XDP_EXT, tcp(outside, nodeIP, 30069, TCP.SYN, src), outsideIf);
      expect(out.retval).toBe(XDP_TX);
      const p = expectValid(out.dataOut);
      expect(p).toMatchObject({ saddr: snatAddr, daddr: A(SAME_SEGMENT_BACKEND.ip), dport: 8080 });
      expect(macOf(out.dataOut, 0)).toBe(SAME_SEGMENT_BACKEND.mac);
      expect(out.dataOut[ttlAt]).toBe(63);
      const back = runXdpOn(lb, XDP_EXT, replyTo(out.dataOut), outsideIf);
      expect(back.retval).toBe(XDP_TX);
      expect(expectValid(back.dataOut)).toMatchObject({
        saddr: nodeIP,
        sport: 30069,
        daddr: outside,
        dport: src,
      });
      expect(macOf(back.dataOut, 0)).toBe(NEIGHBOURS.outside.mac);
      // Arriving on another interface than the FIB's choice: left to tc, untouched.
      const elsewhere = tcp(outside, nodeIP, 30069, TCP.ACK, src);
      const x = runXdpOn(lb, XDP_EXT, elsewhere, ifNameToIndex('r0'));
      expect(x.retval).toBe(XDP_PASS);
      expect(x.dataOut).toEqual(elsewhere);
    });

    it('XDP sets up the flow but leaves routed packets to tc, untouched', () => {
      const syn = tcp(outside, nodeIP, 30068, TCP.SYN, sport());
      const before = stats(lb.fd.svcStats, 68);
      const x = run(lb, XDP_EXT, syn);
      expect(x.retval).toBe(XDP_PASS);
      expect(x.dataOut).toEqual(syn);
      const t = run(lb, TC_EXT, syn);
      expect(t.retval).toBe(TC_ACT_REDIRECT);
      expect(parsePacket(t.dataOut).saddr).toBe(snatAddr);
      const after = stats(lb.fd.svcStats, 68);
      expect(after.fwdPackets - before.fwdPackets).toBe(1n);
      expect(after.newConns - before.newConns).toBe(1n); // counted once, when XDP created the flow
    });

    it('SNATs to the address of the interface the flow leaves through, as MASQUERADE does (tc, and XDP setting the flow up)', () => {
      const r0 = ifNameToIndex('r0');
      // r0's own address, not the node IP (the map's entry as the agent writes it).
      const r0Addr = A('10.244.9.1');
      const map = v4 ? lb.fd.ifAddrs4 : lb.fd.ifAddrs6;
      mapUpdate(map, u32Codec.encode(r0), v4 ? ip4Codec.encode(r0Addr) : ifAddr6Val.encode({ addr: r0Addr }));
      try {
        const out = run(lb, TC_EXT, tcp(outside, nodeIP, 30068));
        expect(out.retval).toBe(TC_ACT_REDIRECT);
        expect(expectValid(out.dataOut)).toMatchObject({
          saddr: r0Addr,
          daddr: A(NEIGHBOURS.remoteBackend.ip),
        });
        const back = run(lb, TC_EXT, replyTo(out.dataOut));
        expect(back.retval).toBe(TC_ACT_REDIRECT);
        expect(expectValid(back.dataOut)).toMatchObject({ saddr: nodeIP, sport: 30068, daddr: outside });
        // From XDP on the outside interface: the flow is set up with r0's address, and tc routes it.
        const syn = tcp(outside, nodeIP, 30068);
        const x = runXdpOn(lb, XDP_EXT, syn, ifNameToIndex('r1'));
        expect(x.retval).toBe(XDP_PASS);
        expect(x.dataOut).toEqual(syn);
        expect(expectValid(run(lb, TC_EXT, syn).dataOut)).toMatchObject({ saddr: r0Addr });
      } finally {
        mapDelete(map, u32Codec.encode(r0));
      }
      // Without the entry: the configured node address again.
      expect(parsePacket(run(lb, TC_EXT, tcp(outside, nodeIP, 30068)).dataOut).saddr).toBe(snatAddr);
    });
  });

  describe('SNAT', () => {
    it('external traffic to another node`s backend leaves with the node address and a NAT port, routed by tc; the reply is reversed', () => {
      writeFrontend(lb, {
        svcId: 60,
        addr: '0.0.0.0',
        port: 30060,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
        backends: [{ id: 60, addr: NEIGHBOURS.remoteBackend.ip, port: 8080 }],
      });
      mapUpdate(lb.fd.nodeAddrs4, ip4Codec.encode('192.168.50.1'), u32Codec.encode(1));
      const src = sport();
      const out = run(lb, TC_EXT, tcp(OUTSIDE, '192.168.50.1', 30060, TCP.SYN, src));
      expect(out.retval).toBe(TC_ACT_REDIRECT);
      const p = expectValid(out.dataOut);
      expect(p).toMatchObject({
        saddr: TEST_CONFIG.snatAddr4,
        daddr: NEIGHBOURS.remoteBackend.ip,
        dport: 8080,
      });
      expect(p.sport).toBeGreaterThanOrEqual(TEST_CONFIG.snatPortMin);
      expect(p.sport).toBeLessThanOrEqual(TEST_CONFIG.snatPortMax);
      expect(macOf(out.dataOut, 0)).toBe(NEIGHBOURS.remoteBackend.mac);
      expect(out.dataOut[ETH_HLEN + 8]).toBe(63); // forwarded by us: TTL decremented
      // The remote backend's reply comes back through the external interface.
      const back = run(lb, TC_EXT, replyTo(out.dataOut));
      expect(back.retval).toBe(TC_ACT_REDIRECT);
      expect(expectValid(back.dataOut)).toMatchObject({
        saddr: '192.168.50.1',
        sport: 30060,
        daddr: OUTSIDE,
        dport: src,
      });
      expect(macOf(back.dataOut, 0)).toBe(NEIGHBOURS.outside.mac);
      // Later packets of the flow keep the same NAT port.
      const again = parsePacket(run(lb, TC_EXT, tcp(OUTSIDE, '192.168.50.1', 30060, TCP.ACK, src)).dataOut);
      expect(again.sport).toBe(p.sport);
    });

    it('drops a routed packet the FIB cannot forward, and counts why', () => {
      writeFrontend(lb, {
        svcId: 63,
        addr: '192.168.50.163',
        port: 80,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL,
        backends: [{ id: 63, addr: '10.250.0.1', port: 8080 }],
      });
      const before = drops(DROP_REASON.fib);
      expect(run(lb, TC_EXT, tcp(OUTSIDE, '192.168.50.163', 80)).retval).toBe(TC_ACT_SHOT);
      expect(drops(DROP_REASON.fib) - before).toBe(1n);
    });

    it('answers a routed packet too big for its route with ICMP frag needed (DF), sends it on as it is without DF', async () => {
      await lab.exec('fib', 'ip', ['link', 'set', 'r0', 'mtu', '1400']);
      try {
        const big = (dontFragment: boolean) =>
          buildPacket({
            saddr: OUTSIDE,
            daddr: '192.168.50.1',
            proto: IPPROTO_TCP,
            sport: sport(),
            dport: 30060,
            tcpFlags: TCP.SYN,
            payload: Buffer.alloc(1460),
            dontFragment,
          });
        const before = drops(DROP_REASON.fragNeeded);
        const frame = big(true);
        const out = run(lb, TC_EXT, frame);
        expect(out.retval).toBe(TC_ACT_REDIRECT);
        const icmp = out.dataOut.subarray(ETH_HLEN);
        expect(icmp[9]).toBe(IPPROTO_ICMP);
        expect([...icmp.subarray(12, 16)].join('.')).toBe('192.168.50.1'); // from the address used
        expect([...icmp.subarray(16, 20)].join('.')).toBe(OUTSIDE);
        expect(icmp[20]).toBe(3); // destination unreachable
        expect(icmp[21]).toBe(4); // fragmentation needed and DF set
        expect(icmp.readUInt16BE(26)).toBe(1400); // next-hop MTU
        // The quote is the packet as the client sent it, so its socket finds the connection.
        expect(icmp.subarray(28, 48)).toEqual(frame.subarray(ETH_HLEN, ETH_HLEN + 20));
        expect(drops(DROP_REASON.fragNeeded) - before).toBe(1n);

        // Without DF (a fragment, say) no program can fragment it: it leaves as it is, for an
        // overlay device to carry (bpf/fib.h).
        const fibBefore = drops(DROP_REASON.fib);
        const loose = run(lb, TC_EXT, big(false));
        expect(loose.retval).toBe(TC_ACT_REDIRECT);
        expect(macOf(loose.dataOut, 0)).toBe(NEIGHBOURS.remoteBackend.mac);
        expect(expectValid(loose.dataOut)).toMatchObject({
          saddr: TEST_CONFIG.snatAddr4,
          daddr: NEIGHBOURS.remoteBackend.ip,
        });
        expect(drops(DROP_REASON.fib)).toBe(fibBefore);
      } finally {
        await lab.exec('fib', 'ip', ['link', 'set', 'r0', 'mtu', '1500']);
      }
    });

    it('leaves replies of SNATed flows alone at egress (tc forwards them at ingress)', () => {
      const out = run(lb, TC_EXT, tcp(OUTSIDE, '192.168.50.1', 30060));
      const reply = replyTo(out.dataOut);
      expect(run(lb, TC_EGRESS, reply).dataOut).toEqual(reply);
      const stranger = tcp('10.244.9.60', OUTSIDE, 4444, TCP.ACK);
      expect(run(lb, TC_EGRESS, stranger).dataOut).toEqual(stranger);
    });

    it('an ICMP error about a SNATed flow reaches the client in its terms, forwarded by tc (RELATED, ingress)', () => {
      const src = sport();
      const sent = tcp(OUTSIDE, '192.168.50.1', 30060, TCP.SYN, src);
      const out = run(lb, TC_EXT, sent).dataOut;
      const snat = parsePacket(out);
      // A router on the backend's path cannot forward it: frag needed to the SNAT address,
      // quoting the IPv4 header and 8 bytes (RFC 792).
      const error = buildIcmpError({
        saddr: '10.244.9.254',
        daddr: snat.saddr,
        quote: out.subarray(ETH_HLEN, ETH_HLEN + 28),
        code: 4,
        mtu: 1400,
      });
      const back = run(lb, TC_EXT, error);
      expect(back.retval).toBe(TC_ACT_REDIRECT);
      expect(expectValid(back.dataOut)).toMatchObject({
        proto: IPPROTO_ICMP,
        saddr: '10.244.9.254',
        daddr: OUTSIDE,
      });
      expect(macOf(back.dataOut, 0)).toBe(NEIGHBOURS.outside.mac);
      expect(back.dataOut[ETH_HLEN + 8]).toBe(63); // forwarded by us
      expect(back.dataOut.readUInt16BE(ETH_HLEN + 26)).toBe(1400); // the MTU as the router said
      // The quote is the client's packet in its own terms, so its socket finds the connection.
      const quote = parsePacket(quotedPacket(back.dataOut));
      expect(quote).toMatchObject({
        ipChecksumOk: true,
        saddr: OUTSIDE,
        sport: src,
        daddr: '192.168.50.1',
        dport: 30060,
      });
      // Addressed elsewhere than the quoted packet's sender: not ours, untouched.
      const stray = buildIcmpError({
        saddr: '10.244.9.254',
        daddr: '10.244.9.1',
        quote: out.subarray(ETH_HLEN),
      });
      expect(run(lb, TC_EXT, stray).dataOut).toEqual(stray);
    });

    it('a backend`s port unreachable about a SNATed UDP flow reaches the client from the service address', () => {
      writeFrontend(lb, {
        svcId: 67,
        addr: '0.0.0.0',
        port: 30067,
        proto: IPPROTO_UDP,
        flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
        backends: [{ id: 67, addr: NEIGHBOURS.remoteBackend.ip, port: 5353 }],
      });
      const src = sport();
      const out = run(lb, TC_EXT, udp(OUTSIDE, '192.168.50.1', 30067, src)).dataOut;
      const error = buildIcmpError({
        saddr: NEIGHBOURS.remoteBackend.ip,
        daddr: parsePacket(out).saddr,
        quote: out.subarray(ETH_HLEN),
      });
      const back = run(lb, TC_EXT, error);
      expect(back.retval).toBe(TC_ACT_REDIRECT);
      expect(expectValid(back.dataOut)).toMatchObject({ saddr: '192.168.50.1', daddr: OUTSIDE });
      // The whole datagram quoted: its UDP checksum is valid in the client's terms too.
      expect(expectValid(quotedPacket(back.dataOut))).toMatchObject({
        saddr: OUTSIDE,
        sport: src,
        daddr: '192.168.50.1',
        dport: 30067,
      });
    });

    it('an ICMP error from the client`s side about a SNATed flow`s reply reaches the backend in its terms, forwarded by tc', () => {
      const out = run(lb, TC_EXT, tcp(OUTSIDE, '192.168.50.1', 30060)).dataOut;
      const sentByBackend = replyTo(out);
      const seenByClient = run(lb, TC_EXT, sentByBackend).dataOut;
      // A router on the client's path: frag needed to the node address the reply came from.
      const error = buildIcmpError({
        saddr: '203.0.113.254',
        daddr: '192.168.50.1',
        quote: seenByClient.subarray(ETH_HLEN, ETH_HLEN + 28),
        code: 4,
        mtu: 1400,
      });
      const fwd = run(lb, TC_EXT, error);
      expect(fwd.retval).toBe(TC_ACT_REDIRECT);
      // From the SNAT address, as the flow's packets come (MASQUERADE does the same to such errors).
      expect(expectValid(fwd.dataOut)).toMatchObject({
        proto: IPPROTO_ICMP,
        saddr: TEST_CONFIG.snatAddr4,
        daddr: NEIGHBOURS.remoteBackend.ip,
      });
      expect(macOf(fwd.dataOut, 0)).toBe(NEIGHBOURS.remoteBackend.mac);
      const b = parsePacket(sentByBackend);
      expect(parsePacket(quotedPacket(fwd.dataOut))).toMatchObject({
        ipChecksumOk: true,
        saddr: b.saddr,
        sport: b.sport,
        daddr: b.daddr,
        dport: b.dport,
      });
    });

    it('XDP sends an ICMP error about a routed flow back out with XDP_TX when the FIB says so, else leaves it to tc', () => {
      writeFrontend(lb, {
        svcId: 64,
        addr: '0.0.0.0',
        port: 30064,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
        backends: [{ id: 64, addr: SAME_SEGMENT_BACKEND.ip, port: 8080 }],
      });
      const outsideIf = ifNameToIndex('r1');
      const src = sport();
      const out = runXdpOn(lb, XDP_EXT, tcp(OUTSIDE, '192.168.50.1', 30064, TCP.SYN, src), outsideIf).dataOut;
      const error = buildIcmpError({
        saddr: SAME_SEGMENT_BACKEND.ip,
        daddr: TEST_CONFIG.snatAddr4,
        quote: out.subarray(ETH_HLEN, ETH_HLEN + 28),
      });
      const back = runXdpOn(lb, XDP_EXT, error, outsideIf);
      expect(back.retval).toBe(XDP_TX);
      expect(expectValid(back.dataOut)).toMatchObject({
        proto: IPPROTO_ICMP,
        saddr: '192.168.50.1',
        daddr: OUTSIDE,
      });
      expect(macOf(back.dataOut, 0)).toBe(NEIGHBOURS.outside.mac);
      expect(parsePacket(quotedPacket(back.dataOut))).toMatchObject({ sport: src, dport: 30064 });
      const elsewhere = runXdpOn(lb, XDP_EXT, error, ifNameToIndex('r0'));
      expect(elsewhere.retval).toBe(XDP_PASS);
      expect(elsewhere.dataOut).toEqual(error);
    });

    it('gives concurrent flows from the same client port distinct NAT ports', () => {
      const ports = new Set<number>();
      for (let i = 0; i < 20; i++) {
        const client = `198.18.0.${i + 1}`;
        ports.add(
          parsePacket(run(lb, TC_EXT, tcp(client, '192.168.50.1', 30060, TCP.SYN, 5555)).dataOut).sport,
        );
      }
      expect(ports.size).toBe(20);
    });

    it('finds the one free SNAT port among 128 (more candidates than the 16 once unrolled)', () => {
      const backend = { id: 66, addr: NEIGHBOURS.remoteBackend.ip, port: 8066 };
      writeFrontend(lb, {
        svcId: 66,
        addr: '0.0.0.0',
        port: 30066,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
        backends: [backend],
      });
      mapUpdate(lb.fd.nodeAddrs4, ip4Codec.encode('192.168.50.1'), u32Codec.encode(1));
      const min = 62000;
      const max = 62127;
      writeConfig(lb, { snatPortMin: min, snatPortMax: max });
      const reply = (port: number) =>
        ct4Key.encode({
          saddr: backend.addr,
          daddr: TEST_CONFIG.snatAddr4,
          sport: backend.port,
          dport: port,
          proto: IPPROTO_TCP,
        });
      const taken = ct4Val.encode({
        lastSeenNs: 1n,
        xlateSaddr: '192.168.50.1',
        xlateDaddr: '198.18.1.1',
        xlateSport: 30066,
        xlateDport: 1,
        svcId: 66,
        backendId: 66,
        flags: CT_F.REPLY | CT_F.SNAT | CT_F.ROUTE,
        tcpFlags: 0,
      });
      try {
        for (let port = min; port <= max; port++) mapUpdate(lb.fd.ct4Tcp, reply(port), taken);
        // One port at a time comes free; each new flow must find it.
        for (const free of [62077, 62001, 62126]) {
          mapDelete(lb.fd.ct4Tcp, reply(free));
          const out = run(lb, TC_EXT, tcp(`198.18.2.${free - min}`, '192.168.50.1', 30066, TCP.SYN));
          expect(out.retval).toBe(TC_ACT_REDIRECT);
          expect(expectValid(out.dataOut)).toMatchObject({ saddr: TEST_CONFIG.snatAddr4, sport: free });
        }
        // All taken: dropped and counted.
        const before = drops(DROP_REASON.snatPortsExhausted);
        expect(run(lb, TC_EXT, tcp('198.18.2.200', '192.168.50.1', 30066, TCP.SYN)).retval).toBe(TC_ACT_SHOT);
        expect(drops(DROP_REASON.snatPortsExhausted) - before).toBe(1n);
      } finally {
        for (let port = min; port <= max; port++) mapDelete(lb.fd.ct4Tcp, reply(port));
        writeConfig(lb);
      }
    });

    it('lb_compat.o (no bpf_loop, the 5.10 clock) SNATs too, from its 16 unrolled candidates', () => {
      const compat = loadLb(
        {},
        { coarseClock: false, sockSetRetval: false, hostRouting: false },
        LB_COMPAT_OBJECT_PATH,
      );
      try {
        writeConfig(compat);
        writeFrontend(compat, {
          svcId: 60,
          addr: '0.0.0.0',
          port: 30060,
          proto: IPPROTO_TCP,
          flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
          backends: [{ id: 60, addr: NEIGHBOURS.remoteBackend.ip, port: 8080 }],
        });
        mapUpdate(compat.fd.nodeAddrs4, ip4Codec.encode('192.168.50.1'), u32Codec.encode(1));
        const ports = new Set<number>();
        for (let i = 0; i < 20; i++) {
          const out = run(compat, TC_EXT, tcp(`198.18.3.${i + 1}`, '192.168.50.1', 30060, TCP.SYN, 5555));
          expect(out.retval).toBe(TC_ACT_REDIRECT);
          ports.add(expectValid(out.dataOut).sport);
        }
        expect(ports.size).toBe(20);
      } finally {
        compat.close();
      }
    });

    it('hairpin: a pod reaching itself through its service is SNATed so the reply comes back through us', () => {
      writeFrontend(lb, {
        svcId: 61,
        addr: '10.96.0.61',
        port: 80,
        proto: IPPROTO_TCP,
        backends: [{ id: 61, addr: '10.244.2.61', port: 8080, flags: BE_F.LOCAL }],
      });
      const src = sport();
      const out = run(lb, TC_POD, tcp('10.244.2.61', '10.96.0.61', 80, TCP.SYN, src));
      expect(out.retval).toBe(TC_ACT_REDIRECT);
      const p = expectValid(out.dataOut);
      expect(p).toMatchObject({ saddr: TEST_CONFIG.snatAddr4, daddr: '10.244.2.61', dport: 8080 });
      expect(macOf(out.dataOut, 0)).toBe(NEIGHBOURS.pod.mac);
      const back = run(lb, TC_POD, replyTo(out.dataOut));
      expect(back.retval).toBe(TC_ACT_REDIRECT); // SNATed both ways: forwarded by tc itself
      expect(macOf(back.dataOut, 0)).toBe(NEIGHBOURS.pod.mac);
      expect(expectValid(back.dataOut)).toMatchObject({
        saddr: '10.96.0.61',
        sport: 80,
        daddr: '10.244.2.61',
        dport: src,
      });
    });

    it('does not SNAT external traffic to a local backend (the client address is kept)', () => {
      writeFrontend(lb, {
        svcId: 62,
        addr: '192.168.50.162',
        port: 80,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL,
        backends: [{ id: 62, addr: '10.244.2.62', port: 8080, flags: BE_F.LOCAL }],
      });
      expect(parsePacket(run(lb, TC_EXT, tcp(OUTSIDE, '192.168.50.162', 80)).dataOut).saddr).toBe(OUTSIDE);
    });

    it('drops and counts when SNAT is needed but no node address is configured', () => {
      writeConfig(lb, { snatAddr4: '0.0.0.0' });
      try {
        const before = drops(DROP_REASON.noSnatAddress);
        expect(run(lb, TC_EXT, tcp(OUTSIDE, '192.168.50.1', 30060)).retval).toBe(TC_ACT_SHOT);
        expect(drops(DROP_REASON.noSnatAddress) - before).toBe(1n);
      } finally {
        writeConfig(lb);
      }
    });
  });
});
