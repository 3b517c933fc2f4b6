/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The backend of a new flow: ClientIP affinity, else the service's algorithm (random, rr over
 * the slots, or the Maglev table); select_family.h, once per family.
 */
#ifndef KBP_SELECT_H
#define KBP_SELECT_H

#include <linux/bpf.h>

#include <bpf/bpf_helpers.h>

#include "family.h"
#include "hash.h"
#include "maps.h"
#include "parse.h"

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

/* The slot of a new flow by random or rr. One backend needs no choice: neither the random number
 * (a helper call) nor rr's lock. */
static __always_inline __u32 kbp_pick_slot(const struct kbp_svc_val *sv) {
	if (sv->count <= 1)
		return 0;
	if (sv->algorithm == KBP_ALG_RR)
		return kbp_rr_slot(sv);
	return bpf_get_prandom_u32() % sv->count;
}

#define KBP_FAM 4
#include "select_family.h"
#undef KBP_FAM
#define KBP_FAM 6
#include "select_family.h"
#undef KBP_FAM

#endif /* KBP_SELECT_H */
