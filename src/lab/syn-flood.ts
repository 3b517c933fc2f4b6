// The lab's SYN flood: TCP SYNs to one --target from a raw socket, each from another source
// address and port (spoofed, as a flood's are), so that every one is a new flow to a load
// balancer. Sources walk --sources (a CIDR) with ports spread by a fixed multiplier: the same
// arguments send the same packets. Bounded by --count and by --seconds, whichever comes first;
// prints {"sent", "seconds"}. Meant for lab namespaces only: the backends' SYN-ACKs go to the
// spoofed addresses, which the lab routes nowhere.
// Usage: node syn-flood.js --target IP:PORT --count N --seconds S [--sources 198.18.0.0/15]

import { parseArgs } from 'node:util';
import { closeFd, openRawIPv4Socket, sendIPv4Packet } from '../../native/libc.js';
import { formatIP, parseCIDR } from '../net/ip.js';
import { buildPacket, ETH_HLEN, IPPROTO_TCP, TCP } from '../net/packets.js';

const { values } = parseArgs({
  options: {
    target: { type: 'string' },
    count: { type: 'string' },
    seconds: { type: 'string' },
    // RFC 2544's benchmarking range: never a real client's address.
    sources: { type: 'string', default: '198.18.0.0/15' },
  },
});
const target = values.target ?? '';
const split = target.lastIndexOf(':');
const daddr = target.slice(0, split);
const dport = Number(target.slice(split + 1));
const count = Number(values.count);
const seconds = Number(values.seconds);
const sources = parseCIDR(values.sources ?? '');
if (!daddr || !(dport > 0) || !(count > 0) || !(seconds > 0) || !sources || sources.family !== 'IPv4')
  throw new Error('usage: syn-flood --target IP:PORT --count N --seconds S [--sources IPv4-CIDR]');
const network = Buffer.from(sources.network).readUInt32BE(0);
const hosts = 2 ** (32 - sources.prefixLength);

/** The i-th SYN's source: addresses in order, ports 1024-65535 spread by a prime multiplier. */
function sourceOf(i: number): { saddr: string; sport: number } {
  const address = Buffer.alloc(4);
  address.writeUInt32BE((network + (i % hosts)) >>> 0, 0);
  return { saddr: formatIP(address), sport: 1024 + ((i * 40_503) % 64_512) };
}

const fd = openRawIPv4Socket();
const started = performance.now();
const deadline = started + seconds * 1000;
let sent = 0;
try {
  while (sent < count && performance.now() < deadline) {
    const { saddr, sport } = sourceOf(sent);
    const frame = buildPacket({ saddr, daddr, proto: IPPROTO_TCP, sport, dport, tcpFlags: TCP.SYN });
    sendIPv4Packet(fd, frame.subarray(ETH_HLEN));
    sent++;
  }
} finally {
  closeFd(fd);
}
console.log(JSON.stringify({ sent, seconds: (performance.now() - started) / 1000 }));
