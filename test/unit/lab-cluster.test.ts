import { describe, expect, it } from 'vitest';
import { DEMO_NODES } from '../../src/cli/demo.js';
import { clusterSpecFromState, podIPv6 } from '../../src/lab/cluster.js';
import { ownCgroupName } from '../../src/lab/lab-cgroup.js';
import { deadLabPid, labCgroupName } from '../../src/lab/real-node-cgroups.js';
import { ipv6Of } from '../../src/lab/real-node-plan.js';
import { deadRunPidOf } from '../../src/lab/run-names.js';
import { ChangeTracker } from '../../src/model/tracker.js';
import { readManifests } from '../../src/sources/manifests.js';

// The namespace lab's dual-stack address plan (src/lab/cluster.ts, src/lab/real-node-plan.ts), and
// the names of the real-node lab's cgroups (src/lab/real-node-cgroups.ts) and of a lab's own
// (src/lab/lab-cgroup.ts).

describe('the lab clusters, dual-stack', () => {
  const nodeA = { podCIDR: '10.244.1.0/24', podCIDR6: 'fd00:244:0:1::/64' };

  it("puts a pod's IPv6 address at its IPv4 offset in the node's IPv6 pod CIDR", () => {
    expect(podIPv6(nodeA, '10.244.1.10')).toBe('fd00:244:0:1::a');
    expect(podIPv6(nodeA, '10.244.1.255')).toBe('fd00:244:0:1::ff');
    expect(podIPv6({ podCIDR: '10.244.0.0/16', podCIDR6: 'fd00:244::/48' }, '10.244.1.2')).toBe(
      'fd00:244::102',
    );
    // A single-stack node gives none.
    expect(podIPv6({ podCIDR: '10.244.1.0/24' }, '10.244.1.10')).toBeNull();
  });

  it('gives the demo pods both families and pairs the IPv6 EndpointSlice with them; a single-stack node leaves IPv6 out', () => {
    const tracker = new ChangeTracker('');
    tracker.apply(readManifests(['examples/manifests']).events);
    const dual = clusterSpecFromState(tracker.state(), DEMO_NODES, [], []);
    const web1 = dual.pods.find((p) => p.name === 'pod-10.244.1.10');
    expect(web1).toMatchObject({
      ip: '10.244.1.10',
      ip6: 'fd00:244:0:1::a',
      node: 'node-a',
      tcpPorts: [8080],
    });
    // demo/web's IPv6 endpoints are the same four pods: no pod of their own.
    expect(dual.pods.some((p) => p.name.includes(':'))).toBe(false);
    expect(dual.pods.every((p) => p.ip6 !== undefined)).toBe(true);

    const single = clusterSpecFromState(
      tracker.state(),
      DEMO_NODES.map(({ name, ip, podCIDR }) => ({ name, ip, podCIDR })),
      [],
      [],
    );
    expect(single.pods.map((p) => p.name)).toEqual(dual.pods.map((p) => p.name));
    expect(single.pods.every((p) => p.ip6 === undefined)).toBe(true);
  });

  it("maps the real-node lab's IPv4 addresses to their IPv6 counterparts", () => {
    expect(ipv6Of('10.96.1.3')).toBe('fd00:10:96::1:3');
    expect(ipv6Of('10.96.0.1')).toBe('fd00:10:96::1');
    expect(ipv6Of('192.0.2.100')).toBe('fd00:192::2:100');
    expect(ipv6Of('198.51.100.10')).toBe('fd00:198:51::100:10');
  });
});

describe("the real-node lab's cgroups", () => {
  it('are named by the run, so that a later run removes what a killed one left', () => {
    expect(labCgroupName('kbprnb7', 123)).toBe('/kbp-real-node-123-kbprnb7');
    const alive = (pid: number) => pid === 200;
    expect(deadLabPid(labCgroupName('kbprnb100', 100), alive)).toBe(100);
    expect(deadLabPid('kbp-real-node-100-kbpmig100', alive)).toBe(100);
    expect(deadLabPid(labCgroupName('kbprnb200', 200), alive)).toBeNull();
    // This run's own, and names of other labs, are never taken for a dead run's.
    expect(deadLabPid(labCgroupName('kbprnb1'), () => false)).toBeNull();
    expect(deadLabPid('/kbpc100-node1', alive)).toBeNull();
    expect(deadLabPid('/kbp-real-node-x-kbprnb', alive)).toBeNull();
  });
});

describe("a lab's own cgroup", () => {
  it('is named by the run and the lab, apart from the real-node lab cgroups', () => {
    expect(ownCgroupName('kbpdemo', 123)).toBe('/kube-bpf-proxy-lab-123-kbpdemo');
    const alive = (pid: number) => pid === 200;
    expect(deadRunPidOf('kube-bpf-proxy-lab-', ownCgroupName('kbpdemo', 100), alive)).toBe(100);
    expect(deadRunPidOf('kube-bpf-proxy-lab-', ownCgroupName('kbpdemo', 200), alive)).toBeNull();
    expect(deadLabPid(ownCgroupName('kbprnb', 100), alive)).toBeNull();
    expect(deadRunPidOf('kube-bpf-proxy-lab-', labCgroupName('kbprnb', 100), alive)).toBeNull();
  });
});
