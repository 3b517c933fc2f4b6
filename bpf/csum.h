/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* One's complement arithmetic for the Internet checksum (RFC 1071, RFC 1624). */
#ifndef KBP_CSUM_H
#define KBP_CSUM_H

#include <linux/types.h>

#include <bpf/bpf_helpers.h>

static __always_inline __u32 kbp_csum_add(__u32 sum, __u32 v) {
	sum += v;
	return sum + (sum < v);
}

static __always_inline __u16 kbp_csum_fold(__u32 sum) {
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* The RFC 1624 difference of replacing word `from` by `to` (raw memory words). */
static __always_inline __u32 kbp_csum_diff32(__u32 diff, __u32 from, __u32 to) {
	return kbp_csum_add(kbp_csum_add(diff, ~from), to);
}

/* HC' = ~(~HC + diff) */
static __always_inline __u16 kbp_csum_apply(__u16 check, __u32 diff) {
	return ~kbp_csum_fold(kbp_csum_add(diff, (__u16)~check));
}

static __always_inline __u16 kbp_csum_buf(void *buf, __u32 len) {
	return ~kbp_csum_fold((__u32)bpf_csum_diff(NULL, 0, buf, len, 0));
}

#endif /* KBP_CSUM_H */
