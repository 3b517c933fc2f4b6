/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The flow hash that indexes Maglev tables; flow-hash.ts computes the same. */
#ifndef KBP_HASH_H
#define KBP_HASH_H

#include <linux/types.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "parse.h"

static __always_inline __u32 kbp_rol32(__u32 w, __u32 s) {
	return (w << s) | (w >> (32 - s));
}

/* Bob Jenkins' lookup3 jhash_3words as in the Linux kernel. */
static __always_inline __u32 kbp_jhash_3words(__u32 a, __u32 b, __u32 c, __u32 initval) {
	initval += 0xdeadbeef + (3 << 2);
	a += initval;
	b += initval;
	c += initval;
	c ^= b;
	c -= kbp_rol32(b, 14);
	a ^= c;
	a -= kbp_rol32(c, 11);
	b ^= a;
	b -= kbp_rol32(a, 25);
	c ^= b;
	c -= kbp_rol32(b, 16);
	a ^= c;
	a -= kbp_rol32(c, 4);
	b ^= a;
	b -= kbp_rol32(a, 14);
	c ^= b;
	c -= kbp_rol32(b, 24);
	return c;
}

/* The destination address is left out so every address of a service picks the same backend. */
static __always_inline __u32 kbp_flow_hash4(const struct kbp_pkt4 *p, __u32 seed) {
	return kbp_jhash_3words(bpf_ntohl(p->saddr),
				((__u32)bpf_ntohs(p->sport) << 16) | bpf_ntohs(p->dport), p->proto,
				seed);
}

/* IPv6: the source address folded to one word (XOR of its four), then as IPv4. */
static __always_inline __u32 kbp_flow_hash6(const struct kbp_pkt6 *p, __u32 seed) {
	__be32 folded = p->saddr[0] ^ p->saddr[1] ^ p->saddr[2] ^ p->saddr[3];

	return kbp_jhash_3words(bpf_ntohl(folded),
				((__u32)bpf_ntohs(p->sport) << 16) | bpf_ntohs(p->dport), p->proto,
				seed);
}

#endif /* KBP_HASH_H */
