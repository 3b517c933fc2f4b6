// Node-level decisions: the node's primary IPs, which local addresses accept NodePorts
// (pkg/proxy/util/nodeport_addresses.go), the local-traffic detector
// (pkg/proxy/util/localdetector.go) and the masquerade mark string.

import type { DetectLocalMode } from '../config/types.js';
import type { IpAddrInterface } from '../host/interfaces.js';
import type { IPFamily, Node } from '../model/types.js';
import {
  canonicalIPOfFamily,
  cidrContains,
  formatCIDR,
  formatIP,
  isLoopback,
  type ParsedCIDR,
  parseCIDR,
  parseIP,
} from '../net/ip.js';
import type { LocalDetector, NodePortAddresses } from './types.js';

export const NODE_PORT_ADDRESSES_PRIMARY = 'primary';

/** The node's primary IP of a family: the first given one, else the Node's InternalIP, then ExternalIP. */
export function primaryNodeIP(nodeIPs: string[], node: Node | null, family: IPFamily): string {
  for (const ip of nodeIPs) {
    const canonical = canonicalIPOfFamily(ip, family);
    if (canonical) return canonical;
  }
  for (const type of ['InternalIP', 'ExternalIP']) {
    for (const address of node?.addresses ?? []) {
      if (address.type !== type) continue;
      const canonical = canonicalIPOfFamily(address.address, family);
      if (canonical) return canonical;
    }
  }
  return '';
}

/**
 * NewNodePortAddresses + GetNodeIPs, with the iptables proxier's loopback rules: IPv6 loopback is
 * never a NodePort address, IPv4 loopback only with localhostNodePorts.
 */
export function resolveNodePortAddresses(
  configured: string[],
  family: IPFamily,
  nodeIP: string,
  interfaces: IpAddrInterface[],
  localhostNodePorts: boolean,
): NodePortAddresses {
  const cidrs: ParsedCIDR[] = [];
  for (const entry of configured) {
    if (entry === NODE_PORT_ADDRESSES_PRIMARY) {
      if (nodeIP !== '') cidrs.push(parseCIDR(`${nodeIP}/${family === 'IPv4' ? 32 : 128}`) as ParsedCIDR);
      continue;
    }
    const cidr = parseCIDR(entry);
    if (cidr && cidr.family === family) cidrs.push(cidr);
  }
  if (cidrs.length === 0 || cidrs.some((cidr) => cidr.prefixLength === 0)) return { matchAll: true, ips: [] };

  const ips: string[] = [];
  for (const iface of interfaces) {
    for (const info of iface.addr_info) {
      const ip = parseIP(info.local);
      if (!ip || ip.family !== family) continue;
      if (!cidrs.some((cidr) => cidrContains(cidr, ip))) continue;
      if (isLoopback(ip) && (family === 'IPv6' || !localhostNodePorts)) continue;
      const text = formatIP(ip.bytes);
      if (!ips.includes(text)) ips.push(text);
    }
  }
  return { matchAll: false, ips };
}

/** The local-traffic detector for a family; NoOp ("None") when its mode has nothing to match. */
export function localDetectorFor(
  mode: DetectLocalMode,
  family: IPFamily,
  clusterCIDRs: string[],
  node: Node | null,
  detectLocal: { bridgeInterface: string; interfaceNamePrefix: string },
): LocalDetector {
  const cidrsOfFamily = (values: string[]) =>
    values
      .map((value) => parseCIDR(value.trim()))
      .filter((cidr): cidr is ParsedCIDR => cidr !== null && cidr.family === family)
      .map(formatCIDR);
  switch (mode) {
    case 'ClusterCIDR': {
      const cidrs = cidrsOfFamily(clusterCIDRs);
      return cidrs.length > 0 ? { mode, cidrs } : { mode: 'None' };
    }
    case 'NodeCIDR': {
      const cidrs = cidrsOfFamily(node?.podCIDRs ?? []);
      return cidrs.length > 0 ? { mode, cidrs } : { mode: 'None' };
    }
    case 'BridgeInterface':
      return detectLocal.bridgeInterface
        ? { mode, interfaceName: detectLocal.bridgeInterface }
        : { mode: 'None' };
    case 'InterfaceNamePrefix':
      return detectLocal.interfaceNamePrefix
        ? { mode, prefix: detectLocal.interfaceNamePrefix }
        : { mode: 'None' };
  }
}

/** fmt.Sprintf("%#08x", 1<<bit): Go pads the digits to 8 and then adds "0x", so bit 14 is 0x00004000. */
export function masqueradeMark(bit: number): string {
  return `0x${(2 ** bit).toString(16).padStart(8, '0')}`;
}

/** KEP-3836: a node being deleted or drained by the cluster autoscaler is not eligible for /healthz. */
export function nodeEligible(node: Node | null): boolean {
  if (!node || node.deletionTimestamp) return false;
  return !node.taints.some((taint) => taint.key === 'ToBeDeletedByClusterAutoscaler');
}
