/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Every BPF map the data plane shares with the control plane, with its default capacity. The
 * structs they hold are in types.h; docs/bpf-datapath.md describes each map, its ids and what
 * the datapath does with it. A layout change gets a new map name (_v2), never a reinterpretation
 * of a pinned map.
 */
#ifndef KBP_MAPS_H
#define KBP_MAPS_H

#include <linux/bpf.h>
#include <linux/types.h>

#include <bpf/bpf_helpers.h>

#include "types.h"

/* Default capacities; the agent overrides them from its config before loading.
 *
 * The large hash maps only the agent writes (the programs look them up and never update them:
 * services, slots, backends, affinity matches) are not preallocated (BPF_F_NO_PREALLOC): their
 * elements are allocated as the agent writes them, so a node pays for the entries it holds, not
 * for max_entries, and creating them costs next to nothing (preallocating 2^20 slots and 2^20
 * affinity matches took 20-180 ms each at a start on a loaded machine). A lookup is the same, and
 * the agent's update of a full map fails with E2BIG either way. Maps the programs write keep
 * their preallocation: an allocation in a program could fail under memory pressure. */
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
#define KBP_MAX_FRAG	  8192

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KBP_MAX_FRONTENDS);
	__type(key, struct kbp_svc4_key);
	__type(value, struct kbp_svc_val);
} kbp_svc4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KBP_MAX_FRONTENDS);
	__type(key, struct kbp_svc6_key);
	__type(value, struct kbp_svc_val);
} kbp_svc6_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KBP_MAX_SLOTS);
	__type(key, struct kbp_slot_key);
	__type(value, struct kbp_slot_val);
} kbp_slot_v2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KBP_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct kbp_backend4);
} kbp_be4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KBP_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct kbp_backend6);
} kbp_be6_v1 SEC(".maps");

/* kbp_mglv_v1: key __u32 svc_id -> inner map fd. The inner map: ARRAY, key __u32 index, value
 * __u32 backend_id, max_entries = kbp_config.maglev_size, map_flags = BPF_F_INNER_MAP (the
 * template below has it; inner maps must match). */
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
	__uint(map_flags, BPF_F_NO_PREALLOC);
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

/* The node configuration in two generations (key 0 and 1); kbp_cfggen_v1[0] names the live one.
 * The agent writes the other generation whole, then flips the live one (config.h): a program
 * never reads a configuration half written. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct kbp_config);
} kbp_cfg_v2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} kbp_cfggen_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kbp_rate);
} kbp_rate_v1 SEC(".maps");

/* The coarse clock as this CPU last read it, and when (clock.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kbp_clock);
} kbp_clock_v1 SEC(".maps");

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

/* kbp_ifaddr6_v1: the IPv6 counterpart, key __u32 ifindex, value the interface's first usable
 * global IPv6 address (not tentative, not deprecated while another is not), the source the
 * kernel's MASQUERADE would pick through it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KBP_MAX_IFADDR);
	__type(key, __u32);
	__type(value, struct kbp_ifaddr6_val);
} kbp_ifaddr6_v1 SEC(".maps");

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

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KBP_MAX_SOCK_REV);
	__type(key, struct kbp_sockrev6_key);
	__type(value, struct kbp_sockrev6_val);
} kbp_sockrev6_v1 SEC(".maps");

/* Socket cookie -> the reverse entries the socket made (types.h). Not preallocated: it holds an
 * entry per live translated socket only, deleted at its release. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KBP_MAX_SOCK_REV);
	__type(key, __u64);
	__type(value, struct kbp_sockidx);
} kbp_sockidx_v1 SEC(".maps");

/* Datagrams in flight as fragments: entries are never deleted (fragments may come in any order),
 * the LRU forgets the oldest. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KBP_MAX_FRAG);
	__type(key, struct kbp_frag4_key);
	__type(value, struct kbp_frag4_val);
} kbp_frag4_v1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kbp_frag_stats);
} kbp_fragst_v1 SEC(".maps");

/* The IPv6 counterpart of kbp_frag4_v1 (frag.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KBP_MAX_FRAG);
	__type(key, struct kbp_frag6_key);
	__type(value, struct kbp_frag6_val);
} kbp_frag6_v1 SEC(".maps");

#endif /* KBP_MAPS_H */
