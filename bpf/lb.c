// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * kube-bpf-proxy data plane programs (one object, bpf/lb.o):
 *   kbp_tc_pod   tc ingress of pod-facing interfaces
 *   kbp_tc_ext   tc ingress of external interfaces
 *   kbp_xdp_ext  XDP on external interfaces: the same load balancer before the stack
 *   kbp_xdp_tx   benchmark baseline
 * The tc programs return TC_ACT_UNSPEC (= TCX_NEXT) to let the packet continue, so they work
 * under tcx and under clsact/cls_bpf direct-action alike.
 */
#include "lb_common.h"

/* Linear bytes the parser wants: Ethernet + the longest IPv4 header + a TCP header. */
#define KBP_PULL_LEN (sizeof(struct ethhdr) + 60 + sizeof(struct tcphdr))
/* Room for the quote of an ICMP error: the original IPv4 header (<= 60) and 8 bytes of it. */
#define KBP_QUOTE_MAX (60 + 8)

/* linux/icmp.h pulls in libc socket headers, so the 8-byte ICMP header is spelled out here. */
#define KBP_ICMP_DEST_UNREACH 3
#define KBP_ICMP_PORT_UNREACH 3

struct kbp_icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be32 unused;
};

struct kbp_icmp_err {
	struct kbp_icmphdr icmp;
	__u8 quote[KBP_QUOTE_MAX];
};

static __always_inline __u16 kbp_csum_buf(void *buf, __u32 len) {
	return ~kbp_csum_fold((__u32)bpf_csum_diff(NULL, 0, buf, len, 0));
}

/*
 * Turns the packet into an ICMP port unreachable to its sender, quoting its IPv4 header and the
 * first 8 bytes after it (RFC 792), and sends it back out of the interface it came in on.
 * This is kube-proxy's REJECT for services without endpoints.
 */
static __always_inline int kbp_reject4(struct __sk_buff *skb) {
	struct kbp_icmp_err err = {};
	struct ethhdr eth;
	struct iphdr ip = {};
	__u8 mac[ETH_ALEN];
	__u32 ihl_len, quote_len, l3_len;
	__u8 ihl;

	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0 ||
	    bpf_skb_load_bytes(skb, sizeof(eth), &ihl, 1) < 0)
		return -1;
	ihl_len = (ihl & 0x0f) * 4;
	if (ihl_len < sizeof(struct iphdr))
		return -1;
	quote_len = ihl_len + 8;
	if (bpf_skb_load_bytes(skb, sizeof(eth), err.quote, quote_len) < 0)
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
	err.icmp.code = KBP_ICMP_PORT_UNREACH;
	err.icmp.checksum = kbp_csum_buf(&err, sizeof(err.icmp) + quote_len);

	__builtin_memcpy(mac, eth.h_source, ETH_ALEN);
	__builtin_memcpy(eth.h_source, eth.h_dest, ETH_ALEN);
	__builtin_memcpy(eth.h_dest, mac, ETH_ALEN);

	if (bpf_skb_change_tail(skb, sizeof(eth) + l3_len, 0) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) < 0 ||
	    bpf_skb_store_bytes(skb, sizeof(eth), &ip, sizeof(ip), 0) < 0 ||
	    bpf_skb_store_bytes(skb, sizeof(eth) + sizeof(ip), &err, sizeof(err.icmp) + quote_len,
				0) < 0)
		return -1;
	return 0;
}

static __always_inline int kbp_tc(struct __sk_buff *skb, int role) {
	__u32 reason = KBP_DROP_NONE, svc_id = 0, ifindex = 0;
	int verdict;

	/* Only when the headers are not all linear yet: small packets are linear as they are. */
	__u32 want = skb->len < KBP_PULL_LEN ? skb->len : KBP_PULL_LEN;

	if (skb->data_end - skb->data < want)
		bpf_skb_pull_data(skb, want);

	verdict = kbp_lb4(skb, false, role, &reason, &svc_id, &ifindex);
	if (verdict == KBP_PASS)
		return TC_ACT_UNSPEC;
	if (verdict == KBP_REDIRECT)
		return bpf_redirect(ifindex, 0);
	if (verdict == KBP_REDIRECT_NEIGH)
		return bpf_redirect_neigh(ifindex, NULL, 0, 0);
	if (verdict == KBP_REJECT) {
		__u32 len = skb->len;

		if (kbp_reject4(skb) == 0) {
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
	return kbp_tc(skb, KBP_ROLE_POD);
}

SEC("tc")
int kbp_tc_ext(struct __sk_buff *skb) {
	return kbp_tc(skb, KBP_ROLE_EXT);
}

SEC("xdp")
int kbp_xdp_ext(struct xdp_md *ctx) {
	__u32 reason = KBP_DROP_NONE, svc_id = 0, ifindex = 0;
	int verdict = kbp_lb4(ctx, true, KBP_ROLE_EXT, &reason, &svc_id, &ifindex);

	/* Rejects are answered by kbp_tc_ext, which can build the ICMP error. */
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

char _license[] SEC("license") = "Dual BSD/GPL";
