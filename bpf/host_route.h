/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * BPF host routing (bpf.hostRouting, docs/bpf-datapath.md "Host routing"): a packet of a service
 * flow from a pod of this node goes from the pod's veth straight to its next hop, and its reply
 * straight back into the pod, instead of through the node's routing, netfilter and conntrack. The
 * FIB lookup is kbp_route's (fib.h), made at the same place; this header only says which flows may
 * take the bypass and what the FIB's egress device turns the verdict into.
 *
 * Two kinds of flow, each decided the same way for both of its directions, so that netfilter sees
 * a flow whole or not at all, never a lone reply its INVALID rule would drop:
 *  - to a local pod: a request from a pod-facing device to a device the agent lists for local pods
 *    in kbp_hostif_v1 (pod veths, the bridges of bridge CNIs); its reply the same way back. Both
 *    directions meet the same two devices, so each packet decides alone.
 *  - to a pod of another node: only where the agent proved the way there safe and wrote the
 *    destination's prefix into kbp_hostdst4/6_v1 (host-route.ts, remoteBypass: routed out of the
 *    underlay or a vxlan overlay, no masquerade of the CNI applies, no policy routing). The new
 *    flow's entries carry KBP_CT_F_HOST from then on; the request leaves by the listed device
 *    towards the other node, and the reply, at that device's tc ingress (kbp_tc_ext), goes into
 *    the pod. Everything else (host-network backends on other nodes, which the CNI masquerades
 *    towards, other tunnels) keeps the stack's path.
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
	/* A device towards other nodes (the underlay, or a vxlan overlay) through which the agent
	 * routes a prefix of kbp_hostdst4/6_v1: a KBP_CT_F_HOST request leaves by it with the FIB's
	 * MACs (bpf_redirect), or bpf_redirect_neigh. */
	KBP_HOST_IF_REMOTE = 3,
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

/* kbp_hostdst4/6_v1: other nodes' pod prefixes the agent proved safe for the bypass (LPM, value
 * 1). Written while bpf.hostRouting resolves to bpf; empty otherwise. */
struct kbp_hostdst4_key {
	__u32 prefixlen;
	__be32 addr;
};
_Static_assert(sizeof(struct kbp_hostdst4_key) == 8, "kbp_hostdst4_key");

struct kbp_hostdst6_key {
	__u32 prefixlen;
	__be32 addr[4];
};
_Static_assert(sizeof(struct kbp_hostdst6_key) == 20, "kbp_hostdst6_key");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KBP_MAX_IFADDR);
	__type(key, struct kbp_hostdst4_key);
	__type(value, __u8);
} kbp_hostdst4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KBP_MAX_IFADDR);
	__type(key, struct kbp_hostdst6_key);
	__type(value, __u8);
} kbp_hostdst6_v1 SEC(".maps");

/*
 * May this packet of a tracked flow take the bypass? tc only, with host routing loaded; from a
 * pod-facing device (requests from a pod, replies from a local backend), or a KBP_CT_F_HOST flow's
 * reply from another node; not a flow from outside (its client is not a local pod) nor a routed
 * (SNATed) one, which tc forwards already; not a fragment: the stack reassembles a datagram's
 * fragments and sends it on in the next hop's MTU, and all of its fragments must take the same
 * path.
 */
static __always_inline bool kbp_host_candidate(const bool xdp, int role, __u8 frag, __u8 flags) {
	return !xdp && kbp_host_routing && (role == KBP_ROLE_POD || flags & KBP_CT_F_HOST) &&
	       frag == KBP_PKT_WHOLE && !(flags & (KBP_CT_F_EXTERNAL | KBP_CT_F_ROUTE));
}

/* A new flow from a local pod to `addr` (a backend on another node): does it take the bypass,
 * both ways, for its whole life (KBP_CT_F_HOST)? Only with the agent's word for the prefix. */
static __always_inline bool kbp_host_remote4(__be32 addr) {
	struct kbp_hostdst4_key key = {.prefixlen = 32, .addr = addr};

	return bpf_map_lookup_elem(&kbp_hostdst4_v1, &key) != NULL;
}

static __always_inline bool kbp_host_remote6(const __be32 *addr) {
	struct kbp_hostdst6_key key = {.prefixlen = 128};

	__builtin_memcpy(key.addr, addr, sizeof(key.addr));
	return bpf_map_lookup_elem(&kbp_hostdst6_v1, &key) != NULL;
}

/*
 * kbp_route's verdict for a candidate, turned into the bypass: a local pod's device gets the
 * packet (KBP_REDIRECT_PEER into a veth's pod, KBP_REDIRECT out of a bridge, KBP_REDIRECT_NEIGH
 * when the neighbour is not resolved yet), and so does a listed device towards other nodes when
 * the flow is a KBP_CT_F_HOST one (KBP_REDIRECT with the FIB's MACs, or KBP_REDIRECT_NEIGH);
 * anything else (another node otherwise, the node itself, no route, TTL 1, too big but for a
 * KBP_CT_F_HOST flow's KBP_FRAG_NEEDED) is KBP_PASS: the stack's path, as without host routing.
 */
static __always_inline int kbp_host_hop(int verdict, const struct kbp_hop *hop, __u8 flags) {
	enum kbp_host_if *kind;

	/* Too big for the route and DF set: tc answers, as for a routed flow, so that the stack
	 * meets no packet of a flow whose reply it never sees. */
	if (verdict == KBP_FRAG_NEEDED && flags & KBP_CT_F_HOST)
		return verdict;
	if (verdict != KBP_REDIRECT && verdict != KBP_REDIRECT_NEIGH)
		return KBP_PASS;
	kind = bpf_map_lookup_elem(&kbp_hostif_v1, &hop->ifindex);
	if (!kind || (*kind == KBP_HOST_IF_REMOTE && !(flags & KBP_CT_F_HOST)))
		return KBP_PASS;
	if (verdict == KBP_REDIRECT && *kind == KBP_HOST_IF_PEER)
		return KBP_REDIRECT_PEER;
	return verdict;
}

#endif /* KBP_HOST_ROUTE_H */
