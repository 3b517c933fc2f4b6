/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Forwarding of routed (KBP_CT_F_ROUTE) flows: the FIB lookup and where the packet goes, and the
 * Ethernet header an L3 device's packet needs before a redirect.
 */
#ifndef KBP_FIB_H
#define KBP_FIB_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "ctx.h"
#include "parse.h"
#include "types.h"
#include "verdict.h"

#define KBP_AF_INET 2 /* bpf_fib_lookup.family */

/* Where a routed (KBP_CT_F_ROUTE) packet goes once rewritten: filled by kbp_route4. */
struct kbp_hop {
	__u8 macs[12]; /* destination, then source MAC */
	__u32 ifindex;
	__u32 mtu; /* the route's MTU, for KBP_FRAG_NEEDED */
};

/*
 * The FIB's verdict for a KBP_CT_F_ROUTE packet once rewritten to t's tuple. KBP_PASS: leave it
 * to the stack untouched (its TTL runs out here, and the stack sends the ICMP time exceeded),
 * or, from XDP, to tc. XDP only sends a packet back out of the interface it came in on
 * (XDP_TX, the one-NIC NodePort case); anything else, tc does.
 * tc asks without a length (tot_len 0): the kernel then checks the skb itself against the
 * route's MTU, and a GSO/GRO skb is judged by its segments, not by its total length.
 */
static __always_inline int kbp_route4(void *ctx, const bool xdp, const bool l3,
				      const struct kbp_pkt4 *p, const struct kbp_ct4_val *t,
				      struct kbp_hop *hop, __u32 *reason) {
	struct bpf_fib_lookup fib = {};
	__u32 in_ifindex = kbp_ingress_ifindex(ctx, xdp);
	long rc;

	if (p->ttl <= 1)
		return KBP_PASS;
	fib.family = KBP_AF_INET;
	fib.l4_protocol = p->proto;
	fib.sport = t->xlate_sport;
	fib.dport = t->xlate_dport;
	fib.tot_len = xdp ? p->len - KBP_L2_LEN(l3) : 0;
	fib.ifindex = in_ifindex;
	fib.ipv4_src = t->xlate_saddr;
	fib.ipv4_dst = t->xlate_daddr;
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

/* KBP_TX (XDP only): the FIB's next hop MACs into the frame. */
static __always_inline int kbp_tx_macs(void *ctx, const bool xdp, const struct kbp_hop *hop) {
	void *data = kbp_data(ctx, xdp);

	if (data + sizeof(hop->macs) > kbp_data_end(ctx, xdp))
		return -1;
	__builtin_memcpy(data, hop->macs, sizeof(hop->macs));
	return 0;
}

/*
 * A packet from an L3 device has no Ethernet header, but redirecting to an Ethernet device
 * needs one (the kernel strips it again for an L3 target): room for it, with the FIB's MACs.
 */
static __always_inline int kbp_push_l2(struct __sk_buff *skb, const struct kbp_hop *hop) {
	struct ethhdr eth;

	/* Field by field: an initialiser would be a .rodata template, which holds only the
	 * load-time constants layout.ts describes. */
	eth.h_proto = bpf_htons(ETH_P_IP);
	__builtin_memcpy(eth.h_dest, hop->macs, ETH_ALEN);
	__builtin_memcpy(eth.h_source, hop->macs + ETH_ALEN, ETH_ALEN);
	if (bpf_skb_change_head(skb, sizeof(eth), 0) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) < 0 ? -1 : 0;
}

#endif /* KBP_FIB_H */
