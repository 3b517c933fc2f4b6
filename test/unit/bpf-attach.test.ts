import { describe, expect, it } from 'vitest';
import {
  linkName,
  linkNameOfPin,
  parseLinkName,
  pinFileName,
  plannedAttachments,
  programsAtStart,
  SOCK_HOOKS,
  sockHooksFor,
} from '../../src/dataplanes/bpf/attach.js';
import type { DiscoveredInterface } from '../../src/dataplanes/bpf/discover.js';
import { interfaceAddresses, nodeAddresses } from '../../src/dataplanes/bpf/interface-follower.js';
import { PROGRAMS } from '../../src/dataplanes/bpf/layout.js';
import { MonotonicCounters } from '../../src/dataplanes/bpf/stats-read.js';

const iface = (
  ifname: string,
  ifindex: number,
  extra: Partial<DiscoveredInterface>,
): DiscoveredInterface => ({
  ifname,
  ifindex,
  role: 'pod',
  l3: false,
  overlay: false,
  reason: 'test',
  ...extra,
});

describe('which program goes on which hook', () => {
  const interfaces = [
    iface('veth1', 5, {}),
    iface('eth0', 2, { role: 'external' }),
    iface('flannel.1', 7, { role: 'external', overlay: true }),
    iface('wg0', 9, { role: 'external', l3: true, overlay: true }),
  ];
  const planned = (xdpMode: 'native' | 'generic' | 'off') =>
    plannedAttachments(interfaces, xdpMode).map((a) => `${linkName(a)}#${a.ifindex} ${a.program}`);

  it('pod-facing: tc ingress kbp_tc_pod and tc egress; external: the L2 or L3 variants; XDP on L2 non-overlays', () => {
    expect(planned('native')).toEqual([
      'tc-ingress@eth0#2 kbp_tc_ext',
      'tc-egress@eth0#2 kbp_tc_egress',
      'xdp@eth0#2 kbp_xdp_ext',
      'tc-ingress@flannel.1#7 kbp_tc_ext',
      'tc-egress@flannel.1#7 kbp_tc_egress',
      'tc-ingress@veth1#5 kbp_tc_pod',
      'tc-egress@veth1#5 kbp_tc_egress',
      'tc-ingress@wg0#9 kbp_tc_ext_l3',
      'tc-egress@wg0#9 kbp_tc_egress_l3',
    ]);
    expect(planned('off').filter((a) => a.startsWith('xdp'))).toEqual([]);
  });

  it('pin names stand for a hook and an interface; bpffs takes no dot, so it is encoded', () => {
    for (const name of ['tc-egress@flannel.1', 'xdp@eth0.100', 'tc-ingress@odd%2e.name']) {
      expect(pinFileName(name)).not.toContain('.');
      expect(linkNameOfPin(pinFileName(name))).toBe(name);
    }
    expect(parseLinkName('tc-egress@flannel.1')).toEqual({ hook: 'tc-egress', ifname: 'flannel.1' });
    expect(parseLinkName('xdp@eth0')).toEqual({ hook: 'xdp', ifname: 'eth0' });
    expect(parseLinkName('tc-pod@veth1')).toBeNull();
    expect(parseLinkName('stray')).toBeNull();
  });
});

describe('metrics helpers', () => {
  const c = (n: number) => ({
    newConnections: BigInt(n),
    forwardPackets: BigInt(n * 10),
    forwardBytes: BigInt(n * 1000),
    replyPackets: 0n,
    replyBytes: 0n,
    droppedPackets: 0n,
  });

  it('keeps a series monotonic when the id behind it changes or its counters restart', () => {
    const m = new MonotonicCounters();
    expect(m.value('TCP/10.96.0.10:80', 3, c(5)).newConnections).toBe(5n);
    expect(m.value('TCP/10.96.0.10:80', 3, c(7)).newConnections).toBe(7n);
    // Re-created under id 9, counting from zero again.
    expect(m.value('TCP/10.96.0.10:80', 9, c(1)).newConnections).toBe(8n);
    expect(m.value('TCP/10.96.0.10:80', 9, c(2)).forwardPackets).toBe(90n);
    // Same id, counters zeroed (id reused).
    expect(m.value('TCP/10.96.0.10:80', 9, c(0)).newConnections).toBe(9n);
  });

  it('takes every non-loopback IPv4 address of the node, and every global IPv6 one', () => {
    expect(
      nodeAddresses([
        { ifname: 'lo', addr_info: [{ family: 'inet', local: '127.0.0.1', prefixlen: 8 }] },
        {
          ifname: 'eth0',
          addr_info: [
            { family: 'inet', local: '192.168.1.10', prefixlen: 24 },
            { family: 'inet6', local: 'fe80::1', prefixlen: 64 },
            { family: 'inet6', local: 'fd00:1::10', prefixlen: 64 },
          ],
        },
        { ifname: 'lo', addr_info: [{ family: 'inet6', local: '::1', prefixlen: 128 }] },
        { ifname: 'eth1', addr_info: [{ family: 'inet', local: '10.0.0.5', prefixlen: 8 }] },
      ]),
    ).toEqual(['10.0.0.5', '192.168.1.10', 'fd00:1::10']);
  });

  it('picks each interface`s SNAT source per family: the first global IPv4 address, the first usable global IPv6 one', () => {
    const picked = interfaceAddresses([
      { ifindex: 1, addr_info: [{ family: 'inet', local: '127.0.0.1', scope: 'host' }] },
      {
        ifindex: 2,
        addr_info: [
          { family: 'inet6', local: 'fe80::1', scope: 'link' },
          { family: 'inet', local: '192.168.1.10', scope: 'global' },
          { family: 'inet', local: '192.168.1.11', scope: 'global' }, // a secondary
          // Still in duplicate address detection, or failed it: the kernel never uses it.
          { family: 'inet6', local: 'fd00:1::1', scope: 'global', tentative: true },
          { family: 'inet6', local: 'fd00:1::2', scope: 'global', dadfailed: true },
          // Deprecated: only when nothing better is there.
          { family: 'inet6', local: 'fd00:1::3', scope: 'global', deprecated: true },
          { family: 'inet6', local: 'FD00:1:0::0:4', scope: 'global' },
        ],
      },
      // Only a deprecated global address: still the one MASQUERADE would use.
      { ifindex: 3, addr_info: [{ family: 'inet6', local: 'fd00:3::3', scope: 'global', deprecated: true }] },
      // IPv6 only, and only link-local: no IPv6 SNAT source of its own.
      { ifindex: 4, addr_info: [{ family: 'inet6', local: 'fe80::4', scope: 'link' }] },
      { ifindex: 5, addr_info: [{ family: 'inet6', local: 'fd00:5::5', scope: 'global', tentative: true }] },
      { ifindex: 6 },
    ]);
    expect([...picked.IPv4]).toEqual([[2, '192.168.1.10']]);
    // Written as the maps read it back (canonical text), so an unchanged address is not rewritten.
    expect([...picked.IPv6]).toEqual([
      [2, 'fd00:1::4'],
      [3, 'fd00:3::3'],
    ]);
  });
});

describe('which programs the kernel verifies when the agent starts', () => {
  const tc = [PROGRAMS.tcFromPod, PROGRAMS.tcFromExternal, PROGRAMS.tcEgress];
  // The IPv4 hooks and the release hook, which serves both families.
  const sock4 = SOCK_HOOKS.filter((h) => !h.hook.endsWith('6')).map((h) => h.program);

  it('those of pod-facing and Ethernet external interfaces and the socket hooks; not the L3 or XDP variants, nor the benchmark baseline', () => {
    const programs = programsAtStart({ xdpMode: 'off', socketLB: 'host' }, true);
    expect(programs).toEqual([...tc, ...SOCK_HOOKS.map((h) => h.program)]);
    for (const later of [
      PROGRAMS.tcFromExternalL3,
      PROGRAMS.tcEgressL3,
      PROGRAMS.xdpFromExternal,
      PROGRAMS.xdpTx,
    ])
      expect(programs).not.toContain(later);
  });

  it("XDP's when bpf.xdpMode asks for it, no socket hooks with bpf.socketLB off, no IPv6 ones without IPv6 sockets", () => {
    expect(programsAtStart({ xdpMode: 'native', socketLB: 'off' }, true)).toEqual([
      ...tc,
      PROGRAMS.xdpFromExternal,
    ]);
    expect(programsAtStart({ xdpMode: 'off', socketLB: 'all' }, false)).toEqual([...tc, ...sock4]);
    expect(sockHooksFor(false).map((h) => h.program)).toEqual(sock4);
  });

  it('an L3 interface and XDP ask the follower for the programs the start left out', () => {
    const planned = plannedAttachments(
      [
        iface('veth1', 5, {}),
        iface('eth0', 2, { role: 'external' }),
        iface('wg0', 3, { role: 'external', l3: true }),
      ],
      'native',
    ).map((a) => a.program);
    expect(new Set(planned)).toEqual(
      new Set([...tc, PROGRAMS.tcFromExternalL3, PROGRAMS.tcEgressL3, PROGRAMS.xdpFromExternal]),
    );
  });
});
