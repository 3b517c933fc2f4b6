// Moving a node's open connections between the kernel's netfilter conntrack and the BPF conntrack
// (issue 30): the decisions only, as pure functions; conntrack-handoff.ts reads and writes the two.
//
// kube-proxy → bpf. A connection opened through kube-proxy's rules has a netfilter conntrack entry
// that holds its NAT: the rules are consulted only for a flow's first packet, so the entry goes on
// translating the flow after `kube-bpf-proxy cleanup` removed them (pkg/proxy/iptables/proxier.go
// and pkg/proxy/nftables/proxier.go at v1.37.2 match new connections only). The tc programs,
// attached before the flow ends, would see its next packet to the service address as a new flow
// and choose a backend afresh. So, before the first sync writes the frontends, every such entry
// becomes a pair of BPF conntrack entries flagged KBP_CT_F_STACK: the programs pass those packets
// untouched and netfilter keeps translating them to the backend kube-proxy chose, until they end.
//
// bpf → kube-proxy. A flow of ours is translated by the tc programs; netfilter saw it, if at all,
// already translated (client → backend). Once the programs detach, its packets would meet
// kube-proxy's rules as a new flow. So, before detaching, `cleanup` writes each flow as a netfilter
// entry with the same NAT (client → service, DNAT to the backend, SNAT to the address and port the
// programs chose), after deleting the entries that would clash with it; the programs hold the
// flow's forward packets meanwhile (KBP_CT_F_HOLD), then pass them to that entry (KBP_CT_F_STACK).

import type { ConntrackTuple } from '../../host/ctnetlink.js';
import type { IPFamily } from '../../model/types.js';
import { canonicalIP } from '../../net/ip.js';
import { IPPROTO } from './frontend-codec.js';
import { CT_F, TCP_FLAG } from './layout.js';
import type { PlannedBackend, PlannedFrontend } from './plan.js';
import { ANY_ADDRESS } from './types.js';

/** What the takeover reads of a plan (BpfPlan). */
export interface PlanFrontends {
  frontends: readonly Pick<PlannedFrontend, 'key' | 'serviceId' | 'action'>[];
  backends: readonly Pick<PlannedBackend, 'id' | 'family' | 'address' | 'port'>[];
}

/** One direction's addresses and ports of a connection. */
export interface Tuple {
  src: string;
  dst: string;
  sport: number;
  dport: number;
}

/** A netfilter conntrack entry as `conntrack -L` prints it. */
export interface NetfilterFlow {
  protocol: 'tcp' | 'udp';
  /** TCP's state (ESTABLISHED, TIME_WAIT, ...); null for UDP. */
  state: string | null;
  orig: Tuple;
  reply: Tuple;
}

/**
 * `conntrack -L` lines: "tcp 6 431999 ESTABLISHED src=A dst=B sport=P dport=Q src=C dst=D sport=R
 * dport=S [ASSURED] mark=0 use=1" (UDP without the state). The first src/dst/sport/dport are the
 * original direction, the second the reply. Other protocols and lines that do not parse are left out.
 */
export function parseNetfilterFlows(stdout: string): NetfilterFlow[] {
  const flows: NetfilterFlow[] = [];
  for (const line of stdout.split('\n')) {
    const fields = line.trim().split(/\s+/);
    const protocol = fields[0];
    if (protocol !== 'tcp' && protocol !== 'udp') continue;
    const seen = new Map<string, string[]>();
    for (const field of fields) {
      const eq = field.indexOf('=');
      if (eq > 0)
        seen.set(field.slice(0, eq), [...(seen.get(field.slice(0, eq)) ?? []), field.slice(eq + 1)]);
    }
    const tuple = (i: number): Tuple | null => {
      const src = canonicalIP(seen.get('src')?.[i] ?? '');
      const dst = canonicalIP(seen.get('dst')?.[i] ?? '');
      const sport = Number(seen.get('sport')?.[i]);
      const dport = Number(seen.get('dport')?.[i]);
      if (src === null || dst === null || !Number.isInteger(sport) || !Number.isInteger(dport)) return null;
      return { src, dst, sport, dport };
    };
    const orig = tuple(0);
    const reply = tuple(1);
    if (!orig || !reply) continue;
    const state = protocol === 'tcp' && /^[A-Z_]+$/.test(fields[3] ?? '') ? (fields[3] as string) : null;
    flows.push({ protocol, state, orig, reply });
  }
  return flows;
}

/** TCP states of a connection that is over: nothing of it is left to carry. */
const TCP_DONE = new Set(['TIME_WAIT', 'CLOSE']);

/** The fields of a BPF conntrack key and value (kbp_ct4_key/val, kbp_ct6_key/val), addresses as text. */
export interface BpfCtEntry {
  key: { saddr: string; daddr: string; sport: number; dport: number; proto: number };
  value: {
    lastSeenNs: bigint;
    xlateSaddr: string;
    xlateDaddr: string;
    xlateSport: number;
    xlateDport: number;
    svcId: number;
    backendId: number;
    flags: number;
    tcpFlags: number;
  };
}

/** The frontend of the plan a packet to `dst` (tcp/udp) reaches: its address, else a NodePort on
 * every node address; null when none forwards. */
function frontendFor(
  plan: PlanFrontends,
  family: IPFamily,
  protocol: 'tcp' | 'udp',
  dst: string,
  dport: number,
) {
  const candidates = plan.frontends.filter(
    (f) =>
      f.key.family === family &&
      f.key.port === dport &&
      f.key.protocol.toLowerCase() === protocol &&
      f.action === 'forward',
  );
  return (
    candidates.find((f) => f.key.address === dst) ??
    candidates.find((f) => f.key.address === ANY_ADDRESS[family]) ??
    null
  );
}

/**
 * kube-proxy → bpf: the BPF conntrack entries (forward and reply, KBP_CT_F_STACK) for the netfilter
 * flows of `family` that a Service of the plan translated and that are not over: destination NAT
 * (the reply comes from another address or port than the client sent to) to one of its frontends.
 * Each pair is what the programs would have written for the flow (the reply entry keyed by the
 * translated tuple, reversed), so conntrack GC ages the pair as one flow.
 */
export function stackEntries(
  flows: readonly NetfilterFlow[],
  plan: PlanFrontends,
  family: IPFamily,
  nowNs: bigint,
): BpfCtEntry[] {
  const entries: BpfCtEntry[] = [];
  for (const flow of flows) {
    const { orig, reply, protocol } = flow;
    if (flow.state !== null && TCP_DONE.has(flow.state)) continue;
    if (reply.src === orig.dst && reply.sport === orig.dport) continue;
    const frontend = frontendFor(plan, family, protocol, orig.dst, orig.dport);
    if (!frontend) continue;
    const backend = plan.backends.find(
      (b) => b.family === family && b.address === reply.src && b.port === reply.sport,
    );
    const common = {
      lastSeenNs: nowNs,
      svcId: frontend.serviceId,
      backendId: backend?.id ?? 0,
      // The connection is established: GC gives it the established timeout, not SYN's.
      tcpFlags: protocol === 'tcp' ? TCP_FLAG.ACK : 0,
    };
    const proto = protocol === 'tcp' ? IPPROTO.TCP : IPPROTO.UDP;
    entries.push(
      {
        key: { saddr: orig.src, daddr: orig.dst, sport: orig.sport, dport: orig.dport, proto },
        value: {
          ...common,
          xlateSaddr: reply.dst,
          xlateDaddr: reply.src,
          xlateSport: reply.dport,
          xlateDport: reply.sport,
          flags: CT_F.STACK,
        },
      },
      {
        key: { saddr: reply.src, daddr: reply.dst, sport: reply.sport, dport: reply.dport, proto },
        value: {
          ...common,
          xlateSaddr: orig.dst,
          xlateDaddr: orig.src,
          xlateSport: orig.dport,
          xlateDport: orig.sport,
          flags: CT_F.STACK | CT_F.REPLY,
        },
      },
    );
  }
  return entries;
}

/** A flow of the programs, as netfilter must carry it once they detach. */
export interface Handback {
  protocol: 'tcp' | 'udp';
  /** The packet as the client sends it (to the service address). */
  orig: Tuple;
  /** Where the programs send it: the backend, and the source they gave it. */
  translated: Tuple;
  /** The BPF forward entry's key, flagged KBP_CT_F_STACK when netfilter takes the flow. */
  forwardKey: BpfCtEntry['key'];
}

/** The other direction of a tuple. */
const reversed = (t: Tuple): Tuple => ({ src: t.dst, dst: t.src, sport: t.dport, dport: t.sport });

/**
 * bpf → kube-proxy: the flows of the programs' conntrack (both maps of one family) that netfilter
 * must carry: forward entries that translate, not the stack's already, and TCP not yet closed by a
 * RST or a FIN each way.
 */
export function handbacks(entries: readonly BpfCtEntry[]): Handback[] {
  const keyText = (k: BpfCtEntry['key']) => `${k.proto}/${k.saddr}/${k.sport}/${k.daddr}/${k.dport}`;
  const byKey = new Map(entries.map((e) => [keyText(e.key), e]));
  const out: Handback[] = [];
  for (const { key, value } of entries) {
    if (value.flags & (CT_F.REPLY | CT_F.STACK)) continue;
    if (key.proto !== IPPROTO.TCP && key.proto !== IPPROTO.UDP) continue;
    const translated = {
      src: value.xlateSaddr,
      dst: value.xlateDaddr,
      sport: value.xlateSport,
      dport: value.xlateDport,
    };
    const back = reversed(translated);
    const replyKey = {
      saddr: back.src,
      daddr: back.dst,
      sport: back.sport,
      dport: back.dport,
      proto: key.proto,
    };
    const replyFlags = byKey.get(keyText(replyKey))?.value.tcpFlags ?? 0;
    const flags = value.tcpFlags | replyFlags;
    if (key.proto === IPPROTO.TCP && (flags & TCP_FLAG.RST || value.tcpFlags & replyFlags & TCP_FLAG.FIN))
      continue;
    out.push({
      protocol: key.proto === IPPROTO.TCP ? 'tcp' : 'udp',
      orig: { src: key.saddr, dst: key.daddr, sport: key.sport, dport: key.dport },
      translated,
      forwardKey: key,
    });
  }
  return out;
}

const hostPort = (ip: string, port: number) => (ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`);
const tupleArgs = (t: Tuple) => [
  '-s',
  t.src,
  '-d',
  t.dst,
  '--sport',
  String(t.sport),
  '--dport',
  String(t.dport),
];

/** The kernel's timeouts for an established TCP and a replied UDP flow (the defaults of
 * nf_conntrack_tcp_timeout_established and nf_conntrack_udp_timeout_stream): each packet of the
 * flow renews its entry's own after that. */
export const HANDBACK_TIMEOUT_SECONDS = { tcp: 432_000, udp: 120 } as const;

/**
 * The netfilter entries to delete before a flow goes in (their original tuples):
 *   - the entry of its translated tuple: the stack saw the flow after the programs translated it,
 *     and that entry's reply tuple is the one the flow's entry needs;
 *   - the entry of the translated tuple reversed: a reply that reached netfilter between that
 *     delete and the insert made one, whose tuple is the insert's reply tuple;
 *   - the entry of its own tuple: a packet that reached netfilter untranslated made one, without
 *     NAT (before the programs held the flow, or in a batch that failed).
 */
export function handbackDeletes(h: Handback): ConntrackTuple[] {
  const t = h.translated;
  return [t, reversed(t), h.orig].map((tuple) => ({ protocol: h.protocol, ...tuple }));
}

/**
 * The flow's line for `conntrack -R` (one command a line; no family, it follows from the
 * addresses): the flow in, with the programs' NAT: DNAT to the backend, and SNAT when the programs
 * changed the source. Established (TCP) and assured, so that neither kube-proxy's rules (they match
 * new connections only) nor early drop touch it.
 */
export function handbackInsertLine(h: Handback): string {
  const { orig, translated: t } = h;
  const snat = t.src !== orig.src || t.sport !== orig.sport;
  return [
    '-I',
    '-p',
    h.protocol,
    ...tupleArgs(orig),
    '--dst-nat',
    hostPort(t.dst, t.dport),
    ...(snat ? ['--src-nat', hostPort(t.src, t.sport)] : []),
    ...(h.protocol === 'tcp' ? ['--state', 'ESTABLISHED'] : []),
    '--status',
    'SEEN_REPLY,ASSURED',
    '--timeout',
    String(HANDBACK_TIMEOUT_SECONDS[h.protocol]),
  ].join(' ');
}

/** The handbacks netfilter does not carry as asked (`flows`: its entries after the batch). */
export function missingHandbacks(hs: readonly Handback[], flows: readonly NetfilterFlow[]): Handback[] {
  const same = (a: Tuple, b: Tuple) =>
    a.src === b.src && a.dst === b.dst && a.sport === b.sport && a.dport === b.dport;
  return hs.filter(
    (h) =>
      !flows.some(
        (f) => f.protocol === h.protocol && same(f.orig, h.orig) && same(f.reply, reversed(h.translated)),
      ),
  );
}
