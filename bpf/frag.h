/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Fragments of TCP and UDP datagrams, IPv4 and IPv6 (docs/bpf-datapath.md, "Fragments"). Only the
 * first fragment (offset 0, more fragments set) carries the L4 header; every fragment repeats what
 * identifies its datagram: IPv4's {saddr, daddr, protocol, IP id}, IPv6's {saddr, daddr, the
 * Fragment header's identification} (RFC 8200). The parser records the first fragment's ports
 * under those fields in kbp_frag4_v1 / kbp_frag6_v1 (with the L4 protocol, for IPv6) and gives a
 * later fragment (offset > 0) the ports recorded for it, so conntrack and the service lookup see
 * every fragment of a datagram with the same tuple, and each gets the same translation (a later
 * one only its L3 part: it has no L4 header). A later fragment that comes before its first one, or
 * after its record was evicted, is passed untouched and counted. The family-generic record and
 * lookup are in frag_family.h.
 */
#ifndef KBP_FRAG_H
#define KBP_FRAG_H

#include <linux/bpf.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "family.h"
#include "maps.h"

/* kbp_pkt4.frag, kbp_pkt6.frag */
#define KBP_PKT_WHOLE	   0 /* not a fragment */
#define KBP_PKT_FRAG_FIRST 1 /* offset 0, MF set: carries the L4 header */
#define KBP_PKT_FRAG_LATER 2 /* offset > 0: the L4 header is in the first fragment */

/* The IPv6 Fragment header (RFC 8200 4.5; the kernel's struct frag_hdr is not UAPI). */
struct kbp_frag6_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset in 8-byte units << 3, two reserved bits, M */
	__be32 id;
};
_Static_assert(sizeof(struct kbp_frag6_hdr) == 8, "kbp_frag6_hdr");

#define KBP_IP6_OFFSET 0xfff8 /* kbp_frag6_hdr.frag_off, host order: the offset in bytes */
#define KBP_IP6_MF     0x0001

static __always_inline struct kbp_frag_stats *kbp_frag_stats(void) {
	__u32 zero = 0;

	return bpf_map_lookup_elem(&kbp_fragst_v1, &zero);
}

#define KBP_FAM 4
#include "frag_family.h"
#undef KBP_FAM
#define KBP_FAM 6
#include "frag_family.h"
#undef KBP_FAM

static __always_inline void kbp_frag_key4(struct kbp_frag4_key *key, const struct iphdr *iph) {
	key->saddr = iph->saddr;
	key->daddr = iph->daddr;
	key->id = iph->id;
	key->proto = iph->protocol;
	key->pad = 0;
}

static __always_inline void kbp_frag_key6(struct kbp_frag6_key *key, const struct ipv6hdr *ip6,
					  __be32 id) {
	__builtin_memcpy(key->saddr, &ip6->saddr, sizeof(key->saddr));
	__builtin_memcpy(key->daddr, &ip6->daddr, sizeof(key->daddr));
	key->id = id;
}

/* An IPv4 first fragment: its original ports, for the fragments that follow. */
static __always_inline void kbp_frag_record(const struct iphdr *iph, __be16 sport, __be16 dport) {
	struct kbp_frag4_key key;
	struct kbp_frag4_val val = {.sport = sport, .dport = dport};

	kbp_frag_key4(&key, iph);
	kbp_frag_record4(&key, &val);
}

/* An IPv4 later fragment: the ports its first fragment recorded. Returns -1 when there is none. */
static __always_inline int kbp_frag_ports(const struct iphdr *iph, __be16 *sport, __be16 *dport) {
	struct kbp_frag4_key key;
	struct kbp_frag4_val val;

	kbp_frag_key4(&key, iph);
	if (kbp_frag_lookup4(&key, &val) < 0)
		return -1;
	*sport = val.sport;
	*dport = val.dport;
	return 0;
}

/* An IPv6 first fragment (Fragment header identification `id`): its ports and L4 protocol. */
static __always_inline void kbp_frag_record_v6(const struct ipv6hdr *ip6, __be32 id, __u8 proto,
					       __be16 sport, __be16 dport) {
	struct kbp_frag6_key key;
	struct kbp_frag6_val val = {.sport = sport, .dport = dport, .proto = proto};

	kbp_frag_key6(&key, ip6, id);
	kbp_frag_record6(&key, &val);
}

/* An IPv6 later fragment: the ports and L4 protocol its first fragment recorded, or -1. */
static __always_inline int kbp_frag_ports_v6(const struct ipv6hdr *ip6, __be32 id, __u8 *proto,
					     __be16 *sport, __be16 *dport) {
	struct kbp_frag6_key key;
	struct kbp_frag6_val val;

	kbp_frag_key6(&key, ip6, id);
	if (kbp_frag_lookup6(&key, &val) < 0)
		return -1;
	*proto = val.proto;
	*sport = val.sport;
	*dport = val.dport;
	return 0;
}

#endif /* KBP_FRAG_H */
