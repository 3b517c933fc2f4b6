/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ICMP errors about tracked flows (RELATED), on their way to the client at egress: a destination
 * unreachable (port or host unreachable, fragmentation needed) or time exceeded that quotes a
 * forward packet of an unrouted flow as it was translated ({client -> backend}) gets the service
 * tuple back in its quote, and the service address as its source when the backend sent it, so
 * the client's socket (connected to the service address) learns of it: a UDP client sees
 * ECONNREFUSED, PMTU discovery sees the MTU. Routed (SNATed) flows are not handled yet
 * (docs/bpf-datapath.md, "ICMP errors about tracked flows").
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
#include "icmp.h"
#include "parse.h"

#define KBP_ICMP_TIME_EXCEEDED 11

/* The RFC 1624 difference of replacing the 16-bit word `from` by `to`. */
static __always_inline __u32 kbp_csum_diff16(__u32 diff, __u16 from, __u16 to) {
	return kbp_csum_add(kbp_csum_add(diff, (__u16)~from), to);
}

/* Linear bytes an ICMP error needs here: Ethernet, the outer IPv4 header, ICMP, the quoted IPv4
 * header and its TCP header as far as the checksum. */
#define KBP_RELATED_PULL (sizeof(struct ethhdr) + 60 + 8 + 60 + 18)

/*
 * The quote is rewritten in place with direct writes: every change inside the ICMP message is
 * compensated by the ICMP checksum, and the outer source by the outer IP checksum, so the sum
 * of the whole packet, which a CHECKSUM_COMPLETE skb carries, does not change.
 */
static __always_inline void kbp_related4_rewrite(struct __sk_buff *skb, const bool l3) {
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct iphdr *iph = data + KBP_L2_LEN(l3);
	struct kbp_icmphdr *ih;
	struct iphdr *in;
	struct kbp_ct4_key key = {};
	struct kbp_ct4_val *ct, cv;
	__u32 ihl_len, in_len, addr_diff = 0, port_diff = 0, icmp_diff, old_ports, new_ports;
	__u16 old_check, *l4_check = NULL;
	__be16 *ports;

	if ((void *)(iph + 1) > end)
		return;
	if (l3) {
		if (skb->protocol != bpf_htons(ETH_P_IP))
			return;
	} else if (((struct ethhdr *)data)->h_proto != bpf_htons(ETH_P_IP)) {
		return;
	}
	if (iph->version != 4 || iph->protocol != IPPROTO_ICMP ||
	    (iph->frag_off & bpf_htons(KBP_IP_MF | KBP_IP_OFFSET)))
		return;
	ihl_len = (__u32)iph->ihl * 4;
	if (ihl_len < sizeof(*iph) || ihl_len > 60)
		return;
	ih = (void *)iph + ihl_len;
	if ((void *)(ih + 1) > end)
		return;
	if (ih->type != KBP_ICMP_DEST_UNREACH && ih->type != KBP_ICMP_TIME_EXCEEDED)
		return;
	in = (void *)(ih + 1);
	if ((void *)(in + 1) > end || in->version != 4)
		return;
	in_len = (__u32)in->ihl * 4;
	if (in_len < sizeof(*in) || in_len > 60)
		return;
	if (in->protocol != IPPROTO_TCP && in->protocol != IPPROTO_UDP)
		return;
	ports = (void *)in + in_len;
	if ((void *)(ports + 2) > end)
		return;

	/* The quoted packet went client -> backend: its reply entry is the reversed tuple. */
	key.saddr = in->daddr;
	key.daddr = in->saddr;
	key.sport = ports[1];
	key.dport = ports[0];
	key.proto = in->protocol;
	ct = kbp_ct_lookup(&key);
	if (!ct)
		return;
	cv = *ct;
	if (!kbp_ct_egress_reply(&cv))
		return;

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

	/* Outer source: the service address, when the backend itself sent the error. */
	if (iph->saddr == in->daddr) {
		__u32 d = kbp_csum_diff32(0, iph->saddr, cv.xlate_saddr);

		iph->saddr = cv.xlate_saddr;
		iph->check = kbp_csum_apply(iph->check, d);
	}

	/* The quote: {client, cport} -> {vip, vport}, as the client sent it. */
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
}

/* An IPv4 ICMP packet gets its quote pulled into the linear area first; nothing else is looked at.
 */
static __always_inline void kbp_related4_egress(struct __sk_buff *skb, const bool l3) {
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct iphdr *iph = data + KBP_L2_LEN(l3);
	__u32 want;

	if ((void *)(iph + 1) > end || iph->protocol != IPPROTO_ICMP)
		return;
	want = skb->len < KBP_RELATED_PULL ? skb->len : KBP_RELATED_PULL;
	if (skb->data_end - skb->data < want)
		bpf_skb_pull_data(skb, want);
	kbp_related4_rewrite(skb, l3);
}

#endif /* KBP_RELATED_H */
