/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The family-generic part of service.h, included by it once per family (family.h). */
#ifndef KBP_FAM
#include "service.h"
#else

/* The frontend of {p->daddr, p->dport, p->proto} for traffic of `role`: 0 with *sv filled, or -1.
 */
static __always_inline int KBP_F(kbp_lookup_service)(const KBP_PKT *p, int role,
						     struct kbp_svc_val *sv) {
	KBP_SVC_KEY key = {.port = p->dport, .proto = p->proto, .scope = KBP_SCOPE_ALL};
	struct kbp_svc_val *found;

	KBP_ADDR_SET(key.addr, p->daddr);
	found = bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_svc, _v1), &key);
	if (!found) {
		if (!kbp_nodeport_candidate(p->dport))
			return -1;
		if (!(role == KBP_ROLE_HOST && KBP_F(kbp_loopback)(p->daddr)) &&
		    !bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_node, _v1), &p->daddr))
			return -1;
		__builtin_memset(&key.addr, 0, sizeof(key.addr));
		found = bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_svc, _v1), &key);
		if (!found)
			return -1;
	}
	*sv = *found;
	if (role != KBP_ROLE_EXT && (sv->flags & KBP_SVC_F_TWO_SCOPES)) {
		key.scope = KBP_SCOPE_INTERNAL;
		found = bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_svc, _v1), &key);
		if (found)
			*sv = *found;
	}
	return 0;
}

#endif /* KBP_FAM */
