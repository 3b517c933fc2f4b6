// The datapath's flow hash (bpf/hash.h kbp_flow_hash4, kbp_flow_hash6), for `trace` and tests:
// which Maglev slot a client tuple lands in. Bob Jenkins' lookup3 jhash_3words as in the Linux
// kernel over (saddr, sport << 16 | dport, proto), an IPv6 saddr folded to the XOR of its four
// words; the destination address is left out so every address of a service picks the same backend.

import { ipBytes, ipFamilyOf } from '../../net/ip.js';

function rol32(w: number, s: number): number {
  return ((w << s) | (w >>> (32 - s))) >>> 0;
}

export function jhash3Words(a0: number, b0: number, c0: number, initval: number): number {
  const init = (initval + 0xdeadbeef + (3 << 2)) >>> 0;
  let a = (a0 + init) >>> 0;
  let b = (b0 + init) >>> 0;
  let c = (c0 + init) >>> 0;
  c = ((c ^ b) - rol32(b, 14)) >>> 0;
  a = ((a ^ c) - rol32(c, 11)) >>> 0;
  b = ((b ^ a) - rol32(a, 25)) >>> 0;
  c = ((c ^ b) - rol32(b, 16)) >>> 0;
  a = ((a ^ c) - rol32(c, 4)) >>> 0;
  b = ((b ^ a) - rol32(a, 14)) >>> 0;
  c = ((c ^ b) - rol32(b, 24)) >>> 0;
  return c;
}

export function flowHash(saddr: string, sport: number, dport: number, proto: number, seed: number): number {
  const family = ipFamilyOf(saddr) ?? 'IPv4';
  const bytes = Buffer.from(ipBytes(saddr, family));
  let a = 0;
  for (let at = 0; at < bytes.length; at += 4) a = (a ^ bytes.readUInt32BE(at)) >>> 0;
  return jhash3Words(a, ((sport << 16) | dport) >>> 0, proto, seed >>> 0);
}

/** The Maglev table index the datapath reads for this client tuple. */
export function maglevIndex(
  saddr: string,
  sport: number,
  dport: number,
  proto: number,
  seed: number,
  tableSize: number,
): number {
  return flowHash(saddr, sport, dport, proto, seed) % tableSize;
}
