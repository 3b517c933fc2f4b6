/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ICMP errors about tracked flows (RELATED): an ICMP destination unreachable (port or host
 * unreachable, fragmentation needed) or time exceeded, or an ICMPv6 destination unreachable,
 * packet too big or time exceeded, quoting a TCP or UDP packet of a tracked flow, addressed to the
 * quoted packet's sender, is matched by its quote (the quote's tuple reversed is the conntrack
 * entry of the other direction) and rewritten into the terms the error's receiver knows the
 * flow by, so that a UDP client sees ECONNREFUSED and PMTU discovery sees the MTU:
 *   - at egress, an error about a forward packet of an unrouted flow, on its way to the client;
 *   - at ingress, an error about a forward packet of a routed (SNATed) flow, sent to the node's
 *     SNAT address, translated for the client and forwarded to it as that flow's replies are;
 *   - at ingress, an error from the client's side about a reply (as the client saw it, from the
 *     service address), translated for the backend: handed to the stack for an unrouted flow,
 *     forwarded by tc for a routed one.
 * One body for both families (related_family.h: kbp_related4, kbp_related6; family.h says how).
 * docs/bpf-datapath.md, "ICMP errors about tracked flows".
 */
#ifndef KBP_RELATED_H
#define KBP_RELATED_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "conntrack.h"
#include "csum.h"
#include "ctx.h"
#include "family.h"
#include "fib.h"
#include "frag.h"
#include "icmp.h"
#include "parse.h"
#include "verdict.h"

#define KBP_ICMP_TIME_EXCEEDED	 11
#define KBP_ICMPV6_TIME_EXCEEDED 3

/* The RFC 1624 difference of replacing the 16-bit word `from` by `to`. */
static __always_inline __u32 kbp_csum_diff16(__u32 diff, __u16 from, __u16 to) {
	return kbp_csum_add(kbp_csum_add(diff, (__u16)~from), to);
}

/* Linear bytes an ICMP error needs here: Ethernet, the outer IPv4 header, ICMP, the quoted IPv4
 * header and its TCP header as far as the checksum; for IPv6, room for 64 bytes of extension
 * headers in the quote (and as many in the outer packet, which are not walked yet). */
#define KBP_RELATED_PULL  (sizeof(struct ethhdr) + 60 + 8 + 60 + 18)
#define KBP_RELATED6_PULL (sizeof(struct ethhdr) + 40 + 64 + 8 + 40 + 64 + 18)

/*
 * The IPv6 extension headers from `off` bytes into the IPv6 header at ip6 (at most
 * KBP_IPV6_EXT_MAX of them): the offset of the header after them, its type in *nexthdr; -1 when
 * one is truncated. A Fragment header is walked in a quote when it says offset 0 (the quoted
 * packet is a first fragment, which holds the ports); otherwise it ends the walk with -1.
 */
static __always_inline int kbp_related_ext6(void *ip6, void *end, __u32 off, __u8 *nexthdr,
					    const bool quote) {
	__u8 next = *nexthdr;

#pragma unroll
	for (int i = 0; i < KBP_IPV6_EXT_MAX; i++) {
		struct ipv6_opt_hdr *opt = ip6 + off;

		if ((void *)(opt + 1) > end)
			break;
		if (next == IPPROTO_FRAGMENT) {
			struct kbp_frag6_hdr *fh = ip6 + off;

			if (!quote || (void *)(fh + 1) > end ||
			    (bpf_ntohs(fh->frag_off) & KBP_IP6_OFFSET))
				return -1;
			next = fh->nexthdr;
			off += sizeof(*fh);
			continue;
		}
		if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING && next != IPPROTO_DSTOPTS)
			break;
		next = opt->nexthdr;
		off += ((__u32)opt->hdrlen + 1) * 8;
	}
	*nexthdr = next;
	return (int)(off & KBP_IPV6_L4_OFF_MASK);
}

#define KBP_FAM 4
#include "related_family.h"
#undef KBP_FAM
#define KBP_FAM 6
#include "related_family.h"
#undef KBP_FAM

#endif /* KBP_RELATED_H */
