// A namespace for BPF_PROG_TEST_RUN of routed packets: bpf_fib_lookup answers from the namespace
// the test run happens in, so this one has interfaces towards a remote backend, an outside client
// and local pods, with fixed neighbours.

import type { Lab } from '../../src/lab/netns.js';
import { FAMILY_CASES } from './families.js';

export const OUTSIDE = '203.0.113.7';

export const NEIGHBOURS = {
  remoteBackend: { net: '10.244.9.1/24', ip: '10.244.9.60', mac: '02:00:00:00:09:60' },
  outside: { net: '203.0.113.1/24', ip: OUTSIDE, mac: '02:00:00:00:71:07' },
  pod: { net: '10.244.2.1/24', ip: '10.244.2.61', mac: '02:00:00:00:02:61' },
};
/** Another node's backend on the outside segment (device r1): reached through the same interface. */
export const SAME_SEGMENT_BACKEND = { ip: '203.0.113.60', mac: '02:00:00:00:71:60' };

/** Creates namespace `fib` in `lab`: devices r0 (remote backend), r1 (outside), r2 (pods), each
 * with its IPv4 network and the IPv6 counterpart (families.ts), neighbours of both families. */
export async function buildRoutingNamespace(lab: Lab): Promise<void> {
  await lab.addNamespace('fib');
  await lab.sysctl('fib', 'net.ipv4.ip_forward', '1');
  await lab.sysctl('fib', 'net.ipv6.conf.all.forwarding', '1');
  let i = 0;
  for (const n of Object.values(NEIGHBOURS)) {
    const dev = `r${i++}`;
    await lab.exec('fib', 'ip', ['link', 'add', dev, 'type', 'veth', 'peer', 'name', `${dev}p`]);
    await lab.exec('fib', 'ip', ['link', 'set', dev, 'up']);
    await lab.exec('fib', 'ip', ['link', 'set', `${dev}p`, 'up']);
    for (const { A, cidr } of FAMILY_CASES) {
      await lab.addAddress('fib', dev, cidr(n.net));
      await lab.exec('fib', 'ip', ['neigh', 'add', A(n.ip), 'lladdr', n.mac, 'dev', dev, 'nud', 'permanent']);
    }
  }
  const s = SAME_SEGMENT_BACKEND;
  for (const { A } of FAMILY_CASES)
    await lab.exec('fib', 'ip', ['neigh', 'add', A(s.ip), 'lladdr', s.mac, 'dev', 'r1', 'nud', 'permanent']);
}

export function macOf(frame: Buffer, at: 0 | 6): string {
  return [...frame.subarray(at, at + 6)].map((b) => b.toString(16).padStart(2, '0')).join(':');
}
