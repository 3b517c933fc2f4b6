// Chain names and the fixed chains of kube-proxy's iptables mode (kube-proxy v1.37.2's pkg/proxy/iptables/proxier.go
// and pkg/util/iptables). Per-service chains are named by a hash so they fit iptables' 28-character limit.

import { createHash } from 'node:crypto';
import type { Protocol } from '../../model/types.js';

const BASE32_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/** The first `length` characters of base32.StdEncoding(sha256(input)) (RFC 4648, upper case). */
export function base32Sha256Prefix(input: string, length: number): string {
  const digest = createHash('sha256').update(input, 'utf8').digest();
  let out = '';
  let buffer = 0;
  let bufferedBits = 0;
  for (const byte of digest) {
    buffer = ((buffer << 8) | byte) & 0xffff;
    bufferedBits += 8;
    while (bufferedBits >= 5 && out.length < length) {
      bufferedBits -= 5;
      out += BASE32_ALPHABET[(buffer >> bufferedBits) & 31];
    }
    if (out.length === length) return out;
  }
  throw new Error(`base32Sha256Prefix: ${length} characters exceed the digest`);
}

/** portProtoHash: the hash shared by a service port's SVC, SVL, EXT and FW chains. */
export function servicePortHash(servicePortName: string, protocol: Protocol): string {
  return base32Sha256Prefix(servicePortName + protocol.toLowerCase(), 16);
}

export interface ServicePortChains {
  /** KUBE-SVC-: endpoints for Cluster traffic policy. */
  cluster: string;
  /** KUBE-SVL-: endpoints for Local traffic policy. */
  local: string;
  /** KUBE-EXT-: external destinations (NodePort, externalIPs, LB IPs). */
  external: string;
  /** KUBE-FW-: loadBalancerSourceRanges. */
  firewall: string;
}

export function servicePortChains(servicePortName: string, protocol: Protocol): ServicePortChains {
  const hash = servicePortHash(servicePortName, protocol);
  return {
    cluster: `KUBE-SVC-${hash}`,
    local: `KUBE-SVL-${hash}`,
    external: `KUBE-EXT-${hash}`,
    firewall: `KUBE-FW-${hash}`,
  };
}

/** KUBE-SEP-: one endpoint of a service port; `endpoint` is net.JoinHostPort(ip, port). */
export function endpointChain(servicePortName: string, protocol: Protocol, endpoint: string): string {
  return `KUBE-SEP-${base32Sha256Prefix(servicePortName + protocol.toLowerCase() + endpoint, 16)}`;
}

const SERVICE_CHAIN_PREFIXES = ['KUBE-SVC-', 'KUBE-SVL-', 'KUBE-EXT-', 'KUBE-FW-', 'KUBE-SEP-'];

/** isServiceChainName: the per-service nat chains a sync deletes when they are no longer used. */
export function isServiceChainName(chain: string): boolean {
  return SERVICE_CHAIN_PREFIXES.some((prefix) => chain.startsWith(prefix));
}

export const KUBE_SERVICES = 'KUBE-SERVICES';
export const KUBE_EXTERNAL_SERVICES = 'KUBE-EXTERNAL-SERVICES';
export const KUBE_FORWARD = 'KUBE-FORWARD';
export const KUBE_NODEPORTS = 'KUBE-NODEPORTS';
export const KUBE_PROXY_FIREWALL = 'KUBE-PROXY-FIREWALL';
export const KUBE_FIREWALL = 'KUBE-FIREWALL';
export const KUBE_POSTROUTING = 'KUBE-POSTROUTING';
export const KUBE_MARK_MASQ = 'KUBE-MARK-MASQ';
/** Created empty in mangle, nat and filter; when it disappears someone flushed the tables. */
export const KUBE_PROXY_CANARY = 'KUBE-PROXY-CANARY';

/** The nfnetlink_acct counters kube-proxy attaches to rules (and exports as metrics). */
export const NFACCT_CT_STATE_INVALID_DROPPED = 'ct_state_invalid_dropped_pkts';
export const NFACCT_LOCALHOST_NODEPORTS_ACCEPTED = 'localhost_nps_accepted_pkts';

export type IptablesTable = 'filter' | 'nat' | 'mangle';

export interface JumpRule {
  table: IptablesTable;
  /** The built-in chain the jump is inserted at the top of. */
  from: string;
  to: string;
  /** "" for kubelet's KUBE-FIREWALL duplicates, which carry no comment. */
  comment: string;
  extraArgs: string[];
}

const NEW_CONNECTIONS = ['-m', 'conntrack', '--ctstate', 'NEW'];

/**
 * iptablesJumpChains followed by iptablesKubeletJumpChains: installed outside the restore (the
 * built-in chains are not ours to rewrite), with EnsureRule(Prepend) on every full sync.
 */
export const JUMP_RULES: readonly JumpRule[] = [
  jump(
    'filter',
    'INPUT',
    KUBE_EXTERNAL_SERVICES,
    'kubernetes externally-visible service portals',
    NEW_CONNECTIONS,
  ),
  jump(
    'filter',
    'FORWARD',
    KUBE_EXTERNAL_SERVICES,
    'kubernetes externally-visible service portals',
    NEW_CONNECTIONS,
  ),
  jump('filter', 'INPUT', KUBE_NODEPORTS, 'kubernetes health check service ports', []),
  jump('filter', 'FORWARD', KUBE_SERVICES, 'kubernetes service portals', NEW_CONNECTIONS),
  jump('filter', 'OUTPUT', KUBE_SERVICES, 'kubernetes service portals', NEW_CONNECTIONS),
  jump('filter', 'FORWARD', KUBE_FORWARD, 'kubernetes forwarding rules', []),
  jump('filter', 'INPUT', KUBE_PROXY_FIREWALL, 'kubernetes load balancer firewall', NEW_CONNECTIONS),
  jump('filter', 'OUTPUT', KUBE_PROXY_FIREWALL, 'kubernetes load balancer firewall', NEW_CONNECTIONS),
  jump('filter', 'FORWARD', KUBE_PROXY_FIREWALL, 'kubernetes load balancer firewall', NEW_CONNECTIONS),
  jump('nat', 'OUTPUT', KUBE_SERVICES, 'kubernetes service portals', []),
  jump('nat', 'PREROUTING', KUBE_SERVICES, 'kubernetes service portals', []),
  jump('nat', 'POSTROUTING', KUBE_POSTROUTING, 'kubernetes postrouting rules', []),
  jump('filter', 'INPUT', KUBE_FIREWALL, '', []),
  jump('filter', 'OUTPUT', KUBE_FIREWALL, '', []),
];

function jump(
  table: IptablesTable,
  from: string,
  to: string,
  comment: string,
  extraArgs: string[],
): JumpRule {
  return { table, from, to, comment, extraArgs };
}

/** The rule spec after the chain name, as an argument vector (no shell quoting). */
export function jumpRuleArgs(rule: JumpRule): string[] {
  const args = [...rule.extraArgs];
  if (rule.comment !== '') args.push('-m', 'comment', '--comment', rule.comment);
  args.push('-j', rule.to);
  return args;
}
