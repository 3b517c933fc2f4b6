/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The frontend a packet or socket address is for: the exact entry, else the addr-0 NodePort entry
 * on a node address, then the internal-scope entry for traffic from pods (service_family.h, once
 * per family).
 */
#ifndef KBP_SERVICE_H
#define KBP_SERVICE_H

#include <linux/types.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "config.h"
#include "family.h"
#include "maps.h"
#include "parse.h"

/* Which interface the packet arrived on decides ClusterIP access and the SNAT need. */
enum kbp_role {
	KBP_ROLE_POD = 0, /* pod-facing interface: traffic from pods ("internal") */
	KBP_ROLE_EXT = 1, /* external interface: traffic from outside the node */
	/* a socket hook: a process on the node, "internal" like pods (kube-proxy's OUTPUT chains
	 * treat locally originated traffic so), and 127.0.0.0/8 reaches NodePorts */
	KBP_ROLE_HOST = 2,
};

/* Could this destination port be a NodePort? Keeps the node address lookup off the path of
 * ordinary traffic. */
static __always_inline bool kbp_nodeport_candidate(__be16 dport) {
	__u32 port = bpf_ntohs(dport);
	struct kbp_config *cfg = kbp_config_live();

	if (!cfg)
		return false;
	return cfg->nodeport_max == 0 || (port >= cfg->nodeport_min && port <= cfg->nodeport_max);
}

/* A local process may reach a NodePort on loopback, as kube-proxy's localhost NodePorts allow. */
static __always_inline bool kbp_loopback4(__be32 addr) {
	return (addr & bpf_htonl(0xff000000)) == bpf_htonl(0x7f000000);
}

/* IPv6's loopback, ::1. */
static __always_inline bool kbp_loopback6(const __be32 *addr) {
	return (addr[0] | addr[1] | addr[2]) == 0 && addr[3] == bpf_htonl(1);
}

#define KBP_FAM 4
#include "service_family.h"
#undef KBP_FAM
#define KBP_FAM 6
#include "service_family.h"
#undef KBP_FAM

#endif /* KBP_SERVICE_H */
