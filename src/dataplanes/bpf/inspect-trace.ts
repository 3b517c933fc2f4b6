import { mapLookup } from '../../../native/libbpf/map.js';
import { ipFamilyOf, joinHostPort } from '../../net/ip.js';
import { flowHash } from './flow-hash.js';
import { decodeFrontendValue, encodeFrontendKey, IPPROTO } from './frontend-codec.js';
import type { PinnedMaps } from './inspect.js';
import { readMaglevTable } from './kernel-store.js';
import {
  aff4Key,
  aff6Key,
  affMatchKey,
  affVal,
  BE_F,
  type BpfConfigValue,
  backend4,
  backend6,
  CT_F,
  type Ct4Key,
  type Ct4Val,
  ct4Key,
  ct4Val,
  ct6Key,
  ct6Val,
  ip4Codec,
  ip6Codec,
  rrVal,
  SRC_RANGE_ID_BITS,
  slotKey,
  slotVal4,
  srcRange4Key,
  srcRange6Key,
  svc4Key,
  svc6Key,
  svcVal,
  TCP_FLAG,
  u8Codec,
  u32Codec,
} from './layout.js';
import type { MapName } from './object.js';
import type { BackendEntry, FrontendValue } from './store.js';
import { ANY_ADDRESS, type FrontendKey, frontendLabel } from './types.js';

export type TraceRole = 'pod' | 'external';

export interface TraceInput {
  saddr: string;
  sport: number;
  daddr: string;
  dport: number;
  protocol: 'TCP' | 'UDP';
  /** Which hook sees the packet: a pod-facing interface or an external one. */
  from: TraceRole;
  /** TCP only: a connection's first packet (SYN). */
  syn: boolean;
}

export interface TraceStep {
  step: string;
  result: string;
}

export interface TraceResult {
  verdict: 'pass' | 'translate' | 'drop' | 'reject';
  steps: TraceStep[];
  /** The frontend matched, if any. */
  frontend: string | null;
  servicePort: string | null;
  serviceId: number | null;
  /** The backend the packet goes to when that is known for certain. */
  backend: string | null;
  /** Backends one of which a new flow would get, when the choice is not determined in advance. */
  candidates: string[];
  deterministic: boolean;
}

/** What trace reads from the maps, one question at a time (the CLI answers from the kernel). */
export interface TraceMaps {
  conntrack(key: Ct4Key): Ct4Val | null;
  frontend(key: FrontendKey): FrontendValue | null;
  isNodeAddress(address: string): boolean;
  config(): BpfConfigValue;
  slot(serviceId: number, gen: number, slot: number): number;
  backend(id: number): BackendEntry | null;
  sourceAllowed(serviceId: number, saddr: string): boolean;
  /** The affinity entry's backend and age (ns), or null. */
  affinity(client: string, serviceId: number): { backendId: number; ageNs: bigint } | null;
  affinityMatches(backendId: number, serviceId: number): boolean;
  rrNext(serviceId: number): number | null;
  maglevTable(serviceId: number): Uint32Array | null;
}

const name = (b: BackendEntry | null, id: number) =>
  b ? joinHostPort(b.address, b.port) : `#${id} (missing)`;

/** One trace as its steps fill it in. */
interface Trace {
  input: TraceInput;
  maps: TraceMaps;
  names: ReadonlyMap<number, string>;
  proto: number;
  steps: TraceStep[];
  result: TraceResult;
}

/** The datapath's decision for one packet, step by step (kbp_lb4 / kbp_lb6, bpf/lb_family.h); the
 * destination's family picks the maps. Each step returns whether the packet's fate is settled. */
export function traceFlow(
  input: TraceInput,
  maps: TraceMaps,
  names: ReadonlyMap<number, string>,
): TraceResult {
  const steps: TraceStep[] = [];
  const result: TraceResult = {
    verdict: 'pass',
    steps,
    frontend: null,
    servicePort: null,
    serviceId: null,
    backend: null,
    candidates: [],
    deterministic: true,
  };
  const t: Trace = { input, maps, names, proto: IPPROTO[input.protocol], steps, result };
  if (traceConntrack(t)) return result;
  const sv = traceService(t);
  if (!sv || traceAdmission(t, sv)) return result;
  const slots = traceBackends(t, sv);
  if (traceAffinity(t, sv)) return result;
  traceScheduler(t, sv, slots);
  return result;
}

const backendName = (t: Trace, id: number) => name(t.maps.backend(id), id);

/** 1. Conntrack: a tracked flow is rewritten as it was, unless a SYN reopens a closed or orphaned one. */
function traceConntrack({ input, maps, names, proto, steps, result }: Trace): boolean {
  const tuple: Ct4Key = {
    saddr: input.saddr,
    daddr: input.daddr,
    sport: input.sport,
    dport: input.dport,
    proto,
  };
  const ct = maps.conntrack(tuple);
  if (!ct) {
    steps.push({ step: 'conntrack', result: 'no tracked flow for this tuple' });
    return false;
  }
  const newConnection = input.protocol === 'TCP' && input.syn;
  const reply = (ct.flags & CT_F.REPLY) !== 0;
  const closed = (ct.tcpFlags & (TCP_FLAG.FIN | TCP_FLAG.RST)) !== 0;
  const b = maps.backend(ct.backendId);
  const current = b !== null && b.address === ct.xlateDaddr && b.port === ct.xlateDport && !b.terminating;
  const to = `${joinHostPort(ct.xlateSaddr, ct.xlateSport)} -> ${joinHostPort(ct.xlateDaddr, ct.xlateDport)}`;
  if (!reply && newConnection && (closed || !current)) {
    steps.push({
      step: 'conntrack',
      result: `tracked flow found, but this SYN opens a new connection and the old flow ${closed ? 'closed' : 'lost its backend'}: choose again`,
    });
    return false;
  }
  steps.push({
    step: 'conntrack',
    result: `${reply ? 'reply of' : 'packet of'} a tracked flow (service id ${ct.svcId}, backend id ${ct.backendId}): rewritten to ${to}`,
  });
  result.verdict = 'translate';
  result.serviceId = ct.svcId;
  result.servicePort = names.get(ct.svcId) ?? null;
  result.backend = reply
    ? joinHostPort(ct.xlateSaddr, ct.xlateSport)
    : joinHostPort(ct.xlateDaddr, ct.xlateDport);
  return true;
}

/** The frontend the packet matches: its own address, else a NodePort on every node address. */
function lookupFrontend({ input, maps }: Trace, key: FrontendKey): FrontendValue | null {
  const sv = maps.frontend(key);
  if (sv) return sv;
  const cfg = maps.config();
  const candidate =
    cfg.nodeportMax === 0 || (input.dport >= cfg.nodeportMin && input.dport <= cfg.nodeportMax);
  if (!candidate || !maps.isNodeAddress(input.daddr)) return null;
  key.address = ANY_ADDRESS[key.family];
  return maps.frontend(key);
}

/** 2. Service lookup: the frontend, its internal-scope sibling for pods; null when the packet
 * passes untouched. */
function traceService(t: Trace): FrontendValue | null {
  const { input, maps, names, steps, result } = t;
  const key: FrontendKey = {
    family: ipFamilyOf(input.daddr) ?? 'IPv4',
    address: input.daddr,
    port: input.dport,
    protocol: input.protocol,
    scope: 'all',
  };
  let sv = lookupFrontend(t, key);
  if (!sv) {
    steps.push({
      step: 'service',
      result: `no frontend for ${input.protocol}/${joinHostPort(input.daddr, input.dport)}: passed untouched`,
    });
    return null;
  }
  if (input.from === 'pod' && sv.hasInternalScope) {
    const internal = maps.frontend({ ...key, scope: 'internal' });
    if (internal) {
      sv = internal;
      key.scope = 'internal';
    }
  }
  result.frontend = frontendLabel(key);
  result.serviceId = sv.serviceId;
  result.servicePort = names.get(sv.serviceId) ?? null;
  steps.push({
    step: 'service',
    result: `frontend ${result.frontend} (${sv.kind}${result.servicePort ? ` of ${result.servicePort}` : ''}, service id ${sv.serviceId}${key.scope === 'internal' ? ', the entry for traffic from pods' : ''})`,
  });
  if (input.from === 'external' && sv.kind === 'ClusterIP') {
    steps.push({
      step: 'scope',
      result: 'ClusterIPs are served to pods only: from an external interface the packet passes untouched',
    });
    result.frontend = null;
    return null;
  }
  return sv;
}

/** 3. Source ranges, then the frontend's action: dropped or rejected here, or on to a backend. */
function traceAdmission({ input, maps, steps, result }: Trace, sv: FrontendValue): boolean {
  if (sv.checksSourceRanges) {
    if (!maps.sourceAllowed(sv.serviceId, input.saddr)) {
      steps.push({
        step: 'source ranges',
        result: `${input.saddr} is outside loadBalancerSourceRanges: dropped`,
      });
      result.verdict = 'drop';
      return true;
    }
    steps.push({ step: 'source ranges', result: `${input.saddr} is inside loadBalancerSourceRanges` });
  }
  if (sv.action === 'reject') {
    steps.push({
      step: 'endpoints',
      result: 'the service has no endpoints: rejected (ICMP port unreachable)',
    });
    result.verdict = 'reject';
    return true;
  }
  if (sv.action === 'drop' || sv.count === 0) {
    steps.push({ step: 'endpoints', result: 'no endpoint the traffic policy allows (Local): dropped' });
    result.verdict = 'drop';
    return true;
  }
  return false;
}

/** The live generation's backend ids, in slot order. */
function traceBackends(t: Trace, sv: FrontendValue): number[] {
  const slots = Array.from({ length: sv.count }, (_, i) => t.maps.slot(sv.serviceId, sv.gen, i));
  t.steps.push({
    step: 'backends',
    result: `${sv.count} backend(s) in generation ${sv.gen}${sv.localOnly ? ' (local endpoints only)' : ''}: ${slots.map((id) => backendName(t, id)).join(', ')}`,
  });
  t.result.verdict = 'translate';
  return slots;
}

/** 4. Affinity: a client seen within the timeout goes to its backend again. */
function traceAffinity(t: Trace, sv: FrontendValue): boolean {
  const { input, maps, steps, result } = t;
  if (sv.affinityTimeoutSeconds <= 0) return false;
  const a = maps.affinity(input.saddr, sv.serviceId);
  const timeoutNs = BigInt(sv.affinityTimeoutSeconds) * 1_000_000_000n;
  if (a && a.ageNs <= timeoutNs && maps.affinityMatches(a.backendId, sv.serviceId)) {
    steps.push({
      step: 'affinity',
      result: `client ${input.saddr} used ${backendName(t, a.backendId)} ${Number(a.ageNs / 1_000_000_000n)}s ago (timeout ${sv.affinityTimeoutSeconds}s): same backend`,
    });
    result.backend = backendName(t, a.backendId);
    return true;
  }
  steps.push({
    step: 'affinity',
    result: a
      ? 'the client affinity entry expired or its backend left: choose again'
      : `no affinity entry for ${input.saddr} yet`,
  });
  return false;
}

/** 5. Scheduler: Maglev's table entry, round robin's next slot, else any backend at random. */
function traceScheduler(t: Trace, sv: FrontendValue, slots: readonly number[]): void {
  if (sv.scheduler === 'maglev' && traceMaglev(t, sv)) return;
  if (sv.scheduler === 'rr' && traceRoundRobin(t, sv, slots)) return;
  t.steps.push({
    step: 'random',
    result: `one of the ${sv.count} backend(s) at random, per new flow (not deterministic)`,
  });
  t.result.candidates = slots.map((id) => backendName(t, id));
  t.result.deterministic = false;
}

function traceMaglev(t: Trace, sv: FrontendValue): boolean {
  const { input, maps, steps, result } = t;
  const table = maps.maglevTable(sv.serviceId);
  const cfg = maps.config();
  if (!table || cfg.maglevSize <= 0) {
    steps.push({ step: 'maglev', result: 'no Maglev table installed: random choice instead' });
    return false;
  }
  const index = flowHash(input.saddr, input.sport, input.dport, t.proto, cfg.hashSeed) % cfg.maglevSize;
  const id = table[index] ?? 0;
  steps.push({
    step: 'maglev',
    result: `hash of (${input.saddr}, ${input.sport}, ${input.dport}, ${input.protocol}) with seed ${cfg.hashSeed} -> entry ${index} of ${cfg.maglevSize}: ${backendName(t, id)} (deterministic)`,
  });
  result.backend = backendName(t, id);
  return true;
}

function traceRoundRobin(t: Trace, sv: FrontendValue, slots: readonly number[]): boolean {
  const next = t.maps.rrNext(sv.serviceId);
  if (next === null) return false;
  const slot = next % sv.count;
  t.steps.push({
    step: 'rr',
    result: `round robin counter at ${next}: the next new flow gets slot ${slot}, ${backendName(t, slots[slot]!)} (unless another flow comes first)`,
  });
  t.result.backend = backendName(t, slots[slot]!);
  t.result.deterministic = false;
  return true;
}

/** TraceMaps over the pinned maps. */
export function kernelTraceMaps(
  maps: PinnedMaps,
  nowNs: () => bigint = () => process.hrtime.bigint(),
): TraceMaps {
  const { fd } = maps;
  const lookup = (map: MapName, key: Buffer, size: number): Buffer | null => {
    const value = Buffer.alloc(size);
    return mapLookup(fd[map], key, value) ? value : null;
  };
  let config: BpfConfigValue | null = null;
  const v6 = (address: string) => ipFamilyOf(address) === 'IPv6';
  return {
    conntrack(key) {
      const tcp = key.proto === IPPROTO.TCP;
      if (v6(key.saddr)) {
        const v = lookup(tcp ? 'ct6Tcp' : 'ct6Any', ct6Key.encode(key), ct6Val.size);
        return v ? ct6Val.decode(v) : null;
      }
      const v = lookup(tcp ? 'ct4Tcp' : 'ct4Any', ct4Key.encode(key), ct4Val.size);
      return v ? ct4Val.decode(v) : null;
    },
    frontend(key) {
      const k = encodeFrontendKey(key);
      const v =
        key.family === 'IPv6'
          ? lookup('svc6', svc6Key.encode(k), svcVal.size)
          : lookup('svc4', svc4Key.encode(k), svcVal.size);
      return v ? decodeFrontendValue(svcVal.decode(v)) : null;
    },
    isNodeAddress: (address) =>
      v6(address)
        ? lookup('nodeAddrs6', ip6Codec.encode(address), 4) !== null
        : lookup('nodeAddrs4', ip4Codec.encode(address), 4) !== null,
    config() {
      config ??= maps.store.readConfig();
      return config;
    },
    slot(serviceId, gen, slot) {
      const v = lookup('slots', slotKey.encode({ svcId: serviceId, slot, gen }), slotVal4.size);
      return v ? slotVal4.decode(v).backendId : 0;
    },
    backend(id) {
      // One id space for both families: the id is in one of the two maps.
      const v4 = lookup('backends4', u32Codec.encode(id), backend4.size);
      const v = v4 ?? lookup('backends6', u32Codec.encode(id), backend6.size);
      if (!v) return null;
      const b = v4 ? backend4.decode(v) : backend6.decode(v);
      return {
        id,
        family: v4 ? 'IPv4' : 'IPv6',
        address: b.addr,
        port: b.port,
        isLocal: (b.flags & BE_F.LOCAL) !== 0,
        terminating: (b.flags & BE_F.TERMINATING) !== 0,
      };
    },
    sourceAllowed: (serviceId, saddr) =>
      v6(saddr)
        ? lookup(
            'srcRange6',
            srcRange6Key.encode({ prefixlen: SRC_RANGE_ID_BITS + 128, svcId: serviceId, addr: saddr }),
            u8Codec.size,
          ) !== null
        : lookup(
            'srcRange4',
            srcRange4Key.encode({ prefixlen: SRC_RANGE_ID_BITS + 32, svcId: serviceId, addr: saddr }),
            u8Codec.size,
          ) !== null,
    affinity(client, serviceId) {
      const key = { client, svcId: serviceId };
      const v = v6(client)
        ? lookup('affinity6', aff6Key.encode(key), affVal.size)
        : lookup('affinity4', aff4Key.encode(key), affVal.size);
      if (!v) return null;
      const a = affVal.decode(v);
      return { backendId: a.backendId, ageNs: nowNs() - a.lastUsedNs };
    },
    affinityMatches: (backendId, serviceId) =>
      lookup('affinityMatch', affMatchKey.encode({ backendId, svcId: serviceId }), 1) !== null,
    rrNext(serviceId) {
      const v = lookup('rr', u32Codec.encode(serviceId), rrVal.size);
      return v ? rrVal.decode(v).next : null;
    },
    maglevTable(serviceId) {
      const v = lookup('maglev', u32Codec.encode(serviceId), 4);
      return v ? readMaglevTable(u32Codec.decode(v)) : null;
    },
  };
}
