/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The service load balancer shared by the tc and XDP programs (over a `void *ctx`, see ctx.h).
 *
 * Packet walk at ingress (IPv4, TCP and UDP; everything else passes untouched):
 *   1. parse: Ethernet (none on L3 devices), IPv4 honouring ihl, TCP or UDP; truncated or
 *      inconsistent headers pass untouched (never rewritten), and an ICMP error about a tracked
 *      flow goes to related.h. Fragments (tc only, frag.h): the first is handled as a whole
 *      packet, later ones with its ports and an L3-only rewrite.
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
#ifndef KBP_LB_H
#define KBP_LB_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "config.h"
#include "conntrack.h"
#include "counters.h"
#include "ctx.h"
#include "fib.h"
#include "maps.h"
#include "nat.h"
#include "parse.h"
#include "policy.h"
#include "related.h"
#include "rodata.h"
#include "select.h"
#include "service.h"
#include "verdict.h"

/* One candidate port of a search, kept on the caller's stack while bpf_loop runs it. */
struct kbp_port_search {
	struct kbp_ct4_key key; /* the reply key; dport is the candidate */
	struct kbp_ct4_val val; /* the reply entry */
	__u32 min;
	__u32 range;
	__u32 start;
	__u32 found;
};

/* Candidate `i`: the reply entry inserts with BPF_NOEXIST, or the port is taken. */
static __always_inline bool kbp_port_try(struct kbp_port_search *s, __u32 i) {
	s->key.dport = bpf_htons((__u16)(s->min + (s->start + i) % s->range));
	return kbp_ct_insert(&s->key, &s->val, BPF_NOEXIST) == 0;
}

#ifndef KBP_NO_BPF_LOOP
/* bpf_loop's callback: 1 stops the loop. */
static long kbp_port_try_cb(__u32 i, void *ctx) {
	struct kbp_port_search *s = ctx;

	if (!kbp_port_try(s, i))
		return 0;
	s->found = 1;
	return 1;
}
#endif

/*
 * Claims a free port for a translated source: rkey (the reply key, daddr set) gets the first of
 * KBP_SNAT_PORT_TRIES candidate ports in [snat_port_min, snat_port_max], from a random start,
 * whose reply entry inserts with BPF_NOEXIST. bpf_loop (5.17+) runs the candidates without
 * growing the program; lb_compat.o, for older kernels, unrolls KBP_SNAT_PORT_TRIES_COMPAT of
 * them. Returns 0, or -1 with *reason set.
 */
static __always_inline int kbp_claim_port(struct kbp_ct4_key *rkey, const struct kbp_ct4_val *rval,
					  const struct kbp_config *cfg, __u32 *reason) {
	struct kbp_port_search s;
	__u32 min = cfg->snat_port_min, max = cfg->snat_port_max;

	if (min == 0 || max < min) {
		*reason = KBP_DROP_NO_SNAT_ADDR;
		return -1;
	}
	__builtin_memcpy(&s.key, rkey, sizeof(s.key));
	__builtin_memcpy(&s.val, rval, sizeof(s.val));
	s.min = min;
	s.range = max - min + 1;
	s.start = bpf_get_prandom_u32();
	s.found = 0;
#ifndef KBP_NO_BPF_LOOP
	bpf_loop(KBP_SNAT_PORT_TRIES, kbp_port_try_cb, &s, 0);
#else
	/* Unrolled: kernels before 6.4 reject the back-edge clang emits for this loop. */
#pragma clang loop unroll(full)
	for (__u32 i = 0; i < KBP_SNAT_PORT_TRIES_COMPAT; i++) {
		if (kbp_port_try(&s, i)) {
			s.found = 1;
			break;
		}
	}
#endif
	if (!s.found) {
		*reason = KBP_DROP_SNAT_PORTS;
		return -1;
	}
	rkey->dport = s.key.dport;
	return 0;
}

/* A new flow: choose the backend, decide SNAT, create both conntrack entries. Fills `out` with
 * the forward entry. Returns KBP_PASS or KBP_DROP with *reason set. */
static __always_inline int kbp_new_flow(void *ctx, const bool xdp, const struct kbp_pkt4 *p,
					int role, const struct kbp_svc_val *sv, __u64 now,
					struct kbp_ct4_val *out, __u32 *reason) {
	__u32 backend_id = 0;
	struct kbp_config *cfg = kbp_config_live();
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
	if (!kbp_new_flow_allowed(cfg->new_flow_rate, now)) {
		*reason = KBP_DROP_NEW_FLOW_RATE;
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
		if (cfg->snat_addr4 == 0) {
			*reason = KBP_DROP_NO_SNAT_ADDR;
			return KBP_DROP;
		}
		out->xlate_saddr = kbp_snat_source4(ctx, xdp, backend_addr, cfg);
		rkey.daddr = out->xlate_saddr;
	} else {
		/* The client keeps its port unless another flow already owns the reply tuple (the
		 * same client port to two frontends of one backend): then, as netfilter resolves
		 * such a clash, the source port is translated, the address kept. */
		rkey.daddr = p->saddr;
		rkey.dport = p->sport;
		if (kbp_ct_insert(&rkey, &rval, BPF_NOEXIST) == 0)
			goto forward;
	}
	if (kbp_claim_port(&rkey, &rval, cfg, reason) < 0)
		return KBP_DROP;
	out->xlate_sport = rkey.dport;

forward:
	fkey.saddr = p->saddr;
	fkey.daddr = p->daddr;
	fkey.sport = p->sport;
	fkey.dport = p->dport;
	fkey.proto = p->proto;
	if (kbp_ct_insert(&fkey, out, BPF_ANY) != 0) {
		/* The reply entry, and the port it holds, must not outlive a flow never made. */
		kbp_ct_delete(&rkey);
		*reason = KBP_DROP_CT_INSERT;
		return KBP_DROP;
	}
	return KBP_PASS;
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
	if (verdict == KBP_TX && kbp_tx_macs(ctx, xdp, hop) < 0)
		return KBP_PASS;
	return verdict;
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
		return kbp_related4_ingress(ctx, xdp, l3, hop);

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
		    ((cv.tcp_flags & (KBP_TCP_FIN | KBP_TCP_RST)) || !kbp_backend_current(&cv))) {
			struct kbp_ct4_key old;

			/* The old flow's reply entry goes (and frees its SNAT port) before the new
			 * flow claims one: it would otherwise linger until GC and clash. */
			kbp_ct_reply_key(&old, &cv, p.proto);
			kbp_ct_delete(&old);
			goto service;
		}
		kbp_ct_touch(ct, &cv, &p, now);
		*svc_id = cv.svc_id;
		return kbp_deliver(ctx, xdp, l3, &p, &cv, reason, hop);
	}
	/* A later fragment never starts a flow: its first fragment did, or the datagram is not
	 * ours. */
	if (p.frag == KBP_PKT_FRAG_LATER)
		return KBP_PASS;

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
 * Returns false when the packet is not a TCP/UDP packet the parser accepts (an ICMP error, say,
 * which related.h looks at next).
 */
static __always_inline bool kbp_rev4_egress(struct __sk_buff *skb, const bool l3) {
	struct kbp_pkt4 p = {};
	struct kbp_ct4_val *ct, cv;

	if (kbp_parse4(skb, false, l3, &p) < 0)
		return false;
	ct = kbp_ct_lookup_pkt(&p);
	if (!ct)
		return true;
	cv = *ct;
	if (!kbp_ct_egress_reply(&cv))
		return true;
	kbp_ct_touch(ct, &cv, &p, kbp_now());
	kbp_count_traffic(&kbp_svcst_v1, cv.svc_id, p.len, true);
	kbp_count_traffic(&kbp_best_v1, cv.backend_id, p.len, true);
	kbp_rewrite4(skb, false, l3, &p, cv.xlate_saddr, cv.xlate_daddr, cv.xlate_sport,
		     cv.xlate_dport, false);
	return true;
}

#endif /* KBP_LB_H */
