/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The parsed packet (struct kbp_pkt4) and the parser: IPv4 TCP and UDP, whole or fragmented (the
 * tc programs only, see frag.h); everything else is left alone (docs/bpf-datapath.md, "Packet
 * walk", step 1).
 */
#ifndef KBP_PARSE_H
#define KBP_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
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
	} else if (iph->protocol == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > end || l4_len < sizeof(*th))
			return -1;
		if (th->doff < 5 || (__u32)th->doff * 4 > l4_len)
			return -1;
		p->sport = th->source;
		p->dport = th->dest;
		p->tcp_flags = ((__u8 *)th)[13] & KBP_TCP_FLAGS_TRACKED;
	} else if (iph->protocol == IPPROTO_UDP) {
		struct udphdr *uh = l4;
		__u32 ulen;

		if ((void *)(uh + 1) > end)
			return -1;
		ulen = bpf_ntohs(uh->len);
		/* A first fragment's UDP length is the whole datagram's. */
		if (ulen < sizeof(*uh) || (ulen > l4_len && frag == KBP_PKT_WHOLE))
			return -1;
		p->sport = uh->source;
		p->dport = uh->dest;
		p->tcp_flags = 0;
	} else {
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

/* Linear bytes the parser wants: Ethernet + the longest IPv4 header + a TCP header. */
#define KBP_PULL_LEN (sizeof(struct ethhdr) + 60 + sizeof(struct tcphdr))

/* Makes the headers the parser reads linear; small packets are linear as they are. */
static __always_inline void kbp_pull_headers(struct __sk_buff *skb) {
	__u32 want = skb->len < KBP_PULL_LEN ? skb->len : KBP_PULL_LEN;

	if (skb->data_end - skb->data < want)
		bpf_skb_pull_data(skb, want);
}

#endif /* KBP_PARSE_H */
