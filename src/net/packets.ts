// Crafted Ethernet/IPv4/IPv6/TCP/UDP frames for BPF_PROG_TEST_RUN, with correct checksums, and a
// reader that checks them. Addresses are strings (the family is the address's), ports numbers, as
// in layout.ts.

import { formatIP, ipBytes, ipFamilyOf } from './ip.js';

export const ETH_HLEN = 14;
export const IPPROTO_ICMP = 1;
export const IPPROTO_TCP = 6;
export const IPPROTO_UDP = 17;
export const IPPROTO_ICMPV6 = 58;
/** IPv6 extension headers (next header values). */
export const IPV6_EXT = { HOPOPTS: 0, ROUTING: 43, FRAGMENT: 44, DSTOPTS: 60 } as const;
const ETH_P_IP = 0x0800;
const ETH_P_IPV6 = 0x86dd;

export const TCP = { FIN: 0x01, SYN: 0x02, RST: 0x04, PSH: 0x08, ACK: 0x10 } as const;

export interface PacketSpec {
  saddr: string;
  daddr: string;
  proto: typeof IPPROTO_TCP | typeof IPPROTO_UDP;
  sport: number;
  dport: number;
  /** TCP flags (TCP.*); default SYN. */
  tcpFlags?: number;
  payload?: Buffer;
  /** IPv4 options (padded to a multiple of 4 bytes). */
  ipOptions?: Buffer;
  /** UDP with checksum 0 ("no checksum"). */
  udpNoChecksum?: boolean;
  ttl?: number;
  /** Don't Fragment (default set). */
  dontFragment?: boolean;
  /** The IP identification (default 0x1234). */
  ipId?: number;
  srcMac?: string;
  dstMac?: string;
  /** IPv6 only: extension headers before the L4 header, in order (each 8 bytes; a fragment
   * header says offset 0, more fragments, id 1). */
  extHeaders?: number[];
}

/** One's complement sum of `buf` (16-bit big-endian words), not complemented. */
export function onesSum(buf: Buffer, initial = 0): number {
  let sum = initial;
  for (let i = 0; i + 1 < buf.length; i += 2) sum += buf.readUInt16BE(i);
  if (buf.length % 2 === 1) sum += buf[buf.length - 1]! << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum;
}

/** The pseudo header's sum: RFC 793's for IPv4 (4-byte addresses), RFC 8200's for IPv6. */
function pseudoHeaderSum(saddr: Buffer, daddr: Buffer, proto: number, l4Length: number): number {
  const ph = Buffer.alloc(2 * saddr.length + 8);
  saddr.copy(ph, 0);
  daddr.copy(ph, saddr.length);
  ph.writeUInt16BE(l4Length, ph.length - 6);
  ph[ph.length - 1] = proto;
  return onesSum(ph);
}

function macBytes(mac: string): Buffer {
  return Buffer.from(mac.split(':').map((h) => Number.parseInt(h, 16)));
}

/** The IPv6 header with its extension headers, for an L4 part of l4Len bytes. */
function ipv6Header(spec: PacketSpec, l4Len: number): Buffer {
  const ext = spec.extHeaders ?? [];
  const ip = Buffer.alloc(40 + 8 * ext.length);
  ip.writeUInt32BE(0x60000000, 0);
  ip.writeUInt16BE(8 * ext.length + l4Len, 4);
  ip[6] = ext[0] ?? spec.proto;
  ip[7] = spec.ttl ?? 64;
  Buffer.from(ipBytes(spec.saddr, 'IPv6')).copy(ip, 8);
  Buffer.from(ipBytes(spec.daddr, 'IPv6')).copy(ip, 24);
  ext.forEach((type, i) => {
    const h = ip.subarray(40 + 8 * i, 48 + 8 * i);
    h[0] = ext[i + 1] ?? spec.proto;
    if (type === IPV6_EXT.FRAGMENT) {
      h.writeUInt16BE(1, 2); // offset 0, more fragments
      h.writeUInt32BE(1, 4);
    } else {
      h[2] = 1; // a PadN option filling the header
      h[3] = 4;
    }
  });
  return ip;
}

export function buildPacket(spec: PacketSpec): Buffer {
  if (ipFamilyOf(spec.saddr) === 'IPv6') return buildPacket6(spec);
  const options = spec.ipOptions ?? Buffer.alloc(0);
  if (options.length % 4 !== 0 || options.length > 40)
    throw new Error('IPv4 options must be 4-byte padded, ≤ 40');
  const payload = spec.payload ?? Buffer.alloc(0);
  const ihlLen = 20 + options.length;
  const l4HeaderLen = spec.proto === IPPROTO_TCP ? 20 : 8;
  const l4Len = l4HeaderLen + payload.length;
  const frame = Buffer.alloc(ETH_HLEN + ihlLen + l4Len);

  macBytes(spec.dstMac ?? '02:00:00:00:00:02').copy(frame, 0);
  macBytes(spec.srcMac ?? '02:00:00:00:00:01').copy(frame, 6);
  frame.writeUInt16BE(0x0800, 12);

  const ip = frame.subarray(ETH_HLEN, ETH_HLEN + ihlLen);
  ip[0] = 0x40 | (ihlLen / 4);
  ip.writeUInt16BE(ihlLen + l4Len, 2);
  ip.writeUInt16BE(spec.ipId ?? 0x1234, 4);
  ip.writeUInt16BE(spec.dontFragment === false ? 0 : 0x4000, 6);
  ip[8] = spec.ttl ?? 64;
  ip[9] = spec.proto;
  const saddr = Buffer.from(ipBytes(spec.saddr, 'IPv4'));
  const daddr = Buffer.from(ipBytes(spec.daddr, 'IPv4'));
  saddr.copy(ip, 12);
  daddr.copy(ip, 16);
  options.copy(ip, 20);
  ip.writeUInt16BE(~onesSum(ip) & 0xffff, 10);

  writeL4(frame.subarray(ETH_HLEN + ihlLen), spec, saddr, daddr);
  return frame;
}

/** An Ethernet frame carrying the IPv6 header (extension headers included) `ip`, then `l4`. */
function ipv6Frame(
  ip: Buffer,
  l4: Buffer,
  dstMac = '02:00:00:00:00:02',
  srcMac = '02:00:00:00:00:01',
): Buffer {
  const frame = Buffer.alloc(ETH_HLEN + ip.length + l4.length);
  macBytes(dstMac).copy(frame, 0);
  macBytes(srcMac).copy(frame, 6);
  frame.writeUInt16BE(ETH_P_IPV6, 12);
  ip.copy(frame, ETH_HLEN);
  l4.copy(frame, ETH_HLEN + ip.length);
  return frame;
}

function buildPacket6(spec: PacketSpec): Buffer {
  const l4 = Buffer.alloc((spec.proto === IPPROTO_TCP ? 20 : 8) + (spec.payload?.length ?? 0));
  const ip = ipv6Header(spec, l4.length);
  writeL4(l4, spec, ip.subarray(8, 24), ip.subarray(24, 40));
  return ipv6Frame(ip, l4, spec.dstMac, spec.srcMac);
}

/** The TCP or UDP header, payload and checksum into l4 (sized for them). */
function writeL4(l4: Buffer, spec: PacketSpec, saddr: Buffer, daddr: Buffer): void {
  const payload = spec.payload ?? Buffer.alloc(0);
  const l4HeaderLen = spec.proto === IPPROTO_TCP ? 20 : 8;
  const l4Len = l4.length;
  l4.writeUInt16BE(spec.sport, 0);
  l4.writeUInt16BE(spec.dport, 2);
  if (spec.proto === IPPROTO_TCP) {
    l4.writeUInt32BE(1000, 4); // seq
    l4.writeUInt32BE((spec.tcpFlags ?? TCP.SYN) & TCP.ACK ? 2000 : 0, 8);
    l4[12] = 5 << 4;
    l4[13] = spec.tcpFlags ?? TCP.SYN;
    l4.writeUInt16BE(65535, 14);
  } else {
    l4.writeUInt16BE(l4Len, 4);
  }
  payload.copy(l4, l4HeaderLen);
  if (!(spec.proto === IPPROTO_UDP && spec.udpNoChecksum)) {
    const sum = ~onesSum(l4, pseudoHeaderSum(saddr, daddr, spec.proto, l4Len)) & 0xffff;
    const at = spec.proto === IPPROTO_TCP ? 16 : 6;
    l4.writeUInt16BE(spec.proto === IPPROTO_UDP && sum === 0 ? 0xffff : sum, at);
  }
}

/** An ICMPv6 neighbour solicitation (type 135) from `saddr` for `target`, to its solicited-node
 * multicast address: what must pass the programs untouched. */
export function buildNeighbourSolicitation(saddr: string, target: string): Buffer {
  const t = Buffer.from(ipBytes(target, 'IPv6'));
  const daddr = Buffer.from(ipBytes('ff02::1:ff00:0', 'IPv6'));
  t.copy(daddr, 13, 13);
  const icmp = Buffer.alloc(24);
  icmp[0] = 135;
  t.copy(icmp, 8);
  const ip = ipv6Header(
    {
      saddr,
      daddr: formatIP(daddr),
      proto: IPPROTO_ICMPV6 as typeof IPPROTO_TCP,
      sport: 0,
      dport: 0,
      ttl: 255,
    },
    icmp.length,
  );
  icmp.writeUInt16BE(
    ~onesSum(icmp, pseudoHeaderSum(ip.subarray(8, 24), daddr, IPPROTO_ICMPV6, 24)) & 0xffff,
    2,
  );
  return ipv6Frame(ip, icmp, '33:33:ff:00:00:00');
}

export interface ParsedPacket {
  saddr: string;
  daddr: string;
  proto: number;
  ihlLen: number;
  totLen: number;
  sport: number;
  dport: number;
  tcpFlags: number;
  ipId: number;
  /** The fragment offset in bytes, and More Fragments: 0 and false for a whole packet. */
  fragOffset: number;
  moreFragments: boolean;
  ipChecksumOk: boolean;
  /** TCP/UDP checksum over the pseudo header; UDP checksum 0 counts as ok. ICMP: its own checksum.
   * A fragment's is meaningless (it covers the whole datagram): check the reassembled one. */
  l4ChecksumOk: boolean;
  /** The L4 bytes (header and payload, as tot_len says). */
  l4: Buffer;
}

function ipString(buf: Buffer, at: number): string {
  return `${buf[at]}.${buf[at + 1]}.${buf[at + 2]}.${buf[at + 3]}`;
}

/** Reads a frame this module built (or the program rewrote); throws on anything else. */
export function parsePacket(frame: Buffer): ParsedPacket {
  if (frame.readUInt16BE(12) === ETH_P_IPV6) return parsePacket6(frame);
  if (frame.readUInt16BE(12) !== ETH_P_IP) throw new Error('neither IPv4 nor IPv6');
  const ip = frame.subarray(ETH_HLEN);
  const ihlLen = (ip[0]! & 0x0f) * 4;
  const totLen = ip.readUInt16BE(2);
  const proto = ip[9]!;
  const fragOffset = (ip.readUInt16BE(6) & 0x1fff) * 8;
  const l4 = ip.subarray(ihlLen, totLen);
  const ports = proto !== IPPROTO_ICMP && fragOffset === 0;
  const saddr = Buffer.from(ip.subarray(12, 16));
  const daddr = Buffer.from(ip.subarray(16, 20));
  let l4ChecksumOk: boolean;
  if (proto === IPPROTO_ICMP) l4ChecksumOk = onesSum(l4) === 0xffff;
  else if (proto === IPPROTO_UDP && l4.readUInt16BE(6) === 0) l4ChecksumOk = true;
  else l4ChecksumOk = onesSum(l4, pseudoHeaderSum(saddr, daddr, proto, l4.length)) === 0xffff;
  return {
    saddr: ipString(ip, 12),
    daddr: ipString(ip, 16),
    proto,
    ihlLen,
    totLen,
    sport: ports ? l4.readUInt16BE(0) : 0,
    dport: ports ? l4.readUInt16BE(2) : 0,
    tcpFlags: proto === IPPROTO_TCP && fragOffset === 0 ? l4[13]! : 0,
    ipId: ip.readUInt16BE(4),
    fragOffset,
    moreFragments: (ip.readUInt16BE(6) & 0x2000) !== 0,
    ipChecksumOk: onesSum(ip.subarray(0, ihlLen)) === 0xffff,
    l4ChecksumOk,
    l4,
  };
}

/** IPv6: ihlLen is the offset of the L4 header (after the extension headers; a later fragment's:
 * of its data), totLen the IPv6 header's 40 bytes and its payload, ipId the Fragment header's
 * identification; there is no IP checksum (ipChecksumOk always). */
function parsePacket6(frame: Buffer): ParsedPacket {
  const ip = frame.subarray(ETH_HLEN);
  const totLen = 40 + ip.readUInt16BE(4);
  let proto = ip[6]!;
  let at = 40;
  let fragOffset = 0;
  let moreFragments = false;
  let ipId = 0;
  while (
    ([IPV6_EXT.HOPOPTS, IPV6_EXT.ROUTING, IPV6_EXT.DSTOPTS, IPV6_EXT.FRAGMENT] as number[]).includes(proto)
  ) {
    if (proto === IPV6_EXT.FRAGMENT) {
      fragOffset = ip.readUInt16BE(at + 2) & 0xfff8;
      moreFragments = (ip.readUInt16BE(at + 2) & 1) !== 0;
      ipId = ip.readUInt32BE(at + 4);
      proto = ip[at]!;
      at += 8;
      // A later fragment's data follows: no more headers.
      if (fragOffset !== 0) break;
    } else {
      proto = ip[at]!;
      at += 8 * (ip[at + 1]! + 1);
    }
  }
  const l4 = ip.subarray(at, totLen);
  const saddr = Buffer.from(ip.subarray(8, 24));
  const daddr = Buffer.from(ip.subarray(24, 40));
  const ports = (proto === IPPROTO_TCP || proto === IPPROTO_UDP) && fragOffset === 0;
  return {
    saddr: formatIP(saddr),
    daddr: formatIP(daddr),
    proto,
    ihlLen: at,
    totLen,
    sport: ports ? l4.readUInt16BE(0) : 0,
    dport: ports ? l4.readUInt16BE(2) : 0,
    tcpFlags: proto === IPPROTO_TCP && fragOffset === 0 ? l4[13]! : 0,
    ipId,
    fragOffset,
    moreFragments,
    ipChecksumOk: true,
    l4ChecksumOk: onesSum(l4, pseudoHeaderSum(saddr, daddr, proto, l4.length)) === 0xffff,
    l4,
  };
}

/** An ICMP error frame from `saddr` to `daddr` quoting `quote` (an IPv4 packet, no Ethernet
 * header): destination unreachable (type 3) by default, code 3 (port unreachable). With IPv6
 * addresses, an ICMPv6 error quoting an IPv6 packet: destination unreachable (type 1) by default,
 * code 4 (port unreachable), its checksum over the pseudo header. */
export function buildIcmpError(spec: {
  saddr: string;
  daddr: string;
  quote: Buffer;
  type?: number;
  code?: number;
  /** Next-hop MTU of a fragmentation needed (code 4), or of an ICMPv6 packet too big (type 2). */
  mtu?: number;
  /** IPv6 only: extension headers before the ICMPv6 header (IPV6_EXT.*, 8 bytes each). */
  extHeaders?: number[];
  hopLimit?: number;
}): Buffer {
  const v6 = ipFamilyOf(spec.saddr) === 'IPv6';
  const icmp = Buffer.alloc(8 + spec.quote.length);
  icmp[0] = spec.type ?? (v6 ? 1 : 3);
  icmp[1] = spec.code ?? (v6 ? 4 : 3);
  if (v6) icmp.writeUInt32BE(spec.mtu ?? 0, 4);
  else icmp.writeUInt16BE(spec.mtu ?? 0, 6);
  spec.quote.copy(icmp, 8);
  if (v6) {
    const ip = ipv6Header(
      {
        saddr: spec.saddr,
        daddr: spec.daddr,
        proto: IPPROTO_ICMPV6 as typeof IPPROTO_TCP,
        sport: 0,
        dport: 0,
        ttl: spec.hopLimit ?? 64,
        extHeaders: spec.extHeaders,
      },
      icmp.length,
    );
    const sum = pseudoHeaderSum(ip.subarray(8, 24), ip.subarray(24, 40), IPPROTO_ICMPV6, icmp.length);
    icmp.writeUInt16BE(~onesSum(icmp, sum) & 0xffff, 2);
    return ipv6Frame(ip, icmp);
  }
  icmp.writeUInt16BE(~onesSum(icmp) & 0xffff, 2);
  const frame = Buffer.alloc(ETH_HLEN + 20 + icmp.length);
  macBytes('02:00:00:00:00:02').copy(frame, 0);
  macBytes('02:00:00:00:00:01').copy(frame, 6);
  frame.writeUInt16BE(0x0800, 12);
  const ip = frame.subarray(ETH_HLEN, ETH_HLEN + 20);
  ip[0] = 0x45;
  ip.writeUInt16BE(20 + icmp.length, 2);
  ip[8] = spec.hopLimit ?? 64;
  ip[9] = IPPROTO_ICMP;
  Buffer.from(ipBytes(spec.saddr, 'IPv4')).copy(ip, 12);
  Buffer.from(ipBytes(spec.daddr, 'IPv4')).copy(ip, 16);
  ip.writeUInt16BE(~onesSum(ip) & 0xffff, 10);
  icmp.copy(frame, ETH_HLEN + 20);
  return frame;
}

/** The packet an ICMP (or ICMPv6) error quotes, as a frame parsePacket reads. */
export function quotedPacket(icmpFrame: Buffer): Buffer {
  const p = parsePacket(icmpFrame);
  const quote = p.l4.subarray(8);
  const frame = Buffer.alloc(ETH_HLEN + quote.length);
  frame.writeUInt16BE(icmpFrame.readUInt16BE(12), 12);
  quote.copy(frame, ETH_HLEN);
  return frame;
}

/** The frame a reply to `frame` would be: addresses, ports and MACs swapped, new checksums. */
export function replyTo(frame: Buffer, tcpFlags: number = TCP.SYN | TCP.ACK): Buffer {
  const p = parsePacket(frame);
  return buildPacket({
    saddr: p.daddr,
    daddr: p.saddr,
    proto: p.proto as typeof IPPROTO_TCP | typeof IPPROTO_UDP,
    sport: p.dport,
    dport: p.sport,
    tcpFlags,
    srcMac: '02:00:00:00:00:02',
    dstMac: '02:00:00:00:00:01',
  });
}

/**
 * Splits a frame's IPv4 datagram into fragments of at most `chunk` payload bytes (a multiple of
 * 8), as a host fragments it: each fragment repeats the IP header (its options included), with
 * DF clear, MF on all but the last, the offset, its own length and header checksum. An IPv6
 * datagram gets a Fragment header with identification `id` after its unfragmentable part (the
 * IPv6 header and any leading hop-by-hop and routing headers, RFC 8200 4.5), repeated in each.
 */
export function fragmentPacket(frame: Buffer, chunk: number, id = 0x1234): Buffer[] {
  if (chunk <= 0 || chunk % 8 !== 0) throw new Error('fragment payload must be a positive multiple of 8');
  if (frame.readUInt16BE(12) === ETH_P_IPV6) return fragmentPacket6(frame, chunk, id);
  const ip = frame.subarray(ETH_HLEN);
  const ihlLen = (ip[0]! & 0x0f) * 4;
  const payload = ip.subarray(ihlLen, ip.readUInt16BE(2));
  const out: Buffer[] = [];
  for (let at = 0; at < payload.length; at += chunk) {
    const part = payload.subarray(at, at + chunk);
    const f = Buffer.concat([frame.subarray(0, ETH_HLEN + ihlLen), part]);
    const h = f.subarray(ETH_HLEN, ETH_HLEN + ihlLen);
    h.writeUInt16BE(ihlLen + part.length, 2);
    h.writeUInt16BE((at + chunk < payload.length ? 0x2000 : 0) | (at / 8), 6);
    h.writeUInt16BE(0, 10);
    h.writeUInt16BE(~onesSum(h) & 0xffff, 10);
    out.push(f);
  }
  return out;
}

/** Where an IPv6 packet's unfragmentable part ends, and the next header field that names what
 * follows it. */
function unfragmentable6(ip: Buffer): { end: number; nextAt: number } {
  let nextAt = 6;
  let at = 40;
  while (ip[nextAt] === IPV6_EXT.HOPOPTS || ip[nextAt] === IPV6_EXT.ROUTING) {
    nextAt = at;
    at += 8 * (ip[at + 1]! + 1);
  }
  return { end: at, nextAt };
}

function fragmentPacket6(frame: Buffer, chunk: number, id: number): Buffer[] {
  const ip = frame.subarray(ETH_HLEN, ETH_HLEN + 40 + frame.readUInt16BE(ETH_HLEN + 4));
  const { end, nextAt } = unfragmentable6(ip);
  const payload = ip.subarray(end);
  const out: Buffer[] = [];
  for (let at = 0; at < payload.length; at += chunk) {
    const part = payload.subarray(at, at + chunk);
    const head = Buffer.from(frame.subarray(0, ETH_HLEN + end));
    const fh = Buffer.alloc(8);
    fh[0] = ip[nextAt]!;
    fh.writeUInt16BE(at | (at + chunk < payload.length ? 1 : 0), 2);
    fh.writeUInt32BE(id >>> 0, 4);
    head[ETH_HLEN + nextAt] = IPV6_EXT.FRAGMENT;
    head.writeUInt16BE(end - 40 + 8 + part.length, ETH_HLEN + 4);
    out.push(Buffer.concat([head, fh, part]));
  }
  return out;
}

/** The datagram the fragments (any order) make up, as one frame: the first fragment's headers,
 * the payloads by offset (IPv6: without the Fragment header). Throws when one is missing. */
export function reassemble(fragments: Buffer[]): Buffer {
  const sorted = [...fragments].sort((a, b) => parsePacket(a).fragOffset - parsePacket(b).fragOffset);
  if (sorted[0]!.readUInt16BE(12) === ETH_P_IPV6) return reassemble6(sorted);
  const first = sorted[0]!;
  const ihlLen = (first[ETH_HLEN]! & 0x0f) * 4;
  const parts: Buffer[] = [];
  let next = 0;
  for (const f of sorted) {
    const p = parsePacket(f);
    if (p.fragOffset !== next) throw new Error(`fragment at ${next} missing`);
    const body = f.subarray(ETH_HLEN + p.ihlLen, ETH_HLEN + p.totLen);
    parts.push(body);
    next += body.length;
  }
  if (parsePacket(sorted[sorted.length - 1]!).moreFragments) throw new Error('last fragment missing');
  const frame = Buffer.concat([first.subarray(0, ETH_HLEN + ihlLen), ...parts]);
  const h = frame.subarray(ETH_HLEN, ETH_HLEN + ihlLen);
  h.writeUInt16BE(ihlLen + next, 2);
  h.writeUInt16BE(0, 6);
  h.writeUInt16BE(0, 10);
  h.writeUInt16BE(~onesSum(h) & 0xffff, 10);
  return frame;
}

function reassemble6(sorted: Buffer[]): Buffer {
  const parts: Buffer[] = [];
  let next = 0;
  let head: Buffer | null = null;
  for (const f of sorted) {
    const ip = f.subarray(ETH_HLEN, ETH_HLEN + 40 + f.readUInt16BE(ETH_HLEN + 4));
    // The Fragment header: after the unfragmentable part.
    let nextAt = 6;
    let at = 40;
    while (ip[nextAt] !== IPV6_EXT.FRAGMENT) {
      if (ip[nextAt] !== IPV6_EXT.HOPOPTS && ip[nextAt] !== IPV6_EXT.ROUTING)
        throw new Error('not a fragment');
      nextAt = at;
      at += 8 * (ip[at + 1]! + 1);
    }
    const offset = ip.readUInt16BE(at + 2) & 0xfff8;
    if (offset !== next) throw new Error(`fragment at ${next} missing`);
    if (!head) {
      head = Buffer.from(f.subarray(0, ETH_HLEN + at));
      head[ETH_HLEN + nextAt] = ip[at]!;
    }
    const body = ip.subarray(at + 8);
    parts.push(body);
    next += body.length;
    if (!(ip.readUInt16BE(at + 2) & 1) && f !== sorted[sorted.length - 1])
      throw new Error('fragment after the last');
  }
  const last = sorted[sorted.length - 1]!;
  if (parsePacket(last).moreFragments) throw new Error('last fragment missing');
  const frame = Buffer.concat([head!, ...parts]);
  frame.writeUInt16BE(frame.length - ETH_HLEN - 40, ETH_HLEN + 4);
  return frame;
}
