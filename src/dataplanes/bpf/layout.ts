// The TypeScript side of bpf/types.h and bpf/maps.h: one codec per map struct with the same
// offsets, the constants (each paired with its C enum), the map names, the programs and the
// .rodata variables. The codecs are built from codec.ts; btf-check.ts compares all of this with
// the loaded object's BTF.
// Addresses are strings ("10.0.0.1"); ports are numbers in host order (stored big-endian, as in
// packets); ids, counts and flags are numbers; timestamps and counters are bigint.

import {
  be32,
  type Fields,
  ip4,
  ip6,
  port,
  ScalarCodec,
  StructCodec,
  type StructValue,
  u8,
  u16,
  u32,
  u64,
} from './codec.js';

export const u32Codec = new ScalarCodec(4, u32(0));
export const u8Codec = new ScalarCodec(1, u8(0));
/** A socket cookie as a whole key (kbp_sockidx_v1). */
export const u64Codec = new ScalarCodec(8, u64(0));
export const ip4Codec = new ScalarCodec(4, ip4(0));
/** An IPv6 address as a whole key (kbp_node6_key's one field). */
export const ip6Codec = new ScalarCodec(16, ip6(0));

// ---------- constants (types.h enums) ----------

/** A constant table of this file and the C enum of types.h it mirrors, checked against BTF. */
export interface EnumLayout {
  /** The table's name here, for messages. */
  tsName: string;
  /** The enum's name in types.h (and in the object's BTF). */
  cName: string;
  /** Every key of the table with its C enumerator and value. */
  members: readonly { key: string; cName: string; value: number }[];
  /** Enumerators of the C enum that the control plane does not use. */
  cOnly: readonly string[];
}

const enumLayouts: EnumLayout[] = [];

/**
 * A constant table that mirrors `enum cName` of types.h. A key's enumerator is `prefix` plus the
 * key in upper snake case (noLocalEndpoints -> NO_LOCAL_ENDPOINTS) unless `names` spells it.
 */
function cEnum<const T extends Record<string, number>>(
  tsName: string,
  cName: string,
  prefix: string,
  values: T,
  options: { names?: { [K in keyof T]?: string }; cOnly?: readonly string[] } = {},
): T {
  enumLayouts.push({
    tsName,
    cName,
    members: Object.entries(values).map(([key, value]) => ({
      key,
      cName: options.names?.[key] ?? prefix + key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase(),
      value,
    })),
    cOnly: options.cOnly ?? [],
  });
  return values;
}

export const SCOPE = cEnum('SCOPE', 'kbp_scope', 'KBP_SCOPE_', { all: 0, internal: 1 });
export const ALGORITHM = cEnum('ALGORITHM', 'kbp_algorithm', 'KBP_ALG_', { random: 0, rr: 1, maglev: 2 });
export const ACTION = cEnum('ACTION', 'kbp_action', 'KBP_ACTION_', { forward: 0, reject: 1, drop: 2 });

export const SVC_F = cEnum('SVC_F', 'kbp_svc_flags', 'KBP_SVC_F_', {
  EXTERNAL: 1 << 0,
  NODEPORT: 1 << 1,
  EXTERNAL_IP: 1 << 2,
  LOADBALANCER: 1 << 3,
  LOCAL_ONLY: 1 << 4,
  TWO_SCOPES: 1 << 5,
  AFFINITY: 1 << 6,
  SOURCE_RANGE: 1 << 7,
});

export const BE_F = cEnum('BE_F', 'kbp_backend_flags', 'KBP_BE_F_', { LOCAL: 1 << 0, TERMINATING: 1 << 1 });

export const CT_F = cEnum('CT_F', 'kbp_ct_flags', 'KBP_CT_F_', {
  REPLY: 1 << 0,
  SNAT: 1 << 1,
  HAIRPIN: 1 << 2,
  EXTERNAL: 1 << 3,
  ROUTE: 1 << 4,
  STACK: 1 << 5,
  HOLD: 1 << 6,
  HOST: 1 << 7,
});

export const TCP_FLAG = cEnum('TCP_FLAG', 'kbp_tcp_flags', 'KBP_TCP_', {
  FIN: 1 << 0,
  SYN: 1 << 1,
  RST: 1 << 2,
  ACK: 1 << 4,
});

/** Index of kbp_drops_v1. */
export const DROP_REASON = cEnum(
  'DROP_REASON',
  'kbp_drop_reason',
  'KBP_DROP_',
  {
    none: 0,
    noEndpoints: 1,
    noLocalEndpoints: 2,
    sourceRange: 3,
    backendMissing: 4,
    noSnatAddress: 5,
    snatPortsExhausted: 6,
    conntrackInsert: 7,
    rejectFailed: 8,
    fib: 9,
    fragNeeded: 10,
    newFlowRate: 11,
    handoff: 12,
  },
  {
    names: {
      noSnatAddress: 'KBP_DROP_NO_SNAT_ADDR',
      snatPortsExhausted: 'KBP_DROP_SNAT_PORTS',
      conntrackInsert: 'KBP_DROP_CT_INSERT',
    },
    // The size of kbp_drops_v1.
    cOnly: ['KBP_DROP_MAX'],
  },
);

/** kbp_sockcfg.scope */
export const SOCK_SCOPE = cEnum('SOCK_SCOPE', 'kbp_sock_scope', 'KBP_SOCK_SCOPE_', { host: 0, all: 1 });

/** kbp_hostif_v1's value: how host routing hands a packet to a device (host_route.h): a local pod's
 * veth or bridge, or a device towards other nodes' pods. */
export const HOST_IF = cEnum('HOST_IF', 'kbp_host_if', 'KBP_HOST_IF_', { peer: 1, bridge: 2, remote: 3 });

/** Every constant table above with its C enum: what verifyLayoutAgainstBtf checks. */
export const ENUMS: readonly EnumLayout[] = enumLayouts;

// ---------- structs (types.h) ----------

export const svc4Key = new StructCodec('kbp_svc4_key', 8, {
  addr: ip4(0),
  port: port(4),
  proto: u8(6),
  scope: u8(7),
});
export const svc6Key = new StructCodec('kbp_svc6_key', 20, {
  addr: ip6(0),
  port: port(16),
  proto: u8(18),
  scope: u8(19),
});
export const svcVal = new StructCodec(
  'kbp_svc_val',
  24,
  {
    svcId: u32(0),
    count: u16(4),
    localCount: u16(6),
    flags: u32(8),
    affinityTimeoutS: u32(12),
    gen: u8(16),
    algorithm: u8(17),
    action: u8(18),
  },
  { pad: 19, pad2: 20 },
);
export const slotKey = new StructCodec(
  'kbp_slot_key',
  8,
  { svcId: u32(0), slot: u16(4), gen: u8(6) },
  { pad: 7 },
);
/** kbp_slot_val: the slot's backend id with the backend's address and port, in the frontend's
 * family (an IPv4 address is the first 4 of the 16 address bytes). */
export const slotVal4 = new StructCodec(
  'kbp_slot_val',
  24,
  { backendId: u32(0), port: port(4), addr: ip4(8) },
  { pad: 6 },
);
export const slotVal6 = new StructCodec(
  'kbp_slot_val',
  24,
  { backendId: u32(0), port: port(4), addr: ip6(8) },
  { pad: 6 },
);
export const backend4 = new StructCodec(
  'kbp_backend4',
  8,
  { addr: ip4(0), port: port(4), flags: u8(6) },
  { pad: 7 },
);
export const backend6 = new StructCodec(
  'kbp_backend6',
  20,
  { addr: ip6(0), port: port(16), flags: u8(18) },
  { pad: 19 },
);
export const ct4Key = new StructCodec(
  'kbp_ct4_key',
  16,
  { saddr: ip4(0), daddr: ip4(4), sport: port(8), dport: port(10), proto: u8(12) },
  { pad: 13 },
);
export const ct4Val = new StructCodec(
  'kbp_ct4_val',
  32,
  {
    lastSeenNs: u64(0),
    xlateSaddr: ip4(8),
    xlateDaddr: ip4(12),
    xlateSport: port(16),
    xlateDport: port(18),
    svcId: u32(20),
    backendId: u32(24),
    flags: u8(28),
    tcpFlags: u8(29),
  },
  { pad: 30 },
);
export const ct6Key = new StructCodec(
  'kbp_ct6_key',
  40,
  { saddr: ip6(0), daddr: ip6(16), sport: port(32), dport: port(34), proto: u8(36) },
  { pad: 37 },
);
export const ct6Val = new StructCodec(
  'kbp_ct6_val',
  56,
  {
    lastSeenNs: u64(0),
    xlateSaddr: ip6(8),
    xlateDaddr: ip6(24),
    xlateSport: port(40),
    xlateDport: port(42),
    svcId: u32(44),
    backendId: u32(48),
    flags: u8(52),
    tcpFlags: u8(53),
  },
  { pad: 54 },
);
export const aff4Key = new StructCodec('kbp_aff4_key', 8, { client: ip4(0), svcId: u32(4) });
export const aff6Key = new StructCodec('kbp_aff6_key', 20, { client: ip6(0), svcId: u32(16) });
export const affVal = new StructCodec(
  'kbp_aff_val',
  16,
  { lastUsedNs: u64(0), backendId: u32(8) },
  { pad: 12 },
);
export const affMatchKey = new StructCodec('kbp_aff_match_key', 8, { backendId: u32(0), svcId: u32(4) });
/** prefixlen = SRC_RANGE_ID_BITS + the CIDR's prefix length (the trie matches svc_id first). */
export const srcRange4Key = new StructCodec('kbp_srcr4_key', 12, {
  prefixlen: u32(0),
  svcId: u32(4),
  addr: ip4(8),
});
export const srcRange6Key = new StructCodec('kbp_srcr6_key', 24, {
  prefixlen: u32(0),
  svcId: u32(4),
  addr: ip6(8),
});
/** kbp_hostdst4/6_v1's keys: another node's pod prefix host routing may reach (host_route.h). */
export const hostDst4Key = new StructCodec('kbp_hostdst4_key', 8, { prefixlen: u32(0), addr: ip4(4) });
export const hostDst6Key = new StructCodec('kbp_hostdst6_key', 20, { prefixlen: u32(0), addr: ip6(4) });
/** Bits of kbp_srcr*_key.prefixlen that cover svc_id. */
export const SRC_RANGE_ID_BITS = 32;
export const rrVal = new StructCodec('kbp_rr_val', 8, { next: u32(4) }, { lock: 0 });
export const trafficStats = new StructCodec('kbp_traffic_stats', 48, {
  newConns: u64(0),
  fwdPackets: u64(8),
  fwdBytes: u64(16),
  replyPackets: u64(24),
  replyBytes: u64(32),
  drops: u64(40),
});
export const dropStats = new StructCodec('kbp_drop_stats', 16, { packets: u64(0), bytes: u64(8) });
export const svcDropKey = new StructCodec('kbp_svc_drop_key', 8, { svcId: u32(0), reason: u32(4) });
export const config = new StructCodec('kbp_config', 40, {
  snatAddr4: ip4(0),
  snatAddr6: ip6(4),
  snatPortMin: u16(20),
  snatPortMax: u16(22),
  maglevSize: u32(24),
  hashSeed: u32(28),
  nodeportMin: u16(32),
  nodeportMax: u16(34),
  newFlowRate: u32(36),
});
/** kbp_rate_v1 (per CPU): this CPU's new flows in the current one-second window. */
export const rate = new StructCodec('kbp_rate', 16, { windowNs: u64(0), count: u64(8) });
/** kbp_clock_v1 (per CPU): the coarse clock as this CPU last read it, and the jiffies then
 * (bpf/clock.h). */
export const clock = new StructCodec('kbp_clock', 16, { jiffies: u64(0), ns: u64(8) });
export const node6Key = new StructCodec('kbp_node6_key', 16, { addr: ip6(0) });
/** kbp_ifaddr6_v1's value: an interface's IPv6 SNAT source. */
export const ifAddr6Val = new StructCodec('kbp_ifaddr6_val', 16, { addr: ip6(0) });
export const sockConfig = new StructCodec(
  'kbp_sockcfg',
  16,
  { hostNetnsCookie: u64(0), scope: u32(8) },
  { pad: 12 },
);
export const sockRev4Key = new StructCodec(
  'kbp_sockrev4_key',
  16,
  { cookie: u64(0), addr: ip4(8), port: port(12) },
  { pad: 14 },
);
export const sockRev4Val = new StructCodec(
  'kbp_sockrev4_val',
  12,
  { addr: ip4(0), port: port(4), svcId: u32(8) },
  { pad: 6 },
);
/** kbp_sockrev6_v1 (LRU): the IPv6 counterparts (an IPv4-mapped peer's entry is an IPv4 one). */
export const sockRev6Key = new StructCodec(
  'kbp_sockrev6_key',
  32,
  { cookie: u64(0), addr: ip6(8), port: port(24) },
  { pad: 26, pad2: 28 },
);
export const sockRev6Val = new StructCodec(
  'kbp_sockrev6_val',
  24,
  { addr: ip6(0), port: port(16), svcId: u32(20) },
  { pad: 18 },
);
/** kbp_sockidx_v1: the reverse entries a socket made, deleted with it by kbp_sock_release. Only the
 * datapath reads and writes it: the control plane counts its entries, so its slots are left
 * undecoded (checked against BTF as padding is). */
export const sockIdx = new StructCodec('kbp_sockidx', 84, { next: u32(0) }, { slots: 4 });
/** kbp_frag4_v1 (LRU): a fragmented datagram, by the fields every fragment repeats... */
export const frag4Key = new StructCodec(
  'kbp_frag4_key',
  12,
  { saddr: ip4(0), daddr: ip4(4), id: port(8), proto: u8(10) },
  { pad: 11 },
);
/** ...-> the ports its first fragment carried. */
export const frag4Val = new StructCodec('kbp_frag4_val', 4, { sport: port(0), dport: port(2) });
/** kbp_frag6_v1 (LRU): an IPv6 datagram in fragments, by its addresses and the Fragment header's
 * identification... */
export const frag6Key = new StructCodec('kbp_frag6_key', 36, { saddr: ip6(0), daddr: ip6(16), id: be32(32) });
/** ...-> its first fragment's ports and L4 protocol. */
export const frag6Val = new StructCodec(
  'kbp_frag6_val',
  8,
  { sport: port(0), dport: port(2), proto: u8(4) },
  { pad: 5 },
);
/** kbp_fragst_v1 (per CPU, one entry): fragments of TCP/UDP datagrams the tc programs saw. */
export const fragStats = new StructCodec('kbp_frag_stats', 32, {
  first: u64(0),
  laterKnown: u64(8),
  laterUnknown: u64(16),
  recordFailed: u64(24),
});

export type Svc4Key = StructValue<typeof svc4Key.fields>;
export type Svc6Key = StructValue<typeof svc6Key.fields>;
export type SvcVal = StructValue<typeof svcVal.fields>;
export type SlotKey = StructValue<typeof slotKey.fields>;
export type SlotVal = StructValue<typeof slotVal4.fields>;
export type Backend4 = StructValue<typeof backend4.fields>;
export type Backend6 = StructValue<typeof backend6.fields>;
export type Ct4Key = StructValue<typeof ct4Key.fields>;
export type Ct4Val = StructValue<typeof ct4Val.fields>;
export type Ct6Key = StructValue<typeof ct6Key.fields>;
export type Ct6Val = StructValue<typeof ct6Val.fields>;
export type Aff4Key = StructValue<typeof aff4Key.fields>;
export type Aff6Key = StructValue<typeof aff6Key.fields>;
export type AffVal = StructValue<typeof affVal.fields>;
export type AffMatchKey = StructValue<typeof affMatchKey.fields>;
export type SrcRange4Key = StructValue<typeof srcRange4Key.fields>;
export type SrcRange6Key = StructValue<typeof srcRange6Key.fields>;
export type TrafficStats = StructValue<typeof trafficStats.fields>;
export type DropStats = StructValue<typeof dropStats.fields>;
export type SvcDropKey = StructValue<typeof svcDropKey.fields>;
export type BpfConfigValue = StructValue<typeof config.fields>;
export type SockConfig = StructValue<typeof sockConfig.fields>;
export type SockRev4Key = StructValue<typeof sockRev4Key.fields>;
export type SockRev4Val = StructValue<typeof sockRev4Val.fields>;
export type SockRev6Key = StructValue<typeof sockRev6Key.fields>;
export type SockRev6Val = StructValue<typeof sockRev6Val.fields>;
export type Frag4Key = StructValue<typeof frag4Key.fields>;
export type Frag4Val = StructValue<typeof frag4Val.fields>;
export type FragStats = StructValue<typeof fragStats.fields>;
export type Frag6Key = StructValue<typeof frag6Key.fields>;
export type Frag6Val = StructValue<typeof frag6Val.fields>;

export const STRUCTS: readonly StructCodec<Fields>[] = [
  svc4Key,
  svc6Key,
  svcVal,
  slotKey,
  slotVal4,
  slotVal6,
  backend4,
  backend6,
  ct4Key,
  ct4Val,
  ct6Key,
  ct6Val,
  aff4Key,
  aff6Key,
  affVal,
  affMatchKey,
  srcRange4Key,
  srcRange6Key,
  rrVal,
  trafficStats,
  dropStats,
  svcDropKey,
  config,
  node6Key,
  ifAddr6Val,
  sockConfig,
  sockRev4Key,
  sockRev4Val,
  sockRev6Key,
  sockRev6Val,
  sockIdx,
  frag4Key,
  frag4Val,
  fragStats,
  frag6Key,
  frag6Val,
  clock,
] as unknown as readonly StructCodec<Fields>[];

// ---------- maps ----------

export interface MapLayout {
  /** Name in the object, and the pin name. */
  name: string;
  keySize: number;
  valueSize: number;
  perCpu: boolean;
}

function mapLayout(name: string, key: { size: number }, value: { size: number }, perCpu = false): MapLayout {
  return { name, keySize: key.size, valueSize: value.size, perCpu };
}

export const MAPS = {
  svc4: mapLayout('kbp_svc4_v1', svc4Key, svcVal),
  svc6: mapLayout('kbp_svc6_v1', svc6Key, svcVal),
  slots: mapLayout('kbp_slot_v2', slotKey, slotVal4),
  backends4: mapLayout('kbp_be4_v1', u32Codec, backend4),
  backends6: mapLayout('kbp_be6_v1', u32Codec, backend6),
  /** HASH_OF_MAPS: value is an inner map fd (4 bytes) on update, an inner map id on lookup. */
  maglev: mapLayout('kbp_mglv_v1', u32Codec, u32Codec),
  ct4Tcp: mapLayout('kbp_ct4tcp_v1', ct4Key, ct4Val),
  ct4Any: mapLayout('kbp_ct4any_v1', ct4Key, ct4Val),
  ct6Tcp: mapLayout('kbp_ct6tcp_v1', ct6Key, ct6Val),
  ct6Any: mapLayout('kbp_ct6any_v1', ct6Key, ct6Val),
  affinity4: mapLayout('kbp_aff4_v1', aff4Key, affVal),
  affinity6: mapLayout('kbp_aff6_v1', aff6Key, affVal),
  affinityMatch: mapLayout('kbp_affm_v1', affMatchKey, u8Codec),
  srcRange4: mapLayout('kbp_srcr4_v1', srcRange4Key, u8Codec),
  srcRange6: mapLayout('kbp_srcr6_v1', srcRange6Key, u8Codec),
  rr: mapLayout('kbp_rr_v1', u32Codec, rrVal),
  svcStats: mapLayout('kbp_svcst_v1', u32Codec, trafficStats, true),
  backendStats: mapLayout('kbp_best_v1', u32Codec, trafficStats, true),
  drops: mapLayout('kbp_drops_v1', u32Codec, dropStats, true),
  /** LRU per-CPU hash: {svc_id, reason} -> packets, bytes dropped. */
  svcDrops: mapLayout('kbp_svcdrop_v1', svcDropKey, dropStats, true),
  /** Two generations of the node configuration (key 0 and 1), published by configGen. */
  config: mapLayout('kbp_cfg_v2', u32Codec, config),
  /** One entry: the live generation of `config` (0 or 1). */
  configGen: mapLayout('kbp_cfggen_v1', u32Codec, u32Codec),
  /** Per CPU, one entry: new flows in the current second (kbp_config.new_flow_rate). */
  newFlowRate: mapLayout('kbp_rate_v1', u32Codec, rate, true),
  /** Per CPU, one entry: the clock read once a tick (bpf/clock.h). */
  clock: mapLayout('kbp_clock_v1', u32Codec, clock, true),
  nodeAddrs4: mapLayout('kbp_node4_v1', ip4Codec, u32Codec),
  nodeAddrs6: mapLayout('kbp_node6_v1', node6Key, u32Codec),
  /** ifindex -> the interface's primary IPv4 address: the SNAT source through it. */
  ifAddrs4: mapLayout('kbp_ifaddr4_v1', u32Codec, ip4Codec),
  /** ifindex -> the interface's first usable global IPv6 address: the IPv6 SNAT source through it. */
  ifAddrs6: mapLayout('kbp_ifaddr6_v1', u32Codec, ifAddr6Val),
  /** ifindex -> HOST_IF: the local pods' devices host routing delivers to (bpf.hostRouting). */
  hostIfs: mapLayout('kbp_hostif_v1', u32Codec, u32Codec),
  /** LPM: other nodes' pod prefixes host routing carries flows to, both ways (bpf.hostRouting). */
  hostDst4: mapLayout('kbp_hostdst4_v1', hostDst4Key, u8Codec),
  hostDst6: mapLayout('kbp_hostdst6_v1', hostDst6Key, u8Codec),
  /** Whose sockets the socket hooks serve (one entry, written before they are attached). */
  sockConfig: mapLayout('kbp_sockcfg_v1', u32Codec, sockConfig),
  /** LRU: {socket cookie, backend} -> the service address the socket asked for. */
  sockRev4: mapLayout('kbp_sockrev4_v1', sockRev4Key, sockRev4Val),
  sockRev6: mapLayout('kbp_sockrev6_v1', sockRev6Key, sockRev6Val),
  /** Socket cookie -> the sockRev entries the socket made (not preallocated): kbp_sock_release
   * deletes them when the socket closes. */
  sockIdx: mapLayout('kbp_sockidx_v1', u64Codec, sockIdx),
  /** LRU: {saddr, daddr, IP id, proto} of a fragmented datagram -> its first fragment's ports. */
  fragments4: mapLayout('kbp_frag4_v1', frag4Key, frag4Val),
  /** Per CPU, one entry: fragments recorded, followed, and passed untouched. */
  fragStats: mapLayout('kbp_fragst_v1', u32Codec, fragStats, true),
  /** LRU: {saddr, daddr, Fragment header id} of an IPv6 datagram -> its first fragment's ports. */
  fragments6: mapLayout('kbp_frag6_v1', frag6Key, frag6Val),
} as const satisfies Record<string, MapLayout>;

/** The programs in bpf/lb.o. Their names differ in the first 15 characters, all the kernel keeps,
 * so `list` can tell which one a link runs. */
export const PROGRAMS = {
  /** tc ingress of pod-facing interfaces (traffic from pods, both directions of SNATed flows). */
  tcFromPod: 'kbp_tc_pod',
  /** tc ingress of external interfaces (NodePort/externalIP/LB, replies of SNATed flows). */
  tcFromExternal: 'kbp_tc_ext',
  /** kbp_tc_ext for devices without an Ethernet header (ipip, WireGuard). */
  tcFromExternalL3: 'kbp_tc_ext_l3',
  /** tc egress of pod-facing and external interfaces: replies get the service address back. */
  tcEgress: 'kbp_tc_egress',
  /** kbp_tc_egress for devices without an Ethernet header. */
  tcEgressL3: 'kbp_tc_egress_l3',
  /** XDP on external interfaces: the same work as kbp_tc_ext before the stack. */
  xdpFromExternal: 'kbp_xdp_ext',
  /** Benchmark baseline: swap MACs, XDP_TX. */
  xdpTx: 'kbp_xdp_tx',
  /** cgroup connect4: TCP and UDP connect() to a service address goes to a backend. */
  sockConnect4: 'kbp_sock4_connect',
  /** cgroup sendmsg4: each unconnected UDP datagram to a service address goes to a backend. */
  sockSendmsg4: 'kbp_sock4_sendmsg',
  /** cgroup recvmsg4: UDP replies from a backend read as from the service address. */
  sockRecvmsg4: 'kbp_sock4_recvmsg',
  /** cgroup getpeername4: a translated socket's peer reads as the service address. */
  sockGetpeername4: 'kbp_sock4_getpeername',
  /** cgroup connect6, sendmsg6, recvmsg6, getpeername6: the same for IPv6 sockets; a dual-stack
   * socket's IPv4-mapped service address is decided in the IPv4 maps. */
  sockConnect6: 'kbp_sock6_connect',
  sockSendmsg6: 'kbp_sock6_sendmsg',
  sockRecvmsg6: 'kbp_sock6_recvmsg',
  sockGetpeername6: 'kbp_sock6_getpeername',
  /** cgroup sock_release: a closing socket's sockRev entries go with it (sockIdx). */
  sockRelease: 'kbp_sock_release',
} as const;

// ---------- load-time constants (.rodata) ----------

/** The object's read-only globals, set with setMapInitialValue(findMap(obj, RODATA_MAP), ...) before
 * loading. */
export const RODATA_MAP = '.rodata';

export interface DatapathRodata {
  /** bpf_ktime_get_coarse_ns (kernel >= 5.11); false falls back to bpf_ktime_get_ns (5.10). */
  coarseClock: boolean;
  /** bpf_set_retval is callable from the cgroup socket-address hooks (probed): a connect() to a
   * service without endpoints then fails with ECONNREFUSED instead of EPERM. */
  sockSetRetval: boolean;
  /** bpf.hostRouting resolved to bpf (hostRoutingDecision): flows between local pods bypass the
   * stack; false keeps bpf_redirect_peer out of the verifier's sight. */
  hostRouting: boolean;
}

/** The variables of bpf/rodata.h (each a __u32) by offset: all that the object's .rodata holds. */
const RODATA_VARS = { kbp_coarse_clock: 0, kbp_sock_set_retval: 4, kbp_host_routing: 8 } as const;

export const rodata = {
  size: 12,
  vars: RODATA_VARS as Readonly<Record<string, number>>,
  encode(value: DatapathRodata): Buffer {
    const buf = Buffer.alloc(12);
    buf.writeUInt32LE(value.coarseClock ? 1 : 0, RODATA_VARS.kbp_coarse_clock);
    buf.writeUInt32LE(value.sockSetRetval ? 1 : 0, RODATA_VARS.kbp_sock_set_retval);
    buf.writeUInt32LE(value.hostRouting ? 1 : 0, RODATA_VARS.kbp_host_routing);
    return buf;
  },
};
