/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The per-CPU counters: traffic per service and backend, drops per reason and service. */
#ifndef KBP_COUNTERS_H
#define KBP_COUNTERS_H

#include <linux/bpf.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "maps.h"

/* What kbp_count_flow counts: a new connection, the packet (forward, or a reply). */
#define KBP_COUNT_NEW	0x1
#define KBP_COUNT_PKT	0x2
#define KBP_COUNT_REPLY 0x4

static __always_inline void kbp_count_stats(struct kbp_traffic_stats *st, __u32 len, __u32 what) {
	if (!st)
		return;
	if (what & KBP_COUNT_NEW)
		st->new_conns++;
	if (!(what & KBP_COUNT_PKT))
		return;
	if (what & KBP_COUNT_REPLY) {
		st->reply_packets++;
		st->reply_bytes += len;
	} else {
		st->fwd_packets++;
		st->fwd_bytes += len;
	}
}

/* A flow's packet (and, for its first, the connection) on its service's and its backend's
 * records: one lookup of each, whatever is counted. */
static __always_inline void kbp_count_flow(__u32 svc_id, __u32 backend_id, __u32 len, __u32 what) {
	kbp_count_stats(bpf_map_lookup_elem(&kbp_svcst_v1, &svc_id), len, what);
	kbp_count_stats(bpf_map_lookup_elem(&kbp_best_v1, &backend_id), len, what);
}

static __always_inline void kbp_count_drop(__u32 reason, __u32 svc_id, __u32 len) {
	struct kbp_drop_stats *ds = bpf_map_lookup_elem(&kbp_drops_v1, &reason);
	struct kbp_svc_drop_key key = {.svc_id = svc_id, .reason = reason};
	struct kbp_traffic_stats *st;

	if (ds) {
		ds->packets++;
		ds->bytes += len;
	}
	if (svc_id == 0)
		return;
	st = bpf_map_lookup_elem(&kbp_svcst_v1, &svc_id);
	if (st)
		st->drops++;
	ds = bpf_map_lookup_elem(&kbp_svcdrop_v1, &key);
	if (!ds) {
		struct kbp_drop_stats zero = {};

		bpf_map_update_elem(&kbp_svcdrop_v1, &key, &zero, BPF_NOEXIST);
		ds = bpf_map_lookup_elem(&kbp_svcdrop_v1, &key);
		if (!ds)
			return;
	}
	ds->packets++;
	ds->bytes += len;
}

#endif /* KBP_COUNTERS_H */
