/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The family-generic part of related.h, included by it once per family (family.h). */
#ifndef KBP_FAM
#include "related.h"
#else

#if KBP_FAM == 4
#define KBP_REL_IPH	 struct iphdr
#define KBP_REL_WORDS	 1
#define KBP_REL_ETH_P	 ETH_P_IP
#define KBP_REL_ICMP	 IPPROTO_ICMP
#define KBP_REL_PULL	 KBP_RELATED_PULL
#define KBP_REL_SADDR(h) (&(h)->saddr)
#define KBP_REL_DADDR(h) (&(h)->daddr)
#else
#define KBP_REL_IPH	 struct ipv6hdr
#define KBP_REL_WORDS	 4
#define KBP_REL_ETH_P	 ETH_P_IPV6
#define KBP_REL_ICMP	 IPPROTO_ICMPV6
#define KBP_REL_PULL	 KBP_RELATED6_PULL
#define KBP_REL_SADDR(h) ((h)->saddr.in6_u.u6_addr32)
#define KBP_REL_DADDR(h) ((h)->daddr.in6_u.u6_addr32)
#endif

/* An address as words, the family's length. */
static __always_inline bool KBP_F(kbp_related_eq)(const __be32 *a, const __be32 *b) {
	__be32 x = 0;

#pragma unroll
	for (int i = 0; i < KBP_REL_WORDS; i++)
		x |= a[i] ^ b[i];
	return x == 0;
}

/* Writes address `to` over the one at `at`: the checksum difference `diff` plus the change. */
static __always_inline __u32 KBP_F(kbp_related_set)(__u32 diff, __be32 *at, const __be32 *to) {
#pragma unroll
	for (int i = 0; i < KBP_REL_WORDS; i++) {
		diff = kbp_csum_diff32(diff, at[i], to[i]);
		at[i] = to[i];
	}
	return diff;
}

/*
 * Finds the flow an ICMP error is about and rewrites it, in place with direct writes: every
 * change inside the ICMP message is compensated by the ICMP checksum, and the outer addresses
 * and TTL by the outer IP checksum (IPv6 has none: its addresses are in the ICMPv6 checksum's
 * pseudo header, which compensates them too), so the sum of the whole packet, which a
 * CHECKSUM_COMPLETE skb carries, does not change (but for a forwarded IPv6 error's hop limit, as
 * kbp_rewrite6's). `ingress` selects which entries are ours (top of related.h).
 * Returns KBP_PASS (rewritten for the stack, or untouched), or, for a routed flow, kbp_route's
 * KBP_REDIRECT / KBP_REDIRECT_NEIGH (tc) or KBP_TX (XDP) with hop filled; an error whose routed
 * flow cannot be forwarded from here (no route, TTL, XDP on another interface) is untouched.
 * rp and rt are room for the conntrack key and the route's query (kbp_route's packet and tuple):
 * at ingress the load balancer's own packet and entry, unused once its parser has refused the
 * packet, so that this code adds little to the program's stack (kbp_tc_pod's, with the bpf_loop
 * callback's, must stay within 512 bytes on 6.1's verifier).
 */
static __always_inline int KBP_F(kbp_related)(void *ctx, const bool xdp, const bool l3,
					      const bool ingress, struct kbp_hop *hop, KBP_PKT *rp,
					      KBP_CT_VAL *rt) {
	void *data = kbp_data(ctx, xdp);
	void *end = kbp_data_end(ctx, xdp);
	KBP_REL_IPH *iph = data + KBP_L2_LEN(l3);
	struct kbp_icmphdr *ih;
	KBP_REL_IPH *in;
	KBP_CT_VAL *ct;
	__u32 addr_diff = 0, port_diff = 0, icmp_diff, outer_diff = 0;
	__u32 old_ports, new_ports, reason = 0;
	__u16 *l4_check = NULL;
	__be16 *ports;
	__u8 proto, ttl;
	int verdict = KBP_PASS;
	bool route, from_entry;

	if ((void *)(iph + 1) > end)
		return KBP_PASS;
	if (l3) {
		if (((struct __sk_buff *)ctx)->protocol != bpf_htons(KBP_REL_ETH_P))
			return KBP_PASS;
	} else if (((struct ethhdr *)data)->h_proto != bpf_htons(KBP_REL_ETH_P)) {
		return KBP_PASS;
	}
#if KBP_FAM == 4
	__u32 ihl_len, in_len;

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
	proto = in->protocol;
	ports = (void *)in + in_len;
	ttl = iph->ttl;
#else
	int off, in_off;
	__u8 next;

	if (iph->version != 6)
		return KBP_PASS;
	/* The error right behind the IPv6 header: one behind extension headers is left alone (the
	 * walk would cost the stack kbp_tc_pod does not have on 6.1's verifier). */
	if (iph->nexthdr != IPPROTO_ICMPV6)
		return KBP_PASS;
	off = sizeof(*iph);
	ih = (void *)iph + off;
	if ((void *)(ih + 1) > end)
		return KBP_PASS;
	/* Not neighbour discovery, nor any other informational message. */
	if (ih->type != KBP_ICMPV6_DEST_UNREACH && ih->type != KBP_ICMPV6_PKT_TOOBIG &&
	    ih->type != KBP_ICMPV6_TIME_EXCEEDED)
		return KBP_PASS;
	in = (void *)(ih + 1);
	if ((void *)(in + 1) > end || in->version != 6)
		return KBP_PASS;
	next = in->nexthdr;
	/* A quoted later fragment holds no ports. */
	in_off = kbp_related_ext6(in, end, sizeof(*in), &next, true);
	if (in_off < 0)
		return KBP_PASS;
	proto = next;
	ports = (void *)in + in_off;
	ttl = iph->hop_limit;
#endif
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return KBP_PASS;
	if ((void *)(ports + 2) > end)
		return KBP_PASS;
	/* An error goes back to the quoted packet's sender; one addressed elsewhere is not ours. */
	if (!KBP_F(kbp_related_eq)(KBP_REL_DADDR(iph), KBP_REL_SADDR(in)))
		return KBP_PASS;

	/* The entry of the direction opposite to the quoted packet: its reversed tuple. The key is
	 * built in rt's room too (the route query, later, overwrites it). */
	{
		KBP_CT_KEY *key = (KBP_CT_KEY *)rt;

		_Static_assert(sizeof(KBP_CT_KEY) <= sizeof(KBP_CT_VAL), "a key fits in rt");
		__builtin_memset(key, 0, sizeof(*key));
		__builtin_memcpy(&key->saddr, KBP_REL_DADDR(in), sizeof(key->saddr));
		__builtin_memcpy(&key->daddr, KBP_REL_SADDR(in), sizeof(key->daddr));
		key->sport = ports[1];
		key->dport = ports[0];
		key->proto = proto;
		ct = KBP_F(kbp_ct_lookup)(key);
		if (!ct)
			return KBP_PASS;
	}
	/* The entry is read in place (its translation fields change only when its flow is made
	 * anew): a copy would cost the stack the load balancer needs. */
	/* The egress program owns the errors about unrouted forward packets; ingress the rest; the
	 * kernel's conntrack those of the flows it translates. */
	if (ct->flags & KBP_CT_F_STACK || kbp_ct_egress_reply(ct->flags) != !ingress)
		return KBP_PASS;
	route = ingress && (ct->flags & KBP_CT_F_ROUTE);

	/* The outer header, addressed as the entry's direction: to the sender of the quoted packet
	 * in the entry's terms; from the entry's source when the other end of the flow sent the
	 * error, and, towards the backend of a SNATed flow, always (as MASQUERADE translates such
	 * errors), so the backend's node sees it come from where the flow comes from. Otherwise the
	 * source is kept. */
	from_entry = KBP_F(kbp_related_eq)(KBP_REL_SADDR(iph), KBP_REL_DADDR(in)) ||
		     (ct->flags & (KBP_CT_F_REPLY | KBP_CT_F_SNAT)) == KBP_CT_F_SNAT;

	if (route) {
		/* DF clear: an ICMP error is never answered with another (RFC 1122, RFC 4443). */
		rp->proto = KBP_REL_ICMP;
		rp->ttl = ttl;
		rp->df = 0;
		rp->len = kbp_frame_len(ctx, xdp);
		rt->xlate_sport = 0;
		rt->xlate_dport = 0;
		if (from_entry)
			__builtin_memcpy(&rt->xlate_saddr, &ct->xlate_saddr,
					 sizeof(rt->xlate_saddr));
		else
			__builtin_memcpy(&rt->xlate_saddr, KBP_REL_SADDR(iph),
					 sizeof(rt->xlate_saddr));
		__builtin_memcpy(&rt->xlate_daddr, &ct->xlate_daddr, sizeof(rt->xlate_daddr));
		verdict = KBP_F(kbp_route)(ctx, xdp, l3, rp, rt, hop, &reason);
		if (verdict != KBP_REDIRECT && verdict != KBP_REDIRECT_NEIGH && verdict != KBP_TX)
			return KBP_PASS;
	}

	/* The quote's L4 checksum, when the quote holds it: UDP (unless 0, "none") or TCP. */
	if (proto == IPPROTO_UDP) {
		__u16 *c = (void *)ports + 6;

		if ((void *)(c + 1) <= end && *c != 0)
			l4_check = c;
	} else {
		__u16 *c = (void *)ports + 16;

		if ((void *)(c + 1) <= end)
			l4_check = c;
	}

	if (from_entry)
		outer_diff = KBP_F(kbp_related_set)(outer_diff, KBP_REL_SADDR(iph),
						    (__be32 *)&ct->xlate_saddr);
	outer_diff =
	    KBP_F(kbp_related_set)(outer_diff, KBP_REL_DADDR(iph), (__be32 *)&ct->xlate_daddr);
#if KBP_FAM == 4
	if (route) {
		/* Forwarded by us: this hop's TTL decrement too (it shares a word with the
		 * protocol). */
		__u16 *ttl_word = (__u16 *)&iph->ttl;
		__u16 old_word = *ttl_word;

		iph->ttl--;
		outer_diff = kbp_csum_diff16(outer_diff, old_word, *ttl_word);
	}
	iph->check = kbp_csum_apply(iph->check, outer_diff);
#else
	/* The hop limit is in no checksum. */
	if (route)
		iph->hop_limit--;
#endif

	/* The quote: the packet as its sender sent it, in the entry's terms reversed. */
	addr_diff =
	    KBP_F(kbp_related_set)(addr_diff, KBP_REL_SADDR(in), (__be32 *)&ct->xlate_daddr);
	addr_diff =
	    KBP_F(kbp_related_set)(addr_diff, KBP_REL_DADDR(in), (__be32 *)&ct->xlate_saddr);
	old_ports = *(__u32 *)ports;
	ports[0] = ct->xlate_dport;
	ports[1] = ct->xlate_sport;
	new_ports = *(__u32 *)ports;
	port_diff = kbp_csum_diff32(port_diff, old_ports, new_ports);
	icmp_diff = kbp_csum_add(addr_diff, port_diff);
#if KBP_FAM == 4
	__u16 old_check = in->check;

	in->check = kbp_csum_apply(in->check, addr_diff);
	icmp_diff = kbp_csum_diff16(icmp_diff, old_check, in->check);
#else
	/* The pseudo header: the outer addresses. */
	icmp_diff = kbp_csum_add(icmp_diff, outer_diff);
#endif
	if (l4_check) {
		__u16 old_l4 = *l4_check, new_l4;

		new_l4 = kbp_csum_apply(old_l4, kbp_csum_add(addr_diff, port_diff));
		if (proto == IPPROTO_UDP && new_l4 == 0)
			new_l4 = 0xffff;
		*l4_check = new_l4;
		icmp_diff = kbp_csum_diff16(icmp_diff, old_l4, new_l4);
	}
	ih->checksum = kbp_csum_apply(ih->checksum, icmp_diff);
	if (verdict == KBP_TX && kbp_tx_macs(ctx, xdp, hop) < 0)
		return KBP_PASS;
	return verdict;
}

/* tc: an ICMP packet gets its quote pulled into the linear area first. */
static __always_inline void KBP_FAM_NAME(kbp_related, _pull)(struct __sk_buff *skb, const bool l3) {
	KBP_REL_IPH *iph = (void *)(long)skb->data + KBP_L2_LEN(l3);
	__u32 want;

	if ((void *)(iph + 1) > (void *)(long)skb->data_end)
		return;
#if KBP_FAM == 4
	if (iph->protocol != IPPROTO_ICMP)
		return;
#else
	if (iph->nexthdr != IPPROTO_ICMPV6)
		return;
#endif
	want = skb->len < KBP_REL_PULL ? skb->len : KBP_REL_PULL;
	if (skb->data_end - skb->data < want)
		bpf_skb_pull_data(skb, want);
}

/* At ingress, for a packet the TCP/UDP parser left: a kbp_verdict, as kbp_related4/6 (rp, rt:
 * the load balancer's packet and entry structs, as room). */
static __always_inline int KBP_FAM_NAME(kbp_related, _ingress)(void *ctx, const bool xdp,
							       const bool l3, struct kbp_hop *hop,
							       KBP_PKT *rp, KBP_CT_VAL *rt) {
	if (!xdp)
		KBP_FAM_NAME(kbp_related, _pull)(ctx, l3);
	return KBP_F(kbp_related)(ctx, xdp, l3, true, hop, rp, rt);
}

static __always_inline void KBP_FAM_NAME(kbp_related, _egress)(struct __sk_buff *skb,
							       const bool l3) {
	/* Egress forwards nothing (no route), and its program's stack is small: room of its own. */
	KBP_PKT rp;
	KBP_CT_VAL rt;

	KBP_FAM_NAME(kbp_related, _pull)(skb, l3);
	KBP_F(kbp_related)(skb, false, l3, false, NULL, &rp, &rt);
}

#undef KBP_REL_IPH
#undef KBP_REL_WORDS
#undef KBP_REL_ETH_P
#undef KBP_REL_ICMP
#undef KBP_REL_PULL
#undef KBP_REL_SADDR
#undef KBP_REL_DADDR

#endif /* KBP_FAM */
