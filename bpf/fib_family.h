/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The family-generic part of fib.h, included by it once per family (family.h). */
#ifndef KBP_FAM
#include "fib.h"
#else

/*
 * The FIB's verdict for a KBP_CT_F_ROUTE packet once rewritten to t's tuple. KBP_PASS: leave it
 * to the stack untouched (its TTL or hop limit runs out here, and the stack sends the ICMP time
 * exceeded), or, from XDP, to tc. XDP only sends a packet back out of the interface it came in on
 * (XDP_TX, the one-NIC NodePort case); anything else, tc does.
 * tc asks without a length (tot_len 0): the kernel then checks the skb itself against the
 * route's MTU, and a GSO/GRO skb is judged by its segments, not by its total length.
 */
static __always_inline int KBP_F(kbp_route)(void *ctx, const bool xdp, const bool l3,
					    const KBP_PKT *p, const KBP_CT_VAL *t,
					    struct kbp_hop *hop, __u32 *reason) {
	struct bpf_fib_lookup fib = {};
	__u32 in_ifindex = kbp_ingress_ifindex(ctx, xdp);
	long rc;

	if (p->ttl <= 1)
		return KBP_PASS;
#if KBP_FAM == 4
	fib.family = KBP_AF_INET;
	fib.ipv4_src = t->xlate_saddr;
	fib.ipv4_dst = t->xlate_daddr;
#else
	fib.family = KBP_AF_INET6;
	__builtin_memcpy(fib.ipv6_src, t->xlate_saddr, sizeof(fib.ipv6_src));
	__builtin_memcpy(fib.ipv6_dst, t->xlate_daddr, sizeof(fib.ipv6_dst));
#endif
	fib.l4_protocol = p->proto;
	fib.sport = t->xlate_sport;
	fib.dport = t->xlate_dport;
	fib.tot_len = xdp ? p->len - KBP_L2_LEN(l3) : 0;
	fib.ifindex = in_ifindex;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	hop->ifindex = fib.ifindex;
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		__builtin_memcpy(hop->macs, fib.dmac, ETH_ALEN);
		__builtin_memcpy(hop->macs + ETH_ALEN, fib.smac, ETH_ALEN);
		if (xdp)
			return fib.ifindex == in_ifindex ? KBP_TX : KBP_PASS;
		return KBP_REDIRECT;
	}
	if (xdp)
		return KBP_PASS;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return KBP_REDIRECT_NEIGH;
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED && p->df) {
		/* mtu_result shares tot_len's place; kernels before 5.12 leave it 0. */
		hop->mtu = fib.mtu_result ? fib.mtu_result : 576;
		*reason = KBP_DROP_FRAG_NEEDED;
		return KBP_FRAG_NEEDED;
	}
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		/* Too big without DF (the fragments of a big datagram from a 1500-byte link into a
		 * 1450-byte overlay): no program can fragment, and the stack would drop the
		 * packet's node-address source as a martian, so it goes out as it is. An overlay
		 * carries it (vxlan's outer packet is fragmented by the underlay); a plain device
		 * drops it. Without tot_len the kernel found the route and the neighbour before it
		 * judged the skb's length, so the MACs are there. */
		__builtin_memcpy(hop->macs, fib.dmac, ETH_ALEN);
		__builtin_memcpy(hop->macs + ETH_ALEN, fib.smac, ETH_ALEN);
		return KBP_REDIRECT;
	}
	*reason = KBP_DROP_FIB;
	return KBP_DROP;
}

#endif /* KBP_FAM */
