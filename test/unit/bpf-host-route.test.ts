import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { discoverInterfaces, type HostNetwork } from '../../src/dataplanes/bpf/discover.js';
import {
  hostRouteInterfaces,
  hostRoutingDecision,
  iptablesChainNames,
  nftChainNames,
} from '../../src/dataplanes/bpf/host-route.js';
import { HOST_IF } from '../../src/dataplanes/bpf/layout.js';

describe('bpf.hostRouting', () => {
  const plain = ['INPUT', 'FORWARD', 'OUTPUT', 'FLANNEL-FWD'];

  it('stack never bypasses; bpf always, and refuses a kernel without the helpers', () => {
    expect(hostRoutingDecision('stack', { helpers: true, chains: plain })?.bpf).toBe(false);
    expect(hostRoutingDecision('bpf', { helpers: true, chains: ['cali-FORWARD'] })?.bpf).toBe(true);
    expect(hostRoutingDecision('bpf', { helpers: false, chains: plain })).toBeNull();
  });

  it('auto bypasses only with the helpers, readable netfilter and no NetworkPolicy chain', () => {
    expect(hostRoutingDecision('auto', { helpers: true, chains: plain })).toEqual({
      bpf: true,
      reason: 'no NetworkPolicy chain in netfilter',
    });
    expect(hostRoutingDecision('auto', { helpers: false, chains: plain })?.bpf).toBe(false);
    expect(hostRoutingDecision('auto', { helpers: true, chains: null })?.bpf).toBe(false);
    for (const chain of [
      'cali-FORWARD',
      'KUBE-ROUTER-FORWARD',
      'KUBE-NWPLCY-ABC',
      'WEAVE-NPC',
      'kube-network-policies',
    ]) {
      expect(hostRoutingDecision('auto', { helpers: true, chains: [...plain, chain] })).toEqual({
        bpf: false,
        reason: `NetworkPolicy enforced by netfilter (${chain})`,
      });
    }
  });

  it('reads chain names from nft list chains and iptables-save', () => {
    const nft = [
      'table ip filter {',
      '\tchain FORWARD {',
      '\t\ttype filter hook forward priority filter; policy accept;',
      '\t}',
      '}',
      'table inet kube-network-policies {',
      '\tchain postrouting {',
      '\t}',
      '}',
    ].join('\n');
    expect(nftChainNames(nft)).toEqual(['filter', 'FORWARD', 'kube-network-policies', 'postrouting']);
    const save = '*filter\n:INPUT ACCEPT [0:0]\n:cali-FORWARD - [0:0]\n-A FORWARD -j cali-FORWARD\nCOMMIT\n';
    expect(iptablesChainNames(save)).toEqual(['INPUT', 'cali-FORWARD']);
  });

  it("lists the pods' veths for the peer redirect and their bridge for the bridge CNI", () => {
    const file = JSON.parse(
      readFileSync(new URL('../fixtures/host-network/flannel-node.json', import.meta.url), 'utf8'),
    );
    const host: HostNetwork = { links: file.addr, defaultRoutes: [...file.routes4, ...file.routes6] };
    const found = discoverInterfaces(host, ['192.168.50.10'], { podInterfaces: [], externalInterfaces: [] });
    // veth1a2b (ptp) and vethbr01 (a port of cni0); not the uplink veth eth0, nor flannel.1.
    expect(hostRouteInterfaces(host.links, found)).toEqual(
      new Map([
        [3, HOST_IF.peer],
        [5, HOST_IF.peer],
        [4, HOST_IF.bridge],
      ]),
    );
  });
});
