/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The parsed packet (struct kbp_pkt4, struct kbp_pkt6) and the parsers: IPv4 TCP and UDP, whole or
 * fragmented (the tc programs only, see frag.h); IPv6 TCP and UDP behind at most
 * KBP_IPV6_EXT_MAX extension headers, whole or fragmented (tc only, the same way); everything
 * else is left alone
 * (docs/bpf-datapath.md, "Packet walk", step 1).
 */
#ifndef KBP_PARSE_H
#define KBP_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "ctx.h"
#include "frag.h"
#include "types.h"

#define KBP_IP_DF	      0x4000
#define KBP_IP_MF	      0x2000
#define KBP_IP_OFFSET	      0x1fff
#define KBP_TCP_FLAGS_TRACKED (KBP_TCP_FIN | KBP_TCP_SYN | KBP_TCP_RST | KBP_TCP_ACK)

struct kbp_pkt4 {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 tcp_flags; /* KBP_TCP_*: the TCP header's bits at the same positions */
	__u16 ihl_len;	/* IPv4 header length in bytes */
	__u32 len;	/* frame length, for byte counters */
	__u8 ttl;
	__u8 df;   /* Don't Fragment set */
	__u8 frag; /* KBP_PKT_WHOLE, KBP_PKT_FRAG_FIRST or KBP_PKT_FRAG_LATER (frag.h) */
};

/* The IPv6 counterpart: the fields the family-generic code reads have the same names. */
struct kbp_pkt6 {
	__be32 saddr[4];
	__be32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 tcp_flags;
	__u16 l4_off; /* bytes from the IPv6 header to the TCP/UDP header (extension headers), or to
		       * a later fragment's data */
	__u32 len;
	__u8 ttl;  /* the hop limit */
	__u8 df;   /* 1: IPv6 routers never fragment */
	__u8 frag; /* as kbp_pkt4's */
};

/*
 * The ports and TCP flags of the TCP or UDP header at l4, which has l4_len bytes of the datagram
 * after it (a first fragment's UDP length is the whole datagram's: `whole` false). -1 when it is
 * truncated or inconsistent.
 */
static __always_inline int kbp_parse_ports(void *l4, void *end, __u32 l4_len, __u8 proto,
					   bool whole, __be16 *sport, __be16 *dport,
					   __u8 *tcp_flags) {
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > end || l4_len < sizeof(*th))
			return -1;
		if (th->doff < 5 || (__u32)th->doff * 4 > l4_len)
			return -1;
		*sport = th->source;
		*dport = th->dest;
		*tcp_flags = ((__u8 *)th)[13] & KBP_TCP_FLAGS_TRACKED;
		return 0;
	}
	if (proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;
		__u32 ulen;

		if ((void *)(uh + 1) > end)
			return -1;
		ulen = bpf_ntohs(uh->len);
		if (ulen < sizeof(*uh) || (ulen > l4_len && whole))
			return -1;
		*sport = uh->source;
		*dport = uh->dest;
		*tcp_flags = 0;
		return 0;
	}
	return -1;
}

/* 0 when the packet is an IPv4 TCP/UDP packet whose headers are complete and consistent: whole,
 * a first fragment (its ports recorded), or, in tc, a later fragment whose first fragment's ports
 * were recorded (p->sport, p->dport are those); -1 for everything the load balancer must leave
 * alone. */
static __always_inline int kbp_parse4(void *ctx, const bool xdp, const bool l3,
				      struct kbp_pkt4 *p) {
	void *data = kbp_data(ctx, xdp);
	void *end = kbp_data_end(ctx, xdp);
	struct iphdr *iph = data + KBP_L2_LEN(l3);
	__u32 ihl_len, tot_len, l4_len;
	__u8 frag = KBP_PKT_WHOLE;
	void *l4;

	if ((void *)(iph + 1) > end)
		return -1;
	if (l3) {
		if (((struct __sk_buff *)ctx)->protocol != bpf_htons(ETH_P_IP))
			return -1;
	} else if (((struct ethhdr *)data)->h_proto != bpf_htons(ETH_P_IP)) {
		return -1;
	}
	if (iph->version != 4)
		return -1;
	ihl_len = (__u32)iph->ihl * 4;
	if (ihl_len < sizeof(*iph))
		return -1;
	/* The one test whole packets pay. XDP leaves fragments to tc, which alone records them: a
	 * datagram's fragments then meet one program whichever hook they arrive at. */
	if (iph->frag_off & bpf_htons(KBP_IP_MF | KBP_IP_OFFSET)) {
		if (xdp)
			return -1;
		frag = iph->frag_off & bpf_htons(KBP_IP_OFFSET) ? KBP_PKT_FRAG_LATER
								: KBP_PKT_FRAG_FIRST;
	}
	tot_len = bpf_ntohs(iph->tot_len);
	/* BIG TCP (IPv4, 6.3+): a GSO packet longer than 64 KiB carries tot_len 0; its length is
	 * the skb's. Only tc sees such packets (XDP runs before GRO). */
	if (tot_len == 0 && !xdp && ((struct __sk_buff *)ctx)->gso_size)
		tot_len = kbp_frame_len(ctx, xdp) - KBP_L2_LEN(l3);
	if (tot_len < ihl_len || KBP_L2_LEN(l3) + tot_len > kbp_frame_len(ctx, xdp))
		return -1;
	l4_len = tot_len - ihl_len;
	l4 = (void *)iph + ihl_len;

	if (frag == KBP_PKT_FRAG_LATER) {
		if (iph->protocol != IPPROTO_TCP && iph->protocol != IPPROTO_UDP)
			return -1;
		if (kbp_frag_ports(iph, &p->sport, &p->dport) < 0)
			return -1;
		p->tcp_flags = 0;
	} else if (kbp_parse_ports(l4, end, l4_len, iph->protocol, frag == KBP_PKT_WHOLE, &p->sport,
				   &p->dport, &p->tcp_flags) < 0) {
		return -1;
	}
	p->saddr = iph->saddr;
	p->daddr = iph->daddr;
	p->proto = iph->protocol;
	p->ttl = iph->ttl;
	p->df = !!(iph->frag_off & bpf_htons(KBP_IP_DF));
	p->frag = frag;
	p->ihl_len = ihl_len;
	p->len = kbp_frame_len(ctx, xdp);
	if (frag == KBP_PKT_FRAG_FIRST)
		kbp_frag_record(iph, p->sport, p->dport);
	return 0;
}

/* Extension headers (hop-by-hop, routing, destination options, one Fragment header) walked before
 * the TCP/UDP header; a packet with more is left alone. */
#define KBP_IPV6_EXT_MAX 4
/* The furthest a TCP/UDP header can be after them (each is at most 2048 bytes). */
#define KBP_IPV6_L4_OFF_MAX (40 + KBP_IPV6_EXT_MAX * 2048)
/* A mask that keeps every offset the parser accepts: an offset masked with it has a bound the
 * verifier sees however the compiler spills it (6.1's marks no packet range past a pointer whose
 * variable part may reach 64 KiB, as a __u16 reloaded from the stack does). */
#define KBP_IPV6_L4_OFF_MASK 0x3fff
_Static_assert(KBP_IPV6_L4_OFF_MAX <= KBP_IPV6_L4_OFF_MASK, "KBP_IPV6_L4_OFF_MASK");

/* 0 when the packet is an IPv6 TCP/UDP packet whose headers are complete and consistent, behind at
 * most KBP_IPV6_EXT_MAX extension headers: whole, a first fragment (its ports recorded), or, in
 * tc, a later fragment whose first fragment's ports were recorded (p->proto, p->sport, p->dport
 * are those; p->l4_off is where its fragment's data starts). -1 for everything else: ICMPv6
 * (neighbour discovery among it, errors for related.h), other protocols, fragments in XDP. */
static __always_inline int kbp_parse6(void *ctx, const bool xdp, const bool l3,
				      struct kbp_pkt6 *p) {
	void *data = kbp_data(ctx, xdp);
	void *end = kbp_data_end(ctx, xdp);
	struct ipv6hdr *ip6 = data + KBP_L2_LEN(l3);
	__u32 off = sizeof(*ip6), total;
	__u8 nexthdr, frag = KBP_PKT_WHOLE;
	__be32 frag_id = 0;

	if ((void *)(ip6 + 1) > end)
		return -1;
	if (l3) {
		if (((struct __sk_buff *)ctx)->protocol != bpf_htons(ETH_P_IPV6))
			return -1;
	} else if (((struct ethhdr *)data)->h_proto != bpf_htons(ETH_P_IPV6)) {
		return -1;
	}
	if (ip6->version != 6)
		return -1;
	total = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	/* BIG TCP (IPv6, 6.3+): a GSO packet longer than 64 KiB carries payload_len 0 (its jumbo
	 * option is gone by the time tc sees it); its length is the skb's. */
	if (total == sizeof(*ip6) && !xdp && ((struct __sk_buff *)ctx)->gso_size)
		total = kbp_frame_len(ctx, xdp) - KBP_L2_LEN(l3);
	if (KBP_L2_LEN(l3) + total > kbp_frame_len(ctx, xdp))
		return -1;
	nexthdr = ip6->nexthdr;
#pragma unroll
	for (int i = 0; i < KBP_IPV6_EXT_MAX; i++) {
		struct ipv6_opt_hdr *opt;

		if (nexthdr == IPPROTO_FRAGMENT) {
			struct kbp_frag6_hdr *fh = (void *)ip6 + off;
			__u16 fo;

			/* XDP leaves fragments to tc (see kbp_parse4); a second Fragment header is
			 * not a datagram's. */
			if (xdp || (void *)(fh + 1) > end || frag != KBP_PKT_WHOLE)
				return -1;
			fo = bpf_ntohs(fh->frag_off);
			nexthdr = fh->nexthdr;
			off += sizeof(*fh);
			/* Offset 0 without M is an atomic fragment (RFC 6946): a whole datagram. */
			if (fo & KBP_IP6_OFFSET) {
				frag = KBP_PKT_FRAG_LATER;
				frag_id = fh->id;
				/* What follows is the datagram's data, not headers. */
				break;
			}
			if (fo & KBP_IP6_MF) {
				frag = KBP_PKT_FRAG_FIRST;
				frag_id = fh->id;
			}
			continue;
		}
		if (nexthdr != IPPROTO_HOPOPTS && nexthdr != IPPROTO_ROUTING &&
		    nexthdr != IPPROTO_DSTOPTS)
			break;
		opt = (void *)ip6 + off;
		if ((void *)(opt + 1) > end)
			return -1;
		nexthdr = opt->nexthdr;
		off += ((__u32)opt->hdrlen + 1) * 8;
	}
	if (off > total)
		return -1;
	if (frag == KBP_PKT_FRAG_LATER) {
		if (kbp_frag_ports_v6(ip6, frag_id, &nexthdr, &p->sport, &p->dport) < 0)
			return -1;
		p->tcp_flags = 0;
	} else if (kbp_parse_ports((void *)ip6 + off, end, total - off, nexthdr,
				   frag == KBP_PKT_WHOLE, &p->sport, &p->dport,
				   &p->tcp_flags) < 0) {
		return -1;
	}
	__builtin_memcpy(p->saddr, &ip6->saddr, sizeof(p->saddr));
	__builtin_memcpy(p->daddr, &ip6->daddr, sizeof(p->daddr));
	p->proto = nexthdr;
	p->ttl = ip6->hop_limit;
	p->df = 1;
	p->frag = frag;
	p->l4_off = off;
	p->len = kbp_frame_len(ctx, xdp);
	if (frag == KBP_PKT_FRAG_FIRST)
		kbp_frag_record_v6(ip6, frag_id, nexthdr, p->sport, p->dport);
	return 0;
}

/* Linear bytes the parsers want: Ethernet + the longest IPv4 header + a TCP header; for IPv6,
 * room for a few extension headers before it. */
#define KBP_PULL_LEN  (sizeof(struct ethhdr) + 60 + sizeof(struct tcphdr))
#define KBP_PULL_LEN6 (sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + 64 + sizeof(struct tcphdr))

/* Makes the first `len` bytes linear; small packets are linear as they are. */
static __always_inline void kbp_pull_headers(struct __sk_buff *skb, __u32 len) {
	__u32 want = skb->len < len ? skb->len : len;

	if (skb->data_end - skb->data < want)
		bpf_skb_pull_data(skb, want);
}

#endif /* KBP_PARSE_H */
