/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The family-generic part of lb.h, included by it once per family (family.h). */
#ifndef KBP_FAM
#include "lb.h"
#else

/* A new flow's reply entry and, when its port must be searched for, the search: on the caller's
 * stack while bpf_loop runs the candidates. */
struct KBP_FAM_NAME(kbp_port_search, ) {
	KBP_CT_KEY key; /* the reply key; dport is the candidate */
	KBP_CT_VAL val; /* the reply entry */
	__u32 min;
	__u32 range;
	__u32 start;
	__u32 found;
};

/* Candidate `i`: the reply entry inserts with BPF_NOEXIST, or the port is taken. */
static __always_inline bool KBP_F(kbp_port_try)(struct KBP_FAM_NAME(kbp_port_search, ) * s,
						__u32 i) {
	s->key.dport = bpf_htons((__u16)(s->min + (s->start + i) % s->range));
	return KBP_F(kbp_ct_insert)(&s->key, &s->val, BPF_NOEXIST) == 0;
}

#ifndef KBP_NO_BPF_LOOP
/* bpf_loop's callback: 1 stops the loop. */
static long KBP_F(kbp_port_try_cb)(__u32 i, void *ctx) {
	struct KBP_FAM_NAME(kbp_port_search, ) *s = ctx;

	if (!KBP_F(kbp_port_try)(s, i))
		return 0;
	s->found = 1;
	return 1;
}
#endif

/*
 * Claims a free port for a translated source: s->key (the reply key, daddr set) gets the first of
 * KBP_SNAT_PORT_TRIES candidate ports in [snat_port_min, snat_port_max], from a random start,
 * whose reply entry inserts with BPF_NOEXIST. bpf_loop (5.17+) runs the candidates without
 * growing the program; lb_compat.o, for older kernels, unrolls KBP_SNAT_PORT_TRIES_COMPAT of
 * them. Returns 0, or -1 with *reason set.
 */
static __always_inline int KBP_F(kbp_claim_port)(struct KBP_FAM_NAME(kbp_port_search, ) * s,
						 const struct kbp_config *cfg, __u32 *reason) {
	__u32 min = cfg->snat_port_min, max = cfg->snat_port_max;

	if (min == 0 || max < min) {
		*reason = KBP_DROP_NO_SNAT_ADDR;
		return -1;
	}
	s->min = min;
	s->range = max - min + 1;
	s->start = bpf_get_prandom_u32();
	s->found = 0;
#ifndef KBP_NO_BPF_LOOP
	bpf_loop(KBP_SNAT_PORT_TRIES, KBP_F(kbp_port_try_cb), s, 0);
#else
	/* Unrolled: kernels before 6.4 reject the back-edge clang emits for this loop. */
#pragma clang loop unroll(full)
	for (__u32 i = 0; i < KBP_SNAT_PORT_TRIES_COMPAT; i++) {
		if (KBP_F(kbp_port_try)(s, i)) {
			s->found = 1;
			break;
		}
	}
#endif
	if (!s->found) {
		*reason = KBP_DROP_SNAT_PORTS;
		return -1;
	}
	return 0;
}

/* A new flow: choose the backend, decide SNAT, create both conntrack entries. Fills `out` with
 * the forward entry. Returns KBP_PASS or KBP_DROP with *reason set. */
static __always_inline int KBP_F(kbp_new_flow)(void *ctx, const bool xdp, const KBP_PKT *p,
					       int role, const struct kbp_svc_val *sv, __u64 now,
					       KBP_CT_VAL *out, __u32 *reason) {
	__u32 backend_id;
	struct kbp_config *cfg = kbp_config_live();
	KBP_BACKEND b;
	KBP_CT_KEY fkey = {};
	bool hairpin, snat;

	if (!cfg) {
		*reason = KBP_DROP_NO_SNAT_ADDR;
		return KBP_DROP;
	}
	if (!kbp_new_flow_allowed(cfg->new_flow_rate, now)) {
		*reason = KBP_DROP_NEW_FLOW_RATE;
		return KBP_DROP;
	}
	backend_id = KBP_F(kbp_select_backend)(sv, p, cfg, now, &b);
	if (!backend_id) {
		*reason = KBP_DROP_BACKEND_MISSING;
		return KBP_DROP;
	}
	hairpin = KBP_F(kbp_addr_eq)(b.addr, p->saddr);
	snat = hairpin || (role == KBP_ROLE_EXT && !(b.flags & KBP_BE_F_LOCAL));

	out->last_seen_ns = now;
	KBP_ADDR_SET(out->xlate_saddr, p->saddr);
	KBP_ADDR_SET(out->xlate_daddr, b.addr);
	out->xlate_sport = p->sport;
	out->xlate_dport = b.port;
	out->svc_id = sv->svc_id;
	out->backend_id = backend_id;
	out->flags = (snat ? KBP_CT_F_SNAT | KBP_CT_F_ROUTE : 0) |
		     (hairpin ? KBP_CT_F_HAIRPIN : 0) |
		     (role == KBP_ROLE_EXT ? KBP_CT_F_EXTERNAL : 0);
	if (!snat && kbp_host_candidate(xdp, role, p->frag, 0) && KBP_F(kbp_host_remote)(b.addr))
		out->flags |= KBP_CT_F_HOST;
	out->tcp_flags = p->tcp_flags;
	out->pad = 0;
	if (snat) {
		if (KBP_F(kbp_addr_zero)(cfg->KBP_FAM_NAME(snat_addr, ))) {
			*reason = KBP_DROP_NO_SNAT_ADDR;
			return KBP_DROP;
		}
#if KBP_FAM == 4
		out->xlate_saddr = kbp_snat_source4(ctx, xdp, b.addr, cfg);
#else
		kbp_snat_source6(ctx, xdp, b.addr, cfg, out->xlate_saddr);
#endif
	}

	/* s.key, s.val: the reply entry. Declared after the SNAT source's FIB lookup, so that clang
	 * gives the lookup's struct the same stack (kbp_tc_pod's, with the bpf_loop callback's,
	 * must stay within the 512 bytes of 6.1's verifier). */
	struct KBP_FAM_NAME(kbp_port_search, ) s = {};

	s.val.last_seen_ns = now;
	KBP_ADDR_SET(s.val.xlate_saddr, p->daddr);
	KBP_ADDR_SET(s.val.xlate_daddr, p->saddr);
	s.val.xlate_sport = p->dport;
	s.val.xlate_dport = p->sport;
	s.val.svc_id = sv->svc_id;
	s.val.backend_id = backend_id;
	s.val.flags = out->flags | KBP_CT_F_REPLY;

	KBP_ADDR_SET(s.key.saddr, b.addr);
	s.key.sport = b.port;
	s.key.proto = p->proto;

	if (snat) {
		KBP_ADDR_SET(s.key.daddr, out->xlate_saddr);
	} else {
		/* The client keeps its port unless another flow already owns the reply tuple (the
		 * same client port to two frontends of one backend): then, as netfilter resolves
		 * such a clash, the source port is translated, the address kept. */
		KBP_ADDR_SET(s.key.daddr, p->saddr);
		s.key.dport = p->sport;
		if (KBP_F(kbp_ct_insert)(&s.key, &s.val, BPF_NOEXIST) == 0)
			goto forward;
	}
	if (KBP_F(kbp_claim_port)(&s, cfg, reason) < 0)
		return KBP_DROP;
	out->xlate_sport = s.key.dport;

forward:
	KBP_ADDR_SET(fkey.saddr, p->saddr);
	KBP_ADDR_SET(fkey.daddr, p->daddr);
	fkey.sport = p->sport;
	fkey.dport = p->dport;
	fkey.proto = p->proto;
	if (KBP_F(kbp_ct_insert)(&fkey, out, BPF_ANY) != 0) {
		/* The reply entry, and the port it holds, must not outlive a flow never made. */
		KBP_F(kbp_ct_delete)(&s.key);
		*reason = KBP_DROP_CT_INSERT;
		return KBP_DROP;
	}
	return KBP_PASS;
}

/*
 * Sends a packet of a tracked flow on its way: rewrite to the entry's tuple, count. A
 * KBP_CT_F_ROUTE packet is forwarded by the program itself (kbp_route4/6), and so is one host
 * routing carries (host_route.h: between two local pods, or a KBP_CT_F_HOST flow). Replies of
 * other flows are not ours at ingress: the egress program translates them (see the top of the
 * file).
 */
static __always_inline int KBP_F(kbp_deliver)(void *ctx, const bool xdp, const bool l3, int role,
					      const KBP_PKT *p, const KBP_CT_VAL *t, __u32 *reason,
					      struct kbp_hop *hop, const bool new_flow) {
	bool reply = t->flags & KBP_CT_F_REPLY;
	__u32 counted = new_flow ? KBP_COUNT_NEW : 0;
	bool host = kbp_host_candidate(xdp, role, p->frag, t->flags);
	int verdict = KBP_PASS;

	if (t->flags & KBP_CT_F_ROUTE || host) {
		verdict = KBP_F(kbp_route)(ctx, xdp, l3, p, t, hop, reason);
		/* Not to a local pod: a request goes on to the stack rewritten, a reply
		 * untouched. */
		if (host)
			verdict = kbp_host_hop(verdict, hop, t->flags);
		if (verdict == KBP_DROP || verdict == KBP_FRAG_NEEDED ||
		    (verdict == KBP_PASS && (!host || reply))) {
			if (new_flow)
				kbp_count_flow(t->svc_id, t->backend_id, 0, counted);
			return verdict;
		}
	} else if (reply) {
		return KBP_PASS;
	}
	/* A new flow's connection and first packet: one lookup of each record. */
	kbp_count_flow(t->svc_id, t->backend_id, p->len,
		       counted | KBP_COUNT_PKT | (reply ? KBP_COUNT_REPLY : 0));
	if (KBP_F(kbp_rewrite)(ctx, xdp, l3, p, t->xlate_saddr, t->xlate_daddr, t->xlate_sport,
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
static __always_inline int KBP_F(kbp_lb)(void *ctx, const bool xdp, const bool l3, int role,
					 __u32 *reason, __u32 *svc_id, struct kbp_hop *hop) {
	KBP_PKT p = {};
	/* the tracked entry, or the new flow's forward entry */
	KBP_CT_VAL *ct, t;
	struct kbp_svc_val sv;
	int verdict;
	__u64 now;

#if KBP_FAM == 4
	if (kbp_parse4(ctx, xdp, l3, &p) < 0)
		return kbp_related4_ingress(ctx, xdp, l3, hop, &p, &t);
#else
	/* ICMPv6 errors go to related.h; neighbour discovery passes untouched. */
	if (kbp_parse6(ctx, xdp, l3, &p) < 0)
		return kbp_related6_ingress(ctx, xdp, l3, hop, &p, &t);
	hop->l4_off = p.l4_off;
#endif

	/* The clock is read only for tracked and new flows: other traffic never pays for it. */
	ct = KBP_F(kbp_ct_lookup_pkt)(&p);
	if (ct) {
		bool new_syn = p.tcp_flags & KBP_TCP_SYN && !(p.tcp_flags & KBP_TCP_ACK);

		t = *ct;

		/* The egress program keeps these entries, and counts their packets, unless host
		 * routing delivers the reply itself. */
		if (kbp_ct_egress_reply(t.flags) && !kbp_host_candidate(xdp, role, p.frag, t.flags))
			return KBP_PASS;
		now = kbp_now();
		/* A new connection on a tracked tuple: reuse the backend only if the old flow is
		 * still open (a retransmitted SYN) and its backend is still current. One on a tuple
		 * the stack translated is ours from now on. */
		if (!(t.flags & KBP_CT_F_REPLY) && new_syn &&
		    ((t.flags & KBP_CT_F_STACK) || (t.tcp_flags & (KBP_TCP_FIN | KBP_TCP_RST)) ||
		     !KBP_F(kbp_backend_current)(&t))) {
			KBP_CT_KEY old;

			/* The old flow's reply entry goes (and frees its SNAT port) before the new
			 * flow claims one: it would otherwise linger until GC and clash. */
			KBP_F(kbp_ct_reply_key)(&old, &t, p.proto);
			KBP_F(kbp_ct_delete)(&old);
			goto service;
		}
		KBP_F(kbp_ct_touch)(ct, &t, &p, now);
		*svc_id = t.svc_id;
		/* The kernel's conntrack translates it, both ways (KBP_CT_F_STACK), or is about to.
		 */
		if (t.flags & KBP_CT_F_HOLD) {
			*reason = KBP_DROP_HANDOFF;
			return KBP_DROP;
		}
		if (t.flags & KBP_CT_F_STACK)
			return KBP_PASS;
		return KBP_F(kbp_deliver)(ctx, xdp, l3, role, &p, &t, reason, hop, false);
	}
	/* A later fragment never starts a flow: its first fragment did, or the datagram is not
	 * ours. */
	if (p.frag == KBP_PKT_FRAG_LATER)
		return KBP_PASS;

service:
	if (KBP_F(kbp_lookup_service)(&p, role, &sv) < 0)
		return KBP_PASS;
	/* ClusterIPs are for pods; from outside they are not ours to translate. */
	if (role == KBP_ROLE_EXT && !(sv.flags & KBP_SVC_F_EXTERNAL))
		return KBP_PASS;
	*svc_id = sv.svc_id;
	verdict = KBP_F(kbp_service_policy)(&sv, &p, reason);
	if (verdict != KBP_PASS)
		return verdict;
	now = kbp_now();
	if (KBP_F(kbp_new_flow)(ctx, xdp, &p, role, &sv, now, &t, reason) != KBP_PASS)
		return KBP_DROP;
	return KBP_F(kbp_deliver)(ctx, xdp, l3, role, &p, &t, reason, hop, true);
}

/*
 * tc egress of pod-facing and external interfaces: a reply of a tracked, unrouted flow leaving
 * towards its client gets the service address back as its source. Everything else passes.
 * Returns false when the packet is not a TCP/UDP packet the parser accepts (an ICMP error, say,
 * which related.h looks at next).
 */
static __always_inline bool KBP_F(kbp_rev_egress)(struct __sk_buff *skb, const bool l3) {
	KBP_PKT p = {};
	KBP_CT_VAL *ct, cv;

	if (KBP_F(kbp_parse)(skb, false, l3, &p) < 0)
		return false;
	ct = KBP_F(kbp_ct_lookup_pkt)(&p);
	if (!ct)
		return true;
	cv = *ct;
	if (!kbp_ct_egress_reply(cv.flags))
		return true;
	KBP_F(kbp_ct_touch)(ct, &cv, &p, kbp_now());
	kbp_count_flow(cv.svc_id, cv.backend_id, p.len, KBP_COUNT_PKT | KBP_COUNT_REPLY);
	KBP_F(kbp_rewrite)
	(skb, false, l3, &p, cv.xlate_saddr, cv.xlate_daddr, cv.xlate_sport, cv.xlate_dport, false);
	return true;
}

#endif /* KBP_FAM */
