// The real CNI reference plugins on the real-node lab's nodes (src/lab/real-node.ts): the netconf
// flannel's CNI plugin hands its delegate (bridge on node-a, ptp on node-b, host-local IPAM), and
// one plugin call made the way the container runtime makes it.

import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Lab } from './netns.js';
import {
  CLUSTER_CIDR,
  CLUSTER_CIDR6,
  nodeNs,
  nodeOf,
  podNs,
  type RealNode,
  VXLAN_MTU,
} from './real-node-plan.js';

// The checkout's root, from src/lab (vitest) or dist/src/lab (the build).
const ROOT = fileURLToPath(
  new URL(import.meta.url.includes('/dist/src/') ? '../../../' : '../../', import.meta.url),
);
/** Where scripts/install-deps.sh builds the CNI plugins and scripts/install-helm.sh helm. */
export const CNI_BIN = join(ROOT, '.tools/cni/bin');

/** The netconf flannel's CNI plugin delegates to bridge (kube-flannel.yml's delegate), or ptp. */
function cniConfig(node: RealNode, dataDir: string): Record<string, unknown> {
  // One range per family: host-local hands each pod an address of both (flannel's dual-stack
  // netconf gives the delegate the same two ranges).
  const ipam = {
    type: 'host-local',
    ranges: [[{ subnet: node.podCIDR }], [{ subnet: node.podCIDR6 }]],
    dataDir,
    routes:
      node.cni === 'bridge'
        ? [{ dst: CLUSTER_CIDR }, { dst: CLUSTER_CIDR6 }]
        : [{ dst: '0.0.0.0/0' }, { dst: '::/0' }],
  };
  const common = { cniVersion: '1.0.0', name: 'cbr0', mtu: VXLAN_MTU, ipMasq: false, ipam };
  return node.cni === 'bridge'
    ? {
        ...common,
        type: 'bridge',
        bridge: 'cni0',
        isGateway: true,
        isDefaultGateway: true,
        hairpinMode: true,
      }
    : { ...common, type: 'ptp' };
}

export interface CniResult {
  interfaces?: { name: string; sandbox?: string }[];
  ips?: { address: string; interface?: number }[];
}

/** Runs a CNI plugin the way the container runtime does: env, netconf on stdin, in the node's netns. */
export async function runCni(
  lab: Lab,
  workDir: string,
  command: 'ADD' | 'DEL',
  pod: { name: string; node: string },
): Promise<CniResult> {
  const node = nodeOf(pod.node);
  const conf = cniConfig(node, join(workDir, 'cni', node.name));
  const { stdout } = await lab.exec(
    nodeNs(node.name),
    'env',
    [
      `CNI_COMMAND=${command}`,
      `CNI_CONTAINERID=${lab.prefix}-${pod.name}`,
      `CNI_NETNS=/run/netns/${lab.ns(podNs(pod.name))}`,
      'CNI_IFNAME=eth0',
      `CNI_PATH=${CNI_BIN}`,
      join(CNI_BIN, conf.type as string),
    ],
    { input: JSON.stringify(conf) },
  );
  return command === 'ADD' ? (JSON.parse(stdout) as CniResult) : {};
}
