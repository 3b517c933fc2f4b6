/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The program context, tc or XDP. The shared code takes it as `void *ctx` plus a compile-time
 * `xdp` flag; with __always_inline the branch for the other hook disappears, so each program only
 * contains (and the verifier only sees) its own context accesses.
 */
#ifndef KBP_CTX_H
#define KBP_CTX_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

/* Bytes before the IPv4 header: Ethernet, or nothing on L3 devices (ipip, WireGuard). */
#define KBP_L2_LEN(l3) ((l3) ? 0u : (__u32)sizeof(struct ethhdr))

static __always_inline void *kbp_data(void *ctx, const bool xdp) {
	if (xdp)
		return (void *)(long)((struct xdp_md *)ctx)->data;
	return (void *)(long)((struct __sk_buff *)ctx)->data;
}

static __always_inline void *kbp_data_end(void *ctx, const bool xdp) {
	if (xdp)
		return (void *)(long)((struct xdp_md *)ctx)->data_end;
	return (void *)(long)((struct __sk_buff *)ctx)->data_end;
}

/* The interface the packet arrived on (tc runs at ingress here). */
static __always_inline __u32 kbp_ingress_ifindex(void *ctx, const bool xdp) {
	if (xdp)
		return ((struct xdp_md *)ctx)->ingress_ifindex;
	return ((struct __sk_buff *)ctx)->ifindex;
}

static __always_inline __u32 kbp_frame_len(void *ctx, const bool xdp) {
	if (xdp)
		return (__u32)(kbp_data_end(ctx, xdp) - kbp_data(ctx, xdp));
	return ((struct __sk_buff *)ctx)->len;
}

#endif /* KBP_CTX_H */
