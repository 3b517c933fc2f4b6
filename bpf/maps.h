/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * kube-bpf-proxy: every BPF map the data plane shares with the control plane.
 *
 * This header is the one source of truth for map layouts. The TypeScript codecs in
 * src/dataplanes/bpf/layout.ts state the same offsets; both sides assert the sizes and the agent
 * checks the loaded object's BTF at start-up. A layout change gets a new map name (_v2), never a
 * reinterpretation of a pinned map.
 *
 * Conventions
 *   - Addresses and ports are in network byte order, exactly as in packets (__be*).
 *   - Ids, counts, flags and timestamps are in host byte order.
 *   - Timestamps are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_coarse_ns, up to a tick behind;
 *     bpf_ktime_get_ns on 5.10): process.hrtime.bigint() in Node reads the same clock.
 *   - Ids: 0 means "none"; svc ids and backend ids start at 1 and index the ARRAY maps below.
 *   - IPv4 and IPv6 have separate maps; the v6 maps exist now so IPv6 needs no layout change.
 *
 * Ids (node-local, restored from the pinned maps at restart)
 *   svc_id      one per frontend entry (kbp_svc4_v1 key): indexes slots, Maglev tables, rr
 *               counters, affinity and per-service counters.
 *   backend_id  one per backend address:port, shared by every frontend that uses it.
 *
 * Frontends (kbp_svc4_v1): one entry per address:port:proto a service answers on.
 *   - ClusterIP, externalIPs, LoadBalancer IPs and NodePorts on explicit node addresses (when
 *     nodePortAddresses restricts them) are exact entries.
 *   - A NodePort open on every local node address (nodePortAddresses empty or 0.0.0.0/0) is ONE
 *     entry with addr 0. The datapath uses it when the exact lookup misses, the port is inside
 *     kbp_config's NodePort range and the destination is in kbp_node4_v1 (the node's addresses,
 *     written by the control plane).
 *   - scope KBP_SCOPE_ALL is the entry every packet matches. When externalTrafficPolicy=Local
 *     gives external traffic other backends than traffic from pods (kube-proxy short-circuits pod
 *     traffic to external VIPs to the cluster endpoints), the ALL entry carries
 *     KBP_SVC_F_TWO_SCOPES and a second entry with KBP_SCOPE_INTERNAL (its own svc_id) holds the
 *     backends for packets that arrived on pod-facing interfaces.
 *   Lookup: {daddr, dport, proto, ALL}, else {0, dport, proto, ALL} if daddr is a node address;
 *   then, for packets from pods and a hit with TWO_SCOPES, the same key with scope INTERNAL.
 *   ClusterIP frontends (no KBP_SVC_F_EXTERNAL) are only served to packets from pod-facing
 *   interfaces; on external interfaces they pass untouched.
 *
 * Backends of a frontend: slots [0, count) of generation `gen` in kbp_slot_v1 ({svc_id, slot,
 * gen} -> backend_id), node-local backends first (slots [0, local_count)). The brain already
 * chose the list (cluster or local endpoints by traffic policy, terminating fallback). The control
 * plane writes the complete new generation, then replaces the frontend value (hash-map updates
 * are atomic per element), then deletes the old generation after a grace period: a reader always
 * sees a consistent set.
 * `action`: KBP_ACTION_FORWARD; KBP_ACTION_REJECT (no endpoints at all: ICMP port unreachable
 * from tc, kube-proxy's REJECT; XDP passes such packets up to tc); KBP_ACTION_DROP (endpoints
 * exist but the traffic policy allows none: kube-proxy's "has no local endpoints" DROP).
 * Only new flows are rejected or dropped; tracked flows keep going.
 *
 * Backend choice for a new flow: ClientIP affinity first (a kbp_aff4_v1 entry younger than the
 * timeout whose {backend_id, svc_id} is in kbp_affm_v1), else by `algorithm`:
 *   KBP_ALG_RANDOM  slot = bpf_get_prandom_u32() % count
 *   KBP_ALG_RR      slot = kbp_rr_v1[svc_id].next++ % count (under its spin lock)
 *   KBP_ALG_MAGLEV  kbp_mglv_v1[svc_id] is an ARRAY of kbp_config.maglev_size backend ids;
 *                   index = kbp_flow_hash4(saddr, sport, dport, proto, hash_seed) % maglev_size
 *                   (jhash of the tuple without daddr, so every VIP of a service agrees).
 *                   No table -> random.
 *
 * Connection tracking (kbp_ct4tcp_v1 for TCP, kbp_ct4any_v1 for the rest, LRU): keyed by the
 * packet's tuple as it arrives at the hook; every flow has two entries:
 *   forward {client, vip, cport, vport}
 *           -> xlate {client or snat_addr, backend, cport or natport, bport}
 *   reply   {backend, client or snat_addr, bport, cport or natport}
 *           -> xlate {vip, client, vport, cport}
 * A packet matching either entry is rewritten to the entry's xlate tuple (one lookup per packet;
 * a reply entry carries the VIP itself, so the addr-0 NodePort entry reverses to whichever node
 * address the client used). The reply key of a forward entry is its xlate tuple reversed, and
 * vice versa, so userspace GC finds the pair. Entries carry last_seen_ns (refreshed at most every
 * KBP_CT_REFRESH_NS or when new TCP flags show up) and the TCP flags seen in their direction, so
 * userspace expires them by protocol state. A TCP SYN that hits a forward entry whose flow closed
 * (FIN/RST seen) or whose backend left kbp_be4_v1 (or is terminating) selects again; other
 * packets of a tracked flow keep their backend (established connections survive endpoint
 * removal, as with kube-proxy). UDP entries towards removed backends are deleted by userspace.
 *
 * SNAT: external traffic to a backend on another node, and hairpin traffic (a pod reaching
 * itself through a service), get source kbp_config.snat_addr4 and a port from
 * [snat_port_min, snat_port_max] so replies come back through this node.
 * Packets whose new source is a node address (SNATed packets, replies from a VIP that is a node
 * address, i.e. NodePorts; kbp_node4_v1 must list every node address) would be dropped by the
 * stack as martians: their conntrack entries carry KBP_CT_F_ROUTE and tc forwards them itself
 * with bpf_fib_lookup and a redirect; XDP sends them back out with XDP_TX when the FIB picks the
 * interface they came in on, and leaves the others to tc untouched.
 */
#ifndef KBP_MAPS_H
#define KBP_MAPS_H

#include <linux/bpf.h>
#include <linux/types.h>

#include <bpf/bpf_helpers.h>

/* ---------- constants shared with layout.ts ---------- */

enum kbp_scope {
	KBP_SCOPE_ALL = 0,
	KBP_SCOPE_INTERNAL = 1,
};

enum kbp_action {
	KBP_ACTION_FORWARD = 0,
	KBP_ACTION_REJECT = 1,
	KBP_ACTION_DROP = 2,
};

enum kbp_algorithm {
	KBP_ALG_RANDOM = 0,
	KBP_ALG_RR = 1,
	KBP_ALG_MAGLEV = 2,
};

/* kbp_svc_val.flags */
#define KBP_SVC_F_EXTERNAL     (1u << 0) /* reachable from outside: NodePort/externalIP/LB */
#define KBP_SVC_F_NODEPORT     (1u << 1) /* informational: a NodePort frontend */
#define KBP_SVC_F_EXTERNAL_IP  (1u << 2) /* informational: an externalIP frontend */
#define KBP_SVC_F_LOADBALANCER (1u << 3) /* informational: a LoadBalancer IP frontend */
#define KBP_SVC_F_LOCAL_ONLY   (1u << 4) /* informational: the backends are the local endpoints */
#define KBP_SVC_F_TWO_SCOPES   (1u << 5) /* pods use the KBP_SCOPE_INTERNAL entry */
#define KBP_SVC_F_AFFINITY     (1u << 6) /* sessionAffinity=ClientIP */
#define KBP_SVC_F_SOURCE_RANGE (1u << 7) /* check kbp_srcr4_v1 (loadBalancerSourceRanges) */

/* kbp_backend4.flags */
#define KBP_BE_F_LOCAL (1u << 0) /* runs on this node: no SNAT needed */
#define KBP_BE_F_TERMINATING                                                                       \
	(1u << 1) /* a new connection (SYN) on its tracked tuple selects again */

/* kbp_ct_val.flags */
#define KBP_CT_F_REPLY	  (1u << 0) /* this is the reply-direction entry */
#define KBP_CT_F_SNAT	  (1u << 1) /* the flow's source was translated to snat_addr */
#define KBP_CT_F_HAIRPIN  (1u << 2) /* client and backend are the same address */
#define KBP_CT_F_EXTERNAL (1u << 3) /* the flow arrived on an external interface */
/* The flow is SNATed: its rewritten source is a node address, which the stack would drop as a
 * martian, so the programs forward both directions themselves at ingress (FIB lookup; tc
 * redirects, XDP only transmits back out of the same interface, else leaves it to tc). Replies
 * of all other flows are translated by the egress program. */
#define KBP_CT_F_ROUTE (1u << 4)

/* kbp_ct_val.tcp_flags: TCP flags seen in the entry's direction */
#define KBP_TCP_FIN (1u << 0)
#define KBP_TCP_SYN (1u << 1)
#define KBP_TCP_RST (1u << 2)
#define KBP_TCP_ACK (1u << 4)

#define KBP_CT_REFRESH_NS   1000000000ull /* last_seen_ns is refreshed at most once a second */
#define KBP_SNAT_PORT_TRIES 16		  /* candidate SNAT ports tried per new flow */

/* kbp_drops_v1 index: why a packet was dropped (or rejected). */
enum kbp_drop_reason {
	KBP_DROP_NONE = 0,
	KBP_DROP_NO_ENDPOINTS = 1,	 /* rejected: service without endpoints (ICMP sent in tc) */
	KBP_DROP_NO_LOCAL_ENDPOINTS = 2, /* KBP_ACTION_DROP (traffic policy Local) */
	KBP_DROP_SOURCE_RANGE = 3,	 /* source outside loadBalancerSourceRanges */
	KBP_DROP_BACKEND_MISSING = 4,	 /* slot or Maglev entry names an unknown backend */
	KBP_DROP_NO_SNAT_ADDR = 5,	 /* SNAT needed but kbp_config.snat_addr4 is 0 */
	KBP_DROP_SNAT_PORTS = 6,	 /* no free SNAT port after KBP_SNAT_PORT_TRIES */
	KBP_DROP_CT_INSERT = 7,		 /* conntrack insert failed */
	KBP_DROP_REJECT_FAILED = 8,	 /* building the ICMP port unreachable failed */
	KBP_DROP_FIB = 9,	   /* no route (or no forwarding) for a KBP_CT_F_ROUTE packet */
	KBP_DROP_FRAG_NEEDED = 10, /* routed packet too big with DF set: ICMP frag needed sent */
	KBP_DROP_MAX = 16,
};

/* ---------- services (frontends) ---------- */

struct kbp_svc4_key {
	__be32 addr; /* 0: NodePort on every node address */
	__be16 port;
	__u8 proto; /* IPPROTO_TCP / IPPROTO_UDP */
	__u8 scope; /* enum kbp_scope */
};
_Static_assert(sizeof(struct kbp_svc4_key) == 8, "kbp_svc4_key");

struct kbp_svc6_key {
	__be32 addr[4];
	__be16 port;
	__u8 proto;
	__u8 scope;
};
_Static_assert(sizeof(struct kbp_svc6_key) == 20, "kbp_svc6_key");

struct kbp_svc_val {
	__u32 svc_id;
	__u16 count;	   /* backends: slots [0, count) */
	__u16 local_count; /* slots [0, local_count) are node-local */
	__u32 flags;	   /* KBP_SVC_F_* */
	__u32 affinity_timeout_s;
	__u8 gen;	/* live slot generation */
	__u8 algorithm; /* enum kbp_algorithm */
	__u8 action;	/* enum kbp_action */
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
/* value: __u32 backend_id */

/* ---------- backends ---------- */

struct kbp_backend4 {
	__be32 addr;
	__be16 port;
	__u8 flags; /* KBP_BE_F_* */
	__u8 pad;
};
_Static_assert(sizeof(struct kbp_backend4) == 8, "kbp_backend4");

struct kbp_backend6 {
	__be32 addr[4];
	__be16 port;
	__u8 flags;
	__u8 pad;
};
_Static_assert(sizeof(struct kbp_backend6) == 20, "kbp_backend6");

/* ---------- Maglev ---------- */

/* kbp_mglv_v1: key __u32 svc_id -> inner map fd. */
/* inner map: ARRAY, key __u32 index, value __u32 backend_id, max_entries = maglev_size,
 * map_flags = BPF_F_INNER_MAP (the template below has it; inner maps must match). */

/* ---------- conntrack ---------- */

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
	__u8 flags;	/* KBP_CT_F_* */
	__u8 tcp_flags; /* KBP_TCP_* seen in this direction */
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
	__u8 flags;
	__u8 tcp_flags;
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
	__u32 reason; /* enum kbp_drop_reason */
};
_Static_assert(sizeof(struct kbp_svc_drop_key) == 8, "kbp_svc_drop_key");

/* ---------- node configuration (ARRAY, one entry) ---------- */

struct kbp_config {
	__be32 snat_addr4;    /* node address used for SNAT and hairpin; 0 disables SNAT */
	__be32 snat_addr6[4]; /* IPv6 counterpart (unused until IPv6 lands) */
	__u16 snat_port_min;  /* host order, inclusive */
	__u16 snat_port_max;
	__u32 maglev_size; /* M of every Maglev table (prime, 16381 by default) */
	__u32 hash_seed;   /* seed of kbp_flow_hash4; the same on every node */
	/* The NodePort range, host order: only these ports consult kbp_node4_v1 for the addr-0
	 * NodePort entry. nodeport_max 0 means every port does. */
	__u16 nodeport_min;
	__u16 nodeport_max;
};
_Static_assert(sizeof(struct kbp_config) == 36, "kbp_config");

/* kbp_node4_v1: key __be32 node address, value __u32 flags (currently 1) */
struct kbp_node6_key {
	__be32 addr[4];
};
_Static_assert(sizeof(struct kbp_node6_key) == 16, "kbp_node6_key");

/* ---------- socket load balancing (cgroup socket hooks) ---------- */

/* kbp_sockcfg.scope: whose sockets the socket hooks translate. */
enum kbp_sock_scope {
	KBP_SOCK_SCOPE_HOST = 0, /* only the node's own network namespace: pods keep the tc path */
	KBP_SOCK_SCOPE_ALL = 1,	 /* every socket in the attached cgroup, pods' too */
};

/* kbp_sockcfg_v1 (ARRAY, one entry), written by the agent before it attaches the programs. */
struct kbp_sockcfg {
	__u64 host_netns_cookie; /* the agent's network namespace; 0: not known yet, serve none */
	__u32 scope;		 /* enum kbp_sock_scope */
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

/* ---------- map definitions ---------- */

/* Default capacities; the agent overrides them from its config before loading. */
#define KBP_MAX_FRONTENDS 65536
#define KBP_MAX_SVC_IDS	  65536
#define KBP_MAX_SLOTS	  262144
#define KBP_MAX_BACKENDS  65536
#define KBP_MAX_CT_TCP	  262144
#define KBP_MAX_CT_ANY	  131072
#define KBP_MAX_AFFINITY  65536
#define KBP_MAX_SRC_RANGE 16384
#define KBP_MAX_MAGLEV	  4096
#define KBP_MAX_NODE_ADDR 256
#define KBP_MAX_IFADDR	  4096
#define KBP_MAX_SOCK_REV  131072

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_FRONTENDS);
	__type(key, struct kbp_svc4_key);
	__type(value, struct kbp_svc_val);
} kbp_svc4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_FRONTENDS);
	__type(key, struct kbp_svc6_key);
	__type(value, struct kbp_svc_val);
} kbp_svc6_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_SLOTS);
	__type(key, struct kbp_slot_key);
	__type(value, __u32);
} kbp_slot_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct kbp_backend4);
} kbp_be4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct kbp_backend6);
} kbp_be6_v1 SEC(".maps");

struct kbp_maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, KBP_MAX_MAGLEV);
	__type(key, __u32);
	__array(values, struct kbp_maglev_inner);
} kbp_mglv_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KBP_MAX_CT_TCP);
	__type(key, struct kbp_ct4_key);
	__type(value, struct kbp_ct4_val);
} kbp_ct4tcp_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KBP_MAX_CT_ANY);
	__type(key, struct kbp_ct4_key);
	__type(value, struct kbp_ct4_val);
} kbp_ct4any_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KBP_MAX_CT_TCP);
	__type(key, struct kbp_ct6_key);
	__type(value, struct kbp_ct6_val);
} kbp_ct6tcp_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KBP_MAX_CT_ANY);
	__type(key, struct kbp_ct6_key);
	__type(value, struct kbp_ct6_val);
} kbp_ct6any_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KBP_MAX_AFFINITY);
	__type(key, struct kbp_aff4_key);
	__type(value, struct kbp_aff_val);
} kbp_aff4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KBP_MAX_AFFINITY);
	__type(key, struct kbp_aff6_key);
	__type(value, struct kbp_aff_val);
} kbp_aff6_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_SLOTS);
	__type(key, struct kbp_aff_match_key);
	__type(value, __u8);
} kbp_affm_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KBP_MAX_SRC_RANGE);
	__type(key, struct kbp_srcr4_key);
	__type(value, __u8);
} kbp_srcr4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KBP_MAX_SRC_RANGE);
	__type(key, struct kbp_srcr6_key);
	__type(value, __u8);
} kbp_srcr6_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KBP_MAX_SVC_IDS);
	__type(key, __u32);
	__type(value, struct kbp_rr_val);
} kbp_rr_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KBP_MAX_SVC_IDS);
	__type(key, __u32);
	__type(value, struct kbp_traffic_stats);
} kbp_svcst_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KBP_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct kbp_traffic_stats);
} kbp_best_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KBP_DROP_MAX);
	__type(key, __u32);
	__type(value, struct kbp_drop_stats);
} kbp_drops_v1 SEC(".maps");

/* Drops by service and reason: entries appear with a service's first drop (LRU: a full map
 * forgets the quietest). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, KBP_MAX_SVC_IDS);
	__type(key, struct kbp_svc_drop_key);
	__type(value, struct kbp_drop_stats);
} kbp_svcdrop_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kbp_config);
} kbp_cfg_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_NODE_ADDR);
	__type(key, __be32);
	__type(value, __u32);
} kbp_node4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_NODE_ADDR);
	__type(key, struct kbp_node6_key);
	__type(value, __u32);
} kbp_node6_v1 SEC(".maps");

/* kbp_ifaddr4_v1: key __u32 ifindex, value __be32 the interface's primary IPv4 address: the
 * SNAT source of flows that leave through it, as MASQUERADE picks it, so the peer's rp_filter
 * sees a source that is routed back through the interface the packet arrived on. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_IFADDR);
	__type(key, __u32);
	__type(value, __be32);
} kbp_ifaddr4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kbp_sockcfg);
} kbp_sockcfg_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KBP_MAX_SOCK_REV);
	__type(key, struct kbp_sockrev4_key);
	__type(value, struct kbp_sockrev4_val);
} kbp_sockrev4_v1 SEC(".maps");

#endif /* KBP_MAPS_H */
