/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The family-generic part of sock.h, included by it once per family (family.h). */
#ifndef KBP_FAM
#include "sock.h"
#else

#define KBP_SOCKREV_KEY struct KBP_FAM_NAME(kbp_sockrev, _key)
#define KBP_SOCKREV_VAL struct KBP_FAM_NAME(kbp_sockrev, _val)

/* A new reverse entry goes into its socket's slots in kbp_sockidx_v1 (kbp_sock_release deletes
 * it with them). Two datagrams of one socket at once on two CPUs may take one slot: the entry lost
 * there is left to the LRU. */
static __always_inline void KBP_F(kbp_sock_remember)(const KBP_SOCKREV_KEY *rk) {
	struct kbp_sockidx *idx = bpf_map_lookup_elem(&kbp_sockidx_v1, &rk->cookie);
	struct kbp_sockidx_slot *slot;

	if (!idx) {
		struct kbp_sockidx fresh = {};

		bpf_map_update_elem(&kbp_sockidx_v1, &rk->cookie, &fresh, BPF_NOEXIST);
		idx = bpf_map_lookup_elem(&kbp_sockidx_v1, &rk->cookie);
		if (!idx)
			return; /* the map is full: the entry is left to the LRU */
	}
	slot = &idx->slots[idx->next % KBP_SOCKIDX_SLOTS];
	idx->next += 1;
#if KBP_FAM == 4
	slot->addr[0] = rk->addr;
	slot->family = KBP_SOCKIDX_V4;
#else
	KBP_ADDR_SET(slot->addr, rk->addr);
	slot->family = KBP_SOCKIDX_V6;
#endif
	slot->port = rk->port;
}

/*
 * The decision for a socket address of this family: p holds the destination the process asked
 * for and the socket's bound source (zero where unbound). Returns KBP_SOCK_TRANSLATED with *to
 * the backend (and the reverse entry written), KBP_SOCK_UNTOUCHED (not a service, or a socket the
 * hooks do not serve) or KBP_SOCK_REFUSED (service without endpoints, traffic policy with none for
 * this scope, source outside loadBalancerSourceRanges, backend missing).
 */
static __always_inline int KBP_F(kbp_sock_xlate)(struct bpf_sock_addr *ctx, KBP_PKT *p,
						 bool connect, KBP_BACKEND *to) {
	struct kbp_svc_val sv;
	KBP_SOCKREV_KEY rk = {};
	KBP_SOCKREV_VAL rv = {};
	struct kbp_config *cfg;
	__u32 backend_id, reason = KBP_DROP_NONE;
	bool known;
	int verdict;

	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return KBP_SOCK_UNTOUCHED;
	if (KBP_F(kbp_lookup_service)(p, KBP_ROLE_HOST, &sv) < 0)
		return KBP_SOCK_UNTOUCHED;
	if (!kbp_sock_served(ctx))
		return KBP_SOCK_UNTOUCHED;
	cfg = kbp_config_live();
	if (!cfg)
		return KBP_SOCK_UNTOUCHED;

	if (KBP_F(kbp_addr_zero)(p->saddr))
		KBP_ADDR_SET(p->saddr, cfg->KBP_FAM_NAME(snat_addr, ));
	if (!p->sport)
		p->sport = (__be16)bpf_get_prandom_u32();

	verdict = KBP_F(kbp_service_policy)(&sv, p, &reason);
	if (verdict != KBP_PASS) {
		kbp_count_drop(reason, sv.svc_id, 0);
		if (verdict == KBP_REJECT && kbp_sock_set_retval)
			bpf_set_retval(-KBP_ECONNREFUSED);
		return KBP_SOCK_REFUSED;
	}
	backend_id = KBP_F(kbp_select_backend)(&sv, p, cfg, kbp_now(), to);
	if (!backend_id) {
		kbp_count_drop(KBP_DROP_BACKEND_MISSING, sv.svc_id, 0);
		return KBP_SOCK_REFUSED;
	}

	rk.cookie = bpf_get_socket_cookie(ctx);
	KBP_ADDR_SET(rk.addr, to->addr);
	rk.port = to->port;
	KBP_ADDR_SET(rv.addr, p->daddr);
	rv.port = p->dport;
	rv.svc_id = sv.svc_id;
	known = bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_sockrev, _v1), &rk) != NULL;
	/* A connect is a new connection; datagrams count once per socket and backend. */
	if (connect || !known) {
		kbp_count_flow(sv.svc_id, backend_id, 0, KBP_COUNT_NEW);
	}
	bpf_map_update_elem(&KBP_FAM_NAME(kbp_sockrev, _v1), &rk, &rv, BPF_ANY);
	if (!known)
		KBP_F(kbp_sock_remember)(&rk);
	return KBP_SOCK_TRANSLATED;
}

/* recvmsg and getpeername: is rk (addr and port set: the peer the kernel reports) a backend this
 * socket was translated to? Then *out is the service address it asked for. */
static __always_inline bool KBP_F(kbp_sock_rev)(struct bpf_sock_addr *ctx, KBP_SOCKREV_KEY *rk,
						KBP_SOCKREV_VAL *out) {
	KBP_SOCKREV_VAL *found;

	rk->cookie = bpf_get_socket_cookie(ctx);
	found = bpf_map_lookup_elem(&KBP_FAM_NAME(kbp_sockrev, _v1), rk);
	if (!found)
		return false;
	*out = *found;
	return true;
}

#undef KBP_SOCKREV_KEY
#undef KBP_SOCKREV_VAL

#endif /* KBP_FAM */
