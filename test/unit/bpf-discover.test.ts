import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEFAULT_BPF_CONFIG } from '../../src/config/defaults.js';
import {
  type DiscoveredInterface,
  discoverInterfaces,
  type HostNetwork,
  type IpLink,
  matchesPattern,
} from '../../src/dataplanes/bpf/discover.js';

/** Real `ip -j` output captured from namespaces (see each file's "captured"). */
function captured(name: string): HostNetwork {
  const file = JSON.parse(
    readFileSync(new URL(`../fixtures/host-network/${name}.json`, import.meta.url), 'utf8'),
  );
  return { links: file.addr, defaultRoutes: [...file.routes4, ...file.routes6] };
}

const auto = { podInterfaces: [], externalInterfaces: [] };
const summary = (found: DiscoveredInterface[]) =>
  found.map((i) => `${i.ifname} ${i.role}${i.l3 ? ' l3' : ''}${i.overlay ? ' overlay' : ''}: ${i.reason}`);

describe('interface discovery', () => {
  it('the agent default finds interfaces instead of naming them', () => {
    expect(DEFAULT_BPF_CONFIG.podInterfaces).toEqual([]);
    expect(DEFAULT_BPF_CONFIG.externalInterfaces).toEqual([]);
  });

  it('a flannel node: uplink veth, ptp and bridge pod veths, vxlan, a tun device', () => {
    const found = discoverInterfaces(captured('flannel-node'), ['192.168.50.10', 'fd00:50::10'], auto);
    expect(summary(found)).toEqual([
      // The uplink is a veth too: holding the node IP makes it external, not pod-facing.
      'eth0 external: holds node IP 192.168.50.10',
      'flannel.1 external overlay: overlay (vxlan)',
      // ptp CNI: the host end holds the pod gateway 10.244.2.1/32, which is no node IP.
      'veth1a2b pod: veth',
      // bridge CNI: the port is pod-facing, cni0 (the pod gateway) is neither.
      'vethbr01 pod: veth',
    ]);
    expect(found.find((i) => i.ifname === 'eth0')?.ifindex).toBe(2);
  });

  it('the default routes make a device external before the node IPs are known', () => {
    const found = discoverInterfaces(captured('flannel-node'), [], auto);
    expect(summary(found)[0]).toBe('eth0 external: default route');
  });

  it('an IPv6 node IP in another spelling still matches', () => {
    const host = captured('flannel-node');
    host.defaultRoutes = [];
    expect(summary(discoverInterfaces(host, ['FD00:50:0:0::10'], auto))[0]).toBe(
      'eth0 external: holds node IP fd00:50::10',
    );
  });

  it('a node IP on one uplink and the default route on another: both external', () => {
    expect(summary(discoverInterfaces(captured('two-uplinks'), ['10.0.0.5'], auto))).toEqual([
      'cali12345abcde pod: veth',
      'eth0 external: default route',
      'eth1 external: holds node IP 10.0.0.5',
    ]);
  });

  it('a device without an Ethernet header is l3; an L3 device is never pod-facing', () => {
    const host = captured('flannel-node');
    // tun0 takes the IPv6 default route here.
    host.defaultRoutes = [{ dev: 'eth0' }, { dev: 'tun0' }];
    const found = discoverInterfaces(host, [], auto);
    expect(summary(found)).toContain('tun0 external l3: default route');
    expect(
      summary(discoverInterfaces(host, [], { ...auto, podInterfaces: ['tun*', 'veth*'] })),
    ).not.toContain('tun0 pod l3: bpf.podInterfaces');
  });

  it('multipath default routes name their devices per next hop', () => {
    const host = captured('two-uplinks');
    host.defaultRoutes = [{ nexthops: [{ dev: 'eth0' }, { dev: 'eth1' }] }];
    expect(summary(discoverInterfaces(host, [], auto)).filter((s) => s.includes('external'))).toEqual([
      'eth0 external: default route',
      'eth1 external: default route',
    ]);
  });

  // This kernel has no ipip, gre, geneve or wireguard driver: these entries are written by hand
  // in the shape `ip -j -d addr show` gives them (link_type and linkinfo.info_kind as iproute2
  // prints them for each driver).
  const tunnels: IpLink[] = [
    { ifindex: 20, ifname: 'tunl0', link_type: 'ipip', linkinfo: { info_kind: 'ipip' } },
    { ifindex: 21, ifname: 'wireguard.cali', link_type: 'none', linkinfo: { info_kind: 'wireguard' } },
    { ifindex: 22, ifname: 'genev_sys_6081', link_type: 'ether', linkinfo: { info_kind: 'geneve' } },
    { ifindex: 23, ifname: 'gre1', link_type: 'gre', linkinfo: { info_kind: 'gre' } },
    { ifindex: 24, ifname: 'gretap1', link_type: 'ether', linkinfo: { info_kind: 'gretap' } },
  ];

  it('overlays are external; those without an Ethernet header are l3', () => {
    const host = captured('two-uplinks');
    host.links = [...host.links, ...tunnels];
    expect(
      summary(discoverInterfaces(host, ['10.0.0.5'], auto)).filter((s) => s.includes('overlay')),
    ).toEqual([
      'genev_sys_6081 external overlay: overlay (geneve)',
      'gre1 external l3 overlay: overlay (gre)',
      'gretap1 external overlay: overlay (gretap)',
      'tunl0 external l3 overlay: overlay (ipip)',
      'wireguard.cali external l3 overlay: overlay (wireguard)',
    ]);
  });

  it('a non-empty bpf.externalInterfaces names the external devices; auto pod-facing excludes them', () => {
    const host = captured('flannel-node');
    expect(
      summary(
        discoverInterfaces(host, ['192.168.50.10'], { ...auto, externalInterfaces: ['veth1*', 'tun0'] }),
      ),
    ).toEqual([
      'eth0 pod: veth',
      'tun0 external l3: bpf.externalInterfaces',
      'veth1a2b external: bpf.externalInterfaces',
      'vethbr01 pod: veth',
    ]);
  });

  it('a non-empty bpf.podInterfaces names the pod-facing devices; external ones stay external', () => {
    const host = captured('flannel-node');
    expect(
      summary(discoverInterfaces(host, ['192.168.50.10'], { ...auto, podInterfaces: ['eth*', 'cni0'] })),
    ).toEqual([
      'cni0 pod: bpf.podInterfaces',
      'eth0 external: holds node IP 192.168.50.10',
      'flannel.1 external overlay: overlay (vxlan)',
    ]);
  });

  it('a veth pair inside the node namespace faces no pod', () => {
    const host = captured('two-uplinks');
    // As `ip -j -d addr show` prints a pair whose ends are both here: "link" instead of "link_netnsid".
    host.links = [
      ...host.links,
      { ifindex: 30, ifname: 'cilium_host', link_type: 'ether', linkinfo: { info_kind: 'veth' } },
      { ifindex: 31, ifname: 'cilium_net', link_type: 'ether', linkinfo: { info_kind: 'veth' } },
    ];
    expect(discoverInterfaces(host, ['10.0.0.5'], auto).map((i) => i.ifname)).toEqual([
      'cali12345abcde',
      'eth0',
      'eth1',
    ]);
  });

  it('never takes the loopback device, even when named', () => {
    const found = discoverInterfaces(captured('flannel-node'), [], {
      podInterfaces: ['*'],
      externalInterfaces: ['lo'],
    });
    expect(found.map((i) => i.ifname)).not.toContain('lo');
  });
});

describe('interface patterns', () => {
  it('matches prefixes with a trailing * and whole names otherwise', () => {
    expect(matchesPattern('veth12ab', ['veth*'])).toBe(true);
    expect(matchesPattern('eth0', ['eth0'])).toBe(true);
    expect(matchesPattern('eth0.100', ['eth0'])).toBe(false);
    expect(matchesPattern('cali1', ['veth*', 'lxc*'])).toBe(false);
  });
});
