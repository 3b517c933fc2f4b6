/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * One body of code for both address families. A concern whose IPv4 and IPv6 code differ only in
 * their address type and maps (conntrack, backend choice, service lookup, policy, routing, the
 * load balancer itself) keeps its family-generic functions in <concern>_family.h, which the
 * concern's header includes twice, with KBP_FAM defined as 4 and then 6. The names below expand
 * to that family's struct, map and function names (kbp_ct4_key, kbp_ct6tcp_v1, kbp_lb6), and the
 * address helpers take a family's address as it is stored: a __be32, or a __be32[4] (which
 * decays to a pointer). With __always_inline, each instantiation compiles to the code it would
 * be if written out for its family.
 */
#ifndef KBP_FAMILY_H
#define KBP_FAMILY_H

#include <linux/types.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#define KBP_CAT3_(a, b, c) a##b##c
#define KBP_CAT3(a, b, c)  KBP_CAT3_(a, b, c)
/* pre, the family's digit, post: KBP_FAM_NAME(kbp_ct, tcp_v1) is kbp_ct4tcp_v1 or kbp_ct6tcp_v1. */
#define KBP_FAM_NAME(pre, post) KBP_CAT3(pre, KBP_FAM, post)
/* A family's function: KBP_F(kbp_lb) is kbp_lb4 or kbp_lb6. */
#define KBP_F(name) KBP_FAM_NAME(name, )

#define KBP_PKT	     struct KBP_FAM_NAME(kbp_pkt, )
#define KBP_CT_KEY   struct KBP_FAM_NAME(kbp_ct, _key)
#define KBP_CT_VAL   struct KBP_FAM_NAME(kbp_ct, _val)
#define KBP_BACKEND  struct KBP_FAM_NAME(kbp_backend, )
#define KBP_SVC_KEY  struct KBP_FAM_NAME(kbp_svc, _key)
#define KBP_AFF_KEY  struct KBP_FAM_NAME(kbp_aff, _key)
#define KBP_SRCR_KEY struct KBP_FAM_NAME(kbp_srcr, _key)

/* dst = src, both a family's address field (a __be32 or a __be32[4]) of the same family. */
#define KBP_ADDR_SET(dst, src) __builtin_memcpy(&(dst), &(src), sizeof(dst))

static __always_inline bool kbp_addr_eq4(__be32 a, __be32 b) {
	return a == b;
}

static __always_inline bool kbp_addr_eq6(const __be32 *a, const __be32 *b) {
	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3])) == 0;
}

static __always_inline bool kbp_addr_zero4(__be32 a) {
	return a == 0;
}

static __always_inline bool kbp_addr_zero6(const __be32 *a) {
	return (a[0] | a[1] | a[2] | a[3]) == 0;
}

#endif /* KBP_FAMILY_H */
