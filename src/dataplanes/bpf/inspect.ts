// Reading the live pinned maps for `list` and `trace`: what each frontend holds and has counted,
// the path a given packet would take through the datapath (bpf/lb.h kbp_lb4), step by
// step, and which program is attached where. Nothing here writes to the kernel.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import {
  BPF_TC_EGRESS,
  BPF_TC_INGRESS,
  getPinned,
  linkInfo,
  mapInfo,
  mapLookup,
  programNameById,
  tcQuery,
  XDP_FLAGS_DRV_MODE,
  xdpQueryId,
} from '../../../native/libbpf.js';
import { closeFd } from '../../../native/libc.js';
import { BPFFS_ROOT, notOnBpffs } from '../../host/bpffs.js';
import type { Protocol } from '../../model/types.js';
import { ipFamilyOf, joinHostPort } from '../../net/ip.js';
import {
  clsactInterfaces,
  HOOKS,
  type Hook,
  linkNameOfPin,
  type Mechanism,
  parseLinkName,
  parseSockLinkName,
  SOCK_HOOKS,
  type SockHook,
  TC_HANDLE,
  TC_PRIORITY,
} from './attach.js';
import { flowHash } from './flow-hash.js';
import {
  decodeFrontendValue,
  encodeFrontendKey,
  IPPROTO,
  KernelStore,
  readMaglevTable,
} from './kernel-store.js';
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
  MAPS,
  PROGRAMS,
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
  type TrafficStats,
  u8Codec,
  u32Codec,
} from './layout.js';
import { type FrontendNames, namesFilePath } from './names-file.js';
import { type MapName, mapPinPath, PIN_LAYOUT_VERSION } from './object.js';
import { ANY_ADDRESS, type FrontendKey, frontendLabel } from './plan.js';
import type { BackendEntry, FrontendValue } from './store.js';

export interface PinnedMaps {
  pinDir: string;
  fd: Record<MapName, number>;
  store: KernelStore;
  close(): void;
}

/** Opens every pinned map of a running (or stopped) agent. */
export function openPinnedMaps(pinPath: string): PinnedMaps {
  // A reader never mounts bpffs: a fresh, empty mount would only hide where the pins could be.
  const why = notOnBpffs(pinPath);
  if (why) {
    throw new Error(
      `nothing is pinned under ${pinPath}: ${why} (an agent in bpf mode mounts bpffs at ${BPFFS_ROOT} when it starts; is one running?)`,
    );
  }
  const pinDir = `${pinPath}/${PIN_LAYOUT_VERSION}`;
  const fd = {} as Record<MapName, number>;
  const capacity = {} as Record<MapName, number>;
  const opened: number[] = [];
  try {
    for (const name of Object.keys(MAPS) as MapName[]) {
      const path = mapPinPath(pinDir, name);
      if (!existsSync(path)) {
        throw new Error(
          `${path} does not exist: no bpf data plane pinned under ${pinPath} (is the agent running with --proxy-mode bpf?)`,
        );
      }
      fd[name] = getPinned(path);
      opened.push(fd[name]);
      capacity[name] = mapInfo(fd[name]).maxEntries;
    }
  } catch (err) {
    for (const f of opened) closeFd(f);
    throw err;
  }
  return { pinDir, fd, store: new KernelStore(fd, capacity), close: () => opened.forEach(closeFd) };
}

/** The agent's names for frontends (service port and kind), when it wrote them. */
export function readFrontendNames(pinPath: string, path = namesFilePath(pinPath)): Map<number, string> {
  try {
    const names = JSON.parse(readFileSync(path, 'utf8')) as FrontendNames;
    return new Map(names.frontends.map((f) => [f.serviceId, f.servicePortName]));
  } catch {
    return new Map();
  }
}

export interface Counters {
  connections: number;
  inPackets: number;
  inBytes: number;
  outPackets: number;
  outBytes: number;
  drops: number;
}

function counters(s: TrafficStats | null): Counters {
  return {
    connections: Number(s?.newConns ?? 0n),
    inPackets: Number(s?.fwdPackets ?? 0n),
    inBytes: Number(s?.fwdBytes ?? 0n),
    outPackets: Number(s?.replyPackets ?? 0n),
    outBytes: Number(s?.replyBytes ?? 0n),
    drops: Number(s?.drops ?? 0n),
  };
}

function maybeCounters(s: TrafficStats | null): Counters | null {
  return s ? counters(s) : null;
}

export interface BackendView {
  slot: number;
  id: number;
  address: string;
  port: number;
  local: boolean;
  terminating: boolean;
  /** What this backend counted for every service that uses it; null when its id is past the
   * per-CPU counter map (bpf.mapSizes.backendCounters): its traffic is in its services' counters. */
  stats: Counters | null;
}

export interface AttachmentView {
  /** The interface; "cgroup" for the socket hooks. */
  interface: string;
  hook: Hook | SockHook;
  program: string;
  mechanism: Mechanism;
}

const HOOK_ORDER: readonly (Hook | SockHook)[] = [...HOOKS, ...SOCK_HOOKS.map((h) => h.hook)];

/** The kernel keeps the first 15 characters of a program's name: back to the full name. */
function programName(id: number): string {
  const kernelName = programNameById(id);
  return Object.values(PROGRAMS).find((p) => p.slice(0, 15) === kernelName) ?? kernelName;
}

/**
 * Which program is attached where: the agent's pinned links (tcx, XDP) and its cls_bpf filters
 * in this network namespace (run it in the agent's), sorted by interface and hook.
 */
export async function listAttachments(pinPath: string): Promise<AttachmentView[]> {
  const views: AttachmentView[] = [];
  const linkDir = `${pinPath}/${PIN_LAYOUT_VERSION}/links`;
  for (const file of existsSync(linkDir) ? readdirSync(linkDir) : []) {
    const name = linkNameOfPin(file);
    const sock = parseSockLinkName(name);
    const at = parseLinkName(name);
    if (!at && !sock) continue;
    const fd = getPinned(`${linkDir}/${file}`);
    let link: ReturnType<typeof linkInfo>;
    try {
      link = linkInfo(fd);
    } finally {
      closeFd(fd);
    }
    if (sock) {
      // A link whose cgroup is gone runs nowhere.
      if (link.cgroupId !== 0n)
        views.push({
          interface: 'cgroup',
          hook: sock,
          program: programName(link.progId),
          mechanism: 'cgroup',
        });
      continue;
    }
    // A link whose interface is gone runs nowhere; the agent removes its pin.
    if (!at || link.ifindex === 0) continue;
    let mechanism: Mechanism = 'tcx';
    if (at.hook === 'xdp')
      mechanism = xdpQueryId(link.ifindex, XDP_FLAGS_DRV_MODE) === link.progId ? 'xdp-drv' : 'xdp-generic';
    views.push({ interface: at.ifname, hook: at.hook, program: programName(link.progId), mechanism });
  }
  for (const i of await clsactInterfaces()) {
    for (const [hook, point] of [
      ['tc-ingress', BPF_TC_INGRESS],
      ['tc-egress', BPF_TC_EGRESS],
    ] as const) {
      const progId = tcQuery(i.ifindex, point, TC_HANDLE, TC_PRIORITY);
      if (progId !== null)
        views.push({ interface: i.ifname, hook, program: programName(progId), mechanism: 'clsact' });
    }
  }
  return views.sort(
    (a, b) =>
      a.interface.localeCompare(b.interface, 'en', { numeric: true }) ||
      HOOK_ORDER.indexOf(a.hook) - HOOK_ORDER.indexOf(b.hook),
  );
}

export interface FrontendView {
  /** "TCP/10.96.0.10:80"; "*" stands for every node address. */
  frontend: string;
  address: string;
  port: number;
  protocol: Protocol;
  scope: 'all' | 'internal';
  serviceId: number;
  /** From the agent's names file; null when it is not there. */
  servicePort: string | null;
  kind: FrontendValue['kind'];
  scheduler: FrontendValue['scheduler'];
  action: FrontendValue['action'];
  flags: string[];
  affinityTimeoutSeconds: number;
  gen: number;
  stats: Counters;
  backends: BackendView[];
}

function flagsOf(v: FrontendValue): string[] {
  const flags: string[] = [];
  if (v.localOnly) flags.push('local-only');
  if (v.hasInternalScope) flags.push('two-scopes');
  if (v.affinityTimeoutSeconds > 0) flags.push(`affinity=${v.affinityTimeoutSeconds}s`);
  if (v.checksSourceRanges) flags.push('source-ranges');
  return flags;
}

const KIND_ORDER = { ClusterIP: 0, LoadBalancer: 1, ExternalIP: 2, NodePort: 3 } as const;

/** Every frontend with its live backends and counters, in a stable order. */
export function listFrontends(maps: PinnedMaps, names: ReadonlyMap<number, string>): FrontendView[] {
  const state = maps.store.read();
  const backends = new Map(state.backends.map((b) => [b.id, b]));
  const slots = new Map<string, number>();
  for (const s of state.slots) slots.set(`${s.serviceId}/${s.gen}/${s.slot}`, s.backendId);
  const views = state.frontends.map(({ key, value }): FrontendView => {
    const live: BackendView[] = [];
    for (let slot = 0; slot < value.count; slot++) {
      const id = slots.get(`${value.serviceId}/${value.gen}/${slot}`) ?? 0;
      const b: BackendEntry | undefined = backends.get(id);
      live.push({
        slot,
        id,
        address: b?.address ?? '?',
        port: b?.port ?? 0,
        local: b?.isLocal ?? false,
        terminating: b?.terminating ?? false,
        stats: maybeCounters(maps.store.trafficStats('backend', id)),
      });
    }
    return {
      frontend: frontendLabel(key),
      address: key.address,
      port: key.port,
      protocol: key.protocol,
      scope: key.scope,
      serviceId: value.serviceId,
      servicePort: names.get(value.serviceId) ?? null,
      kind: value.kind,
      scheduler: value.scheduler,
      action: value.action,
      flags: flagsOf(value),
      affinityTimeoutSeconds: value.affinityTimeoutSeconds,
      gen: value.gen,
      stats: counters(maps.store.trafficStats('service', value.serviceId)),
      backends: live,
    };
  });
  return views.sort(
    (a, b) =>
      KIND_ORDER[a.kind] - KIND_ORDER[b.kind] ||
      a.address.localeCompare(b.address, 'en', { numeric: true }) ||
      a.port - b.port ||
      a.protocol.localeCompare(b.protocol) ||
      a.scope.localeCompare(b.scope),
  );
}

// ---------- trace ----------

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

/** The datapath's decision for one packet, step by step (kbp_lb4 / kbp_lb6, bpf/lb_family.h); the
 * destination's family picks the maps. */
export function traceFlow(
  input: TraceInput,
  maps: TraceMaps,
  names: ReadonlyMap<number, string>,
): TraceResult {
  const steps: TraceStep[] = [];
  const proto = IPPROTO[input.protocol];
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
  const tuple: Ct4Key = {
    saddr: input.saddr,
    daddr: input.daddr,
    sport: input.sport,
    dport: input.dport,
    proto,
  };

  // 1. Conntrack.
  const ct = maps.conntrack(tuple);
  const newConnection = input.protocol === 'TCP' && input.syn;
  if (ct) {
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
    } else {
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
      return result;
    }
  } else {
    steps.push({ step: 'conntrack', result: 'no tracked flow for this tuple' });
  }

  // 2. Service lookup.
  const family = ipFamilyOf(input.daddr) ?? 'IPv4';
  const key: FrontendKey = {
    family,
    address: input.daddr,
    port: input.dport,
    protocol: input.protocol,
    scope: 'all',
  };
  let sv = maps.frontend(key);
  if (!sv) {
    const cfg = maps.config();
    const candidate =
      cfg.nodeportMax === 0 || (input.dport >= cfg.nodeportMin && input.dport <= cfg.nodeportMax);
    if (candidate && maps.isNodeAddress(input.daddr)) {
      key.address = ANY_ADDRESS[family];
      sv = maps.frontend(key);
    }
  }
  if (!sv) {
    steps.push({
      step: 'service',
      result: `no frontend for ${input.protocol}/${joinHostPort(input.daddr, input.dport)}: passed untouched`,
    });
    return result;
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
    return result;
  }

  // 3. Source ranges, action.
  if (sv.checksSourceRanges) {
    if (!maps.sourceAllowed(sv.serviceId, input.saddr)) {
      steps.push({
        step: 'source ranges',
        result: `${input.saddr} is outside loadBalancerSourceRanges: dropped`,
      });
      result.verdict = 'drop';
      return result;
    }
    steps.push({ step: 'source ranges', result: `${input.saddr} is inside loadBalancerSourceRanges` });
  }
  if (sv.action === 'reject') {
    steps.push({
      step: 'endpoints',
      result: 'the service has no endpoints: rejected (ICMP port unreachable)',
    });
    result.verdict = 'reject';
    return result;
  }
  if (sv.action === 'drop' || sv.count === 0) {
    steps.push({ step: 'endpoints', result: 'no endpoint the traffic policy allows (Local): dropped' });
    result.verdict = 'drop';
    return result;
  }
  const slots = Array.from({ length: sv.count }, (_, i) => maps.slot(sv.serviceId, sv.gen, i));
  const backendName = (id: number) => name(maps.backend(id), id);
  steps.push({
    step: 'backends',
    result: `${sv.count} backend(s) in generation ${sv.gen}${sv.localOnly ? ' (local endpoints only)' : ''}: ${slots.map(backendName).join(', ')}`,
  });
  result.verdict = 'translate';

  // 4. Affinity.
  if (sv.affinityTimeoutSeconds > 0) {
    const a = maps.affinity(input.saddr, sv.serviceId);
    const timeoutNs = BigInt(sv.affinityTimeoutSeconds) * 1_000_000_000n;
    if (a && a.ageNs <= timeoutNs && maps.affinityMatches(a.backendId, sv.serviceId)) {
      steps.push({
        step: 'affinity',
        result: `client ${input.saddr} used ${backendName(a.backendId)} ${Number(a.ageNs / 1_000_000_000n)}s ago (timeout ${sv.affinityTimeoutSeconds}s): same backend`,
      });
      result.backend = backendName(a.backendId);
      return result;
    }
    steps.push({
      step: 'affinity',
      result: a
        ? 'the client affinity entry expired or its backend left: choose again'
        : `no affinity entry for ${input.saddr} yet`,
    });
  }

  // 5. Scheduler.
  if (sv.scheduler === 'maglev') {
    const table = maps.maglevTable(sv.serviceId);
    const cfg = maps.config();
    if (table && cfg.maglevSize > 0) {
      const index = flowHash(input.saddr, input.sport, input.dport, proto, cfg.hashSeed) % cfg.maglevSize;
      const id = table[index] ?? 0;
      steps.push({
        step: 'maglev',
        result: `hash of (${input.saddr}, ${input.sport}, ${input.dport}, ${input.protocol}) with seed ${cfg.hashSeed} -> entry ${index} of ${cfg.maglevSize}: ${backendName(id)} (deterministic)`,
      });
      result.backend = backendName(id);
      return result;
    }
    steps.push({ step: 'maglev', result: 'no Maglev table installed: random choice instead' });
  } else if (sv.scheduler === 'rr') {
    const next = maps.rrNext(sv.serviceId);
    if (next !== null) {
      const slot = next % sv.count;
      steps.push({
        step: 'rr',
        result: `round robin counter at ${next}: the next new flow gets slot ${slot}, ${backendName(slots[slot]!)} (unless another flow comes first)`,
      });
      result.backend = backendName(slots[slot]!);
      result.deterministic = false;
      return result;
    }
  }
  steps.push({
    step: 'random',
    result: `one of the ${sv.count} backend(s) at random, per new flow (not deterministic)`,
  });
  result.candidates = slots.map(backendName);
  result.deterministic = false;
  return result;
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
