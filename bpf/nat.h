/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The address translation: the SNAT source of a flow, and the rewrite of a packet's tuple. */
#ifndef KBP_NAT_H
#define KBP_NAT_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "csum.h"
#include "ctx.h"
#include "family.h"
#include "fib.h"
#include "maps.h"
#include "parse.h"

/* Candidate SNAT ports tried per new flow: as many as netfilter's NAT tries (128) where bpf_loop
 * runs them, the unrolled 16 of lb_compat.o on kernels without it. */
#define KBP_SNAT_PORT_TRIES	   128
#define KBP_SNAT_PORT_TRIES_COMPAT 16

/* The IP header's part of a rewrite: the addresses, this hop's TTL decrement when the program
 * forwards the packet itself (by redirect, not by the stack; the TTL shares a 16-bit word with the
 * protocol, which only the IP header sums), the header checksum. Returns the addresses' checksum
 * difference, which the L4 pseudo header shares. */
static __always_inline __u32 kbp_rewrite4_ip(struct iphdr *iph, __be32 saddr, __be32 daddr,
					     bool ttl_dec) {
	__u32 addr_diff = 0;

	addr_diff = kbp_csum_diff32(addr_diff, iph->saddr, saddr);
	addr_diff = kbp_csum_diff32(addr_diff, iph->daddr, daddr);
	iph->saddr = saddr;
	iph->daddr = daddr;
	if (ttl_dec) {
		__u16 *ttl_word = (__u16 *)&iph->ttl;
		__u16 old_word = *ttl_word;

		iph->ttl--;
		iph->check =
		    kbp_csum_apply(iph->check, kbp_csum_diff32(addr_diff, old_word, *ttl_word));
	} else {
		iph->check = kbp_csum_apply(iph->check, addr_diff);
	}
	return addr_diff;
}

/*
 * The L4 part of a rewrite, once the addresses are: the ports at `ports` (the TCP or UDP header,
 * `off` bytes into the frame) to {sport, dport}, and the L4 checksum by the addresses' difference
 * addr_diff (the pseudo header's) and the ports'.
 * XDP updates the checksum per RFC 1624. tc leaves it to bpf_l4_csum_replace, which also handles
 * CHECKSUM_PARTIAL skbs (see the reference's veth gotcha); the helper calls come last because
 * they invalidate packet pointers. A first fragment's L4 checksum covers the whole datagram: only
 * ever updated, never recomputed.
 */
static __always_inline int kbp_rewrite_l4(void *ctx, const bool xdp, __u32 off, __be16 *ports,
					  void *end, bool tcp, __u32 addr_diff, __be16 sport,
					  __be16 dport) {
	/* __builtin_offsetof: clang 14 turns bpf_helpers.h's offsetof in a ?: into a load. */
	__u32 csum_off = tcp ? __builtin_offsetof(struct tcphdr, check)
			     : __builtin_offsetof(struct udphdr, check);
	__u32 port_diff = 0, old_ports, new_ports;
	__u16 *l4_check;

	if ((void *)ports + (tcp ? sizeof(struct tcphdr) : sizeof(struct udphdr)) > end)
		return -1;
	l4_check = (void *)ports + csum_off;
	if ((void *)(l4_check + 1) > end)
		return -1;
	old_ports = *(__u32 *)ports;
	ports[0] = sport;
	ports[1] = dport;
	new_ports = *(__u32 *)ports;
	port_diff = kbp_csum_diff32(port_diff, old_ports, new_ports);

	if (xdp) {
		/* UDP checksum 0 means "none"; a computed 0 is sent as 0xffff. */
		if (!tcp && *l4_check == 0)
			return 0;
		__u16 check = kbp_csum_apply(*l4_check, kbp_csum_add(addr_diff, port_diff));
		if (!tcp && check == 0)
			check = 0xffff;
		*l4_check = check;
		return 0;
	}

	__u64 mangled = tcp ? 0 : BPF_F_MARK_MANGLED_0;

	off += csum_off;
	if (bpf_l4_csum_replace(ctx, off, 0, addr_diff, BPF_F_PSEUDO_HDR | mangled) < 0)
		return -1;
	if (old_ports != new_ports && bpf_l4_csum_replace(ctx, off, 0, port_diff, mangled) < 0)
		return -1;
	return 0;
}

/*
 * Rewrites the packet's tuple to {saddr, daddr, sport, dport} with valid checksums; a later
 * fragment (no L4 header) gets the addresses only. tc writes the IP checksum the same way as XDP
 * (the IP header sum stays invariant, so skb->csum stays right).
 */
static __always_inline int kbp_rewrite4(void *ctx, const bool xdp, const bool l3,
					const struct kbp_pkt4 *p, __be32 saddr, __be32 daddr,
					__be16 sport, __be16 dport, bool ttl_dec) {
	void *data = kbp_data(ctx, xdp);
	void *end = kbp_data_end(ctx, xdp);
	struct iphdr *iph = data + KBP_L2_LEN(l3);
	__u32 ihl_len = p->ihl_len & 0x3c;
	__u32 addr_diff;

	if ((void *)(iph + 1) > end || ihl_len < sizeof(*iph))
		return -1;
	if (p->frag == KBP_PKT_FRAG_LATER) {
		kbp_rewrite4_ip(iph, saddr, daddr, ttl_dec);
		return 0;
	}
	if ((void *)iph + ihl_len + sizeof(struct udphdr) > end)
		return -1;
	addr_diff = kbp_rewrite4_ip(iph, saddr, daddr, ttl_dec);
	return kbp_rewrite_l4(ctx, xdp, KBP_L2_LEN(l3) + ihl_len, (void *)iph + ihl_len, end,
			      p->proto == IPPROTO_TCP, addr_diff, sport, dport);
}

/* The IPv6 rewrite: no IP checksum, so only the L4 one changes with the addresses; the hop limit
 * is decremented when the program forwards the packet itself. */
static __always_inline int kbp_rewrite6(void *ctx, const bool xdp, const bool l3,
					const struct kbp_pkt6 *p, const __be32 *saddr,
					const __be32 *daddr, __be16 sport, __be16 dport,
					bool ttl_dec) {
	void *data = kbp_data(ctx, xdp);
	void *end = kbp_data_end(ctx, xdp);
	struct ipv6hdr *ip6 = data + KBP_L2_LEN(l3);
	__u32 l4_off = p->l4_off & KBP_IPV6_L4_OFF_MASK, addr_diff = 0;
	__be32 *old;

	if ((void *)(ip6 + 1) > end || l4_off > KBP_IPV6_L4_OFF_MAX)
		return -1;
	if ((void *)ip6 + l4_off + sizeof(struct udphdr) > end)
		return -1;
	old = ip6->saddr.in6_u.u6_addr32;
#pragma unroll
	for (int i = 0; i < 4; i++)
		addr_diff = kbp_csum_diff32(addr_diff, old[i], saddr[i]);
	old = ip6->daddr.in6_u.u6_addr32;
#pragma unroll
	for (int i = 0; i < 4; i++)
		addr_diff = kbp_csum_diff32(addr_diff, old[i], daddr[i]);
	__builtin_memcpy(&ip6->saddr, saddr, sizeof(ip6->saddr));
	__builtin_memcpy(&ip6->daddr, daddr, sizeof(ip6->daddr));
	if (ttl_dec)
		ip6->hop_limit--;
	return kbp_rewrite_l4(ctx, xdp, KBP_L2_LEN(l3) + l4_off, (void *)ip6 + l4_off, end,
			      p->proto == IPPROTO_TCP, addr_diff, sport, dport);
}

/*
 * The SNAT source for a flow to `backend`: the address of the interface the FIB sends it
 * through (kbp_ifaddr4_v1), as MASQUERADE chooses it; the configured node address when that
 * interface has none the agent knows.
 */
static __always_inline __be32 kbp_snat_source4(void *ctx, const bool xdp, __be32 backend,
					       const struct kbp_config *cfg) {
	struct bpf_fib_lookup fib = {};
	__be32 *addr;
	long rc;

	fib.family = KBP_AF_INET;
	fib.ifindex = kbp_ingress_ifindex(ctx, xdp);
	fib.ipv4_dst = backend;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		__u32 ifindex = fib.ifindex;

		addr = bpf_map_lookup_elem(&kbp_ifaddr4_v1, &ifindex);
		if (addr && *addr)
			return *addr;
	}
	return cfg->snat_addr4;
}

/*
 * The IPv6 counterpart: into `out`, the address of the interface the FIB sends the flow to
 * `backend` through (kbp_ifaddr6_v1), else the configured node address (kbp_config.snat_addr6).
 */
static __always_inline void kbp_snat_source6(void *ctx, const bool xdp, const __be32 *backend,
					     const struct kbp_config *cfg, __be32 *out) {
	struct bpf_fib_lookup fib = {};
	struct kbp_ifaddr6_val *addr;
	long rc;

	fib.family = KBP_AF_INET6;
	fib.ifindex = kbp_ingress_ifindex(ctx, xdp);
	__builtin_memcpy(fib.ipv6_dst, backend, sizeof(fib.ipv6_dst));
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		__u32 ifindex = fib.ifindex;

		addr = bpf_map_lookup_elem(&kbp_ifaddr6_v1, &ifindex);
		if (addr && !kbp_addr_zero6(addr->addr)) {
			__builtin_memcpy(out, addr->addr, sizeof(addr->addr));
			return;
		}
	}
	__builtin_memcpy(out, cfg->snat_addr6, sizeof(cfg->snat_addr6));
}

#endif /* KBP_NAT_H */
