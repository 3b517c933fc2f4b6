/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * BPF host routing (bpf.hostRouting, docs/bpf-datapath.md "Host routing"): a packet of a flow
 * between two pods of this node goes from one pod's veth straight into the other pod, in both
 * directions, instead of through the node's routing, netfilter and conntrack. The FIB lookup is
 * kbp_route's (fib.h), made at the same place; this header only says which flows may take the
 * bypass and what the FIB's egress device turns the verdict into.
 *
 * Only local pods: a device the agent lists in kbp_hostif_v1 (pod veths, and the bridges of
 * bridge CNIs). Everything else, the other node's pods included, keeps the stack's path, and the
 * decision is the same for both directions of a flow (a request from a pod-facing device to a
 * listed device, its reply from a pod-facing device to a listed device), so netfilter sees each
 * flow whole or not at all: never a lone reply its INVALID rule would drop.
 */
#ifndef KBP_HOST_ROUTE_H
#define KBP_HOST_ROUTE_H

#include <linux/bpf.h>
#include <linux/types.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "fib.h"
#include "frag.h"
#include "maps.h"
#include "rodata.h"
#include "service.h"
#include "types.h"
#include "verdict.h"

/* How the programs hand a packet to a device of kbp_hostif_v1. */
enum kbp_host_if {
	/* The host end of a pod's veth: bpf_redirect_peer puts the packet on the pod's end, in
	 * the pod's namespace, without a second pass through the host's backlog. */
	KBP_HOST_IF_PEER = 1,
	/* A bridge of pod veths (the bridge CNI's cni0): out of the bridge, whose forwarding
	 * database finds the pod's port (bpf_redirect_peer cannot target a bridge). */
	KBP_HOST_IF_BRIDGE = 2,
};
_Static_assert(sizeof(enum kbp_host_if) == 4, "kbp_host_if");

/* kbp_hostif_v1: key __u32 ifindex, value enum kbp_host_if. Written by the agent for every
 * pod-facing device (and pod bridge) while bpf.hostRouting resolves to bpf; empty otherwise. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_IFADDR);
	__type(key, __u32);
	__type(value, enum kbp_host_if);
} kbp_hostif_v1 SEC(".maps");

/*
 * May this packet of a tracked flow take the bypass? tc only, with host routing loaded; from a
 * pod-facing device (requests from a pod, replies from a local backend); not a flow from outside
 * (its client is not a local pod) nor a routed (SNATed) one, which tc forwards already; not a
 * fragment: the stack reassembles a datagram's fragments and sends it on in the next hop's MTU,
 * and all of its fragments must take the same path.
 */
static __always_inline bool kbp_host_candidate(const bool xdp, int role, __u8 frag, __u8 flags) {
	return !xdp && kbp_host_routing && role == KBP_ROLE_POD && frag == KBP_PKT_WHOLE &&
	       !(flags & (KBP_CT_F_EXTERNAL | KBP_CT_F_ROUTE));
}

/*
 * kbp_route's verdict for a candidate, turned into the bypass: a local pod's device gets the
 * packet (KBP_REDIRECT_PEER into a veth's pod, KBP_REDIRECT out of a bridge, KBP_REDIRECT_NEIGH
 * when the neighbour is not resolved yet); anything else (another node, the node itself, no
 * route, TTL 1, too big) is KBP_PASS: the stack's path, as without host routing.
 */
static __always_inline int kbp_host_hop(int verdict, const struct kbp_hop *hop) {
	enum kbp_host_if *kind;

	if (verdict != KBP_REDIRECT && verdict != KBP_REDIRECT_NEIGH)
		return KBP_PASS;
	kind = bpf_map_lookup_elem(&kbp_hostif_v1, &hop->ifindex);
	if (!kind)
		return KBP_PASS;
	if (verdict == KBP_REDIRECT && *kind == KBP_HOST_IF_PEER)
		return KBP_REDIRECT_PEER;
	return verdict;
}

#endif /* KBP_HOST_ROUTE_H */
