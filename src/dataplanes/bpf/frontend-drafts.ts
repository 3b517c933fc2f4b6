// Which frontends one service port asks for, before ids: its ClusterIP, each LoadBalancer IP,
// externalIP and NodePort address, each with its endpoint list in slot order, its action and
// source ranges, and the second (internal-scope) entry where pods must reach other endpoints;
// and which scheduler each kind of frontend uses.

import { SCHEDULER_ANNOTATION } from '../../brain/service-ports.js';
import type { Endpoint, FamilyDecisions, ScopeVerdict, ServicePortDecision } from '../../brain/types.js';
import type { BpfScheduler, MaglevFrontends } from '../../config/types.js';
import { cidrContains, parseCIDR, parseIP } from '../../net/ip.js';
import {
  ANY_ADDRESS,
  type FrontendAction,
  type FrontendKey,
  type FrontendKind,
  type FrontendScope,
  frontendName,
  type PlanProblem,
} from './types.js';

export const SCHEDULERS: readonly BpfScheduler[] = ['random', 'rr', 'maglev'];

/**
 * The scheduler of each kind of frontend of a service port, and the problem with its annotation if
 * it has a bad one. The annotation applies to every frontend; the default `maglev` only to those
 * `maglevFrontends` names (a ClusterIP left out picks at random: its Maglev table would cost a
 * table per backend set for consistency nobody needs — its clients are on the node that picks).
 */
export function resolveScheduler(
  sp: Pick<ServicePortDecision, 'schedulerAnnotation' | 'servicePortName'>,
  defaultScheduler: BpfScheduler,
  maglevFrontends: MaglevFrontends,
): { scheduler: (kind: FrontendKind) => BpfScheduler; problem: PlanProblem | null } {
  const value = sp.schedulerAnnotation;
  const wanted = value?.trim() as BpfScheduler | undefined;
  if (wanted !== undefined && SCHEDULERS.includes(wanted)) return { scheduler: () => wanted, problem: null };
  const byDefault = (kind: FrontendKind): BpfScheduler =>
    defaultScheduler === 'maglev' && maglevFrontends === 'external' && kind === 'ClusterIP'
      ? 'random'
      : defaultScheduler;
  if (value === null) return { scheduler: byDefault, problem: null };
  return {
    scheduler: byDefault,
    problem: {
      servicePortName: sp.servicePortName,
      reason: `annotation ${SCHEDULER_ANNOTATION}=${JSON.stringify(value)} is not one of ${SCHEDULERS.join(', ')}; using the default scheduler ${defaultScheduler}`,
    },
  };
}

/** What one service port asks for, before ids: frontends with their endpoint lists. */
export interface FrontendDraft {
  key: FrontendKey;
  name: string;
  kind: FrontendKind;
  action: FrontendAction;
  endpoints: readonly Endpoint[];
  localOnly: boolean;
  hasInternalScope: boolean;
  sourceRanges: string[];
}

function sameEndpoints(a: readonly Endpoint[], b: readonly Endpoint[]): boolean {
  return a.length === b.length && a.every((e, i) => e.endpoint === b[i]!.endpoint);
}

/** Local endpoints first; each part keeps the brain's order (sorted by endpoint). */
function slotOrder(endpoints: readonly Endpoint[]): readonly Endpoint[] {
  if (!endpoints.some((e) => e.isLocal)) return endpoints;
  return [...endpoints.filter((e) => e.isLocal), ...endpoints.filter((e) => !e.isLocal)];
}

/** kube-proxy's allowFromNode: when a source range holds the node's IP, the LB IPs themselves may
 * send too (hairpin from a node whose VIP is local). */
function lbSourceRanges(sp: ServicePortDecision, nodeIP: string): string[] {
  if (sp.loadBalancerSourceRanges.length === 0) return [];
  const ranges = new Set(sp.loadBalancerSourceRanges);
  const node = parseIP(nodeIP);
  const allowFromNode =
    node !== null &&
    sp.loadBalancerSourceRanges.some((c) => {
      const cidr = parseCIDR(c);
      return cidr !== null && cidrContains(cidr, node);
    });
  if (allowFromNode) {
    const hostBits = sp.family === 'IPv4' ? 32 : 128;
    for (const ip of sp.loadBalancerIPs) ranges.add(`${ip}/${hostBits}`);
  }
  return [...ranges].sort();
}

export function draftFrontends(sp: ServicePortDecision, fam: FamilyDecisions): FrontendDraft[] {
  const drafts: FrontendDraft[] = [];
  const make = (
    kind: FrontendKind,
    address: string,
    port: number,
    scope: FrontendScope,
    verdict: ScopeVerdict,
    extra: Partial<FrontendDraft> = {},
  ): FrontendDraft => {
    const endpoints = verdict.action === 'forward' ? slotOrder(verdict.endpoints) : [];
    const key: FrontendKey = { family: sp.family, address, port, protocol: sp.protocol, scope };
    return {
      key,
      name: frontendName(key),
      kind,
      // A forward to an empty set has nowhere to go: the datapath drops it.
      action: verdict.action === 'forward' && endpoints.length === 0 ? 'drop' : verdict.action,
      endpoints,
      localOnly: verdict.policy === 'Local',
      hasInternalScope: false,
      sourceRanges: [],
      ...extra,
    };
  };

  drafts.push(make('ClusterIP', sp.clusterIP, sp.port, 'all', sp.internal));

  // Pod and node traffic to an external address gets its own entry only where its endpoints differ.
  const fromCluster = sp.externalFromCluster;
  const splitScopes =
    fromCluster !== null &&
    fromCluster.endpoints.length > 0 &&
    !sameEndpoints(slotOrder(fromCluster.endpoints), slotOrder(sp.external.endpoints));
  const external = (kind: FrontendKind, address: string, port: number, sourceRanges: string[]) => {
    drafts.push(
      make(kind, address, port, 'all', sp.external, { hasInternalScope: splitScopes, sourceRanges }),
    );
    if (splitScopes && fromCluster)
      drafts.push(make(kind, address, port, 'internal', fromCluster, { sourceRanges }));
  };
  for (const ip of sp.loadBalancerIPs) external('LoadBalancer', ip, sp.port, lbSourceRanges(sp, fam.nodeIP));
  for (const ip of sp.externalIPs) external('ExternalIP', ip, sp.port, []);
  if (sp.nodePort !== 0) {
    const addresses = fam.nodePortAddresses.matchAll ? [ANY_ADDRESS[sp.family]] : fam.nodePortAddresses.ips;
    for (const ip of addresses) external('NodePort', ip, sp.nodePort, []);
  }
  return drafts;
}
