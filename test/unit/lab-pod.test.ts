// The chart's DaemonSet as the real-node lab runs it in podman (chartPodManifest, src/lab/pod.ts):
// each translation its header lists, on what `helm template` renders with the chart's defaults.

import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HELM } from '../../src/lab/helm.js';
import { chartPodManifest } from '../../src/lab/pod.js';
import { renderChart } from '../../src/lab/real-node-chart.js';

// As test/unit/chart.test.ts: helm is built by scripts/install-deps.sh helm, which the unit tier
// alone does not run, so these tests skip there and say why; in CI a missing helm is a failure.
const helmMissing = !existsSync(HELM);
if (helmMissing && process.env.CI === 'true')
  throw new Error(`${HELM} is missing: run bash scripts/install-deps.sh helm`);
if (helmMissing)
  console.warn(`skipping the lab pod tests: ${HELM} is missing (bash scripts/install-deps.sh helm)`);
const describeHelm = helmMissing ? describe.skip : describe;

// biome-ignore lint/suspicious/noExplicitAny: rendered manifests are untyped YAML, asserted field by field
type Manifest = Record<string, any>;

describeHelm("the chart's pod as the real-node lab runs it", () => {
  let workDir = '';
  beforeAll(() => {
    workDir = mkdtempSync(join(tmpdir(), `kbp-lab-pod-${process.pid}-`));
  });
  afterAll(() => rmSync(workDir, { recursive: true, force: true }));

  it("mounts the node's own cgroup where the chart mounts the host's hierarchy, the other hostPaths under the node's root", async () => {
    const { daemonSet } = await renderChart('bpf', workDir);
    const nodeRoot = join(workDir, 'node-a');
    const hostCgroup = '/sys/fs/cgroup/unified/kbp-real-node-1-lab/node-a';
    const { pod } = chartPodManifest(daemonSet, {
      name: 'lab-node-a',
      node: 'node-a',
      nodeRoot,
      hostCgroup,
      serviceAccountDir: '/lab/serviceaccount',
    });
    const hostPaths = new Map<string, Manifest>(
      (pod.spec.volumes as Manifest[]).filter((v) => v.hostPath).map((v) => [v.name, v.hostPath]),
    );
    expect(hostPaths.get('cgroup2')?.path).toBe(hostCgroup);
    expect(hostPaths.get('kube-api-access')?.path).toBe('/lab/serviceaccount');
    const others = [...hostPaths].filter(([name]) => name !== 'cgroup2' && name !== 'kube-api-access');
    expect(others.length).toBeGreaterThan(0);
    for (const [, hostPath] of others) {
      expect(hostPath.path.startsWith(`${nodeRoot}/`)).toBe(true);
      // Created as the kubelet would: a file for FileOrCreate, a directory otherwise.
      expect(statSync(hostPath.path).isFile()).toBe(hostPath.type === 'FileOrCreate');
    }
  });

  it('gives podman what it takes: the node name, no ports or probes, seccomp as an annotation, short annotations', async () => {
    const { daemonSet } = await renderChart('bpf', workDir);
    const template = daemonSet.spec.template.spec.containers[0] as Manifest;
    const dropped = template.securityContext.capabilities.add[0] as string;
    const { pod, probes, capabilities } = chartPodManifest(daemonSet, {
      name: 'lab-node-b',
      node: 'node-b',
      nodeRoot: join(workDir, 'node-b'),
      hostCgroup: '/sys/fs/cgroup/unified/kbp-real-node-1-lab/node-b',
      serviceAccountDir: '/lab/serviceaccount',
      dropCapabilities: [dropped],
    });
    expect(pod.spec.nodeName).toBe('node-b');
    const containers = [...(pod.spec.initContainers ?? []), ...pod.spec.containers] as Manifest[];
    for (const container of containers) {
      expect(container.ports).toBeUndefined();
      for (const kind of ['startup', 'liveness', 'readiness'])
        expect(container[`${kind}Probe`]).toBeUndefined();
      expect(container.securityContext?.seccompProfile).toBeUndefined();
      // $(VAR) of the container's env expanded (a shell's $(command) is not one).
      const words = JSON.stringify([container.command, container.args]);
      for (const env of container.env ?? []) expect(words).not.toContain(`$(${env.name})`);
    }
    expect(pod.spec.containers[0].args).toContain('--hostname-override=node-b');
    // The agent's probes come back for the lab to run as the kubelet does.
    expect(probes.map((p) => p.kind).sort()).toEqual(['liveness', 'readiness', 'startup']);
    expect(capabilities).not.toContain(dropped);
    const annotations = pod.metadata.annotations as Record<string, string>;
    expect(annotations['io.podman.annotations.init.container.type']).toBe('always');
    expect(annotations['container.seccomp.security.alpha.kubernetes.io/kube-bpf-proxy']).toBe('unconfined');
    expect(Object.values(annotations).every((v) => v.length <= 63)).toBe(true);
  });
});
