// The real cluster harness's decisions (src/lab/real-cluster/): which specs run, which of a junit
// report's test cases are results, which hierarchies get a node's cgroup, which leftovers are stale,
// the addresses and flags of a single- or dual-stack cluster, and the chart values it installs with
// (rendered by the real helm).

import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { HELM } from '../../src/lab/helm.js';
import {
  clusterFamilies,
  controllerManagerArgs,
  joined,
  ofFamily,
} from '../../src/lab/real-cluster/addresses.js';
import { cgroupHierarchies } from '../../src/lab/real-cluster/cgroups.js';
import {
  countResults,
  DEFAULT_SKIP,
  narrowFocus,
  parseJunit,
  SERVICES_FOCUS,
  specSelection,
} from '../../src/lab/real-cluster/e2e.js';
import { cniConfig } from '../../src/lab/real-cluster/node-config.js';
import { chartValues } from '../../src/lab/real-cluster/proxy.js';
import { deadRunPid } from '../../src/lab/real-cluster/stale.js';
import { renderChart } from '../support/helm.js';

const SPECS = [
  '[sig-network] Services should serve a basic endpoint from pods  [Conformance]',
  '[sig-network] Services should be able to create a functioning NodePort service [Conformance]',
  '[sig-network] Services should have session affinity timeout work for service with type clusterIP [LinuxOnly] [Conformance]',
  '[sig-network] Services should implement service.kubernetes.io/headless',
  '[sig-network] Networking Granular Checks: Services should function for pod-Service: http',
  '[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http [NodeConformance] [Conformance]',
  '[sig-network] DNS should provide DNS for services  [Conformance]',
  '[sig-network] Services should work after restarting kube-proxy [Disruptive]',
  '[sig-network] LoadBalancers should be able to change the type and ports of a TCP service [Slow]',
];

/** What ginkgo selects: focus matches and skip does not (both unanchored, as RE2 searches). */
const selected = (focus: string, skip = DEFAULT_SKIP, specs = SPECS) =>
  specs.filter((s) => new RegExp(focus).test(s) && !new RegExp(skip).test(s));

// Names as e2e.test v1.37.2 gives them (test/e2e/network/dual_stack.go: ginkgo puts the feature
// label after the description's top level).
const DUAL_STACK_SPECS = [
  '[sig-network] [Feature:IPv6DualStack] should create service with ipv6,v4 cluster ip',
  '[sig-network] [Feature:IPv6DualStack] Granular Checks: Services Secondary IP Family [LinuxOnly] should function for pod-Service: udp',
  '[sig-network] [Feature:IPv6DualStack] should have at least one dual-stack node',
  '[sig-network] [Feature:IPv6DualStack] Granular Checks: Services Secondary IP Family [LinuxOnly] should function for pod-Service: sctp [Feature:SCTPConnectivity]',
  ...SPECS,
];

describe('the specs the harness selects', () => {
  it('by default: the Services specs and the granular Service checks, without disruptive or load balancer specs', () => {
    expect(selected(SERVICES_FOCUS)).toEqual([SPECS[0], SPECS[1], SPECS[2], SPECS[3], SPECS[4]]);
  });

  it('--focus narrows the Services set instead of replacing it', () => {
    expect(selected(narrowFocus(SERVICES_FOCUS, String.raw`\[Conformance\]`))).toEqual([
      SPECS[0],
      SPECS[1],
      SPECS[2],
    ]);
    expect(selected(narrowFocus(SERVICES_FOCUS, 'headless|pod-Service'))).toEqual([SPECS[3], SPECS[4]]);
    expect(narrowFocus(SERVICES_FOCUS, undefined)).toBe(SERVICES_FOCUS);
  });
});

describe('the specs a dual-stack cluster runs', () => {
  it("are the dual-stack specs but SCTP's, and --focus narrows them", () => {
    const { focus, skip } = specSelection('dual');
    expect(selected(focus, skip, DUAL_STACK_SPECS)).toEqual(DUAL_STACK_SPECS.slice(0, 3));
    expect(selected(narrowFocus(focus, 'Granular'), skip, DUAL_STACK_SPECS)).toEqual([DUAL_STACK_SPECS[1]]);
  });

  it('and a single-stack cluster the Services set, none of them', () => {
    const { focus, skip } = specSelection('ipv4');
    expect({ focus, skip }).toEqual({ focus: SERVICES_FOCUS, skip: DEFAULT_SKIP });
    expect(selected(focus, skip, DUAL_STACK_SPECS)).toEqual(selected(SERVICES_FOCUS));
  });
});

describe("e2e.test's junit report", () => {
  // Test cases as ginkgo v2 writes them for e2e.test v1.37.2 (reporters/junit_report.go): a pass,
  // a spec left out by the focus (bare "skipped"), one that skipped itself (with its reason), a
  // failure, and the suite's setup nodes.
  const xml = `<testsuites><testsuite name="Kubernetes e2e suite">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.1"></testcase>
    <testcase name="[It] [sig-network] Services should be able to change the type from ClusterIP to ExternalName [Conformance]" classname="Kubernetes e2e suite" status="passed" time="4.401102528"></testcase>
    <testcase name="[It] [sig-api-machinery] API Streaming (aka. WatchList) reflector doesn&#39;t support receiving resources as Tables [Beta]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-network] Services should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes" classname="Kubernetes e2e suite" status="skipped" time="2.5">
      <skipped message="skipped - Requires at least 3 nodes (not 2)"></skipped>
    </testcase>
    <testcase name="[It] [sig-network] Services should serve endpoints on same port &amp; different protocols" classname="Kubernetes e2e suite" status="failed" time="61">
      <failure message="service is not reachable within 2m0s timeout on endpoint 10.96.4.2:80 over TCP protocol" type="failed">[FAILED] ...</failure>
    </testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="passed" time="0.2"></testcase>
  </testsuite></testsuites>`;

  it('lists the specs that ran, not those the focus left out nor the setup nodes', () => {
    expect(parseJunit(xml)).toEqual([
      {
        name: '[sig-network] Services should be able to change the type from ClusterIP to ExternalName [Conformance]',
        status: 'passed',
        message: '',
        seconds: 4.401102528,
      },
      {
        name: '[sig-network] Services should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes',
        status: 'skipped',
        message: 'skipped - Requires at least 3 nodes (not 2)',
        seconds: 2.5,
      },
      {
        name: '[sig-network] Services should serve endpoints on same port & different protocols',
        status: 'failed',
        message: 'service is not reachable within 2m0s timeout on endpoint 10.96.4.2:80 over TCP protocol',
        seconds: 61,
      },
    ]);
  });
});

describe('counting results', () => {
  it('counts each status', () => {
    const spec = (status: 'passed' | 'failed' | 'skipped') => ({
      name: 'x',
      status,
      message: '',
      seconds: 1,
    });
    expect(countResults([spec('passed'), spec('passed'), spec('failed'), spec('skipped')])).toEqual({
      passed: 2,
      failed: 1,
      skipped: 1,
    });
  });
});

describe("the nodes' cgroups", () => {
  it("are made in every cgroup v1 hierarchy and in cgroup2, from the hierarchies' root mounts", () => {
    const mountinfo = [
      '22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw',
      '31 22 0:27 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755',
      '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw',
      '42 31 0:39 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct',
      '43 31 0:40 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory',
      '90 22 0:40 /kbpc1-node1 /var/lib/x rw,relatime - cgroup cgroup rw,memory',
    ].join('\n');
    expect(cgroupHierarchies(mountinfo)).toEqual([
      '/sys/fs/cgroup/unified',
      '/sys/fs/cgroup/cpu,cpuacct',
      '/sys/fs/cgroup/memory',
    ]);
  });
});

describe('leftovers of killed runs', () => {
  const alive = (pid: number) => pid === 200;
  it("are the names of runs whose pid is gone, never this run's or a live one's", () => {
    expect(deadRunPid('kbpc100-node1', alive)).toBe(100);
    expect(deadRunPid('/kbpc100-node2', alive)).toBe(100);
    expect(deadRunPid('kbpc200-wire', alive)).toBeNull();
    expect(deadRunPid(`kbpc${process.pid}-cp`, () => false)).toBeNull();
    expect(deadRunPid('kbp100-node1', alive)).toBeNull();
    expect(deadRunPid('kbpc-try.mjs', alive)).toBeNull();
  });
});

describe("a cluster's addresses", () => {
  it('single-stack: IPv4 only, with the mask size flag of that family', () => {
    const families = clusterFamilies('ipv4');
    expect(families.map((f) => f.wireAddress(2))).toEqual(['10.250.0.2']);
    expect(controllerManagerArgs(families)).toEqual([
      '--allocate-node-cidrs=true',
      '--cluster-cidr=10.244.0.0/16',
      '--node-cidr-mask-size-ipv4=24',
      '--service-cluster-ip-range=10.96.0.0/16',
    ]);
  });

  it('dual-stack: IPv4 first, then IPv6, in every list', () => {
    const families = clusterFamilies('dual');
    expect(families.map((f) => f.wireAddress(11))).toEqual(['10.250.0.11', 'fd00:10:250::b']);
    expect(joined(families, 'clusterCIDR')).toBe('10.244.0.0/16,fd00:10:244::/56');
    expect(controllerManagerArgs(families)).toEqual([
      '--allocate-node-cidrs=true',
      '--cluster-cidr=10.244.0.0/16,fd00:10:244::/56',
      '--node-cidr-mask-size-ipv4=24',
      '--node-cidr-mask-size-ipv6=64',
      '--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112',
    ]);
  });

  it("a pod CIDR's route goes via the node's address of its family", () => {
    const ips = ['10.250.0.2', 'fd00:10:250::2'];
    expect(ofFamily(ips, 'fd00:10:244:1::/64')).toBe('fd00:10:250::2');
    expect(ofFamily(ips, '10.244.1.0/24')).toBe('10.250.0.2');
    expect(() => ofFamily(['10.250.0.2'], 'fd00:10:244::/64')).toThrow(/no address/);
  });

  it("a dual-stack node's CNI network gives pods an address and a default route of each family", () => {
    const ipam = JSON.parse(cniConfig(['10.244.1.0/24', 'fd00:10:244:1::/64'])).plugins[0].ipam;
    expect(ipam.ranges).toEqual([[{ subnet: '10.244.1.0/24' }], [{ subnet: 'fd00:10:244:1::/64' }]]);
    expect(ipam.routes).toEqual([{ dst: '0.0.0.0/0' }, { dst: '::/0' }]);
  });
});

// The values go through helm's --set parser, which splits at commas: the real helm renders them.
// helm is built by scripts/install-deps.sh helm: outside CI, where the unit tier alone builds
// nothing, this skips and says why; in CI a missing helm fails (test/unit/chart.test.ts's rule).
const helmMissing = !existsSync(HELM);
if (helmMissing && process.env.CI === 'true')
  throw new Error(`${HELM} is missing: run bash scripts/install-deps.sh helm`);
if (helmMissing)
  console.warn(`skipping the chart values test: ${HELM} is missing (bash scripts/install-deps.sh helm)`);

describe.skipIf(helmMissing)("the chart's values for the cluster", () => {
  const home = mkdtempSync(join(tmpdir(), `kbp-rc-helm-${process.pid}-`));
  afterAll(() => rmSync(home, { recursive: true, force: true }));

  it('reach the agent with both pod CIDRs of a dual-stack cluster', async () => {
    const image = { repository: 'registry.example/kube-bpf-proxy', tag: 't1' };
    const objects = await renderChart(
      home,
      chartValues('bpf', image, joined(clusterFamilies('dual'), 'clusterCIDR')),
    );
    const configMap = objects.find((o) => o.kind === 'ConfigMap' && o.data?.['config.conf']);
    const conf = parse(configMap?.data['config.conf']);
    expect(conf.clusterCIDR).toBe('10.244.0.0/16,fd00:10:244::/56');
    expect(conf.mode).toBe('bpf');
  }, 60_000);
});
