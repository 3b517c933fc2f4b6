// The ctnetlink messages of src/host/ctnetlink.ts, byte for byte as the kernel's
// include/uapi/linux/netfilter/nfnetlink_conntrack.h lays them out. The kernel answers them in the
// migration test (test/e2e/migration.test.ts), where cleanup deletes the entries in the way.

import { describe, expect, it } from 'vitest';
import { ackErrno, ctDeleteMessage, ENOENT } from '../../src/host/ctnetlink.js';

describe('ctnetlink', () => {
  it('deletes by the original tuple: IPv4 addresses, protocol and ports nested as the kernel parses them', () => {
    const m = ctDeleteMessage(
      { protocol: 'tcp', src: '10.244.1.2', dst: '10.244.2.3', sport: 40000, dport: 7000 },
      7,
    );
    expect(m.toString('hex')).toBe(
      [
        '48000000', // nlmsghdr: length 72
        '0201', // type: NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_DELETE
        '0500', // NLM_F_REQUEST | NLM_F_ACK
        '07000000', // seq
        '00000000', // pid
        '02000000', // nfgenmsg: AF_INET, NFNETLINK_V0, res_id 0
        '34000180', // CTA_TUPLE_ORIG, nested, 52 bytes
        '14000180', // CTA_TUPLE_IP, nested, 20 bytes
        '080001000af40102', // CTA_IP_V4_SRC 10.244.1.2
        '080002000af40203', // CTA_IP_V4_DST 10.244.2.3
        '1c000280', // CTA_TUPLE_PROTO, nested, 28 bytes
        '0500010006000000', // CTA_PROTO_NUM 6, padded
        '060002009c400000', // CTA_PROTO_SRC_PORT 40000, network order, padded
        '060003001b580000', // CTA_PROTO_DST_PORT 7000, network order, padded
      ].join(''),
    );
  });

  it('says AF_INET6 and uses the IPv6 address attributes for IPv6 tuples', () => {
    const m = ctDeleteMessage({ protocol: 'udp', src: 'fd00::2', dst: 'fd00::3', sport: 1, dport: 53 }, 1);
    expect(m.readUInt8(16)).toBe(10);
    // CTA_IP_V6_SRC (3), 20 bytes, after the nested CTA_TUPLE_ORIG and CTA_TUPLE_IP headers.
    expect(m.readUInt16LE(28)).toBe(20);
    expect(m.readUInt16LE(30)).toBe(3);
    expect(m.subarray(32, 48).toString('hex')).toBe('fd000000000000000000000000000002');
    expect(m.readUInt32LE(0)).toBe(m.length);
  });

  it("reads the kernel's acknowledgement: 0 done, the errno otherwise, null for anything else", () => {
    const ack = (error: number, type = 2) => {
      const b = Buffer.alloc(36);
      b.writeUInt16LE(type, 4);
      b.writeInt32LE(error, 16);
      return b;
    };
    expect(ackErrno(ack(0))).toBe(0);
    expect(ackErrno(ack(-ENOENT))).toBe(ENOENT);
    expect(ackErrno(ack(0, 3))).toBeNull();
    expect(ackErrno(Buffer.alloc(4))).toBeNull();
  });
});
