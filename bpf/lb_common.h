/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The service load balancer shared by the tc and XDP programs. Every function takes the program
 * context as `void *ctx` plus a compile-time `xdp` flag; with __always_inline the branch for the
 * other hook disappears, so each program only contains (and the verifier only sees) its own
 * context accesses.
 *
 * Packet walk at ingress (IPv4, TCP and UDP; everything else passes untouched):
 *   1. parse: Ethernet (none on L3 devices), IPv4 honouring ihl, TCP or UDP; fragments,
 *      truncated or inconsistent headers pass untouched (never rewritten).
 *   2. conntrack: the packet's tuple in kbp_ct4tcp_v1 / kbp_ct4any_v1. A forward hit is
 *      rewritten to the entry's xlate tuple, counted, and passed on; a reply hit only when the
 *      flow is routed (below), other replies are left to the egress program.
 *   3. service: the frontend for {daddr, dport, proto}; no frontend -> untouched.
 *   4. policy: ClusterIP only from pods; loadBalancerSourceRanges; action reject/drop.
 *   5. backend choice (affinity, random / rr / maglev), SNAT decision and port, both conntrack
 *      entries, counters, rewrite.
 *   6. SNATed flows (KBP_CT_F_ROUTE: the new source is a node address, which the stack would
 *      drop as a martian) are forwarded by tc itself in both directions (FIB lookup, TTL, MACs,
 *      redirect); XDP sends them back out with XDP_TX when the FIB says so, and otherwise
 *      leaves them to tc untouched.
 * At egress (kbp_rev4_egress), replies of every other flow get their source put back to the
 * service address on their way out to the client, after routing and netfilter have seen the
 * untranslated reply. So the stack sees each such flow with one consistent tuple in both
 * directions: rp_filter checks real addresses on their real interfaces, and netfilter
 * conntrack (an INVALID drop rule, a CNI's masquerade) sees a normal connection.
 */
#ifndef KBP_LB_COMMON_H
#define KBP_LB_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "maps.h"

/* Which interface the packet arrived on decides ClusterIP access and the SNAT need. */
enum kbp_role {
	KBP_ROLE_POD = 0, /* pod-facing interface: traffic from pods ("internal") */
	KBP_ROLE_EXT = 1, /* external interface: traffic from outside the node */
	/* a socket hook: a process on the node, "internal" like pods (kube-proxy's OUTPUT chains
	 * treat locally originated traffic so), and 127.0.0.0/8 reaches NodePorts */
	KBP_ROLE_HOST = 2,
};

enum kbp_verdict {
	KBP_PASS = 0,	  /* continue to the stack (rewritten or not) */
	KBP_DROP = 1,	  /* drop, reason counted */
	KBP_REJECT = 2,	  /* answer with ICMP port unreachable (tc), or leave it to tc (XDP) */
	KBP_REDIRECT = 3, /* tc: rewritten and addressed, send out of the FIB's interface */
	KBP_REDIRECT_NEIGH = 4, /* tc: rewritten, the kernel resolves the next hop's MAC */
	KBP_TX = 5,		/* XDP: rewritten and addressed, back out of the same interface */
	KBP_FRAG_NEEDED = 6,	/* tc: too big for the route and DF set: answer ICMP frag needed */
};

/* Bytes before the IPv4 header: Ethernet, or nothing on L3 devices (ipip, WireGuard). */
#define KBP_L2_LEN(l3) ((l3) ? 0u : (__u32)sizeof(struct ethhdr))

#define KBP_AF_INET 2

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
	__u8 df; /* Don't Fragment set */
};

/* Read-only after load (.rodata). bpf_ktime_get_coarse_ns (5.11+) costs a fraction of
 * bpf_ktime_get_ns on the per-packet path and is as good for conntrack and affinity ages;
 * set kbp_coarse_clock to 0 before loading on 5.10, the verifier then never sees the call. */
const volatile __u32 kbp_coarse_clock = 1;

static __always_inline __u64 kbp_now(void) {
	if (kbp_coarse_clock)
		return bpf_ktime_get_coarse_ns();
	return bpf_ktime_get_ns();
}

/* ---------- context abstraction ---------- */

static __always_inline void *kbp_data(void *ctx, const bool xdp) {
	if (xdp)
		return (void *)(long)((struct xdp_md *)ctx)->data;
	return (void *)(long)((struct __sk_buff *)ctx)->data;
}

static __always_inline void *kbp_data_end(void *ctx, const bool xdp) {
	if (xdp)
		return (void *)(long)((struct xdp_md *)ctx)->data_end;
	return (void *)(long)((struct __sk_buff *)ctx)->data_end;
}

/* The interface the packet arrived on (tc runs at ingress here). */
static __always_inline __u32 kbp_ingress_ifindex(void *ctx, const bool xdp) {
	if (xdp)
		return ((struct xdp_md *)ctx)->ingress_ifindex;
	return ((struct __sk_buff *)ctx)->ifindex;
}

static __always_inline __u32 kbp_frame_len(void *ctx, const bool xdp) {
	if (xdp)
		return (__u32)(kbp_data_end(ctx, xdp) - kbp_data(ctx, xdp));
	return ((struct __sk_buff *)ctx)->len;
}

/* ---------- one's complement arithmetic (RFC 1071 / RFC 1624) ---------- */

static __always_inline __u32 kbp_csum_add(__u32 sum, __u32 v) {
	sum += v;
	return sum + (sum < v);
}

static __always_inline __u16 kbp_csum_fold(__u32 sum) {
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* The RFC 1624 difference of replacing word `from` by `to` (raw memory words). */
static __always_inline __u32 kbp_csum_diff32(__u32 diff, __u32 from, __u32 to) {
	return kbp_csum_add(kbp_csum_add(diff, ~from), to);
}

/* HC' = ~(~HC + diff) */
static __always_inline __u16 kbp_csum_apply(__u16 check, __u32 diff) {
	return ~kbp_csum_fold(kbp_csum_add(diff, (__u16)~check));
}

/* ---------- flow hash (Maglev index; layout.ts flowHash4 computes the same) ---------- */

static __always_inline __u32 kbp_rol32(__u32 w, __u32 s) {
	return (w << s) | (w >> (32 - s));
}

/* Bob Jenkins' lookup3 jhash_3words as in the Linux kernel. */
static __always_inline __u32 kbp_jhash_3words(__u32 a, __u32 b, __u32 c, __u32 initval) {
	initval += 0xdeadbeef + (3 << 2);
	a += initval;
	b += initval;
	c += initval;
	c ^= b;
	c -= kbp_rol32(b, 14);
	a ^= c;
	a -= kbp_rol32(c, 11);
	b ^= a;
	b -= kbp_rol32(a, 25);
	c ^= b;
	c -= kbp_rol32(b, 16);
	a ^= c;
	a -= kbp_rol32(c, 4);
	b ^= a;
	b -= kbp_rol32(a, 14);
	c ^= b;
	c -= kbp_rol32(b, 24);
	return c;
}

/* The destination address is left out so every address of a service picks the same backend. */
static __always_inline __u32 kbp_flow_hash4(const struct kbp_pkt4 *p, __u32 seed) {
	return kbp_jhash_3words(bpf_ntohl(p->saddr),
				((__u32)bpf_ntohs(p->sport) << 16) | bpf_ntohs(p->dport), p->proto,
				seed);
}

/* ---------- parsing ---------- */

/* 0 when the packet is an unfragmented IPv4 TCP/UDP packet whose headers are complete and
 * consistent; -1 for everything the load balancer must leave alone. */
static __always_inline int kbp_parse4(void *ctx, const bool xdp, const bool l3,
				      struct kbp_pkt4 *p) {
	void *data = kbp_data(ctx, xdp);
	void *end = kbp_data_end(ctx, xdp);
	struct iphdr *iph = data + KBP_L2_LEN(l3);
	__u32 ihl_len, tot_len, l4_len;
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
	if (iph->frag_off & bpf_htons(KBP_IP_MF | KBP_IP_OFFSET))
		return -1;
	tot_len = bpf_ntohs(iph->tot_len);
	if (tot_len < ihl_len || KBP_L2_LEN(l3) + tot_len > kbp_frame_len(ctx, xdp))
		return -1;
	l4_len = tot_len - ihl_len;
	l4 = (void *)iph + ihl_len;

	if (iph->protocol == IPPROTO_TCP) {
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
		if (ulen < sizeof(*uh) || ulen > l4_len)
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
	p->ihl_len = ihl_len;
	p->len = kbp_frame_len(ctx, xdp);
	return 0;
}

/* ---------- rewrite ---------- */

/*
 * Rewrites the packet's tuple to {saddr, daddr, sport, dport} with valid checksums.
 * XDP updates every checksum per RFC 1624. tc writes the IP checksum the same way (the IP header
 * sum stays invariant, so skb->csum stays right) but leaves the L4 checksum to
 * bpf_l4_csum_replace, which also handles CHECKSUM_PARTIAL skbs (see the reference's veth
 * gotcha); the helper calls come last because they invalidate packet pointers.
 */
static __always_inline int kbp_rewrite4(void *ctx, const bool xdp, const bool l3,
					const struct kbp_pkt4 *p, __be32 saddr, __be32 daddr,
					__be16 sport, __be16 dport, bool ttl_dec) {
	void *data = kbp_data(ctx, xdp);
	void *end = kbp_data_end(ctx, xdp);
	struct iphdr *iph = data + KBP_L2_LEN(l3);
	__u32 ihl_len = p->ihl_len & 0x3c;
	bool tcp = p->proto == IPPROTO_TCP;
	/* __builtin_offsetof: clang 14 turns bpf_helpers.h's offsetof in a ?: into a load. */
	__u32 csum_off = tcp ? __builtin_offsetof(struct tcphdr, check)
			     : __builtin_offsetof(struct udphdr, check);
	__u32 addr_diff = 0, port_diff = 0, old_ports, new_ports;
	__u16 *l4_check;
	__be16 *ports;

	if ((void *)(iph + 1) > end || ihl_len < sizeof(*iph))
		return -1;
	ports = (void *)iph + ihl_len;
	if ((void *)ports + (tcp ? sizeof(struct tcphdr) : sizeof(struct udphdr)) > end)
		return -1;
	l4_check = (void *)ports + csum_off;
	if ((void *)(l4_check + 1) > end)
		return -1;

	addr_diff = kbp_csum_diff32(addr_diff, iph->saddr, saddr);
	addr_diff = kbp_csum_diff32(addr_diff, iph->daddr, daddr);
	old_ports = *(__u32 *)ports;
	iph->saddr = saddr;
	iph->daddr = daddr;
	ports[0] = sport;
	ports[1] = dport;
	new_ports = *(__u32 *)ports;
	port_diff = kbp_csum_diff32(port_diff, old_ports, new_ports);
	if (ttl_dec) {
		/* Forwarded by redirect, not by the stack: this hop's TTL decrement is ours. The
		 * TTL shares a 16-bit word with the protocol; only the IP header sums it. */
		__u16 *ttl_word = (__u16 *)&iph->ttl;
		__u16 old_word = *ttl_word;

		iph->ttl--;
		iph->check =
		    kbp_csum_apply(iph->check, kbp_csum_diff32(addr_diff, old_word, *ttl_word));
	} else {
		iph->check = kbp_csum_apply(iph->check, addr_diff);
	}

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

	__u32 off = KBP_L2_LEN(l3) + ihl_len + csum_off;
	__u64 mangled = tcp ? 0 : BPF_F_MARK_MANGLED_0;

	if (bpf_l4_csum_replace(ctx, off, 0, addr_diff, BPF_F_PSEUDO_HDR | mangled) < 0)
		return -1;
	if (old_ports != new_ports && bpf_l4_csum_replace(ctx, off, 0, port_diff, mangled) < 0)
		return -1;
	return 0;
}

/* ---------- counters ---------- */

static __always_inline void kbp_count_traffic(void *map, __u32 id, __u32 len, bool reply) {
	struct kbp_traffic_stats *st = bpf_map_lookup_elem(map, &id);

	if (!st)
		return;
	if (reply) {
		st->reply_packets++;
		st->reply_bytes += len;
	} else {
		st->fwd_packets++;
		st->fwd_bytes += len;
	}
}

static __always_inline void kbp_count_new_conn(void *map, __u32 id) {
	struct kbp_traffic_stats *st = bpf_map_lookup_elem(map, &id);

	if (st)
		st->new_conns++;
}

static __always_inline void kbp_count_drop(__u32 reason, __u32 svc_id, __u32 len) {
	struct kbp_drop_stats *ds = bpf_map_lookup_elem(&kbp_drops_v1, &reason);
	struct kbp_svc_drop_key key = {.svc_id = svc_id, .reason = reason};
	struct kbp_traffic_stats *st;

	if (ds) {
		ds->packets++;
		ds->bytes += len;
	}
	if (svc_id == 0)
		return;
	st = bpf_map_lookup_elem(&kbp_svcst_v1, &svc_id);
	if (st)
		st->drops++;
	ds = bpf_map_lookup_elem(&kbp_svcdrop_v1, &key);
	if (!ds) {
		struct kbp_drop_stats zero = {};

		bpf_map_update_elem(&kbp_svcdrop_v1, &key, &zero, BPF_NOEXIST);
		ds = bpf_map_lookup_elem(&kbp_svcdrop_v1, &key);
		if (!ds)
			return;
	}
	ds->packets++;
	ds->bytes += len;
}

/* ---------- conntrack ---------- */

static __always_inline struct kbp_ct4_val *kbp_ct_lookup(const struct kbp_ct4_key *key) {
	if (key->proto == IPPROTO_TCP)
		return bpf_map_lookup_elem(&kbp_ct4tcp_v1, key);
	return bpf_map_lookup_elem(&kbp_ct4any_v1, key);
}

static __always_inline long kbp_ct_insert(const struct kbp_ct4_key *key,
					  const struct kbp_ct4_val *val, __u64 flags) {
	if (key->proto == IPPROTO_TCP)
		return bpf_map_update_elem(&kbp_ct4tcp_v1, key, val, flags);
	return bpf_map_update_elem(&kbp_ct4any_v1, key, val, flags);
}

/* The entry for the packet's own tuple, forward or reply. */
static __always_inline struct kbp_ct4_val *kbp_ct_lookup_pkt(const struct kbp_pkt4 *p) {
	struct kbp_ct4_key key = {.saddr = p->saddr,
				  .daddr = p->daddr,
				  .sport = p->sport,
				  .dport = p->dport,
				  .proto = p->proto};

	return kbp_ct_lookup(&key);
}

/* A reply of an unrouted flow: translated by the egress program only, on its way to the client. */
static __always_inline bool kbp_ct_egress_reply(const struct kbp_ct4_val *cv) {
	return (cv->flags & (KBP_CT_F_REPLY | KBP_CT_F_ROUTE)) == KBP_CT_F_REPLY;
}

/* The tracked backend is still there, unchanged, and not terminating. */
static __always_inline bool kbp_backend_current(const struct kbp_ct4_val *cv) {
	__u32 id = cv->backend_id;
	struct kbp_backend4 *be = bpf_map_lookup_elem(&kbp_be4_v1, &id);

	return be && be->addr == cv->xlate_daddr && be->port == cv->xlate_dport &&
	       !(be->flags & KBP_BE_F_TERMINATING);
}

/* ---------- backend choice ---------- */

static __always_inline __u32 kbp_slot_backend(const struct kbp_svc_val *sv, __u32 slot) {
	struct kbp_slot_key sk = {.svc_id = sv->svc_id, .slot = slot, .gen = sv->gen};
	__u32 *id = bpf_map_lookup_elem(&kbp_slot_v1, &sk);

	return id ? *id : 0;
}

static __always_inline __u32 kbp_maglev_backend(const struct kbp_svc_val *sv,
						const struct kbp_pkt4 *p,
						const struct kbp_config *cfg) {
	__u32 svc_id = sv->svc_id;
	void *table = bpf_map_lookup_elem(&kbp_mglv_v1, &svc_id);
	__u32 index, *id;

	if (!table || cfg->maglev_size == 0)
		return 0;
	index = kbp_flow_hash4(p, cfg->hash_seed) % cfg->maglev_size;
	id = bpf_map_lookup_elem(table, &index);
	return id ? *id : 0;
}

static __always_inline __u32 kbp_rr_slot(const struct kbp_svc_val *sv) {
	__u32 svc_id = sv->svc_id;
	struct kbp_rr_val *rr = bpf_map_lookup_elem(&kbp_rr_v1, &svc_id);
	__u32 n;

	if (!rr)
		return bpf_get_prandom_u32() % sv->count;
	bpf_spin_lock(&rr->lock);
	n = rr->next++;
	bpf_spin_unlock(&rr->lock);
	return n % sv->count;
}

static __always_inline __u32 kbp_choose_backend(const struct kbp_svc_val *sv,
						const struct kbp_pkt4 *p,
						const struct kbp_config *cfg) {
	__u32 id;

	if (sv->algorithm == KBP_ALG_MAGLEV) {
		id = kbp_maglev_backend(sv, p, cfg);
		if (id)
			return id;
	} else if (sv->algorithm == KBP_ALG_RR) {
		return kbp_slot_backend(sv, kbp_rr_slot(sv));
	}
	return kbp_slot_backend(sv, bpf_get_prandom_u32() % sv->count);
}

static __always_inline __u32 kbp_affinity_backend(const struct kbp_svc_val *sv, __be32 client,
						  __u64 now) {
	struct kbp_aff4_key ak = {.client = client, .svc_id = sv->svc_id};
	struct kbp_aff_val *av = bpf_map_lookup_elem(&kbp_aff4_v1, &ak);
	struct kbp_aff_match_key mk;

	if (!av || now - av->last_used_ns > (__u64)sv->affinity_timeout_s * 1000000000ull)
		return 0;
	mk.backend_id = av->backend_id;
	mk.svc_id = sv->svc_id;
	return bpf_map_lookup_elem(&kbp_affm_v1, &mk) ? mk.backend_id : 0;
}

/*
 * The backend of a new flow from client p->saddr: its ClientIP affinity entry while it lasts,
 * else the service's algorithm; the choice renews the affinity. NULL when the slot or Maglev
 * entry names a backend that is not in kbp_be4_v1.
 */
static __always_inline struct kbp_backend4 *kbp_select_backend(const struct kbp_svc_val *sv,
							       const struct kbp_pkt4 *p,
							       const struct kbp_config *cfg,
							       __u64 now, __u32 *backend_id) {
	struct kbp_backend4 *be;
	__u32 id = 0;

	if (sv->flags & KBP_SVC_F_AFFINITY)
		id = kbp_affinity_backend(sv, p->saddr, now);
	if (!id)
		id = kbp_choose_backend(sv, p, cfg);
	*backend_id = id;
	be = bpf_map_lookup_elem(&kbp_be4_v1, &id);
	if (be && (sv->flags & KBP_SVC_F_AFFINITY)) {
		struct kbp_aff4_key ak = {.client = p->saddr, .svc_id = sv->svc_id};
		struct kbp_aff_val av = {.last_used_ns = now, .backend_id = id};

		bpf_map_update_elem(&kbp_aff4_v1, &ak, &av, BPF_ANY);
	}
	return be;
}

/* ---------- service lookup ---------- */

/* Could this destination port be a NodePort? Keeps the node address lookup off the path of
 * ordinary traffic. */
static __always_inline bool kbp_nodeport_candidate(__be16 dport) {
	__u32 zero = 0, port = bpf_ntohs(dport);
	struct kbp_config *cfg = bpf_map_lookup_elem(&kbp_cfg_v1, &zero);

	if (!cfg)
		return false;
	return cfg->nodeport_max == 0 || (port >= cfg->nodeport_min && port <= cfg->nodeport_max);
}

/* A local process may reach a NodePort on loopback, as kube-proxy's localhost NodePorts allow. */
static __always_inline bool kbp_loopback4(__be32 addr) {
	return (addr & bpf_htonl(0xff000000)) == bpf_htonl(0x7f000000);
}

static __always_inline int kbp_lookup_service(__be32 daddr, __be16 dport, __u8 proto, int role,
					      struct kbp_svc_val *sv) {
	struct kbp_svc4_key key = {
	    .addr = daddr, .port = dport, .proto = proto, .scope = KBP_SCOPE_ALL};
	struct kbp_svc_val *found = bpf_map_lookup_elem(&kbp_svc4_v1, &key);

	if (!found) {
		if (!kbp_nodeport_candidate(dport))
			return -1;
		if (!(role == KBP_ROLE_HOST && kbp_loopback4(daddr)) &&
		    !bpf_map_lookup_elem(&kbp_node4_v1, &daddr))
			return -1;
		key.addr = 0;
		found = bpf_map_lookup_elem(&kbp_svc4_v1, &key);
		if (!found)
			return -1;
	}
	*sv = *found;
	if (role != KBP_ROLE_EXT && (sv->flags & KBP_SVC_F_TWO_SCOPES)) {
		key.scope = KBP_SCOPE_INTERNAL;
		found = bpf_map_lookup_elem(&kbp_svc4_v1, &key);
		if (found)
			*sv = *found;
	}
	return 0;
}

static __always_inline bool kbp_source_allowed(const struct kbp_svc_val *sv, __be32 saddr) {
	struct kbp_srcr4_key key = {.prefixlen = 64, .svc_id = sv->svc_id, .addr = saddr};

	return bpf_map_lookup_elem(&kbp_srcr4_v1, &key) != NULL;
}

/*
 * What a new flow from saddr to the service gets before any backend is chosen: KBP_PASS to
 * choose one, KBP_DROP (source outside loadBalancerSourceRanges, or endpoints exist but the
 * traffic policy allows none here) or KBP_REJECT (no endpoints at all), with *reason set.
 * The tc path and the socket hooks decide alike.
 */
static __always_inline int kbp_service_policy(const struct kbp_svc_val *sv, __be32 saddr,
					      __u32 *reason) {
	if ((sv->flags & KBP_SVC_F_SOURCE_RANGE) && !kbp_source_allowed(sv, saddr)) {
		*reason = KBP_DROP_SOURCE_RANGE;
		return KBP_DROP;
	}
	if (sv->action == KBP_ACTION_REJECT) {
		*reason = KBP_DROP_NO_ENDPOINTS;
		return KBP_REJECT;
	}
	if (sv->action != KBP_ACTION_FORWARD || sv->count == 0) {
		*reason = KBP_DROP_NO_LOCAL_ENDPOINTS;
		return KBP_DROP;
	}
	return KBP_PASS;
}

/* ---------- the load balancer ---------- */

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

/* A new flow: choose the backend, decide SNAT, create both conntrack entries. Fills `out` with
 * the forward entry. Returns KBP_PASS or KBP_DROP with *reason set. */
static __always_inline int kbp_new_flow(void *ctx, const bool xdp, const struct kbp_pkt4 *p,
					int role, const struct kbp_svc_val *sv, __u64 now,
					struct kbp_ct4_val *out, __u32 *reason) {
	__u32 zero = 0, backend_id = 0;
	struct kbp_config *cfg = bpf_map_lookup_elem(&kbp_cfg_v1, &zero);
	struct kbp_backend4 *be;
	struct kbp_ct4_key rkey = {};
	struct kbp_ct4_key fkey = {};
	struct kbp_ct4_val rval = {};
	bool hairpin, snat;
	__be32 backend_addr;
	__be16 backend_port;
	__u8 be_flags;

	if (!cfg) {
		*reason = KBP_DROP_NO_SNAT_ADDR;
		return KBP_DROP;
	}
	be = kbp_select_backend(sv, p, cfg, now, &backend_id);
	if (!be) {
		*reason = KBP_DROP_BACKEND_MISSING;
		return KBP_DROP;
	}
	backend_addr = be->addr;
	backend_port = be->port;
	be_flags = be->flags;

	hairpin = backend_addr == p->saddr;
	snat = hairpin || (role == KBP_ROLE_EXT && !(be_flags & KBP_BE_F_LOCAL));

	out->last_seen_ns = now;
	out->xlate_saddr = p->saddr;
	out->xlate_daddr = backend_addr;
	out->xlate_sport = p->sport;
	out->xlate_dport = backend_port;
	out->svc_id = sv->svc_id;
	out->backend_id = backend_id;
	out->flags = (snat ? KBP_CT_F_SNAT | KBP_CT_F_ROUTE : 0) |
		     (hairpin ? KBP_CT_F_HAIRPIN : 0) |
		     (role == KBP_ROLE_EXT ? KBP_CT_F_EXTERNAL : 0);
	out->tcp_flags = p->tcp_flags;
	out->pad = 0;

	rval.last_seen_ns = now;
	rval.xlate_saddr = p->daddr;
	rval.xlate_daddr = p->saddr;
	rval.xlate_sport = p->dport;
	rval.xlate_dport = p->sport;
	rval.svc_id = sv->svc_id;
	rval.backend_id = backend_id;
	rval.flags = out->flags | KBP_CT_F_REPLY;

	rkey.saddr = backend_addr;
	rkey.sport = backend_port;
	rkey.proto = p->proto;

	if (snat) {
		__u32 min = cfg->snat_port_min, max = cfg->snat_port_max;
		__u32 range, start, i;
		bool placed = false;

		if (cfg->snat_addr4 == 0 || min == 0 || max < min) {
			*reason = KBP_DROP_NO_SNAT_ADDR;
			return KBP_DROP;
		}
		range = max - min + 1;
		start = bpf_get_prandom_u32();
		out->xlate_saddr = kbp_snat_source4(ctx, xdp, backend_addr, cfg);
		rkey.daddr = out->xlate_saddr;
		/* Unrolled: kernels before 6.4 reject the back-edge clang emits for this loop. */
#pragma clang loop unroll(full)
		for (i = 0; i < KBP_SNAT_PORT_TRIES; i++) {
			__be16 port = bpf_htons((__u16)(min + (start + i) % range));

			rkey.dport = port;
			if (kbp_ct_insert(&rkey, &rval, BPF_NOEXIST) == 0) {
				out->xlate_sport = port;
				placed = true;
				break;
			}
		}
		if (!placed) {
			*reason = KBP_DROP_SNAT_PORTS;
			return KBP_DROP;
		}
	} else {
		rkey.daddr = p->saddr;
		rkey.dport = p->sport;
		if (kbp_ct_insert(&rkey, &rval, BPF_ANY) != 0) {
			*reason = KBP_DROP_CT_INSERT;
			return KBP_DROP;
		}
	}

	fkey.saddr = p->saddr;
	fkey.daddr = p->daddr;
	fkey.sport = p->sport;
	fkey.dport = p->dport;
	fkey.proto = p->proto;
	if (kbp_ct_insert(&fkey, out, BPF_ANY) != 0) {
		*reason = KBP_DROP_CT_INSERT;
		return KBP_DROP;
	}
	return KBP_PASS;
}

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
	*reason = KBP_DROP_FIB;
	return KBP_DROP;
}

/*
 * Sends a packet of a tracked flow on its way: rewrite to the entry's tuple, count. A
 * KBP_CT_F_ROUTE packet is forwarded by the program itself (kbp_route4). Replies of other
 * flows are not ours at ingress: the egress program translates them (see the top of the file).
 */
static __always_inline int kbp_deliver(void *ctx, const bool xdp, const bool l3,
				       const struct kbp_pkt4 *p, const struct kbp_ct4_val *t,
				       __u32 *reason, struct kbp_hop *hop) {
	bool reply = t->flags & KBP_CT_F_REPLY;
	int verdict = KBP_PASS;

	if (t->flags & KBP_CT_F_ROUTE) {
		verdict = kbp_route4(ctx, xdp, l3, p, t, hop, reason);
		if (verdict == KBP_DROP || verdict == KBP_PASS || verdict == KBP_FRAG_NEEDED)
			return verdict;
	} else if (reply) {
		return KBP_PASS;
	}
	kbp_count_traffic(&kbp_svcst_v1, t->svc_id, p->len, reply);
	kbp_count_traffic(&kbp_best_v1, t->backend_id, p->len, reply);
	if (kbp_rewrite4(ctx, xdp, l3, p, t->xlate_saddr, t->xlate_daddr, t->xlate_sport,
			 t->xlate_dport, verdict != KBP_PASS) < 0)
		return KBP_PASS;
	if (verdict == KBP_TX) {
		void *data = kbp_data(ctx, xdp);

		if (data + sizeof(hop->macs) > kbp_data_end(ctx, xdp))
			return KBP_PASS;
		__builtin_memcpy(data, hop->macs, sizeof(hop->macs));
	}
	return verdict;
}

/* Refreshes a tracked entry's age and TCP flags, at most once a second unless flags change. */
static __always_inline void kbp_ct_touch(struct kbp_ct4_val *ct, const struct kbp_ct4_val *cv,
					 const struct kbp_pkt4 *p, __u64 now) {
	if ((cv->tcp_flags | p->tcp_flags) != cv->tcp_flags ||
	    now - cv->last_seen_ns > KBP_CT_REFRESH_NS) {
		ct->tcp_flags = cv->tcp_flags | p->tcp_flags;
		ct->last_seen_ns = now;
	}
}

/*
 * Handles one packet at ingress. Returns a kbp_verdict; *reason and *svc_id tell why a packet
 * is dropped or rejected (counted by the caller, which knows whether the reject is answered),
 * hop where a KBP_REDIRECT* goes.
 */
static __always_inline int kbp_lb4(void *ctx, const bool xdp, const bool l3, int role,
				   __u32 *reason, __u32 *svc_id, struct kbp_hop *hop) {
	struct kbp_pkt4 p = {};
	struct kbp_ct4_val *ct, fwd;
	struct kbp_svc_val sv;
	int verdict;
	__u64 now;

	if (kbp_parse4(ctx, xdp, l3, &p) < 0)
		return KBP_PASS;

	/* The clock is read only for tracked and new flows: other traffic never pays for it. */
	ct = kbp_ct_lookup_pkt(&p);
	if (ct) {
		struct kbp_ct4_val cv = *ct;
		bool new_syn = p.tcp_flags & KBP_TCP_SYN && !(p.tcp_flags & KBP_TCP_ACK);

		/* The egress program keeps these entries, and counts their packets. */
		if (kbp_ct_egress_reply(&cv))
			return KBP_PASS;
		now = kbp_now();
		/* A new connection on a tracked tuple: reuse the backend only if the old flow is
		 * still open (a retransmitted SYN) and its backend is still current. */
		if (!(cv.flags & KBP_CT_F_REPLY) && new_syn &&
		    ((cv.tcp_flags & (KBP_TCP_FIN | KBP_TCP_RST)) || !kbp_backend_current(&cv)))
			goto service;
		kbp_ct_touch(ct, &cv, &p, now);
		*svc_id = cv.svc_id;
		return kbp_deliver(ctx, xdp, l3, &p, &cv, reason, hop);
	}

service:
	if (kbp_lookup_service(p.daddr, p.dport, p.proto, role, &sv) < 0)
		return KBP_PASS;
	/* ClusterIPs are for pods; from outside they are not ours to translate. */
	if (role == KBP_ROLE_EXT && !(sv.flags & KBP_SVC_F_EXTERNAL))
		return KBP_PASS;
	*svc_id = sv.svc_id;
	verdict = kbp_service_policy(&sv, p.saddr, reason);
	if (verdict != KBP_PASS)
		return verdict;
	now = kbp_now();
	if (kbp_new_flow(ctx, xdp, &p, role, &sv, now, &fwd, reason) != KBP_PASS)
		return KBP_DROP;
	kbp_count_new_conn(&kbp_svcst_v1, fwd.svc_id);
	kbp_count_new_conn(&kbp_best_v1, fwd.backend_id);
	return kbp_deliver(ctx, xdp, l3, &p, &fwd, reason, hop);
}

/*
 * tc egress of pod-facing and external interfaces: a reply of a tracked, unrouted flow leaving
 * towards its client gets the service address back as its source. Everything else passes.
 */
static __always_inline void kbp_rev4_egress(struct __sk_buff *skb, const bool l3) {
	struct kbp_pkt4 p = {};
	struct kbp_ct4_val *ct, cv;

	if (kbp_parse4(skb, false, l3, &p) < 0)
		return;
	ct = kbp_ct_lookup_pkt(&p);
	if (!ct)
		return;
	cv = *ct;
	if (!kbp_ct_egress_reply(&cv))
		return;
	kbp_ct_touch(ct, &cv, &p, kbp_now());
	kbp_count_traffic(&kbp_svcst_v1, cv.svc_id, p.len, true);
	kbp_count_traffic(&kbp_best_v1, cv.backend_id, p.len, true);
	kbp_rewrite4(skb, false, l3, &p, cv.xlate_saddr, cv.xlate_daddr, cv.xlate_sport,
		     cv.xlate_dport, false);
}

#endif /* KBP_LB_COMMON_H */
