/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The key and value structs of every map, and the enums their fields carry: the layout the
 * control plane shares with the programs (docs/bpf-datapath.md, "Maps", says what each field
 * means). src/dataplanes/bpf/layout.ts states the same offsets and values; the agent checks them
 * against the loaded object's BTF at start-up, structs and enums alike.
 *
 * Every constant layout.ts uses is an enumerator, never a #define, so that it is in the BTF. clang
 * emits an enum only when an emitted type names it, so each enum here is the type of the field
 * that holds it (no variable, nothing in .rodata). Fields of one byte use a packed enum, whose
 * size the _Static_assert below it pins to that byte; flag sets are enums of single bits.
 */
#ifndef KBP_TYPES_H
#define KBP_TYPES_H

#include <linux/bpf.h>
#include <linux/types.h>

/* ---------- services (frontends) ---------- */

/* kbp_svc4_key.scope: which packets a frontend entry serves. */
enum __attribute__((packed)) kbp_scope {
	KBP_SCOPE_ALL = 0,	/* every packet */
	KBP_SCOPE_INTERNAL = 1, /* packets from pods, for a KBP_SVC_F_TWO_SCOPES frontend */
};
_Static_assert(sizeof(enum kbp_scope) == 1, "kbp_scope");

/* kbp_svc_val.action: what a new flow to the frontend gets. */
enum __attribute__((packed)) kbp_action {
	KBP_ACTION_FORWARD = 0,
	KBP_ACTION_REJECT =
	    1,		     /* no endpoints at all: ICMP port unreachable (kube-proxy's REJECT) */
	KBP_ACTION_DROP = 2, /* endpoints exist but the traffic policy allows none */
};
_Static_assert(sizeof(enum kbp_action) == 1, "kbp_action");

/* kbp_svc_val.algorithm: how a new flow picks its backend. */
enum __attribute__((packed)) kbp_algorithm {
	KBP_ALG_RANDOM = 0,
	KBP_ALG_RR = 1,
	KBP_ALG_MAGLEV = 2,
};
_Static_assert(sizeof(enum kbp_algorithm) == 1, "kbp_algorithm");

/* kbp_svc_val.flags: a set of these bits. */
enum kbp_svc_flags {
	KBP_SVC_F_EXTERNAL = 1 << 0,	 /* reachable from outside: NodePort/externalIP/LB */
	KBP_SVC_F_NODEPORT = 1 << 1,	 /* informational: a NodePort frontend */
	KBP_SVC_F_EXTERNAL_IP = 1 << 2,	 /* informational: an externalIP frontend */
	KBP_SVC_F_LOADBALANCER = 1 << 3, /* informational: a LoadBalancer IP frontend */
	KBP_SVC_F_LOCAL_ONLY = 1 << 4,	 /* informational: the backends are the local endpoints */
	KBP_SVC_F_TWO_SCOPES = 1 << 5,	 /* pods use the KBP_SCOPE_INTERNAL entry */
	KBP_SVC_F_AFFINITY = 1 << 6,	 /* sessionAffinity=ClientIP */
	KBP_SVC_F_SOURCE_RANGE = 1 << 7, /* check kbp_srcr4/6_v1 (loadBalancerSourceRanges) */
};
_Static_assert(sizeof(enum kbp_svc_flags) == 4, "kbp_svc_flags");

struct kbp_svc4_key {
	__be32 addr; /* 0: NodePort on every node address */
	__be16 port;
	__u8 proto; /* IPPROTO_TCP / IPPROTO_UDP */
	enum kbp_scope scope;
};
_Static_assert(sizeof(struct kbp_svc4_key) == 8, "kbp_svc4_key");

struct kbp_svc6_key {
	__be32 addr[4];
	__be16 port;
	__u8 proto;
	enum kbp_scope scope;
};
_Static_assert(sizeof(struct kbp_svc6_key) == 20, "kbp_svc6_key");

struct kbp_svc_val {
	__u32 svc_id;
	__u16 count;		  /* backends: slots [0, count) */
	__u16 local_count;	  /* slots [0, local_count) are node-local */
	enum kbp_svc_flags flags; /* a set of KBP_SVC_F_* */
	__u32 affinity_timeout_s;
	__u8 gen; /* live slot generation */
	enum kbp_algorithm algorithm;
	enum kbp_action action;
	__u8 pad;
	__u32 pad2;
};
_Static_assert(sizeof(struct kbp_svc_val) == 24, "kbp_svc_val");

/* ---------- backend slots ---------- */

struct kbp_slot_key {
	__u32 svc_id;
	__u16 slot;
	__u8 gen;
	__u8 pad;
};
_Static_assert(sizeof(struct kbp_slot_key) == 8, "kbp_slot_key");

/* A slot names its backend and holds the backend's address and port too (an id's address and port
 * never change: one id per backend address:port), so that a new flow by random or rr reads no
 * backend entry. The slot's frontend is of one family: an IPv4 address is addr[0]. */
struct kbp_slot_val {
	__u32 backend_id;
	__be16 port;
	__u16 pad;
	__be32 addr[4];
};
_Static_assert(sizeof(struct kbp_slot_val) == 24, "kbp_slot_val");

/* ---------- backends ---------- */

/* kbp_backend4.flags: a set of these bits. */
enum __attribute__((packed)) kbp_backend_flags {
	KBP_BE_F_LOCAL = 1 << 0, /* runs on this node: no SNAT needed */
	KBP_BE_F_TERMINATING =
	    1 << 1, /* a new connection (SYN) on its tracked tuple selects again */
};
_Static_assert(sizeof(enum kbp_backend_flags) == 1, "kbp_backend_flags");

struct kbp_backend4 {
	__be32 addr;
	__be16 port;
	enum kbp_backend_flags flags;
	__u8 pad;
};
_Static_assert(sizeof(struct kbp_backend4) == 8, "kbp_backend4");

struct kbp_backend6 {
	__be32 addr[4];
	__be16 port;
	enum kbp_backend_flags flags;
	__u8 pad;
};
_Static_assert(sizeof(struct kbp_backend6) == 20, "kbp_backend6");

/* ---------- conntrack ---------- */

/* kbp_ct4_val.flags: a set of these bits. */
enum __attribute__((packed)) kbp_ct_flags {
	KBP_CT_F_REPLY = 1 << 0,    /* this is the reply-direction entry */
	KBP_CT_F_SNAT = 1 << 1,	    /* the flow's source was translated to snat_addr */
	KBP_CT_F_HAIRPIN = 1 << 2,  /* client and backend are the same address */
	KBP_CT_F_EXTERNAL = 1 << 3, /* the flow arrived on an external interface */
	/* The flow is SNATed: its rewritten source is a node address, which the stack would drop
	 * as a martian, so the programs forward both directions themselves at ingress (FIB lookup;
	 * tc redirects, XDP only transmits back out of the same interface, else leaves it to tc).
	 * Replies of all other flows are translated by the egress program. */
	KBP_CT_F_ROUTE = 1 << 4,
	/* The kernel's conntrack translates the flow: kube-proxy's rules opened it before the agent
	 * took the node over, or `cleanup` handed it to netfilter, as
	 * src/dataplanes/bpf/conntrack-takeover.ts decides. The programs pass its packets untouched
	 * until it ends; a new SYN on its tuple starts a flow of ours. */
	KBP_CT_F_STACK = 1 << 5,
	/* The flow is being handed to the kernel's conntrack (`cleanup`): its forward packets are
	 * dropped for the milliseconds until netfilter has its entry (then KBP_CT_F_STACK). Passed
	 * untranslated before it, one to a NodePort would meet no socket and reset the flow. */
	KBP_CT_F_HOLD = 1 << 6,
	/* BPF host routing carries the flow, both ways, between a local pod and a pod of another
	 * node (host_route.h): decided once, when the flow is new, so that netfilter sees neither
	 * direction. */
	KBP_CT_F_HOST = 1 << 7,
};
_Static_assert(sizeof(enum kbp_ct_flags) == 1, "kbp_ct_flags");

/* kbp_ct4_val.tcp_flags: the TCP flags seen in the entry's direction, at the bit positions of the
 * TCP header's flags byte. */
enum __attribute__((packed)) kbp_tcp_flags {
	KBP_TCP_FIN = 1 << 0,
	KBP_TCP_SYN = 1 << 1,
	KBP_TCP_RST = 1 << 2,
	KBP_TCP_ACK = 1 << 4,
};
_Static_assert(sizeof(enum kbp_tcp_flags) == 1, "kbp_tcp_flags");

struct kbp_ct4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct kbp_ct4_key) == 16, "kbp_ct4_key");

struct kbp_ct4_val {
	__u64 last_seen_ns;
	__be32 xlate_saddr; /* the packet leaves with this tuple */
	__be32 xlate_daddr;
	__be16 xlate_sport;
	__be16 xlate_dport;
	__u32 svc_id;
	__u32 backend_id;
	enum kbp_ct_flags flags;
	enum kbp_tcp_flags tcp_flags;
	__u16 pad;
};
_Static_assert(sizeof(struct kbp_ct4_val) == 32, "kbp_ct4_val");

struct kbp_ct6_key {
	__be32 saddr[4];
	__be32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct kbp_ct6_key) == 40, "kbp_ct6_key");

struct kbp_ct6_val {
	__u64 last_seen_ns;
	__be32 xlate_saddr[4];
	__be32 xlate_daddr[4];
	__be16 xlate_sport;
	__be16 xlate_dport;
	__u32 svc_id;
	__u32 backend_id;
	enum kbp_ct_flags flags;
	enum kbp_tcp_flags tcp_flags;
	__u16 pad;
};
_Static_assert(sizeof(struct kbp_ct6_val) == 56, "kbp_ct6_val");

/* ---------- session affinity ---------- */

struct kbp_aff4_key {
	__be32 client;
	__u32 svc_id;
};
_Static_assert(sizeof(struct kbp_aff4_key) == 8, "kbp_aff4_key");

struct kbp_aff6_key {
	__be32 client[4];
	__u32 svc_id;
};
_Static_assert(sizeof(struct kbp_aff6_key) == 20, "kbp_aff6_key");

struct kbp_aff_val {
	__u64 last_used_ns;
	__u32 backend_id;
	__u32 pad;
};
_Static_assert(sizeof(struct kbp_aff_val) == 16, "kbp_aff_val");

/* "backend_id still belongs to svc_id": an affinity entry is only honoured while this exists. */
struct kbp_aff_match_key {
	__u32 backend_id;
	__u32 svc_id;
};
_Static_assert(sizeof(struct kbp_aff_match_key) == 8, "kbp_aff_match_key");
/* value: __u8, 1 */

/* ---------- loadBalancerSourceRanges ---------- */

/* prefixlen = 32 (svc_id) + CIDR bits */
struct kbp_srcr4_key {
	__u32 prefixlen;
	__u32 svc_id;
	__be32 addr;
};
_Static_assert(sizeof(struct kbp_srcr4_key) == 12, "kbp_srcr4_key");

struct kbp_srcr6_key {
	__u32 prefixlen;
	__u32 svc_id;
	__be32 addr[4];
};
_Static_assert(sizeof(struct kbp_srcr6_key) == 24, "kbp_srcr6_key");
/* value: __u8, 1 */

/* ---------- rr counters ---------- */

struct kbp_rr_val {
	struct bpf_spin_lock lock;
	__u32 next;
};
_Static_assert(sizeof(struct kbp_rr_val) == 8, "kbp_rr_val");

/* ---------- counters (per CPU) ---------- */

/* kbp_drops_v1 index: why a packet was dropped (or rejected). */
enum kbp_drop_reason {
	KBP_DROP_NONE = 0,
	KBP_DROP_NO_ENDPOINTS = 1,	 /* rejected: service without endpoints (ICMP sent in tc) */
	KBP_DROP_NO_LOCAL_ENDPOINTS = 2, /* KBP_ACTION_DROP (traffic policy Local) */
	KBP_DROP_SOURCE_RANGE = 3,	 /* source outside loadBalancerSourceRanges */
	KBP_DROP_BACKEND_MISSING = 4,	 /* slot or Maglev entry names an unknown backend */
	KBP_DROP_NO_SNAT_ADDR = 5,	 /* SNAT needed but kbp_config.snat_addr4 (6) is 0 */
	KBP_DROP_SNAT_PORTS = 6,	 /* no free SNAT port after KBP_SNAT_PORT_TRIES */
	KBP_DROP_CT_INSERT = 7,		 /* conntrack insert failed */
	KBP_DROP_REJECT_FAILED = 8,	 /* building the ICMP port unreachable failed */
	KBP_DROP_FIB = 9,	   /* no route (or no forwarding) for a KBP_CT_F_ROUTE packet */
	KBP_DROP_FRAG_NEEDED = 10, /* routed packet too big with DF set: ICMP frag needed sent */
	KBP_DROP_NEW_FLOW_RATE =
	    11, /* this CPU created kbp_config.new_flow_rate flows this second */
	KBP_DROP_HANDOFF =
	    12, /* a forward packet of a flow being handed to netfilter (KBP_CT_F_HOLD) */
	KBP_DROP_MAX = 16,
};
_Static_assert(sizeof(enum kbp_drop_reason) == 4, "kbp_drop_reason");

/* per service (index svc_id) and per backend (index backend_id) */
struct kbp_traffic_stats {
	__u64 new_conns;
	__u64 fwd_packets; /* client -> backend */
	__u64 fwd_bytes;
	__u64 reply_packets; /* backend -> client */
	__u64 reply_bytes;
	__u64 drops; /* dropped or rejected (reasons in kbp_drops_v1) */
};
_Static_assert(sizeof(struct kbp_traffic_stats) == 48, "kbp_traffic_stats");

/* global, index enum kbp_drop_reason; and per service and reason (kbp_svcdrop_v1) */
struct kbp_drop_stats {
	__u64 packets;
	__u64 bytes;
};
_Static_assert(sizeof(struct kbp_drop_stats) == 16, "kbp_drop_stats");

struct kbp_svc_drop_key {
	__u32 svc_id;
	enum kbp_drop_reason reason;
};
_Static_assert(sizeof(struct kbp_svc_drop_key) == 8, "kbp_svc_drop_key");

/* ---------- node configuration (kbp_cfg_v2: two generations, kbp_cfggen_v1 names the live one)
 * ---------- */

struct kbp_config {
	__be32 snat_addr4;    /* node address used for SNAT and hairpin; 0 disables SNAT */
	__be32 snat_addr6[4]; /* IPv6 counterpart; all zero disables IPv6 SNAT */
	__u16 snat_port_min;  /* host order, inclusive */
	__u16 snat_port_max;
	__u32 maglev_size; /* M of every Maglev table (prime, 16381 by default) */
	__u32 hash_seed;   /* seed of kbp_flow_hash4/6; the same on every node */
	/* The NodePort range, host order: only these ports consult kbp_node4_v1 / kbp_node6_v1 for
	 * the addr-0 NodePort entry. nodeport_max 0 means every port does. */
	__u16 nodeport_min;
	__u16 nodeport_max;
	/* New flows (conntrack entry pairs) one CPU may create per second; above it a new flow is
	 * refused (KBP_DROP_NEW_FLOW_RATE), so a flood cannot evict established flows from the LRU
	 * (Katran's MAX_CONN_RATE). 0: no limit. */
	__u32 new_flow_rate;
};
_Static_assert(sizeof(struct kbp_config) == 40, "kbp_config");

/* kbp_rate_v1 (PERCPU_ARRAY, one entry): this CPU's new flows in the current one-second window. */
struct kbp_rate {
	__u64 window_ns; /* start of the window */
	__u64 count;	 /* new flows created in it */
};
_Static_assert(sizeof(struct kbp_rate) == 16, "kbp_rate");

/* kbp_clock_v1 (PERCPU_ARRAY, one entry): the coarse clock as this CPU last read it (clock.h). */
struct kbp_clock {
	__u64 jiffies; /* bpf_jiffies64 when it was read */
	__u64 ns;      /* bpf_ktime_get_coarse_ns then */
};
_Static_assert(sizeof(struct kbp_clock) == 16, "kbp_clock");

/* kbp_node4_v1: key __be32 node address, value __u32 flags (currently 1) */
struct kbp_node6_key {
	__be32 addr[4];
};
_Static_assert(sizeof(struct kbp_node6_key) == 16, "kbp_node6_key");

/* kbp_ifaddr6_v1: key __u32 ifindex, value an IPv6 address of that interface (maps.h). */
struct kbp_ifaddr6_val {
	__be32 addr[4];
};
_Static_assert(sizeof(struct kbp_ifaddr6_val) == 16, "kbp_ifaddr6_val");

/* ---------- IPv4 fragments (frag.h) ---------- */

/* kbp_frag4_v1 (LRU): a datagram being fragmented, by the fields every fragment repeats... */
struct kbp_frag4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 id; /* the IP identification */
	__u8 proto;
	__u8 pad;
};
_Static_assert(sizeof(struct kbp_frag4_key) == 12, "kbp_frag4_key");

/* ...-> the ports of its first fragment, which only that fragment carries. */
struct kbp_frag4_val {
	__be16 sport;
	__be16 dport;
};
_Static_assert(sizeof(struct kbp_frag4_val) == 4, "kbp_frag4_val");

/* kbp_frag6_v1 (LRU): an IPv6 datagram being fragmented, by what every fragment repeats (RFC 8200:
 * the addresses and the Fragment header's identification, as the kernel's reassembly keys it)... */
struct kbp_frag6_key {
	__be32 saddr[4];
	__be32 daddr[4];
	__be32 id; /* the Fragment header's identification */
};
_Static_assert(sizeof(struct kbp_frag6_key) == 36, "kbp_frag6_key");

/* ...-> the ports and the L4 protocol of its first fragment (a later fragment's Fragment header
 * names the first header of the fragmentable part, which need not be the TCP/UDP one). */
struct kbp_frag6_val {
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct kbp_frag6_val) == 8, "kbp_frag6_val");

/* kbp_fragst_v1 (PERCPU_ARRAY, one entry): the fragments of TCP/UDP datagrams the tc programs saw,
 * of both families, counted by each program that sees one (ingress and egress alike). */
struct kbp_frag_stats {
	__u64 first;	     /* first fragments: ports recorded in kbp_frag4_v1 / kbp_frag6_v1 */
	__u64 later_known;   /* later fragments given their first fragment's ports */
	__u64 later_unknown; /* later fragments without a recorded first one: passed untouched */
	__u64 record_failed; /* first fragments whose record could not be written */
};
_Static_assert(sizeof(struct kbp_frag_stats) == 32, "kbp_frag_stats");

/* ---------- socket load balancing (cgroup socket hooks) ---------- */

/* kbp_sockcfg.scope: whose sockets the socket hooks translate. */
enum kbp_sock_scope {
	KBP_SOCK_SCOPE_HOST = 0, /* only the node's own network namespace: pods keep the tc path */
	KBP_SOCK_SCOPE_ALL = 1,	 /* every socket in the attached cgroup, pods' too */
};
_Static_assert(sizeof(enum kbp_sock_scope) == 4, "kbp_sock_scope");

/* kbp_sockcfg_v1 (ARRAY, one entry), written by the agent before it attaches the programs. */
struct kbp_sockcfg {
	__u64 host_netns_cookie; /* the agent's network namespace; 0: not known yet, serve none */
	enum kbp_sock_scope scope;
	__u32 pad;
};
_Static_assert(sizeof(struct kbp_sockcfg) == 16, "kbp_sockcfg");

/* kbp_sockrev4_v1 (LRU): a socket translated to a backend -> the service address it asked for,
 * so recvmsg and getpeername show the service address instead of the backend's. */
struct kbp_sockrev4_key {
	__u64 cookie; /* bpf_get_socket_cookie */
	__be32 addr;  /* backend */
	__be16 port;
	__u16 pad;
};
_Static_assert(sizeof(struct kbp_sockrev4_key) == 16, "kbp_sockrev4_key");

struct kbp_sockrev4_val {
	__be32 addr; /* service address and port the socket used */
	__be16 port;
	__u16 pad;
	__u32 svc_id;
};
_Static_assert(sizeof(struct kbp_sockrev4_val) == 12, "kbp_sockrev4_val");

/* kbp_sockrev6_v1 (LRU): the same for IPv6 sockets. A dual-stack socket's IPv4-mapped peer
 * (::ffff:a.b.c.d) is an IPv4 one: its entry is in kbp_sockrev4_v1. */
struct kbp_sockrev6_key {
	__u64 cookie;	/* bpf_get_socket_cookie */
	__be32 addr[4]; /* backend */
	__be16 port;
	__u16 pad;
	__u32 pad2;
};
_Static_assert(sizeof(struct kbp_sockrev6_key) == 32, "kbp_sockrev6_key");

struct kbp_sockrev6_val {
	__be32 addr[4]; /* service address and port the socket used */
	__be16 port;
	__u16 pad;
	__u32 svc_id;
};
_Static_assert(sizeof(struct kbp_sockrev6_val) == 24, "kbp_sockrev6_val");

/* kbp_sockidx_v1: the reverse entries a socket made, by socket cookie, so kbp_sock_release can
 * delete them when the socket goes (their keys hold the cookie, a hash map cannot be searched by
 * it). A ring: a socket that met more backends than it has slots leaves its oldest entries to the
 * LRU. */
#define KBP_SOCKIDX_SLOTS 4

/* kbp_sockidx_slot.family: which map holds the entry (only the datapath reads it). */
#define KBP_SOCKIDX_NONE 0
#define KBP_SOCKIDX_V4	 4 /* kbp_sockrev4_v1, a mapped peer's entry too */
#define KBP_SOCKIDX_V6	 6

struct kbp_sockidx_slot {
	__be32 addr[4]; /* backend: an IPv4 one in addr[0] */
	__be16 port;
	__u8 family; /* KBP_SOCKIDX_V4 or _V6; KBP_SOCKIDX_NONE while unused */
	__u8 pad;
};
_Static_assert(sizeof(struct kbp_sockidx_slot) == 20, "kbp_sockidx_slot");

struct kbp_sockidx {
	__u32 next; /* the slot the next entry takes, modulo KBP_SOCKIDX_SLOTS */
	struct kbp_sockidx_slot slots[KBP_SOCKIDX_SLOTS];
};
_Static_assert(sizeof(struct kbp_sockidx) == 84, "kbp_sockidx");

#endif /* KBP_TYPES_H */
