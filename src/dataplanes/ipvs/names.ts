// The kernel objects of kube-proxy's ipvs mode by name (kube-proxy v1.37.2's pkg/proxy/ipvs/proxier.go and
// pkg/proxy/ipvs/ipset.go): the dummy
// device, the ipsets with their types and comments, and the iptables chains and jumps.

import type { IPFamily } from '../../model/types.js';
import {
  type JumpRule,
  KUBE_FORWARD,
  KUBE_MARK_MASQ,
  KUBE_POSTROUTING,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
} from '../iptables/names.js';

/** Every ClusterIP (and every LB or external IP that is not already local) is bound here. */
export const IPVS_DUMMY_DEVICE = 'kube-ipvs0';

export type IpsetType = 'hash:ip' | 'hash:ip,port' | 'hash:ip,port,ip' | 'hash:ip,port,net' | 'bitmap:port';

export const KUBE_LOOP_BACK = 'KUBE-LOOP-BACK';
export const KUBE_CLUSTER_IP = 'KUBE-CLUSTER-IP';
export const KUBE_EXTERNAL_IP = 'KUBE-EXTERNAL-IP';
export const KUBE_EXTERNAL_IP_LOCAL = 'KUBE-EXTERNAL-IP-LOCAL';
export const KUBE_LOAD_BALANCER = 'KUBE-LOAD-BALANCER';
export const KUBE_LOAD_BALANCER_FW = 'KUBE-LOAD-BALANCER-FW';
export const KUBE_LOAD_BALANCER_LOCAL = 'KUBE-LOAD-BALANCER-LOCAL';
export const KUBE_LOAD_BALANCER_SOURCE_IP = 'KUBE-LOAD-BALANCER-SOURCE-IP';
export const KUBE_LOAD_BALANCER_SOURCE_CIDR = 'KUBE-LOAD-BALANCER-SOURCE-CIDR';
export const KUBE_NODE_PORT_TCP = 'KUBE-NODE-PORT-TCP';
export const KUBE_NODE_PORT_LOCAL_TCP = 'KUBE-NODE-PORT-LOCAL-TCP';
export const KUBE_NODE_PORT_UDP = 'KUBE-NODE-PORT-UDP';
export const KUBE_NODE_PORT_LOCAL_UDP = 'KUBE-NODE-PORT-LOCAL-UDP';
export const KUBE_NODE_PORT_SCTP = 'KUBE-NODE-PORT-SCTP-HASH';
export const KUBE_NODE_PORT_LOCAL_SCTP = 'KUBE-NODE-PORT-LOCAL-SCTP-HASH';
export const KUBE_HEALTH_CHECK_NODE_PORT = 'KUBE-HEALTH-CHECK-NODE-PORT';
export const KUBE_IPVS_IPS = 'KUBE-IPVS-IPS';

export interface IpsetInfo {
  /** The IPv4 name; ipsetName() gives the IPv6 one. */
  name: string;
  type: IpsetType;
  comment: string;
}

/** ipsetInfo in kube-proxy's order: every set exists in both families, empty or not. */
export const IPSETS: readonly IpsetInfo[] = [
  {
    name: KUBE_LOOP_BACK,
    type: 'hash:ip,port,ip',
    comment: 'Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose',
  },
  {
    name: KUBE_CLUSTER_IP,
    type: 'hash:ip,port',
    comment: 'Kubernetes service cluster ip + port for masquerade purpose',
  },
  {
    name: KUBE_EXTERNAL_IP,
    type: 'hash:ip,port',
    comment: 'Kubernetes service external ip + port for masquerade and filter purpose',
  },
  {
    name: KUBE_EXTERNAL_IP_LOCAL,
    type: 'hash:ip,port',
    comment: 'Kubernetes service external ip + port with externalTrafficPolicy=local',
  },
  { name: KUBE_LOAD_BALANCER, type: 'hash:ip,port', comment: 'Kubernetes service lb portal' },
  {
    name: KUBE_LOAD_BALANCER_FW,
    type: 'hash:ip,port',
    comment: 'Kubernetes service load balancer ip + port for load balancer with sourceRange',
  },
  {
    name: KUBE_LOAD_BALANCER_LOCAL,
    type: 'hash:ip,port',
    comment: 'Kubernetes service load balancer ip + port with externalTrafficPolicy=local',
  },
  {
    name: KUBE_LOAD_BALANCER_SOURCE_IP,
    type: 'hash:ip,port,ip',
    comment: 'Kubernetes service load balancer ip + port + source IP for packet filter purpose',
  },
  {
    name: KUBE_LOAD_BALANCER_SOURCE_CIDR,
    type: 'hash:ip,port,net',
    comment: 'Kubernetes service load balancer ip + port + source cidr for packet filter purpose',
  },
  {
    name: KUBE_NODE_PORT_TCP,
    type: 'bitmap:port',
    comment: 'Kubernetes nodeport TCP port for masquerade purpose',
  },
  {
    name: KUBE_NODE_PORT_LOCAL_TCP,
    type: 'bitmap:port',
    comment: 'Kubernetes nodeport TCP port with externalTrafficPolicy=local',
  },
  {
    name: KUBE_NODE_PORT_UDP,
    type: 'bitmap:port',
    comment: 'Kubernetes nodeport UDP port for masquerade purpose',
  },
  {
    name: KUBE_NODE_PORT_LOCAL_UDP,
    type: 'bitmap:port',
    comment: 'Kubernetes nodeport UDP port with externalTrafficPolicy=local',
  },
  {
    name: KUBE_NODE_PORT_SCTP,
    type: 'hash:ip,port',
    comment: "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'",
  },
  {
    name: KUBE_NODE_PORT_LOCAL_SCTP,
    type: 'hash:ip,port',
    comment: "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'",
  },
  { name: KUBE_HEALTH_CHECK_NODE_PORT, type: 'bitmap:port', comment: 'Kubernetes health check node port' },
  { name: KUBE_IPVS_IPS, type: 'hash:ip', comment: 'Addresses on the ipvs interface' },
];

/** The kernel limit on ipset names. */
const IPSET_NAME_MAX = 31;

/** IPv6 sets are "KUBE-6-…" so both families' sets coexist; long names are cut to 31 characters. */
export function ipsetName(name: string, family: IPFamily): string {
  if (family === 'IPv4' || !name.startsWith('KUBE-')) return name;
  return `KUBE-6-${name.slice('KUBE-'.length)}`.slice(0, IPSET_NAME_MAX);
}

export const KUBE_NODE_PORT = 'KUBE-NODE-PORT';
export const KUBE_LOAD_BALANCER_CHAIN = 'KUBE-LOAD-BALANCER';
export const KUBE_SOURCE_RANGES_FIREWALL = 'KUBE-SOURCE-RANGES-FIREWALL';
export const KUBE_IPVS_FILTER = 'KUBE-IPVS-FILTER';
export const KUBE_IPVS_OUT_FILTER = 'KUBE-IPVS-OUT-FILTER';

/** iptablesChains, in kube-proxy's declaration order. */
export const NAT_CHAINS = [
  KUBE_SERVICES,
  KUBE_POSTROUTING,
  KUBE_NODE_PORT,
  KUBE_LOAD_BALANCER_CHAIN,
  KUBE_MARK_MASQ,
];
export const FILTER_CHAINS = [
  KUBE_FORWARD,
  KUBE_NODE_PORT,
  KUBE_PROXY_FIREWALL,
  KUBE_SOURCE_RANGES_FIREWALL,
  KUBE_IPVS_FILTER,
  KUBE_IPVS_OUT_FILTER,
];

const jump = (table: JumpRule['table'], from: string, to: string, comment: string): JumpRule => ({
  table,
  from,
  to,
  comment,
  extraArgs: [],
});

/** iptablesJumpChain of the ipvs proxier: prepended outside the restore, no conntrack match. */
export const IPVS_JUMP_RULES: readonly JumpRule[] = [
  jump('nat', 'OUTPUT', KUBE_SERVICES, 'kubernetes service portals'),
  jump('nat', 'PREROUTING', KUBE_SERVICES, 'kubernetes service portals'),
  jump('nat', 'POSTROUTING', KUBE_POSTROUTING, 'kubernetes postrouting rules'),
  jump('filter', 'FORWARD', KUBE_FORWARD, 'kubernetes forwarding rules'),
  jump('filter', 'INPUT', KUBE_NODE_PORT, 'kubernetes health check rules'),
  jump('filter', 'INPUT', KUBE_PROXY_FIREWALL, 'kube-proxy firewall rules'),
  jump('filter', 'FORWARD', KUBE_PROXY_FIREWALL, 'kube-proxy firewall rules'),
  jump('filter', 'INPUT', KUBE_IPVS_FILTER, 'kubernetes ipvs access filter'),
  jump('filter', 'OUTPUT', KUBE_IPVS_OUT_FILTER, 'kubernetes ipvs access filter'),
];
