// `list`: what each frontend of the live maps holds and has counted, and which program is
// attached where. Nothing here writes to the kernel.

import { existsSync, readdirSync } from 'node:fs';
import { linkInfo, programNameById, tcQuery, xdpQueryId } from '../../../native/libbpf/attach.js';
import { BPF_TC_EGRESS, BPF_TC_INGRESS, XDP_FLAGS_DRV_MODE } from '../../../native/libbpf/constants.js';
import { getPinned } from '../../../native/libbpf/object.js';
import { closeFd } from '../../../native/libc.js';
import type { Protocol } from '../../model/types.js';
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
import type { PinnedMaps } from './inspect.js';
import { PROGRAMS, type TrafficStats } from './layout.js';
import { PIN_LAYOUT_VERSION } from './object.js';
import type { BackendEntry, FrontendValue } from './store.js';
import { frontendLabel } from './types.js';

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
