/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The family-generic part of conntrack.h, included by it once per family (family.h). */
#ifndef KBP_FAM
#include "conntrack.h"
#else

/* Each call below names one map (KBP_CT_ONE_MAP, conntrack.h). */
static __always_inline KBP_CT_VAL *KBP_F(kbp_ct_lookup)(const KBP_CT_KEY *key) {
	KBP_CT_VAL *v;

	if (key->proto == IPPROTO_TCP) {
		v = bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_ct, tcp_v1), key);
		KBP_CT_ONE_MAP(v);
		return v;
	}
	return bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_ct, any_v1), key);
}

static __always_inline long KBP_F(kbp_ct_insert)(const KBP_CT_KEY *key, const KBP_CT_VAL *val,
						 __u64 flags) {
	long rc;

	if (key->proto == IPPROTO_TCP) {
		rc = bpf_map_update_elem(&KBP_FAM_NAME(kbp_ct, tcp_v1), key, val, flags);
		KBP_CT_ONE_MAP(rc);
		return rc;
	}
	return bpf_map_update_elem(&KBP_FAM_NAME(kbp_ct, any_v1), key, val, flags);
}

static __always_inline void KBP_F(kbp_ct_delete)(const KBP_CT_KEY *key) {
	long rc;

	if (key->proto == IPPROTO_TCP) {
		rc = bpf_map_delete_elem(&KBP_FAM_NAME(kbp_ct, tcp_v1), key);
		KBP_CT_ONE_MAP(rc);
	} else {
		bpf_map_delete_elem(&KBP_FAM_NAME(kbp_ct, any_v1), key);
	}
}

/* The entry for the packet's own tuple, forward or reply. */
static __always_inline KBP_CT_VAL *KBP_F(kbp_ct_lookup_pkt)(const KBP_PKT *p) {
	KBP_CT_KEY key = {.sport = p->sport, .dport = p->dport, .proto = p->proto};

	KBP_ADDR_SET(key.saddr, p->saddr);
	KBP_ADDR_SET(key.daddr, p->daddr);
	return KBP_F(kbp_ct_lookup)(&key);
}

/* The tracked backend is still there, unchanged, not terminating, and still serves the flow's
 * service (kbp_affm_v1 holds every {backend, service} pair the control plane publishes). */
static __always_inline bool KBP_F(kbp_backend_current)(const KBP_CT_VAL *cv) {
	__u32 id = cv->backend_id;
	KBP_BACKEND *be = bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_be, _v1), &id);
	struct kbp_aff_match_key mk = {.backend_id = cv->backend_id, .svc_id = cv->svc_id};

	return be && KBP_F(kbp_addr_eq)(be->addr, cv->xlate_daddr) && be->port == cv->xlate_dport &&
	       !(be->flags & KBP_BE_F_TERMINATING) && bpf_map_lookup_elem(&kbp_affm_v1, &mk);
}

/* The reply entry's key of a tracked forward entry: its translated tuple, reversed. */
static __always_inline void KBP_F(kbp_ct_reply_key)(KBP_CT_KEY *rk, const KBP_CT_VAL *cv,
						    __u8 proto) {
	KBP_ADDR_SET(rk->saddr, cv->xlate_daddr);
	KBP_ADDR_SET(rk->daddr, cv->xlate_saddr);
	rk->sport = cv->xlate_dport;
	rk->dport = cv->xlate_sport;
	rk->proto = proto;
}

/* Refreshes a tracked entry's age and TCP flags, at most once a second unless flags change. */
static __always_inline void KBP_F(kbp_ct_touch)(KBP_CT_VAL *ct, const KBP_CT_VAL *cv,
						const KBP_PKT *p, __u64 now) {
	if ((cv->tcp_flags | p->tcp_flags) != cv->tcp_flags ||
	    now - cv->last_seen_ns > KBP_CT_REFRESH_NS) {
		ct->tcp_flags = cv->tcp_flags | p->tcp_flags;
		ct->last_seen_ns = now;
	}
}

#endif /* KBP_FAM */
