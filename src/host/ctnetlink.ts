// Deleting netfilter conntrack entries by their exact original tuple over ctnetlink
// (IPCTNL_MSG_CT_DELETE with CTA_TUPLE_ORIG, the kernel's include/uapi/linux/netfilter/
// nfnetlink_conntrack.h): one hash lookup in the kernel per entry, where `conntrack -D` walks the
// whole table for each filter it is given (about 14 ms a delete with 262,144 buckets, here).
// The messages are built by pure functions; deleteConntrackEntries() sends them.

import { closeFd, NativeError, netlinkRequest, netlinkSocket } from '../../native/libc.js';
import { ipBytes } from '../net/ip.js';

/** A connection's original direction, as the kernel's conntrack keys it. */
export interface ConntrackTuple {
  protocol: 'tcp' | 'udp';
  src: string;
  dst: string;
  sport: number;
  dport: number;
}

const NETLINK_NETFILTER = 12;
const NFNL_SUBSYS_CTNETLINK = 1;
const IPCTNL_MSG_CT_DELETE = 2;
const NLM_F_REQUEST = 0x1;
const NLM_F_ACK = 0x4;
const NLMSG_ERROR = 0x2;
const NLA_F_NESTED = 0x8000;
const CTA_TUPLE_ORIG = 1;
const CTA_TUPLE_IP = 1;
const CTA_TUPLE_PROTO = 2;
const CTA_IP_V4_SRC = 1;
const CTA_IP_V4_DST = 2;
const CTA_IP_V6_SRC = 3;
const CTA_IP_V6_DST = 4;
const CTA_PROTO_NUM = 1;
const CTA_PROTO_SRC_PORT = 2;
const CTA_PROTO_DST_PORT = 3;
const AF_INET = 2;
const AF_INET6 = 10;
const IPPROTO = { tcp: 6, udp: 17 } as const;
export const ENOENT = 2;

/** One netlink attribute, its payload padded to 4 bytes. */
function attr(type: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(4);
  head.writeUInt16LE(4 + payload.length, 0);
  head.writeUInt16LE(type, 2);
  return Buffer.concat([head, payload, Buffer.alloc((4 - (payload.length % 4)) % 4)]);
}

const be16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
};

/** IPCTNL_MSG_CT_DELETE of the entry whose original tuple is `t`, acknowledged. */
export function ctDeleteMessage(t: ConntrackTuple, seq: number): Buffer {
  const v6 = t.src.includes(':');
  const family = v6 ? 'IPv6' : 'IPv4';
  const ip = attr(
    CTA_TUPLE_IP | NLA_F_NESTED,
    Buffer.concat([
      attr(v6 ? CTA_IP_V6_SRC : CTA_IP_V4_SRC, Buffer.from(ipBytes(t.src, family))),
      attr(v6 ? CTA_IP_V6_DST : CTA_IP_V4_DST, Buffer.from(ipBytes(t.dst, family))),
    ]),
  );
  const proto = attr(
    CTA_TUPLE_PROTO | NLA_F_NESTED,
    Buffer.concat([
      attr(CTA_PROTO_NUM, Buffer.from([IPPROTO[t.protocol]])),
      attr(CTA_PROTO_SRC_PORT, be16(t.sport)),
      attr(CTA_PROTO_DST_PORT, be16(t.dport)),
    ]),
  );
  const body = attr(CTA_TUPLE_ORIG | NLA_F_NESTED, Buffer.concat([ip, proto]));
  // nlmsghdr (16 bytes), then nfgenmsg: family, version 0 (NFNETLINK_V0), res_id 0.
  const header = Buffer.alloc(20);
  header.writeUInt32LE(20 + body.length, 0);
  header.writeUInt16LE((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE, 4);
  header.writeUInt16LE(NLM_F_REQUEST | NLM_F_ACK, 6);
  header.writeUInt32LE(seq, 8);
  header.writeUInt8(v6 ? AF_INET6 : AF_INET, 16);
  return Buffer.concat([header, body]);
}

/** The errno an acknowledgement carries (0: done), null when the answer is not one. */
export function ackErrno(answer: Buffer): number | null {
  if (answer.length < 20 || answer.readUInt16LE(4) !== NLMSG_ERROR) return null;
  const error = answer.readInt32LE(16);
  return error === 0 ? 0 : -error;
}

/**
 * Deletes the entries with these original tuples from the conntrack of this process's network
 * namespace. Returns how many went, and why others failed (a missing entry is no failure).
 */
export function deleteConntrackEntries(tuples: readonly ConntrackTuple[]): {
  deleted: number;
  errors: string[];
} {
  const result = { deleted: 0, errors: [] as string[] };
  if (tuples.length === 0) return result;
  const fd = netlinkSocket(NETLINK_NETFILTER);
  try {
    tuples.forEach((t, i) => {
      const errno = ackErrno(netlinkRequest(fd, ctDeleteMessage(t, i + 1)));
      if (errno === 0) result.deleted++;
      else if (errno !== ENOENT)
        result.errors.push(
          `deleting ${t.protocol} ${t.src}:${t.sport} -> ${t.dst}:${t.dport}: ${errno === null ? 'no acknowledgement' : new NativeError('ctnetlink', errno).message}`,
        );
    });
  } finally {
    closeFd(fd);
  }
  return result;
}
