/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The family-generic part of frag.h, included by it once per family (family.h): the record of a
 * first fragment and its lookup by a later one, each counted in kbp_fragst_v1. */
#ifndef KBP_FAM
#include "frag.h"
#else

#define KBP_FRAG_KEY struct KBP_FAM_NAME(kbp_frag, _key)
#define KBP_FRAG_VAL struct KBP_FAM_NAME(kbp_frag, _val)

/* BPF_ANY: a reused identification is a new datagram. */
static __always_inline void KBP_F(kbp_frag_record)(const KBP_FRAG_KEY *key,
						   const KBP_FRAG_VAL *val) {
	struct kbp_frag_stats *st = kbp_frag_stats();
	long rc = bpf_map_update_elem(&KBP_FAM_NAME(kbp_frag, _v1), key, val, BPF_ANY);

	if (!st)
		return;
	if (rc == 0)
		st->first++;
	else
		st->record_failed++;
}

/* 0 with *out the record, or -1 when there is none. */
static __always_inline int KBP_F(kbp_frag_lookup)(const KBP_FRAG_KEY *key, KBP_FRAG_VAL *out) {
	KBP_FRAG_VAL *val = bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_frag, _v1), key);
	struct kbp_frag_stats *st = kbp_frag_stats();

	if (!val) {
		if (st)
			st->later_unknown++;
		return -1;
	}
	*out = *val;
	if (st)
		st->later_known++;
	return 0;
}

#undef KBP_FRAG_KEY
#undef KBP_FRAG_VAL

#endif /* KBP_FAM */
