/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A service's policy for a new flow, before a backend is chosen: loadBalancerSourceRanges, and
 * the reject and drop actions. The tc path and the socket hooks decide alike.
 */
#ifndef KBP_POLICY_H
#define KBP_POLICY_H

#include <linux/types.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "verdict.h"

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

#endif /* KBP_POLICY_H */
