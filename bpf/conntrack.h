/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The conntrack entries of a flow (kbp_ct4tcp_v1 / kbp_ct4any_v1, and the kbp_ct6* maps): lookup,
 * insert, refresh, and the questions the load balancer asks of an entry (conntrack_family.h, once
 * per family). Layout and lifecycle: docs/bpf-datapath.md, "Conntrack".
 */
#ifndef KBP_CONNTRACK_H
#define KBP_CONNTRACK_H

#include <linux/in.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "family.h"
#include "maps.h"
#include "parse.h"

/*
 * Keeps a TCP-map call apart from its non-TCP twin. clang would otherwise merge the two calls of
 * kbp_ct_lookup (and of the insert and delete) into one whose map is chosen before it, and a call
 * site that may see two maps is one the verifier neither inlines (a lookup) nor turns into a
 * direct call (an update or delete): it goes through the generic helper and the map's ops, an
 * indirect call (Linux kernel/bpf/verifier.c, record_func_map and do_misc_fixups, 6.18). The empty
 * asm on one branch's result leaves the two branches different, so each keeps its own call.
 */
#define KBP_CT_ONE_MAP(v) asm volatile("" : "+r"(v))

#define KBP_CT_REFRESH_NS 1000000000ull /* last_seen_ns is refreshed at most once a second */

#define KBP_RATE_WINDOW_NS 1000000000ull

/* May this CPU create one more flow now (kbp_config.new_flow_rate per second)? Counts it if so.
 * Per CPU, so no lock and no shared cache line: the limit scales with the CPUs RSS spreads a
 * flood over. */
static __always_inline bool kbp_new_flow_allowed(__u32 limit, __u64 now) {
	__u32 zero = 0;
	struct kbp_rate *r;

	if (limit == 0)
		return true;
	r = bpf_map_lookup_elem(&kbp_rate_v1, &zero);
	if (!r)
		return true;
	if (now - r->window_ns >= KBP_RATE_WINDOW_NS) {
		r->window_ns = now;
		r->count = 0;
	}
	if (r->count >= limit)
		return false;
	r->count++;
	return true;
}

/* A reply of an unrouted flow (entry flags): translated by the egress program only, on its way
 * to the client. The stack's flows (KBP_CT_F_STACK) are translated by nobody here. */
static __always_inline bool kbp_ct_egress_reply(__u8 flags) {
	return (flags & (KBP_CT_F_REPLY | KBP_CT_F_ROUTE | KBP_CT_F_STACK)) == KBP_CT_F_REPLY;
}

#define KBP_FAM 4
#include "conntrack_family.h"
#undef KBP_FAM
#define KBP_FAM 6
#include "conntrack_family.h"
#undef KBP_FAM

#endif /* KBP_CONNTRACK_H */
