/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The ICMP errors tc sends back: port unreachable for a rejected flow, fragmentation needed (IPv6:
 * packet too big) for a routed packet too big for its route; ICMP for IPv4, ICMPv6 for IPv6.
 */
#ifndef KBP_ICMP_H
#define KBP_ICMP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "csum.h"
#include "ctx.h"
#include "parse.h"

/* Room for the quote of an ICMP error: the original IPv4 header (<= 60) and 8 bytes of it. */
#define KBP_QUOTE_MAX (60 + 8)

/* Bytes popped behind the MAC header while a packet becomes an ICMP error: past the checksum start
 * of any packet here (a TCP/UDP header behind a 60-byte IPv4 header, or behind the outer headers
 * of an encapsulation such as VXLAN). */
#define KBP_CSUM_POP 128

/* linux/icmp.h pulls in libc socket headers, so the 8-byte ICMP header is spelled out here. */
#define KBP_ICMP_DEST_UNREACH 3
#define KBP_ICMP_PORT_UNREACH 3
#define KBP_ICMP_FRAG_NEEDED  4

/* ICMPv6 (RFC 4443) has the same 8-byte header for these errors. */
#define KBP_ICMPV6_DEST_UNREACH 1
#define KBP_ICMPV6_PORT_UNREACH 4
#define KBP_ICMPV6_PKT_TOOBIG	2

/* Room for the quote of an ICMPv6 error: the IPv6 header, up to 64 bytes of extension headers and
 * the first 8 bytes after them (the ports); a packet with more is not answered. */
#define KBP_QUOTE6_MAX (40 + 64 + 8)

struct kbp_icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be16 unused;
	/* next-hop MTU of a frag needed (RFC 1191), the low half of a packet too big's 32-bit MTU,
	 * else 0 */
	__be16 mtu;
};

struct kbp_icmp_err {
	struct kbp_icmphdr icmp;
	__u8 quote[KBP_QUOTE_MAX];
};

struct kbp_icmp6_err {
	struct kbp_icmphdr icmp;
	__u8 quote[KBP_QUOTE6_MAX];
};

/*
 * Replaces the packet by an error message: the IP header `ip` (ip_len bytes) and the ICMP part
 * `msg` (msg_len bytes) behind the MAC header, whose addresses are swapped (none on L3 devices),
 * to be sent back out of the interface the packet came in on.
 * The checksum state must become the message's (docs/bpf-datapath.md, "Reject"). A
 * CHECKSUM_PARTIAL skb (TCP/UDP from a local socket, through a veth) would have a device without
 * checksum offload, or a host forwarding it, write a TCP/UDP checksum into the quote; no helper
 * sets CHECKSUM_NONE, but the kernel does so itself when a checksum start lies before the data
 * (skb_postpull_rcsum, which BPF_F_RECOMPUTE_CSUM stores call). So: grow to the message's length
 * plus KBP_CSUM_POP (which also resets GSO state: a GRO-merged packet answers as one), pop
 * KBP_CSUM_POP bytes behind the MAC header, past the old checksum start (bpf_skb_adjust_room
 * also clears CHECKSUM_UNNECESSARY), and store with BPF_F_RECOMPUTE_CSUM, which also keeps a
 * CHECKSUM_COMPLETE sum right.
 */
static __always_inline int kbp_icmp_emit(struct __sk_buff *skb, const bool l3, struct ethhdr *eth,
					 const void *ip, __u32 ip_len, const void *msg,
					 __u32 msg_len) {
	const __u32 l2 = KBP_L2_LEN(l3);
	__u8 mac[ETH_ALEN];

	if (bpf_skb_change_tail(skb, l2 + ip_len + msg_len + KBP_CSUM_POP, 0) < 0 ||
	    bpf_skb_adjust_room(skb, -(__s32)KBP_CSUM_POP, BPF_ADJ_ROOM_MAC, 0) < 0)
		return -1;
	if (!l3) {
		__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
		__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
		__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
		/* Not BPF_F_RECOMPUTE_CSUM: at tc the MAC header is outside skb->csum. */
		if (bpf_skb_store_bytes(skb, 0, eth, sizeof(*eth), 0) < 0)
			return -1;
	}
	if (bpf_skb_store_bytes(skb, l2, ip, ip_len, BPF_F_RECOMPUTE_CSUM) < 0 ||
	    bpf_skb_store_bytes(skb, l2 + ip_len, msg, msg_len, BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	return 0;
}

/*
 * Turns the packet into an ICMP destination unreachable to its sender, quoting its IPv4 header
 * and the first 8 bytes after it (RFC 792), to be sent back out of the interface it came in
 * on: port unreachable is kube-proxy's REJECT for services without endpoints; frag needed (with
 * the route's MTU) answers a routed packet too big to forward, so path MTU discovery works.
 * The error comes from the address the sender used, so its socket accepts it.
 */
static __always_inline int kbp_icmp_unreach4(struct __sk_buff *skb, const bool l3, __u8 code,
					     __u16 mtu) {
	const __u32 l2 = KBP_L2_LEN(l3);
	struct kbp_icmp_err err = {};
	struct ethhdr eth;
	struct iphdr ip = {};
	__u32 ihl_len, quote_len, l3_len;
	__u8 ihl;

	if ((!l3 && bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0) ||
	    bpf_skb_load_bytes(skb, l2, &ihl, 1) < 0)
		return -1;
	ihl_len = (ihl & 0x0f) * 4;
	if (ihl_len < sizeof(struct iphdr))
		return -1;
	quote_len = ihl_len + 8;
	if (bpf_skb_load_bytes(skb, l2, err.quote, quote_len) < 0)
		return -1;
	struct iphdr *orig = (struct iphdr *)err.quote;

	l3_len = sizeof(ip) + sizeof(err.icmp) + quote_len;
	ip.version = 4;
	ip.ihl = 5;
	ip.tot_len = bpf_htons(l3_len);
	ip.ttl = 64;
	ip.protocol = IPPROTO_ICMP;
	ip.saddr = orig->daddr;
	ip.daddr = orig->saddr;
	ip.check = kbp_csum_buf(&ip, sizeof(ip));
	err.icmp.type = KBP_ICMP_DEST_UNREACH;
	err.icmp.code = code;
	err.icmp.mtu = bpf_htons(mtu);
	err.icmp.checksum = kbp_csum_buf(&err, sizeof(err.icmp) + quote_len);

	return kbp_icmp_emit(skb, l3, &eth, &ip, sizeof(ip), &err, sizeof(err.icmp) + quote_len);
}

/*
 * The ICMPv6 counterpart (RFC 4443): destination unreachable / port unreachable, or packet too
 * big with the route's MTU, from the address the sender used, quoting the IPv6 header, its
 * extension headers (l4_off bytes in all) and the first 8 bytes after them. The checksum covers
 * the IPv6 pseudo header.
 */
static __always_inline int kbp_icmp_unreach6(struct __sk_buff *skb, const bool l3, __u8 type,
					     __u8 code, __u32 mtu, __u32 l4_off) {
	const __u32 l2 = KBP_L2_LEN(l3);
	struct kbp_icmp6_err err = {};
	struct ethhdr eth;
	struct ipv6hdr ip = {};
	/* 64 bits: its bounds check and its use are then the same register for the verifier. */
	__u64 quote_len = (__u64)l4_off + 8;
	__u32 msg_len, sum;
	__be32 upper[2];

	if (quote_len > KBP_QUOTE6_MAX)
		return -1;
	if ((!l3 && bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0) ||
	    bpf_skb_load_bytes(skb, l2, err.quote, quote_len) < 0)
		return -1;
	struct ipv6hdr *orig = (struct ipv6hdr *)err.quote;

	msg_len = sizeof(err.icmp) + quote_len;
	ip.version = 6;
	ip.payload_len = bpf_htons(msg_len);
	ip.nexthdr = IPPROTO_ICMPV6;
	ip.hop_limit = 64;
	ip.saddr = orig->daddr;
	ip.daddr = orig->saddr;
	err.icmp.type = type;
	err.icmp.code = code;
	err.icmp.mtu = bpf_htons((__u16)mtu);
	/* The pseudo header: both addresses, the upper-layer length and next header as two words.
	 */
	upper[0] = bpf_htonl(msg_len);
	upper[1] = bpf_htonl(IPPROTO_ICMPV6);
	sum = (__u32)bpf_csum_diff(NULL, 0, (__be32 *)&ip.saddr, 32, 0);
	sum = (__u32)bpf_csum_diff(NULL, 0, upper, sizeof(upper), sum);
	err.icmp.checksum =
	    ~kbp_csum_fold((__u32)bpf_csum_diff(NULL, 0, (__be32 *)&err, msg_len, sum));
	return kbp_icmp_emit(skb, l3, &eth, &ip, sizeof(ip), &err, msg_len);
}

#endif /* KBP_ICMP_H */
