import { describe, expect, it } from 'vitest';
import { matchesPattern, plannedAttachments } from '../../src/dataplanes/bpf/attach.js';
import { MonotonicCounters, nodeAddresses } from '../../src/dataplanes/bpf/index.js';

describe('interface patterns', () => {
  it('matches prefixes with a trailing * and whole names otherwise', () => {
    expect(matchesPattern('veth12ab', ['veth*'])).toBe(true);
    expect(matchesPattern('eth0', ['eth0'])).toBe(true);
    expect(matchesPattern('eth0.100', ['eth0'])).toBe(false);
    expect(matchesPattern('cali1', ['veth*', 'lxc*'])).toBe(false);
  });

  it('puts the pod program on pod interfaces and tc plus XDP on external ones', () => {
    const interfaces = [
      { ifname: 'veth1', ifindex: 5 },
      { ifname: 'eth0', ifindex: 2 },
      { ifname: 'lo', ifindex: 1 },
      { ifname: 'docker0', ifindex: 9 },
    ];
    const config = {
      podInterfaces: ['veth*', 'l*'],
      externalInterfaces: ['eth*'],
      xdpMode: 'native' as const,
    };
    expect(plannedAttachments(interfaces, config).map((a) => `${a.hook}@${a.ifname}#${a.ifindex}`)).toEqual([
      'tc-ext@eth0#2',
      'xdp-ext@eth0#2',
      'tc-pod@veth1#5',
    ]);
    expect(plannedAttachments(interfaces, { ...config, xdpMode: 'off' }).map((a) => a.hook)).toEqual([
      'tc-ext',
      'tc-pod',
    ]);
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

  it('takes every non-loopback IPv4 address of the node', () => {
    expect(
      nodeAddresses([
        { ifname: 'lo', addr_info: [{ family: 'inet', local: '127.0.0.1', prefixlen: 8 }] },
        {
          ifname: 'eth0',
          addr_info: [
            { family: 'inet', local: '192.168.1.10', prefixlen: 24 },
            { family: 'inet6', local: 'fe80::1', prefixlen: 64 },
          ],
        },
        { ifname: 'eth1', addr_info: [{ family: 'inet', local: '10.0.0.5', prefixlen: 8 }] },
      ]),
    ).toEqual(['10.0.0.5', '192.168.1.10']);
  });
});
