/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The family-generic part of policy.h, included by it once per family (family.h). */
#ifndef KBP_FAM
#include "policy.h"
#else

static __always_inline bool KBP_F(kbp_source_allowed)(const struct kbp_svc_val *sv,
						      const KBP_PKT *p) {
	/* prefixlen: the svc_id's 32 bits, then every bit of the address. */
	KBP_SRCR_KEY key = {.prefixlen = 32 + 8 * sizeof(p->saddr), .svc_id = sv->svc_id};

	KBP_ADDR_SET(key.addr, p->saddr);
	return bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_srcr, _v1), &key) != NULL;
}

/*
 * What a new flow from p->saddr to the service gets before any backend is chosen: KBP_PASS to
 * choose one, KBP_DROP (source outside loadBalancerSourceRanges, or endpoints exist but the
 * traffic policy allows none here) or KBP_REJECT (no endpoints at all), with *reason set.
 */
static __always_inline int KBP_F(kbp_service_policy)(const struct kbp_svc_val *sv, const KBP_PKT *p,
						     __u32 *reason) {
	if ((sv->flags & KBP_SVC_F_SOURCE_RANGE) && !KBP_F(kbp_source_allowed)(sv, p)) {
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

#endif /* KBP_FAM */
