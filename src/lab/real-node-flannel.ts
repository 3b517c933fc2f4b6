// flannel on the real-node lab's nodes (src/lab/real-node.ts), as flanneld sets a node up: its
// masquerade rules, its vxlan devices (flannel.1 over the IPv4 underlay, flannel-v6.1 over the
// IPv6 one) and, for each remote node's lease, the route, neighbour and FDB entry.

import type { Lab } from './netns.js';
import {
  CLUSTER_CIDR,
  CLUSTER_CIDR6,
  nodeNs,
  REAL_NODES,
  type RealNode,
  VXLAN_MTU,
} from './real-node-plan.js';

/**
 * flannel's nat rules (its iptables trafficmngr) for one node and family, as `iptables -t nat` /
 * `ip6tables -t nat` argument lists.
 */
function flannelMasqueradeRules(node: RealNode, family: 'IPv4' | 'IPv6'): string[][] {
  const v4 = family === 'IPv4';
  const podCIDR = v4 ? node.podCIDR : node.podCIDR6;
  const clusterCIDR = v4 ? CLUSTER_CIDR : CLUSTER_CIDR6;
  const multicast = v4 ? '224.0.0.0/4' : 'ff00::/8';
  const rule = (...spec: string[]) => [
    '-A',
    'FLANNEL-POSTRTG',
    ...spec,
    '-m',
    'comment',
    '--comment',
    'flanneld masq',
  ];
  return [
    ['-N', 'FLANNEL-POSTRTG'],
    ['-A', 'POSTROUTING', '-m', 'comment', '--comment', 'flanneld masq', '-j', 'FLANNEL-POSTRTG'],
    // kube-proxy's masquerade mark: kube-proxy masquerades those itself.
    rule('-m', 'mark', '--mark', '0x4000/0x4000', '-j', 'RETURN'),
    rule('-s', podCIDR, '-d', clusterCIDR, '-j', 'RETURN'),
    rule('-s', clusterCIDR, '-d', podCIDR, '-j', 'RETURN'),
    rule('!', '-s', clusterCIDR, '-d', podCIDR, '-j', 'RETURN'),
    rule('-s', clusterCIDR, '!', '-d', multicast, '-j', 'MASQUERADE', '--random-fully'),
    rule('!', '-s', clusterCIDR, '-d', clusterCIDR, '-j', 'MASQUERADE', '--random-fully'),
  ];
}

/** flannel's masquerade rules in the node's namespace, for both families. */
export async function addFlannelMasquerade(lab: Lab, ns: string, node: RealNode): Promise<void> {
  for (const args of flannelMasqueradeRules(node, 'IPv4'))
    await lab.exec(ns, 'iptables', ['-t', 'nat', ...args]);
  for (const args of flannelMasqueradeRules(node, 'IPv6'))
    await lab.exec(ns, 'ip6tables', ['-t', 'nat', ...args]);
}

/** flannel's vxlan backend: flannel.1 over the IPv4 underlay, flannel-v6.1 over the IPv6 one. */
export async function addVxlanDevices(lab: Lab, ns: string, node: RealNode): Promise<void> {
  for (const [device, local, vtep] of [
    ['flannel.1', node.ip, `${node.vtep}/32`],
    ['flannel-v6.1', node.ip6, `${node.vtep6}/128`],
  ] as const) {
    await lab.exec(ns, 'ip', [
      'link',
      'add',
      device,
      'type',
      'vxlan',
      'id',
      '1',
      'local',
      local,
      'dev',
      'eth0',
      'dstport',
      '8472',
      'nolearning',
    ]);
    await lab.exec(ns, 'ip', [
      'link',
      'set',
      device,
      'mtu',
      String(VXLAN_MTU - (device === 'flannel.1' ? 0 : 20)),
      'up',
    ]);
    await lab.addAddress(ns, device, vtep);
  }
}

/** What flanneld programs on every node for each remote lease: route, permanent neighbour, FDB entry. */
export async function joinOverlay(lab: Lab): Promise<void> {
  for (const v4 of [true, false]) {
    const device = v4 ? 'flannel.1' : 'flannel-v6.1';
    const macs = new Map<string, string>();
    for (const node of REAL_NODES) {
      const { stdout } = await lab.exec(nodeNs(node.name), 'ip', ['-j', 'link', 'show', device]);
      macs.set(node.name, (JSON.parse(stdout) as { address: string }[])[0]?.address ?? '');
    }
    for (const node of REAL_NODES) {
      const ns = nodeNs(node.name);
      for (const remote of REAL_NODES) {
        if (remote === node) continue;
        const mac = macs.get(remote.name) ?? '';
        const vtep = v4 ? remote.vtep : remote.vtep6;
        const podCIDR = v4 ? remote.podCIDR : remote.podCIDR6;
        await lab.addRoute(ns, podCIDR, 'via', vtep, 'dev', device, 'onlink');
        await lab.exec(ns, 'ip', [
          'neigh',
          'replace',
          vtep,
          'lladdr',
          mac,
          'dev',
          device,
          'nud',
          'permanent',
        ]);
        await lab.exec(ns, 'bridge', [
          'fdb',
          'append',
          mac,
          'dev',
          device,
          'dst',
          v4 ? remote.ip : remote.ip6,
          'self',
          'permanent',
        ]);
      }
    }
  }
}
