/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Socket-level load balancing on the cgroup v2 socket hooks: a process's connect() or UDP
 * sendmsg() to a service address is rewritten to a backend before any packet exists, so traffic
 * from the node's own network namespace (which never crosses a tc ingress hook) is balanced by
 * the same maps and the same decisions as the tc path: service lookup (internal scope, as for
 * pods), loadBalancerSourceRanges, reject/drop actions, affinity and the backend algorithm.
 *
 * No conntrack entry is made: the socket itself talks to the backend, so its packets need no
 * rewriting. kbp_sockrev4_v1 (kbp_sockrev6_v1) remembers, per socket and backend, the service
 * address the socket asked for; recvmsg (UDP) and getpeername report that address, so the
 * application only ever sees the service. Both families share the decision (sock_family.h, once
 * per family); an IPv6 socket's IPv4-mapped peer (::ffff:a.b.c.d) is decided as IPv4.
 *
 * The client of a socket (affinity key, Maglev hash input) is the socket's bound source address,
 * or the SNAT node address while it has none: at connect() the kernel has not chosen a source
 * yet, and a process on the node reaches services from a node address. An unbound source port
 * hashes as a random one, so Maglev spreads unbound sockets as random does.
 */
#ifndef KBP_SOCK_H
#define KBP_SOCK_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <stdbool.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "clock.h"
#include "config.h"
#include "counters.h"
#include "family.h"
#include "maps.h"
#include "parse.h"
#include "policy.h"
#include "rodata.h"
#include "select.h"
#include "service.h"
#include "verdict.h"

#define KBP_ECONNREFUSED 111

#define KBP_SOCK_REJECT	 0 /* the hook refuses the call */
#define KBP_SOCK_PROCEED 1

/* Whether the socket hooks serve this socket: every socket under KBP_SOCK_SCOPE_ALL, else only
 * those of the agent's network namespace (pods keep the tc path, which tracks their flows). */
static __always_inline bool kbp_sock_served(struct bpf_sock_addr *ctx) {
	__u32 zero = 0;
	struct kbp_sockcfg *sc = bpf_map_lookup_elem(&kbp_sockcfg_v1, &zero);

	if (!sc)
		return false;
	if (sc->scope == KBP_SOCK_SCOPE_ALL)
		return true;
	return sc->host_netns_cookie != 0 && bpf_get_netns_cookie(ctx) == sc->host_netns_cookie;
}

/* What kbp_sock_xlate4/6 did with a socket address. */
#define KBP_SOCK_UNTOUCHED  0
#define KBP_SOCK_TRANSLATED 1
#define KBP_SOCK_REFUSED    2

#define KBP_FAM 4
#include "sock_family.h"
#undef KBP_FAM
#define KBP_FAM 6
#include "sock_family.h"
#undef KBP_FAM

/* ::ffff:a.b.c.d, how a dual-stack IPv6 socket names an IPv4 peer. */
static __always_inline bool kbp_v4mapped(const __be32 *a) {
	return (a[0] | a[1]) == 0 && a[2] == bpf_htonl(0xffff);
}

/* ctx's IPv6 address, word by word: the context allows 4-byte accesses of user_ip6. */
static __always_inline void kbp_sock_user_ip6(const struct bpf_sock_addr *ctx, __be32 *out) {
	out[0] = ctx->user_ip6[0];
	out[1] = ctx->user_ip6[1];
	out[2] = ctx->user_ip6[2];
	out[3] = ctx->user_ip6[3];
}

static __always_inline void kbp_sock_set_user_ip6(struct bpf_sock_addr *ctx, const __be32 *a) {
	ctx->user_ip6[0] = a[0];
	ctx->user_ip6[1] = a[1];
	ctx->user_ip6[2] = a[2];
	ctx->user_ip6[3] = a[3];
}

static __always_inline int kbp_sock_hook_result(int xlate) {
	return xlate == KBP_SOCK_REFUSED ? KBP_SOCK_REJECT : KBP_SOCK_PROCEED;
}

/* connect4 and sendmsg4: ctx's destination, a service address, becomes a backend. */
static __always_inline int kbp_sock_connect_or_send4(struct bpf_sock_addr *ctx, bool connect) {
	struct kbp_pkt4 p = {.daddr = ctx->user_ip4, .dport = (__be16)ctx->user_port};
	struct bpf_sock *sk = ctx->sk;
	struct kbp_backend4 to;
	int xlate;

	p.proto = ctx->protocol;
	if (sk) {
		p.saddr = sk->src_ip4;
		p.sport = bpf_htons((__u16)sk->src_port);
	}
	xlate = kbp_sock_xlate4(ctx, &p, connect, &to);
	if (xlate == KBP_SOCK_TRANSLATED) {
		ctx->user_ip4 = to.addr;
		ctx->user_port = to.port;
	}
	return kbp_sock_hook_result(xlate);
}

/*
 * connect6 and sendmsg6. An IPv4-mapped destination is an IPv4 service to the socket (the kernel
 * speaks IPv4 to it), so it is decided in the IPv4 maps with the IPv4 source, and the backend
 * written back mapped; its reverse entry is an IPv4 one. (A mapped sendmsg never gets here: the
 * kernel hands such datagrams to the IPv4 path and its sendmsg4 hook.)
 */
static __always_inline int kbp_sock_connect_or_send6(struct bpf_sock_addr *ctx, bool connect) {
	struct kbp_pkt6 p = {.dport = (__be16)ctx->user_port};
	struct bpf_sock *sk = ctx->sk;
	int xlate;

	p.proto = ctx->protocol;
	kbp_sock_user_ip6(ctx, p.daddr);
	if (sk) {
		p.saddr[0] = sk->src_ip6[0];
		p.saddr[1] = sk->src_ip6[1];
		p.saddr[2] = sk->src_ip6[2];
		p.saddr[3] = sk->src_ip6[3];
		p.sport = bpf_htons((__u16)sk->src_port);
	}
	if (kbp_v4mapped(p.daddr)) {
		/* The source counts when bound to a mapped address too; else the node's. */
		struct kbp_pkt4 p4 = {.daddr = p.daddr[3], .dport = p.dport, .sport = p.sport};
		struct kbp_backend4 to;

		p4.proto = p.proto;
		if (kbp_v4mapped(p.saddr))
			p4.saddr = p.saddr[3];
		xlate = kbp_sock_xlate4(ctx, &p4, connect, &to);
		if (xlate == KBP_SOCK_TRANSLATED) {
			ctx->user_ip6[3] = to.addr;
			ctx->user_port = to.port;
		}
	} else {
		struct kbp_backend6 to;

		xlate = kbp_sock_xlate6(ctx, &p, connect, &to);
		if (xlate == KBP_SOCK_TRANSLATED) {
			kbp_sock_set_user_ip6(ctx, to.addr);
			ctx->user_port = to.port;
		}
	}
	return kbp_sock_hook_result(xlate);
}

/* recvmsg4 and getpeername4: a backend address this socket was translated to reads as the
 * service address. These hooks must always proceed. */
static __always_inline void kbp_sock_unxlate4(struct bpf_sock_addr *ctx) {
	struct kbp_sockrev4_key rk = {.addr = ctx->user_ip4, .port = (__be16)ctx->user_port};
	struct kbp_sockrev4_val rv;

	if (!kbp_sock_rev4(ctx, &rk, &rv))
		return;
	ctx->user_ip4 = rv.addr;
	ctx->user_port = rv.port;
}

/* recvmsg6 and getpeername6; an IPv4-mapped peer was translated by the IPv4 maps. */
static __always_inline void kbp_sock_unxlate6(struct bpf_sock_addr *ctx) {
	__be32 addr[4];
	__be16 port = (__be16)ctx->user_port;

	kbp_sock_user_ip6(ctx, addr);
	if (kbp_v4mapped(addr)) {
		struct kbp_sockrev4_key rk = {.addr = addr[3], .port = port};
		struct kbp_sockrev4_val rv;

		if (!kbp_sock_rev4(ctx, &rk, &rv))
			return;
		ctx->user_ip6[3] = rv.addr;
		ctx->user_port = rv.port;
	} else {
		struct kbp_sockrev6_key rk = {.port = port};
		struct kbp_sockrev6_val rv;

		KBP_ADDR_SET(rk.addr, addr);
		if (!kbp_sock_rev6(ctx, &rk, &rv))
			return;
		kbp_sock_set_user_ip6(ctx, rv.addr);
		ctx->user_port = rv.port;
	}
}

/* sock_release: the socket goes, and the reverse entries it made (kbp_sockidx_v1) with it. */
static __always_inline void kbp_sock_forget(__u64 cookie) {
	struct kbp_sockidx *idx = bpf_map_lookup_elem(&kbp_sockidx_v1, &cookie);

	if (!idx)
		return;
#pragma unroll
	for (int i = 0; i < KBP_SOCKIDX_SLOTS; i++) {
		const struct kbp_sockidx_slot *slot = &idx->slots[i];

		if (slot->family == KBP_SOCKIDX_V4) {
			struct kbp_sockrev4_key rk = {
			    .cookie = cookie, .addr = slot->addr[0], .port = slot->port};

			bpf_map_delete_elem(&kbp_sockrev4_v1, &rk);
		} else if (slot->family == KBP_SOCKIDX_V6) {
			struct kbp_sockrev6_key rk = {.cookie = cookie, .port = slot->port};

			KBP_ADDR_SET(rk.addr, slot->addr);
			bpf_map_delete_elem(&kbp_sockrev6_v1, &rk);
		}
	}
	bpf_map_delete_elem(&kbp_sockidx_v1, &cookie);
}

#endif /* KBP_SOCK_H */
