/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The backend of a new flow: ClientIP affinity, else the service's algorithm (random, rr over
 * the slots, or the Maglev table).
 */
#ifndef KBP_SELECT_H
#define KBP_SELECT_H

#include <linux/bpf.h>

#include <bpf/bpf_helpers.h>

#include "hash.h"
#include "maps.h"
#include "parse.h"

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

#endif /* KBP_SELECT_H */
