// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * kube-bpf-proxy data plane programs (one object, bpf/lb.o):
 *   kbp_tc_pod        tc ingress of pod-facing interfaces (the tc programs: IPv4 and IPv6)
 *   kbp_tc_ext        tc ingress of external interfaces
 *   kbp_tc_ext_l3     the same on external devices without an Ethernet header (ipip, WireGuard)
 *   kbp_tc_egress     tc egress of pod-facing and external interfaces: replies back to the VIP
 *   kbp_tc_egress_l3  the same on external devices without an Ethernet header
 *   kbp_xdp_ext       XDP on external interfaces: the same load balancer before the stack (IPv4
 *                     and IPv6)
 *   kbp_xdp_tx        benchmark baseline
 *   kbp_sock4_connect, kbp_sock4_sendmsg, kbp_sock4_recvmsg, kbp_sock4_getpeername, and their
 *   IPv6 counterparts kbp_sock6_connect ... kbp_sock6_getpeername, and kbp_sock_release
 *                     cgroup v2 socket hooks: socket-level load balancing (sock.h)
 * The tc programs return TC_ACT_UNSPEC (= TCX_NEXT) to let the packet continue, so they work
 * under tcx and under clsact/cls_bpf direct-action alike.
 *
 * The programs only map the shared code's verdicts to their hook's return codes; the shared code
 * is in the headers, one concern each (docs/bpf-datapath.md lists them), lb.h on top.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <stdbool.h>

#include <bpf/bpf_helpers.h>

#include "counters.h"
#include "fib.h"
#include "host_route.h"
#include "icmp.h"
#include "lb.h"
#include "parse.h"
#include "related.h"
#include "rodata.h"
#include "service.h"
#include "sock.h"
#include "verdict.h"

static __always_inline int kbp_tc(struct __sk_buff *skb, int role, const bool l3) {
	__u32 reason = KBP_DROP_NONE, svc_id = 0;
	struct kbp_hop hop = {};
	int verdict;

	bool v6 = skb->protocol == bpf_htons(ETH_P_IPV6);

	if (v6) {
		kbp_pull_headers(skb, KBP_PULL_LEN6);
		verdict = kbp_lb6(skb, false, l3, role, &reason, &svc_id, &hop);
	} else {
		kbp_pull_headers(skb, KBP_PULL_LEN);
		verdict = kbp_lb4(skb, false, l3, role, &reason, &svc_id, &hop);
	}
	if (verdict == KBP_PASS)
		return TC_ACT_UNSPEC;
	if (verdict == KBP_REDIRECT || verdict == KBP_REDIRECT_NEIGH ||
	    verdict == KBP_REDIRECT_PEER) {
		if (l3 && kbp_push_l2(skb, &hop, skb->protocol) < 0) {
			kbp_count_drop(KBP_DROP_FIB, svc_id, skb->len);
			return TC_ACT_SHOT;
		}
		if (verdict == KBP_REDIRECT_NEIGH)
			return bpf_redirect_neigh(hop.ifindex, NULL, 0, 0);
		if (!l3 && bpf_skb_store_bytes(skb, 0, hop.macs, sizeof(hop.macs), 0) < 0) {
			kbp_count_drop(KBP_DROP_FIB, svc_id, skb->len);
			return TC_ACT_SHOT;
		}
		/* Behind kbp_host_routing, the only source of the verdict, so that with it 0 the
		 * verifier never meets the helper (see rodata.h). */
		if (kbp_host_routing && verdict == KBP_REDIRECT_PEER)
			return bpf_redirect_peer(hop.ifindex, 0);
		return bpf_redirect(hop.ifindex, 0);
	}
	if (verdict == KBP_REJECT || verdict == KBP_FRAG_NEEDED) {
		__u32 len = skb->len;
		bool reject = verdict == KBP_REJECT;
		int sent;

		if (v6)
			sent = kbp_icmp_unreach6(
			    skb, l3, reject ? KBP_ICMPV6_DEST_UNREACH : KBP_ICMPV6_PKT_TOOBIG,
			    reject ? KBP_ICMPV6_PORT_UNREACH : 0, reject ? 0 : hop.mtu, hop.l4_off);
		else
			sent = kbp_icmp_unreach4(
			    skb, l3, reject ? KBP_ICMP_PORT_UNREACH : KBP_ICMP_FRAG_NEEDED,
			    reject ? 0 : (__u16)hop.mtu);
		if (sent == 0) {
			kbp_count_drop(reason, svc_id, len);
			return bpf_redirect(skb->ifindex, 0);
		}
		reason = KBP_DROP_REJECT_FAILED;
	}
	kbp_count_drop(reason, svc_id, skb->len);
	return TC_ACT_SHOT;
}

SEC("tc")
int kbp_tc_pod(struct __sk_buff *skb) {
	return kbp_tc(skb, KBP_ROLE_POD, false);
}

SEC("tc")
int kbp_tc_ext(struct __sk_buff *skb) {
	return kbp_tc(skb, KBP_ROLE_EXT, false);
}

SEC("tc")
int kbp_tc_ext_l3(struct __sk_buff *skb) {
	return kbp_tc(skb, KBP_ROLE_EXT, true);
}

static __always_inline int kbp_tc_rev(struct __sk_buff *skb, const bool l3) {
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		kbp_pull_headers(skb, KBP_PULL_LEN6);
		if (!kbp_rev_egress6(skb, l3))
			kbp_related6_egress(skb, l3);
	} else {
		kbp_pull_headers(skb, KBP_PULL_LEN);
		if (!kbp_rev_egress4(skb, l3))
			kbp_related4_egress(skb, l3);
	}
	return TC_ACT_UNSPEC;
}

SEC("tc")
int kbp_tc_egress(struct __sk_buff *skb) {
	return kbp_tc_rev(skb, false);
}

SEC("tc")
int kbp_tc_egress_l3(struct __sk_buff *skb) {
	return kbp_tc_rev(skb, true);
}

SEC("xdp")
int kbp_xdp_ext(struct xdp_md *ctx) {
	void *data = (void *)(long)ctx->data;
	struct ethhdr *eth = data;
	__u32 reason = KBP_DROP_NONE, svc_id = 0;
	struct kbp_hop hop = {};
	int verdict;

	if ((void *)(eth + 1) > (void *)(long)ctx->data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		verdict = kbp_lb6(ctx, true, false, KBP_ROLE_EXT, &reason, &svc_id, &hop);
	else
		verdict = kbp_lb4(ctx, true, false, KBP_ROLE_EXT, &reason, &svc_id, &hop);

	/* Rejects and frag needed (packet too big) are answered by kbp_tc_ext, which can build the
	 * ICMP or ICMPv6 error. */
	if (verdict == KBP_TX)
		return XDP_TX;
	if (verdict != KBP_DROP)
		return XDP_PASS;
	kbp_count_drop(reason, svc_id, (__u32)(ctx->data_end - ctx->data));
	return XDP_DROP;
}

/* Baseline for the benchmark: the cheapest program that touches the packet and sends it back. */
SEC("xdp")
int kbp_xdp_tx(struct xdp_md *ctx) {
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	unsigned char tmp[ETH_ALEN];

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
	return XDP_TX;
}

SEC("cgroup/connect4")
int kbp_sock4_connect(struct bpf_sock_addr *ctx) {
	return kbp_sock_connect_or_send4(ctx, true);
}

SEC("cgroup/sendmsg4")
int kbp_sock4_sendmsg(struct bpf_sock_addr *ctx) {
	return kbp_sock_connect_or_send4(ctx, false);
}

SEC("cgroup/recvmsg4")
int kbp_sock4_recvmsg(struct bpf_sock_addr *ctx) {
	kbp_sock_unxlate4(ctx);
	return KBP_SOCK_PROCEED;
}

SEC("cgroup/getpeername4")
int kbp_sock4_getpeername(struct bpf_sock_addr *ctx) {
	kbp_sock_unxlate4(ctx);
	return KBP_SOCK_PROCEED;
}

SEC("cgroup/connect6")
int kbp_sock6_connect(struct bpf_sock_addr *ctx) {
	return kbp_sock_connect_or_send6(ctx, true);
}

SEC("cgroup/sendmsg6")
int kbp_sock6_sendmsg(struct bpf_sock_addr *ctx) {
	return kbp_sock_connect_or_send6(ctx, false);
}

SEC("cgroup/recvmsg6")
int kbp_sock6_recvmsg(struct bpf_sock_addr *ctx) {
	kbp_sock_unxlate6(ctx);
	return KBP_SOCK_PROCEED;
}

SEC("cgroup/getpeername6")
int kbp_sock6_getpeername(struct bpf_sock_addr *ctx) {
	kbp_sock_unxlate6(ctx);
	return KBP_SOCK_PROCEED;
}

/* Runs for every socket of the cgroup that closes: most never were translated (one lookup). */
SEC("cgroup/sock_release")
int kbp_sock_release(struct bpf_sock *ctx) {
	kbp_sock_forget(bpf_get_socket_cookie(ctx));
	return 1;
}

char _license[] SEC("license") = "Dual BSD/GPL";
