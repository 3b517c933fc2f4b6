import { afterAll, expect, it } from 'vitest';
import { type DemoReport, runDemo } from '../../src/cli/demo.js';
import type { ProxyMode } from '../../src/config/types.js';
import { describeRoot } from '../support/privileges.js';

// The demo end to end: manifests -> one `run` agent per node namespace -> the data plane -> real
// TCP and UDP traffic from pods and outside clients. Needs `npm run build` (agents run dist/).

function backendsOf(report: DemoReport, title: string): string[] {
  const step = report.steps.find((s) => s.step.title.startsWith(title));
  if (!step) throw new Error(`no demo step "${title}"`);
  return step.results.map((r) => r.backend ?? `error:${r.error}`);
}

function checkSemantics(report: DemoReport, mode: ProxyMode): void {
  // Zone hints of demo/web keep node-a's pods on zone-a's endpoints.
  const web = backendsOf(report, 'ClusterIP demo/web from');
  expect(new Set(web)).toEqual(new Set(['pod-10.244.1.10', 'pod-10.244.1.11']));
  // demo/web is dual-stack: its IPv6 ClusterIP reaches the same pods over IPv6 (their IPv6 slice's
  // zone hints), and a ClusterIP from a pod keeps the client's (IPv6) address in every mode.
  const web6 = report.steps.find((s) => s.step.title.startsWith('ClusterIP demo/web over IPv6'))!;
  expect(web6.step.target).toBe('[fd00:96::a]:80');
  expect(new Set(web6.results.map((r) => r.backend ?? `error:${r.error}`))).toEqual(
    new Set(['pod-10.244.1.10', 'pod-10.244.1.11']),
  );
  expect(web6.results.map((r) => r.seenClient?.replace(/:\d+$/, ''))).toEqual(
    web6.results.map(() => 'fd00:244:0:1::1e'),
  );
  expect(new Set(backendsOf(report, 'ClusterIP demo/dns')).size).toBeGreaterThanOrEqual(1);
  expect(backendsOf(report, 'ClusterIP demo/dns').every((b) => b.startsWith('pod-10.244.'))).toBe(true);
  const nodePort = report.steps.find((s) => s.step.title.startsWith('NodePort'))!.results;
  expect(nodePort.every((r) => r.backend !== null)).toBe(true);
  if (mode === 'bpf') {
    // bpf SNATs external traffic only towards other nodes' backends, so replies come back
    // through this node; local backends see the client.
    const remote = nodePort.filter((r) => r.backend?.startsWith('pod-10.244.2.'));
    expect(remote.every((r) => r.seenClient?.startsWith('10.10.0.1:'))).toBe(true);
  } else {
    // kube-proxy masquerades eTP=Cluster traffic from outside: no backend sees the client's address.
    expect(nodePort.every((r) => !r.seenClient?.startsWith('192.0.2.100:'))).toBe(true);
  }
  const lb = report.steps.find((s) => s.step.title.startsWith('LB IP 198.51.100.10 (eTP=Local)'))!.results;
  expect(lb.every((r) => r.backend === 'pod-10.244.1.10' || r.backend === 'pod-10.244.1.11')).toBe(true);
  // eTP=Local keeps the client's source address.
  expect(lb.every((r) => r.seenClient?.startsWith('192.0.2.100:'))).toBe(true);
  expect(backendsOf(report, 'LB IP 198.51.100.10 from a source outside')).toEqual([
    'error:timeout',
    'error:timeout',
  ]);
  expect(new Set(backendsOf(report, 'ClientIP affinity')).size).toBe(1);
  expect(backendsOf(report, 'demo/empty')).toEqual(['error:ECONNREFUSED', 'error:ECONNREFUSED']);
}

describeRoot('demo', () => {
  const lines: string[] = [];
  afterAll(() => {
    if (lines.length) console.log(lines.join('\n'));
  });
  for (const mode of ['bpf', 'iptables', 'nftables'] as ProxyMode[]) {
    it(`shows kube-proxy semantics with real traffic in ${mode} mode`, async () => {
      const report = await runDemo({
        mode,
        manifests: 'examples/manifests',
        out: (line) => lines.push(line),
      });
      checkSemantics(report, mode);
      if (mode === 'bpf') {
        expect(report.list).toMatch(/TCP\/10\.96\.0\.10:80\s+ClusterIP\s+demo\/web:http/);
        expect(report.list).toMatch(/TCP\/\[fd00:96::a\]:80\s+ClusterIP\s+demo\/web:http/);
      }
    });
  }
});
