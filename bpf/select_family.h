/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The family-generic part of select.h, included by it once per family (family.h). */
#ifndef KBP_FAM
#include "select.h"
#else

static __always_inline __u32 KBP_F(kbp_maglev_backend)(const struct kbp_svc_val *sv,
						       const KBP_PKT *p,
						       const struct kbp_config *cfg) {
	__u32 svc_id = sv->svc_id;
	void *table = bpf_map_lookup_elem(&kbp_mglv_v1, &svc_id);
	__u32 index, *id;

	if (!table || cfg->maglev_size == 0)
		return 0;
	index = KBP_F(kbp_flow_hash)(p, cfg->hash_seed) % cfg->maglev_size;
	id = bpf_map_lookup_elem(table, &index);
	return id ? *id : 0;
}

/* Slot `slot` of the live generation as the backend entry would read: address and port from the
 * slot, locality from the slot order (slots [0, local_count) are node-local, published with the
 * generation). Returns the backend id, 0 when the slot is missing. */
static __always_inline __u32 KBP_F(kbp_slot_backend)(const struct kbp_svc_val *sv, __u32 slot,
						     KBP_BACKEND *b) {
	struct kbp_slot_key sk = {.svc_id = sv->svc_id, .slot = slot, .gen = sv->gen};
	struct kbp_slot_val *v = bpf_map_lookup_elem(&kbp_slot_v2, &sk);

	if (!v)
		return 0;
	KBP_ADDR_SET(b->addr, v->addr);
	b->port = v->port;
	b->flags = slot < sv->local_count ? KBP_BE_F_LOCAL : 0;
	b->pad = 0;
	return v->backend_id;
}

static __always_inline __u32 KBP_F(kbp_affinity_backend)(const struct kbp_svc_val *sv,
							 const KBP_PKT *p, __u64 now) {
	KBP_AFF_KEY ak = {.svc_id = sv->svc_id};
	struct kbp_aff_val *av;
	struct kbp_aff_match_key mk;

	KBP_ADDR_SET(ak.client, p->saddr);
	av = bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_aff, _v1), &ak);
	if (!av || now - av->last_used_ns > (__u64)sv->affinity_timeout_s * 1000000000ull)
		return 0;
	mk.backend_id = av->backend_id;
	mk.svc_id = sv->svc_id;
	return bpf_map_lookup_elem(&kbp_affm_v1, &mk) ? mk.backend_id : 0;
}

/*
 * The backend of a new flow from client p->saddr, read into *b: its ClientIP affinity entry while
 * it lasts, else the service's algorithm; the choice renews the affinity. Affinity and Maglev name
 * a backend id, read from the family's backend map; random and rr read the slot alone. Returns the
 * backend id, 0 when the slot is missing or names a backend that is not in the backend map.
 */
static __always_inline __u32 KBP_F(kbp_select_backend)(const struct kbp_svc_val *sv,
						       const KBP_PKT *p,
						       const struct kbp_config *cfg, __u64 now,
						       KBP_BACKEND *b) {
	KBP_BACKEND *be;
	__u32 id = 0;

	if (sv->flags & KBP_SVC_F_AFFINITY)
		id = KBP_F(kbp_affinity_backend)(sv, p, now);
	if (!id && sv->algorithm == KBP_ALG_MAGLEV)
		id = KBP_F(kbp_maglev_backend)(sv, p, cfg);
	if (id) {
		be = bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_be, _v1), &id);
		if (!be)
			return 0;
		/* One read of the entry: the control plane may rewrite it meanwhile. */
		*b = *be;
	} else {
		/* Maglev without its table falls back to random, as before the table is written. */
		id = KBP_F(kbp_slot_backend)(sv, kbp_pick_slot(sv), b);
		if (!id)
			return 0;
	}
	if (sv->flags & KBP_SVC_F_AFFINITY) {
		KBP_AFF_KEY ak = {.svc_id = sv->svc_id};
		struct kbp_aff_val av = {.last_used_ns = now, .backend_id = id};

		KBP_ADDR_SET(ak.client, p->saddr);
		bpf_map_update_elem(&KBP_FAM_NAME(kbp_aff, _v1), &ak, &av, BPF_ANY);
	}
	return id;
}

#endif /* KBP_FAM */
