// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * kube-bpf-proxy data plane programs (one object, bpf/lb.o):
 *   kbp_tc_pod        tc ingress of pod-facing interfaces
 *   kbp_tc_ext        tc ingress of external interfaces
 *   kbp_tc_ext_l3     the same on external devices without an Ethernet header (ipip, WireGuard)
 *   kbp_tc_egress     tc egress of pod-facing and external interfaces: replies back to the VIP
 *   kbp_tc_egress_l3  the same on external devices without an Ethernet header
 *   kbp_xdp_ext       XDP on external interfaces: the same load balancer before the stack
 *   kbp_xdp_tx        benchmark baseline
 *   kbp_sock_connect4, kbp_sock_sendmsg4, kbp_sock_recvmsg4, kbp_sock_getpeername4
 *                     cgroup v2 socket hooks: socket-level load balancing (lb_sock.h)
 * The tc programs return TC_ACT_UNSPEC (= TCX_NEXT) to let the packet continue, so they work
 * under tcx and under clsact/cls_bpf direct-action alike.
 */
#include "lb_sock.h"

/* Linear bytes the parser wants: Ethernet + the longest IPv4 header + a TCP header. */
#define KBP_PULL_LEN (sizeof(struct ethhdr) + 60 + sizeof(struct tcphdr))
/* Room for the quote of an ICMP error: the original IPv4 header (<= 60) and 8 bytes of it. */
#define KBP_QUOTE_MAX (60 + 8)

/* linux/icmp.h pulls in libc socket headers, so the 8-byte ICMP header is spelled out here. */
#define KBP_ICMP_DEST_UNREACH 3
#define KBP_ICMP_PORT_UNREACH 3
#define KBP_ICMP_FRAG_NEEDED  4

struct kbp_icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be16 unused;
	__be16 mtu; /* next-hop MTU of a frag needed (RFC 1191), else 0 */
};

struct kbp_icmp_err {
	struct kbp_icmphdr icmp;
	__u8 quote[KBP_QUOTE_MAX];
};

static __always_inline __u16 kbp_csum_buf(void *buf, __u32 len) {
	return ~kbp_csum_fold((__u32)bpf_csum_diff(NULL, 0, buf, len, 0));
}

/*
 * Turns the packet into an ICMP destination unreachable to its sender, quoting its IPv4 header
 * and the first 8 bytes after it (RFC 792), to be sent back out of the interface it came in
 * on: port unreachable is kube-proxy's REJECT for services without endpoints; frag needed (with
 * the route's MTU) answers a routed packet too big to forward, so path MTU discovery works.
 * The error comes from the address the sender used, so its socket accepts it.
 */
static __always_inline int kbp_icmp_unreach4(struct __sk_buff *skb, const bool l3, __u8 code,
					     __u16 mtu) {
	const __u32 l2 = KBP_L2_LEN(l3);
	struct kbp_icmp_err err = {};
	struct ethhdr eth;
	struct iphdr ip = {};
	__u8 mac[ETH_ALEN];
	__u32 ihl_len, quote_len, l3_len;
	__u8 ihl;

	if ((!l3 && bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0) ||
	    bpf_skb_load_bytes(skb, l2, &ihl, 1) < 0)
		return -1;
	ihl_len = (ihl & 0x0f) * 4;
	if (ihl_len < sizeof(struct iphdr))
		return -1;
	quote_len = ihl_len + 8;
	if (bpf_skb_load_bytes(skb, l2, err.quote, quote_len) < 0)
		return -1;
	struct iphdr *orig = (struct iphdr *)err.quote;

	l3_len = sizeof(ip) + sizeof(err.icmp) + quote_len;
	ip.version = 4;
	ip.ihl = 5;
	ip.tot_len = bpf_htons(l3_len);
	ip.ttl = 64;
	ip.protocol = IPPROTO_ICMP;
	ip.saddr = orig->daddr;
	ip.daddr = orig->saddr;
	ip.check = kbp_csum_buf(&ip, sizeof(ip));
	err.icmp.type = KBP_ICMP_DEST_UNREACH;
	err.icmp.code = code;
	err.icmp.mtu = bpf_htons(mtu);
	err.icmp.checksum = kbp_csum_buf(&err, sizeof(err.icmp) + quote_len);

	/* Shrinking also resets GSO state: a GRO-merged packet answers as one. */
	if (bpf_skb_change_tail(skb, l2 + l3_len, 0) < 0)
		return -1;
	if (!l3) {
		__builtin_memcpy(mac, eth.h_source, ETH_ALEN);
		__builtin_memcpy(eth.h_source, eth.h_dest, ETH_ALEN);
		__builtin_memcpy(eth.h_dest, mac, ETH_ALEN);
		if (bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) < 0)
			return -1;
	}
	if (bpf_skb_store_bytes(skb, l2, &ip, sizeof(ip), 0) < 0 ||
	    bpf_skb_store_bytes(skb, l2 + sizeof(ip), &err, sizeof(err.icmp) + quote_len, 0) < 0)
		return -1;
	return 0;
}

/*
 * A packet from an L3 device has no Ethernet header, but redirecting to an Ethernet device
 * needs one (the kernel strips it again for an L3 target): room for it, with the FIB's MACs.
 */
static __always_inline int kbp_push_l2(struct __sk_buff *skb, const struct kbp_hop *hop) {
	struct ethhdr eth;

	/* Field by field: an initialiser would be a .rodata template, which holds only the
	 * load-time constants layout.ts describes. */
	eth.h_proto = bpf_htons(ETH_P_IP);
	__builtin_memcpy(eth.h_dest, hop->macs, ETH_ALEN);
	__builtin_memcpy(eth.h_source, hop->macs + ETH_ALEN, ETH_ALEN);
	if (bpf_skb_change_head(skb, sizeof(eth), 0) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) < 0 ? -1 : 0;
}

/* Makes the headers the parser reads linear; small packets are linear as they are. */
static __always_inline void kbp_pull_headers(struct __sk_buff *skb) {
	__u32 want = skb->len < KBP_PULL_LEN ? skb->len : KBP_PULL_LEN;

	if (skb->data_end - skb->data < want)
		bpf_skb_pull_data(skb, want);
}

static __always_inline int kbp_tc(struct __sk_buff *skb, int role, const bool l3) {
	__u32 reason = KBP_DROP_NONE, svc_id = 0;
	struct kbp_hop hop = {};
	int verdict;

	kbp_pull_headers(skb);
	verdict = kbp_lb4(skb, false, l3, role, &reason, &svc_id, &hop);
	if (verdict == KBP_PASS)
		return TC_ACT_UNSPEC;
	if (verdict == KBP_REDIRECT || verdict == KBP_REDIRECT_NEIGH) {
		if (l3 && kbp_push_l2(skb, &hop) < 0) {
			kbp_count_drop(KBP_DROP_FIB, svc_id, skb->len);
			return TC_ACT_SHOT;
		}
		if (verdict == KBP_REDIRECT_NEIGH)
			return bpf_redirect_neigh(hop.ifindex, NULL, 0, 0);
		if (!l3 && bpf_skb_store_bytes(skb, 0, hop.macs, sizeof(hop.macs), 0) < 0) {
			kbp_count_drop(KBP_DROP_FIB, svc_id, skb->len);
			return TC_ACT_SHOT;
		}
		return bpf_redirect(hop.ifindex, 0);
	}
	if (verdict == KBP_REJECT || verdict == KBP_FRAG_NEEDED) {
		__u32 len = skb->len;
		bool reject = verdict == KBP_REJECT;

		if (kbp_icmp_unreach4(skb, l3,
				      reject ? KBP_ICMP_PORT_UNREACH : KBP_ICMP_FRAG_NEEDED,
				      reject ? 0 : (__u16)hop.mtu) == 0) {
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

SEC("tc")
int kbp_tc_egress(struct __sk_buff *skb) {
	kbp_pull_headers(skb);
	kbp_rev4_egress(skb, false);
	return TC_ACT_UNSPEC;
}

SEC("tc")
int kbp_tc_egress_l3(struct __sk_buff *skb) {
	kbp_pull_headers(skb);
	kbp_rev4_egress(skb, true);
	return TC_ACT_UNSPEC;
}

SEC("xdp")
int kbp_xdp_ext(struct xdp_md *ctx) {
	__u32 reason = KBP_DROP_NONE, svc_id = 0;
	struct kbp_hop hop = {};
	int verdict = kbp_lb4(ctx, true, false, KBP_ROLE_EXT, &reason, &svc_id, &hop);

	/* Rejects and frag needed are answered by kbp_tc_ext, which can build the ICMP error. */
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
int kbp_sock_connect4(struct bpf_sock_addr *ctx) {
	return kbp_sock_xlate4(ctx, true);
}

SEC("cgroup/sendmsg4")
int kbp_sock_sendmsg4(struct bpf_sock_addr *ctx) {
	return kbp_sock_xlate4(ctx, false);
}

SEC("cgroup/recvmsg4")
int kbp_sock_recvmsg4(struct bpf_sock_addr *ctx) {
	kbp_sock_rev4(ctx);
	return KBP_SOCK_PROCEED;
}

SEC("cgroup/getpeername4")
int kbp_sock_getpeername4(struct bpf_sock_addr *ctx) {
	kbp_sock_rev4(ctx);
	return KBP_SOCK_PROCEED;
}

char _license[] SEC("license") = "Dual BSD/GPL";
