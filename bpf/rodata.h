/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The object's read-only globals (.rodata): load-time constants the agent sets before loading
 * (clock.h reads the clock kbp_coarse_clock selects). layout.ts `rodata` encodes them at these
 * offsets, and the agent's start-up check holds the object to exactly that: nothing else may live
 * in .rodata (no initialised struct template, no other const global).
 */
#ifndef KBP_RODATA_H
#define KBP_RODATA_H

#include <linux/types.h>

#include <bpf/bpf_helpers.h>

/* bpf_ktime_get_coarse_ns (5.11+) costs a fraction of bpf_ktime_get_ns on the per-packet path and
 * is as good for conntrack and affinity ages; set kbp_coarse_clock to 0 before loading on 5.10,
 * the verifier then never sees the call. */
const volatile __u32 kbp_coarse_clock = 1;

/* bpf_set_retval is callable from the socket hooks (the agent probes for it). With it a
 * connect() to a service without endpoints fails with ECONNREFUSED, as kube-proxy's REJECT makes
 * it; without it the kernel's EPERM for a refused hook. */
const volatile __u32 kbp_sock_set_retval = 0;

/* bpf.hostRouting resolved to bpf (host_route.h): set only where the kernel has
 * bpf_redirect_peer and bpf_redirect_neigh (the agent probes both), so with 0 the verifier never
 * sees the peer redirect. */
const volatile __u32 kbp_host_routing = 0;

#endif /* KBP_RODATA_H */
