// The namespace the kernel tests run routed packets in (SNAT, replies from node-address VIPs).

import type { Lab } from '../../src/lab/netns.js';

// Routed packets are forwarded by tc with bpf_fib_lookup,
// which answers from the namespace the test run happens in: this one, with interfaces
// towards the remote backends, the outside client and local pods, and fixed neighbours.
export const NEIGHBOURS = {
  remoteBackend: { net: '10.244.9.1/24', ip: '10.244.9.60', mac: '02:00:00:00:09:60' },
  outside: { net: '203.0.113.1/24', ip: '203.0.113.7', mac: '02:00:00:00:71:07' },
  pod: { net: '10.244.2.1/24', ip: '10.244.2.61', mac: '02:00:00:00:02:61' },
};
/** Another node's backend on the outside segment (device r1): reached through the same interface. */
export const SAME_SEGMENT_BACKEND = { ip: '203.0.113.60', mac: '02:00:00:00:71:60' };

export async function buildRoutingNamespace(lab: Lab): Promise<void> {
  await lab.addNamespace('fib');
  await lab.sysctl('fib', 'net.ipv4.ip_forward', '1');
  let i = 0;
  for (const n of Object.values(NEIGHBOURS)) {
    const dev = `r${i++}`;
    await lab.exec('fib', 'ip', ['link', 'add', dev, 'type', 'veth', 'peer', 'name', `${dev}p`]);
    await lab.exec('fib', 'ip', ['link', 'set', dev, 'up']);
    await lab.exec('fib', 'ip', ['link', 'set', `${dev}p`, 'up']);
    await lab.exec('fib', 'ip', ['addr', 'add', n.net, 'dev', dev]);
    await lab.exec('fib', 'ip', ['neigh', 'add', n.ip, 'lladdr', n.mac, 'dev', dev, 'nud', 'permanent']);
  }
  const s = SAME_SEGMENT_BACKEND;
  await lab.exec('fib', 'ip', ['neigh', 'add', s.ip, 'lladdr', s.mac, 'dev', 'r1', 'nud', 'permanent']);
}

export function macOf(frame: Buffer, at: 0 | 6): string {
  return [...frame.subarray(at, at + 6)].map((b) => b.toString(16).padStart(2, '0')).join(':');
}
