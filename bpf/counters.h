/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The per-CPU counters: traffic per service and backend, drops per reason and service. */
#ifndef KBP_COUNTERS_H
#define KBP_COUNTERS_H

#include <linux/bpf.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "maps.h"

static __always_inline void kbp_count_traffic(void *map, __u32 id, __u32 len, bool reply) {
	struct kbp_traffic_stats *st = bpf_map_lookup_elem(map, &id);

	if (!st)
		return;
	if (reply) {
		st->reply_packets++;
		st->reply_bytes += len;
	} else {
		st->fwd_packets++;
		st->fwd_bytes += len;
	}
}

static __always_inline void kbp_count_new_conn(void *map, __u32 id) {
	struct kbp_traffic_stats *st = bpf_map_lookup_elem(map, &id);

	if (st)
		st->new_conns++;
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
