// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* kube-bpf-proxy data plane programs. */
#include <linux/if_ether.h>

#include "maps.h"

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
