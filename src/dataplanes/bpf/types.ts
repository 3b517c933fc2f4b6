// The frontend's key and kinds, shared by the planner (plan.ts), the map stores (store.ts,
// kernel-store.ts) and the readers (inspect-list.ts, inspect-trace.ts), with the two names a key is
// shown under; and the problem a plan reports for a service port it could not program.

import type { IPFamily, Protocol } from '../../model/types.js';
import { joinHostPort } from '../../net/ip.js';

/** The address of a NodePort frontend open on every node address (nodePortAddresses match-all). */
export const ANY_ADDRESS: Record<IPFamily, string> = { IPv4: '0.0.0.0', IPv6: '::' };

/** The families the datapath programs: both (XDP serves IPv4 only; IPv6 takes the tc path there). */
export const DATAPATH_FAMILIES: readonly IPFamily[] = ['IPv4', 'IPv6'];

export type FrontendKind = 'ClusterIP' | 'ExternalIP' | 'LoadBalancer' | 'NodePort';

/**
 * `all`: the entry every packet to the VIP matches. `internal`: a second entry, for traffic from
 * pods, present when that traffic must reach other endpoints than external traffic does
 * (eTP=Local: pods reaching an external VIP use the cluster endpoints, as kube-proxy's
 * "pod traffic for X external destinations" short-circuit does).
 */
export type FrontendScope = 'all' | 'internal';

/** forward: DNAT to a backend. reject: no endpoints anywhere (ICMP port unreachable, as kube-proxy's
 * REJECT). drop: endpoints exist but none the traffic policy allows ("has no local endpoints"). */
export type FrontendAction = 'forward' | 'reject' | 'drop';

export interface FrontendKey {
  family: IPFamily;
  address: string;
  port: number;
  protocol: Protocol;
  scope: FrontendScope;
}

/** "TCP/10.96.0.10:80", with "/internal" for an internal-scope entry; "TCP/0.0.0.0:30080" for a
 * NodePort on every node address. */
export function frontendName(key: FrontendKey): string {
  const base = `${key.protocol}/${joinHostPort(key.address, key.port)}`;
  return key.scope === 'internal' ? `${base}/internal` : base;
}

/** "TCP/10.96.0.10:80", "*" for every node address and " (pods)" on an internal-scope entry. */
export function frontendLabel(key: FrontendKey): string {
  const host = key.address === ANY_ADDRESS[key.family] ? '*' : key.address;
  return `${key.protocol}/${joinHostPort(host, key.port)}${key.scope === 'internal' ? ' (pods)' : ''}`;
}

/** Why a service port is not (fully) programmed. */
export interface PlanProblem {
  servicePortName: string;
  reason: string;
}
