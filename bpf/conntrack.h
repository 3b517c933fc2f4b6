/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The conntrack entries of a flow (kbp_ct4tcp_v1, kbp_ct4any_v1): lookup, insert, refresh, and
 * the questions the load balancer asks of an entry. Layout and lifecycle: docs/bpf-datapath.md,
 * "Conntrack".
 */
#ifndef KBP_CONNTRACK_H
#define KBP_CONNTRACK_H

#include <linux/in.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "parse.h"

#define KBP_CT_REFRESH_NS 1000000000ull /* last_seen_ns is refreshed at most once a second */

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

#define KBP_RATE_WINDOW_NS 1000000000ull

/* May this CPU create one more flow now (kbp_config.new_flow_rate per second)? Counts it if so.
 * Per CPU, so no lock and no shared cache line: the limit scales with the CPUs RSS spreads a
 * flood over. */
static __always_inline bool kbp_new_flow_allowed(__u32 limit, __u64 now) {
	__u32 zero = 0;
	struct kbp_rate *r;

	if (limit == 0)
		return true;
	r = bpf_map_lookup_elem(&kbp_rate_v1, &zero);
	if (!r)
		return true;
	if (now - r->window_ns >= KBP_RATE_WINDOW_NS) {
		r->window_ns = now;
		r->count = 0;
	}
	if (r->count >= limit)
		return false;
	r->count++;
	return true;
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

/* The tracked backend is still there, unchanged, not terminating, and still serves the flow's
 * service (kbp_affm_v1 holds every {backend, service} pair the control plane publishes). */
static __always_inline bool kbp_backend_current(const struct kbp_ct4_val *cv) {
	__u32 id = cv->backend_id;
	struct kbp_backend4 *be = bpf_map_lookup_elem(&kbp_be4_v1, &id);
	struct kbp_aff_match_key mk = {.backend_id = cv->backend_id, .svc_id = cv->svc_id};

	return be && be->addr == cv->xlate_daddr && be->port == cv->xlate_dport &&
	       !(be->flags & KBP_BE_F_TERMINATING) && bpf_map_lookup_elem(&kbp_affm_v1, &mk);
}

/* The reply entry's key of a tracked forward entry: its translated tuple, reversed. */
static __always_inline void kbp_ct_reply_key(struct kbp_ct4_key *rk, const struct kbp_ct4_val *cv,
					     __u8 proto) {
	rk->saddr = cv->xlate_daddr;
	rk->daddr = cv->xlate_saddr;
	rk->sport = cv->xlate_dport;
	rk->dport = cv->xlate_sport;
	rk->proto = proto;
}

static __always_inline void kbp_ct_delete(const struct kbp_ct4_key *key) {
	if (key->proto == IPPROTO_TCP)
		bpf_map_delete_elem(&kbp_ct4tcp_v1, key);
	else
		bpf_map_delete_elem(&kbp_ct4any_v1, key);
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

#endif /* KBP_CONNTRACK_H */
