// Object names of kube-proxy's nftables mode (kube-proxy v1.37.2's pkg/proxy/nftables/proxier.go). kube-proxy owns the
// whole `kube-proxy` table of each family; per-service-port chains carry a hash of their name so
// they stay distinct when truncated and differ visibly from their neighbours.

import type { Endpoint, ServicePortDecision } from '../../brain/types.js';
import type { IPFamily, Protocol } from '../../model/types.js';
import { base32Sha256Prefix } from '../iptables/names.js';

export const TABLE = 'kube-proxy';
export const TABLE_COMMENT = 'rules for kube-proxy';

export type NftFamily = 'ip' | 'ip6';

export function nftFamily(family: IPFamily): NftFamily {
  return family === 'IPv4' ? 'ip' : 'ip6';
}

// Base chains.
export const FILTER_PREROUTING_PRE_DNAT = 'filter-prerouting-pre-dnat';
export const FILTER_OUTPUT_PRE_DNAT = 'filter-output-pre-dnat';
export const FILTER_FORWARD = 'filter-forward';
export const FILTER_INPUT = 'filter-input';
export const FILTER_OUTPUT = 'filter-output';
export const NAT_PREROUTING = 'nat-prerouting';
export const NAT_OUTPUT = 'nat-output';
export const NAT_POSTROUTING = 'nat-postrouting';

// Regular chains.
export const SERVICES = 'services';
export const SERVICE_ENDPOINTS_CHECK = 'service-endpoints-check';
export const NODEPORT_ENDPOINTS_CHECK = 'nodeport-endpoints-check';
export const FIREWALL_CHECK = 'firewall-check';
export const CLUSTER_IPS_CHECK = 'cluster-ips-check';
/**
 * Fixed chains of the layout kube-proxy wrote up to v1.33 (and we before it): v1.37 sets the
 * masquerade mark inline. A full sync that finds one deletes it, after the flushes that leave
 * nothing jumping to it (kube-proxy leaves it behind; it is our own leftover too).
 */
export const LEGACY_CHAINS: readonly string[] = ['mark-for-masquerade'];
export const MASQUERADING = 'masquerading';
export const REJECT_CHAIN = 'reject-chain';

// Sets and verdict maps.
export const CLUSTER_IPS = 'cluster-ips';
export const NODEPORT_IPS = 'nodeport-ips';
export const SERVICE_IPS = 'service-ips';
export const SERVICE_NODEPORTS = 'service-nodeports';
export const NO_ENDPOINT_SERVICES = 'no-endpoint-services';
export const NO_ENDPOINT_NODEPORTS = 'no-endpoint-nodeports';
export const FIREWALL_IPS = 'firewall-ips';
/** endpoint . endpoint . protocol . port of local endpoints: a pod reaching itself through a service. */
export const HAIRPIN_CONNECTIONS = 'hairpin-connections';

/** The maps and sets whose elements every sync owns (nodeport-ips belongs to the table setup). */
export const ELEMENT_CONTAINERS = [
  CLUSTER_IPS,
  SERVICE_IPS,
  SERVICE_NODEPORTS,
  NO_ENDPOINT_SERVICES,
  NO_ENDPOINT_NODEPORTS,
  FIREWALL_IPS,
  HAIRPIN_CONNECTIONS,
] as const;
export type ElementContainer = (typeof ELEMENT_CONTAINERS)[number];

/** The element containers that are sets (the others are verdict maps). */
export const isSetContainer = (container: string) =>
  container === CLUSTER_IPS || container === HAIRPIN_CONNECTIONS;

export interface BaseChain {
  name: string;
  type: 'filter' | 'nat';
  hook: 'prerouting' | 'input' | 'forward' | 'output' | 'postrouting';
  /** knftables prints named priorities as numbers: dstnat -100, filter 0, srcnat 100. */
  priority: number;
}

/** Filtering runs on pre-DNAT destinations (firewall) and post-DNAT ones (endpoint and ClusterIP checks). */
export const BASE_CHAINS: readonly BaseChain[] = [
  { name: FILTER_PREROUTING_PRE_DNAT, type: 'filter', hook: 'prerouting', priority: -110 },
  { name: FILTER_OUTPUT_PRE_DNAT, type: 'filter', hook: 'output', priority: -110 },
  { name: FILTER_INPUT, type: 'filter', hook: 'input', priority: 0 },
  { name: FILTER_FORWARD, type: 'filter', hook: 'forward', priority: 0 },
  { name: FILTER_OUTPUT, type: 'filter', hook: 'output', priority: 0 },
  { name: NAT_PREROUTING, type: 'nat', hook: 'prerouting', priority: -100 },
  { name: NAT_OUTPUT, type: 'nat', hook: 'output', priority: -100 },
  { name: NAT_POSTROUTING, type: 'nat', hook: 'postrouting', priority: 100 },
];

export interface JumpChain {
  to: string;
  from: string;
  /** Matches before the jump ("" for none). */
  match: string;
}

const NEW = 'ct state new';

/**
 * nftablesJumpChains, in kube-proxy's order. The endpoint checks hang off input/forward/output
 * because `reject` is only valid there on kernels before 5.9.
 */
export const JUMP_CHAINS: readonly JumpChain[] = [
  { to: NODEPORT_ENDPOINTS_CHECK, from: FILTER_INPUT, match: NEW },
  { to: SERVICE_ENDPOINTS_CHECK, from: FILTER_INPUT, match: NEW },
  { to: SERVICE_ENDPOINTS_CHECK, from: FILTER_FORWARD, match: NEW },
  { to: SERVICE_ENDPOINTS_CHECK, from: FILTER_OUTPUT, match: NEW },
  { to: FIREWALL_CHECK, from: FILTER_PREROUTING_PRE_DNAT, match: NEW },
  { to: FIREWALL_CHECK, from: FILTER_OUTPUT_PRE_DNAT, match: NEW },
  { to: SERVICES, from: NAT_OUTPUT, match: '' },
  { to: SERVICES, from: NAT_PREROUTING, match: '' },
  { to: MASQUERADING, from: NAT_POSTROUTING, match: '' },
  { to: CLUSTER_IPS_CHECK, from: FILTER_FORWARD, match: NEW },
  { to: CLUSTER_IPS_CHECK, from: FILTER_OUTPUT, match: NEW },
];

/** knftables.NameLengthMax (256) minus the longest prefix (16). */
const CHAIN_NAME_BASE_LENGTH_MAX = 240;

/** hashAndTruncate: base32(sha256(name))[:8] + "-" + name, cut to 240 characters with "...". */
export function hashAndTruncate(name: string): string {
  const hashed = `${base32Sha256Prefix(name, 8)}-${name}`;
  return hashed.length > CHAIN_NAME_BASE_LENGTH_MAX
    ? `${hashed.slice(0, CHAIN_NAME_BASE_LENGTH_MAX - 3)}...`
    : hashed;
}

/** "ns/name/proto/portName": "/" cannot occur in any part, so it separates them unambiguously. */
export function servicePortChainNameBase(
  sp: Pick<ServicePortDecision, 'namespace' | 'name' | 'portName'>,
  protocol: Protocol,
): string {
  return hashAndTruncate(`${sp.namespace}/${sp.name}/${protocol.toLowerCase()}/${sp.portName}`);
}

/** "ns/name/proto/portName__ip/port", with IPv6 colons (not allowed in chain names) as dots. */
export function servicePortEndpointChainNameBase(
  sp: Pick<ServicePortDecision, 'namespace' | 'name' | 'portName'>,
  protocol: Protocol,
  endpoint: Pick<Endpoint, 'ip' | 'port'>,
): string {
  const ip = endpoint.ip.replaceAll(':', '.');
  return hashAndTruncate(
    `${sp.namespace}/${sp.name}/${protocol.toLowerCase()}/${sp.portName}__${ip}/${endpoint.port}`,
  );
}

export interface ServicePortChainNames {
  /** service-: endpoints for Cluster traffic policy. */
  cluster: string;
  /** local-: endpoints for Local traffic policy. */
  local: string;
  /** external-: NodePort, externalIP and LB IP traffic. */
  external: string;
  /** firewall-: loadBalancerSourceRanges. */
  firewall: string;
}

export function servicePortChainNames(sp: ServicePortDecision): ServicePortChainNames {
  const base = servicePortChainNameBase(sp, sp.protocol);
  return {
    cluster: `service-${base}`,
    local: `local-${base}`,
    external: `external-${base}`,
    firewall: `firewall-${base}`,
  };
}

/** The chain and the affinity set of one endpoint of a service port: one hash for both. */
export function endpointObjectNames(
  sp: ServicePortDecision,
  endpoint: Endpoint,
): { chain: string; affinitySet: string } {
  const base = servicePortEndpointChainNameBase(sp, sp.protocol, endpoint);
  return { chain: `endpoint-${base}`, affinitySet: `affinity-${base}` };
}

/** Per-service chains always contain "/"; none of the fixed chains does. */
export function isServiceChainName(chain: string): boolean {
  return chain.includes('/');
}

export function isAffinitySetName(set: string): boolean {
  return set.startsWith('affinity-');
}
