/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Forwarding of routed (KBP_CT_F_ROUTE) flows: the FIB lookup and where the packet goes
 * (fib_family.h, once per family), and the Ethernet header an L3 device's packet needs before a
 * redirect.
 */
#ifndef KBP_FIB_H
#define KBP_FIB_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "ctx.h"
#include "family.h"
#include "parse.h"
#include "types.h"
#include "verdict.h"

/* bpf_fib_lookup.family */
#define KBP_AF_INET  2
#define KBP_AF_INET6 10

/* Where a routed (KBP_CT_F_ROUTE) packet goes once rewritten: filled by kbp_route4/6. */
struct kbp_hop {
	__u8 macs[12]; /* destination, then source MAC */
	__u32 ifindex;
	__u32 mtu;    /* the route's MTU, for KBP_FRAG_NEEDED */
	__u32 l4_off; /* IPv6: the TCP/UDP header's offset, where an ICMPv6 error's quote ends */
};

#define KBP_FAM 4
#include "fib_family.h"
#undef KBP_FAM
#define KBP_FAM 6
#include "fib_family.h"
#undef KBP_FAM

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
static __always_inline int kbp_push_l2(struct __sk_buff *skb, const struct kbp_hop *hop,
				       __be16 proto) {
	struct ethhdr eth;

	/* Field by field: an initialiser would be a .rodata template, which holds only the
	 * load-time constants layout.ts describes. */
	eth.h_proto = proto;
	__builtin_memcpy(eth.h_dest, hop->macs, ETH_ALEN);
	__builtin_memcpy(eth.h_source, hop->macs + ETH_ALEN, ETH_ALEN);
	if (bpf_skb_change_head(skb, sizeof(eth), 0) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) < 0 ? -1 : 0;
}

#endif /* KBP_FIB_H */
