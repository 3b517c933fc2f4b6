/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ICMP errors about tracked flows (RELATED): a destination unreachable (port or host unreachable,
 * fragmentation needed) or time exceeded quoting a packet of a tracked flow, addressed to the
 * quoted packet's sender, is matched by its quote (the quote's tuple reversed is the conntrack
 * entry of the other direction) and rewritten into the terms the error's receiver knows the
 * flow by, so that a UDP client sees ECONNREFUSED and PMTU discovery sees the MTU:
 *   - at egress, an error about a forward packet of an unrouted flow, on its way to the client;
 *   - at ingress, an error about a forward packet of a routed (SNATed) flow, sent to the node's
 *     SNAT address, translated for the client and forwarded to it as that flow's replies are;
 *   - at ingress, an error from the client's side about a reply (as the client saw it, from the
 *     service address), translated for the backend: handed to the stack for an unrouted flow,
 *     forwarded by tc for a routed one.
 * docs/bpf-datapath.md, "ICMP errors about tracked flows".
 */
#ifndef KBP_RELATED_H
#define KBP_RELATED_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "conntrack.h"
#include "csum.h"
#include "ctx.h"
#include "fib.h"
#include "icmp.h"
#include "parse.h"
#include "verdict.h"

#define KBP_ICMP_TIME_EXCEEDED 11

/* The RFC 1624 difference of replacing the 16-bit word `from` by `to`. */
static __always_inline __u32 kbp_csum_diff16(__u32 diff, __u16 from, __u16 to) {
	return kbp_csum_add(kbp_csum_add(diff, (__u16)~from), to);
}

/* Linear bytes an ICMP error needs here: Ethernet, the outer IPv4 header, ICMP, the quoted IPv4
 * header and its TCP header as far as the checksum. */
#define KBP_RELATED_PULL (sizeof(struct ethhdr) + 60 + 8 + 60 + 18)

/*
 * Finds the flow an ICMP error is about and rewrites it, in place with direct writes: every
 * change inside the ICMP message is compensated by the ICMP checksum, and the outer addresses
 * and TTL by the outer IP checksum, so the sum of the whole packet, which a CHECKSUM_COMPLETE
 * skb carries, does not change. `ingress` selects which entries are ours (top of the file).
 * Returns KBP_PASS (rewritten for the stack, or untouched), or, for a routed flow, kbp_route4's
 * KBP_REDIRECT / KBP_REDIRECT_NEIGH (tc) or KBP_TX (XDP) with hop filled; an error whose routed
 * flow cannot be forwarded from here (no route, TTL, XDP on another interface) is untouched.
 */
static __always_inline int kbp_related4(void *ctx, const bool xdp, const bool l3,
					const bool ingress, struct kbp_hop *hop) {
	void *data = kbp_data(ctx, xdp);
	void *end = kbp_data_end(ctx, xdp);
	struct iphdr *iph = data + KBP_L2_LEN(l3);
	struct kbp_icmphdr *ih;
	struct iphdr *in;
	struct kbp_ct4_key key = {};
	struct kbp_ct4_val *ct, cv;
	__u32 ihl_len, in_len, addr_diff = 0, port_diff = 0, icmp_diff, outer_diff = 0;
	__u32 old_ports, new_ports, reason = 0;
	__u16 old_check, *l4_check = NULL;
	__be32 saddr, daddr;
	__be16 *ports;
	int verdict = KBP_PASS;
	bool route;

	if ((void *)(iph + 1) > end)
		return KBP_PASS;
	if (l3) {
		if (((struct __sk_buff *)ctx)->protocol != bpf_htons(ETH_P_IP))
			return KBP_PASS;
	} else if (((struct ethhdr *)data)->h_proto != bpf_htons(ETH_P_IP)) {
		return KBP_PASS;
	}
	if (iph->version != 4 || iph->protocol != IPPROTO_ICMP ||
	    (iph->frag_off & bpf_htons(KBP_IP_MF | KBP_IP_OFFSET)))
		return KBP_PASS;
	ihl_len = (__u32)iph->ihl * 4;
	if (ihl_len < sizeof(*iph) || ihl_len > 60)
		return KBP_PASS;
	ih = (void *)iph + ihl_len;
	if ((void *)(ih + 1) > end)
		return KBP_PASS;
	if (ih->type != KBP_ICMP_DEST_UNREACH && ih->type != KBP_ICMP_TIME_EXCEEDED)
		return KBP_PASS;
	in = (void *)(ih + 1);
	/* A quoted later fragment holds no ports. */
	if ((void *)(in + 1) > end || in->version != 4 || (in->frag_off & bpf_htons(KBP_IP_OFFSET)))
		return KBP_PASS;
	in_len = (__u32)in->ihl * 4;
	if (in_len < sizeof(*in) || in_len > 60)
		return KBP_PASS;
	if (in->protocol != IPPROTO_TCP && in->protocol != IPPROTO_UDP)
		return KBP_PASS;
	ports = (void *)in + in_len;
	if ((void *)(ports + 2) > end)
		return KBP_PASS;
	/* An error goes back to the quoted packet's sender; one addressed elsewhere is not ours. */
	if (iph->daddr != in->saddr)
		return KBP_PASS;

	/* The entry of the direction opposite to the quoted packet: its reversed tuple. */
	key.saddr = in->daddr;
	key.daddr = in->saddr;
	key.sport = ports[1];
	key.dport = ports[0];
	key.proto = in->protocol;
	ct = kbp_ct_lookup4(&key);
	if (!ct)
		return KBP_PASS;
	cv = *ct;
	/* The egress program owns the errors about unrouted forward packets; ingress the rest. */
	if (kbp_ct_egress_reply(cv.flags) != !ingress)
		return KBP_PASS;
	route = ingress && (cv.flags & KBP_CT_F_ROUTE);

	/* The outer header, addressed as the entry's direction: to the sender of the quoted packet
	 * in the entry's terms; from the entry's source when the other end of the flow sent the
	 * error, and, towards the backend of a SNATed flow, always (as MASQUERADE translates such
	 * errors), so the backend's node sees it come from where the flow comes from. */
	daddr = cv.xlate_daddr;
	saddr = iph->saddr;
	if (iph->saddr == in->daddr ||
	    (cv.flags & (KBP_CT_F_REPLY | KBP_CT_F_SNAT)) == KBP_CT_F_SNAT)
		saddr = cv.xlate_saddr;

	if (route) {
		/* DF clear: an ICMP error is never answered with another (RFC 1122). */
		struct kbp_pkt4 p = {.proto = IPPROTO_ICMP, .ttl = iph->ttl};
		struct kbp_ct4_val t = {.xlate_saddr = saddr, .xlate_daddr = daddr};

		p.len = kbp_frame_len(ctx, xdp);
		verdict = kbp_route4(ctx, xdp, l3, &p, &t, hop, &reason);
		if (verdict != KBP_REDIRECT && verdict != KBP_REDIRECT_NEIGH && verdict != KBP_TX)
			return KBP_PASS;
	}

	/* The quote's L4 checksum, when the quote holds it: UDP (unless 0, "none") or TCP. */
	if (in->protocol == IPPROTO_UDP) {
		__u16 *c = (void *)ports + 6;

		if ((void *)(c + 1) <= end && *c != 0)
			l4_check = c;
	} else {
		__u16 *c = (void *)ports + 16;

		if ((void *)(c + 1) <= end)
			l4_check = c;
	}

	outer_diff = kbp_csum_diff32(outer_diff, iph->saddr, saddr);
	outer_diff = kbp_csum_diff32(outer_diff, iph->daddr, daddr);
	iph->saddr = saddr;
	iph->daddr = daddr;
	if (route) {
		/* Forwarded by us: this hop's TTL decrement too (it shares a word with the
		 * protocol). */
		__u16 *ttl_word = (__u16 *)&iph->ttl;
		__u16 old_word = *ttl_word;

		iph->ttl--;
		outer_diff = kbp_csum_diff16(outer_diff, old_word, *ttl_word);
	}
	iph->check = kbp_csum_apply(iph->check, outer_diff);

	/* The quote: the packet as its sender sent it, in the entry's terms reversed. */
	addr_diff = kbp_csum_diff32(addr_diff, in->saddr, cv.xlate_daddr);
	addr_diff = kbp_csum_diff32(addr_diff, in->daddr, cv.xlate_saddr);
	old_ports = *(__u32 *)ports;
	in->saddr = cv.xlate_daddr;
	in->daddr = cv.xlate_saddr;
	ports[0] = cv.xlate_dport;
	ports[1] = cv.xlate_sport;
	new_ports = *(__u32 *)ports;
	port_diff = kbp_csum_diff32(port_diff, old_ports, new_ports);

	old_check = in->check;
	in->check = kbp_csum_apply(in->check, addr_diff);
	icmp_diff = kbp_csum_add(addr_diff, port_diff);
	icmp_diff = kbp_csum_diff16(icmp_diff, old_check, in->check);
	if (l4_check) {
		__u16 old_l4 = *l4_check, new_l4;

		new_l4 = kbp_csum_apply(old_l4, kbp_csum_add(addr_diff, port_diff));
		if (in->protocol == IPPROTO_UDP && new_l4 == 0)
			new_l4 = 0xffff;
		*l4_check = new_l4;
		icmp_diff = kbp_csum_diff16(icmp_diff, old_l4, new_l4);
	}
	ih->checksum = kbp_csum_apply(ih->checksum, icmp_diff);
	if (verdict == KBP_TX && kbp_tx_macs(ctx, xdp, hop) < 0)
		return KBP_PASS;
	return verdict;
}

/* tc: an IPv4 ICMP packet gets its quote pulled into the linear area first. */
static __always_inline void kbp_related4_pull(struct __sk_buff *skb, const bool l3) {
	struct iphdr *iph = (void *)(long)skb->data + KBP_L2_LEN(l3);
	__u32 want;

	if ((void *)(iph + 1) > (void *)(long)skb->data_end || iph->protocol != IPPROTO_ICMP)
		return;
	want = skb->len < KBP_RELATED_PULL ? skb->len : KBP_RELATED_PULL;
	if (skb->data_end - skb->data < want)
		bpf_skb_pull_data(skb, want);
}

/* At ingress, for a packet the TCP/UDP parser left: a kbp_verdict, as kbp_related4. */
static __always_inline int kbp_related4_ingress(void *ctx, const bool xdp, const bool l3,
						struct kbp_hop *hop) {
	if (!xdp)
		kbp_related4_pull(ctx, l3);
	return kbp_related4(ctx, xdp, l3, true, hop);
}

static __always_inline void kbp_related4_egress(struct __sk_buff *skb, const bool l3) {
	struct kbp_hop hop;

	kbp_related4_pull(skb, l3);
	kbp_related4(skb, false, l3, false, &hop);
}

#endif /* KBP_RELATED_H */
