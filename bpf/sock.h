/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Socket-level load balancing on the cgroup v2 socket hooks: a process's connect() or UDP
 * sendmsg() to a service address is rewritten to a backend before any packet exists, so traffic
 * from the node's own network namespace (which never crosses a tc ingress hook) is balanced by
 * the same maps and the same decisions as the tc path: service lookup (internal scope, as for
 * pods), loadBalancerSourceRanges, reject/drop actions, affinity and the backend algorithm.
 *
 * No conntrack entry is made: the socket itself talks to the backend, so its packets need no
 * rewriting. kbp_sockrev4_v1 remembers, per socket and backend, the service address the socket
 * asked for; recvmsg (UDP) and getpeername report that address, so the application only ever
 * sees the service.
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

#include "config.h"
#include "counters.h"
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

/*
 * Rewrites ctx's destination from a service address to a backend. Returns KBP_SOCK_PROCEED
 * (translated or not ours) or KBP_SOCK_REJECT (service without endpoints, traffic policy with
 * none for this scope, source outside loadBalancerSourceRanges, backend missing).
 */
static __always_inline int kbp_sock_xlate4(struct bpf_sock_addr *ctx, bool connect) {
	struct kbp_pkt4 p = {};
	struct kbp_svc_val sv;
	struct kbp_sockrev4_key rk = {};
	struct kbp_sockrev4_val rv = {};
	struct kbp_backend4 *be;
	struct kbp_config *cfg;
	struct bpf_sock *sk;
	__u32 backend_id = 0, reason = KBP_DROP_NONE;
	__u32 proto = ctx->protocol;
	int verdict;

	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return KBP_SOCK_PROCEED;
	p.daddr = ctx->user_ip4;
	p.dport = (__be16)ctx->user_port;
	p.proto = proto;
	if (kbp_lookup_service4(&p, KBP_ROLE_HOST, &sv) < 0)
		return KBP_SOCK_PROCEED;
	if (!kbp_sock_served(ctx))
		return KBP_SOCK_PROCEED;
	cfg = kbp_config_live();
	if (!cfg)
		return KBP_SOCK_PROCEED;

	sk = ctx->sk;
	if (sk) {
		p.saddr = sk->src_ip4;
		p.sport = bpf_htons((__u16)sk->src_port);
	}
	if (!p.saddr)
		p.saddr = cfg->snat_addr4;
	if (!p.sport)
		p.sport = (__be16)bpf_get_prandom_u32();

	verdict = kbp_service_policy4(&sv, &p, &reason);
	if (verdict != KBP_PASS) {
		kbp_count_drop(reason, sv.svc_id, 0);
		if (verdict == KBP_REJECT && kbp_sock_set_retval)
			bpf_set_retval(-KBP_ECONNREFUSED);
		return KBP_SOCK_REJECT;
	}
	be = kbp_select_backend4(&sv, &p, cfg, kbp_now(), &backend_id);
	if (!be) {
		kbp_count_drop(KBP_DROP_BACKEND_MISSING, sv.svc_id, 0);
		return KBP_SOCK_REJECT;
	}

	rk.cookie = bpf_get_socket_cookie(ctx);
	rk.addr = be->addr;
	rk.port = be->port;
	rv.addr = p.daddr;
	rv.port = p.dport;
	rv.svc_id = sv.svc_id;
	/* A connect is a new connection; datagrams count once per socket and backend. */
	if (connect || !bpf_map_lookup_elem(&kbp_sockrev4_v1, &rk)) {
		kbp_count_new_conn(&kbp_svcst_v1, sv.svc_id);
		kbp_count_new_conn(&kbp_best_v1, backend_id);
	}
	bpf_map_update_elem(&kbp_sockrev4_v1, &rk, &rv, BPF_ANY);

	ctx->user_ip4 = be->addr;
	ctx->user_port = be->port;
	return KBP_SOCK_PROCEED;
}

/* recvmsg and getpeername: a backend address this socket was translated to reads as the
 * service address. These hooks must always proceed. */
static __always_inline void kbp_sock_rev4(struct bpf_sock_addr *ctx) {
	struct kbp_sockrev4_key rk = {};
	struct kbp_sockrev4_val *rv;

	rk.cookie = bpf_get_socket_cookie(ctx);
	rk.addr = ctx->user_ip4;
	rk.port = (__be16)ctx->user_port;
	rv = bpf_map_lookup_elem(&kbp_sockrev4_v1, &rk);
	if (!rv)
		return;
	ctx->user_ip4 = rv->addr;
	ctx->user_port = rv->port;
}

#endif /* KBP_SOCK_H */
