/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * IPv4 fragments of TCP and UDP datagrams (docs/bpf-datapath.md, "Fragments"). Only the first
 * fragment (MF set, offset 0) carries the L4 header; every fragment repeats {saddr, daddr,
 * protocol, IP id}. The parser records the first fragment's ports under those four fields in
 * kbp_frag4_v1 and gives a later fragment (offset > 0) the ports recorded for it, so conntrack
 * and the service lookup see every fragment of a datagram with the same tuple, and each gets the
 * same translation (a later one only its L3 part: it has no L4 header). A later fragment that
 * comes before its first one, or after its record was evicted, is passed untouched and counted.
 */
#ifndef KBP_FRAG_H
#define KBP_FRAG_H

#include <linux/bpf.h>
#include <linux/ip.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "maps.h"

/* kbp_pkt4.frag */
#define KBP_PKT_WHOLE	   0 /* not a fragment */
#define KBP_PKT_FRAG_FIRST 1 /* offset 0, MF set: carries the L4 header */
#define KBP_PKT_FRAG_LATER 2 /* offset > 0: the L4 header is in the first fragment */

static __always_inline struct kbp_frag_stats *kbp_frag_stats(void) {
	__u32 zero = 0;

	return bpf_map_lookup_elem(&kbp_fragst_v1, &zero);
}

static __always_inline void kbp_frag_key(struct kbp_frag4_key *key, const struct iphdr *iph) {
	key->saddr = iph->saddr;
	key->daddr = iph->daddr;
	key->id = iph->id;
	key->proto = iph->protocol;
	key->pad = 0;
}

/* A first fragment: its original ports, for the fragments that follow. BPF_ANY: a reused IP id
 * is a new datagram. */
static __always_inline void kbp_frag_record(const struct iphdr *iph, __be16 sport, __be16 dport) {
	struct kbp_frag4_key key;
	struct kbp_frag4_val val = {.sport = sport, .dport = dport};
	struct kbp_frag_stats *st = kbp_frag_stats();
	long rc;

	kbp_frag_key(&key, iph);
	rc = bpf_map_update_elem(&kbp_frag4_v1, &key, &val, BPF_ANY);
	if (!st)
		return;
	if (rc == 0)
		st->first++;
	else
		st->record_failed++;
}

/* A later fragment: the ports its first fragment recorded. Returns -1 when there is none. */
static __always_inline int kbp_frag_ports(const struct iphdr *iph, __be16 *sport, __be16 *dport) {
	struct kbp_frag4_key key;
	struct kbp_frag4_val *val;
	struct kbp_frag_stats *st = kbp_frag_stats();

	kbp_frag_key(&key, iph);
	val = bpf_map_lookup_elem(&kbp_frag4_v1, &key);
	if (!val) {
		if (st)
			st->later_unknown++;
		return -1;
	}
	*sport = val->sport;
	*dport = val->dport;
	if (st)
		st->later_known++;
	return 0;
}

#endif /* KBP_FRAG_H */
