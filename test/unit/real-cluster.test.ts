// The real cluster harness's decisions (src/lab/real-cluster/): which specs run, which of a junit
// report's test cases are results, which hierarchies get a node's cgroup, which leftovers are stale.

import { describe, expect, it } from 'vitest';
import { cgroupHierarchies } from '../../src/lab/real-cluster/cgroups.js';
import {
  countResults,
  DEFAULT_SKIP,
  narrowFocus,
  parseJunit,
  SERVICES_FOCUS,
} from '../../src/lab/real-cluster/e2e.js';
import { deadRunPid } from '../../src/lab/real-cluster/stale.js';

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
const selected = (focus: string) =>
  SPECS.filter((s) => new RegExp(focus).test(s) && !new RegExp(DEFAULT_SKIP).test(s));

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
