/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The service load balancer shared by the tc and XDP programs (over a `void *ctx`, see ctx.h),
 * one body for both families (lb_family.h: kbp_lb4, kbp_lb6; family.h says how).
 *
 * Packet walk at ingress (IPv4 and IPv6, TCP and UDP; everything else passes untouched):
 *   1. parse: Ethernet (none on L3 devices), IPv4 honouring ihl or IPv6 behind its extension
 *      headers, TCP or UDP; truncated or
 *      inconsistent headers pass untouched (never rewritten), and an ICMP error about a tracked
 *      flow goes to related.h. Fragments (tc only, frag.h): the first is handled as a whole
 *      packet, later ones with its ports and an L3-only rewrite.
 *   2. conntrack: the packet's tuple in kbp_ct4tcp_v1 / kbp_ct4any_v1 (kbp_ct6*). A forward hit is
 *      rewritten to the entry's xlate tuple, counted, and passed on; a reply hit only when the
 *      flow is routed (below), other replies are left to the egress program.
 *   3. service: the frontend for {daddr, dport, proto}; no frontend -> untouched.
 *   4. policy: ClusterIP only from pods; loadBalancerSourceRanges; action reject/drop.
 *   5. backend choice (affinity, random / rr / maglev), SNAT decision and port, both conntrack
 *      entries, counters, rewrite.
 *   6. SNATed flows (KBP_CT_F_ROUTE: the new source is a node address, which the stack would
 *      drop as a martian) are forwarded by tc itself in both directions (FIB lookup, TTL, MACs,
 *      redirect); XDP sends them back out with XDP_TX when the FIB says so, and otherwise
 *      leaves them to tc untouched.
 * At egress (kbp_rev_egress4/6), replies of every other flow get their source put back to the
 * service address on their way out to the client, after routing and netfilter have seen the
 * untranslated reply. So the stack sees each such flow with one consistent tuple in both
 * directions: rp_filter checks real addresses on their real interfaces, and netfilter
 * conntrack (an INVALID drop rule, a CNI's masquerade) sees a normal connection.
 */
#ifndef KBP_LB_H
#define KBP_LB_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "clock.h"
#include "config.h"
#include "conntrack.h"
#include "counters.h"
#include "ctx.h"
#include "family.h"
#include "fib.h"
#include "host_route.h"
#include "maps.h"
#include "nat.h"
#include "parse.h"
#include "policy.h"
#include "related.h"
#include "rodata.h"
#include "select.h"
#include "service.h"
#include "verdict.h"

#define KBP_FAM 4
#include "lb_family.h"
#undef KBP_FAM
#define KBP_FAM 6
#include "lb_family.h"
#undef KBP_FAM

#endif /* KBP_LB_H */
