import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Lab, type RequestResult } from '../../src/lab/netns.js';
import { Podman } from '../../src/lab/pod.js';
import { RealNodeLab } from '../../src/lab/real-node.js';
import type { LabService } from '../../src/lab/real-node-objects.js';
import { REAL_NODES } from '../../src/lab/real-node-plan.js';
import type { FakeApiServer } from '../support/fake-apiserver.js';
import { apiAddress, describeImage, fakeApiServerWith } from '../support/image.js';

// Issue 17: the chart's pod (src/lab/pod.ts) on the real-shaped nodes of src/lab/real-node.ts.
// - Least privilege: node-a's pod run again with each capability of the chart's list removed in
//   turn; a capability is needed when the agent then fails to start or traffic fails. Each run
//   starts from an empty bpffs (the init container mounts a fresh one), so nothing the previous
//   agent pinned can make a crippled agent look healthy.
// - Upgrade in place: node-a's pod replaced by one of a newer image build (KBP_IMAGE_NEXT), as
//   the DaemonSet's rolling update does it (old pod deleted, new one created), under continuous
//   traffic through node-a from a pod (tc), from the node itself (socket hooks) and from outside
//   (NodePort): no request may fail.
// The same reading of results as the agent-restart test of test/e2e/bpf.test.ts.

const failures = (results: RequestResult[]) => results.filter((r) => r.error !== null);

const NODE_A = REAL_NODES[0]!;
const NODE_B = REAL_NODES[1]!;
const HTTP = 8080;
const DNS = 5353;
const PODS = [
  { name: 'a1', node: NODE_A.name, tcpPorts: [HTTP], udpPorts: [DNS] },
  { name: 'a2', node: NODE_A.name, tcpPorts: [HTTP], udpPorts: [DNS] },
  { name: 'b2', node: NODE_B.name, tcpPorts: [HTTP], udpPorts: [DNS] },
];
const SERVICES: LabService[] = [
  {
    name: 'both',
    type: 'ClusterIP',
    clusterIP: '10.96.1.3',
    ports: [
      { name: 'http', protocol: 'TCP', port: 80, targetPort: HTTP },
      { name: 'dns', protocol: 'UDP', port: 53, targetPort: DNS },
    ],
    endpoints: [{ pod: 'a2' }, { pod: 'b2' }],
  },
  {
    name: 'np-cluster',
    type: 'NodePort',
    clusterIP: '10.96.1.4',
    ports: [{ name: 'http', protocol: 'TCP', port: 80, targetPort: HTTP, nodePort: 30080 }],
    endpoints: [{ pod: 'a2' }, { pod: 'b2' }],
  },
];

interface Check {
  what: string;
  ns: (nodes: RealNodeLab) => string;
  target: string;
  proto: 'tcp' | 'udp';
}
/** Traffic through node-a on each path the agent programs. */
const CHECKS: Check[] = [
  { what: 'pod → ClusterIP (tc)', ns: (n) => n.podNs('a1'), target: '10.96.1.3:80', proto: 'tcp' },
  { what: 'pod → ClusterIP UDP (tc)', ns: (n) => n.podNs('a1'), target: '10.96.1.3:53', proto: 'udp' },
  {
    what: 'node → ClusterIP (socket hooks)',
    ns: (n) => n.nodeNs(NODE_A.name),
    target: '10.96.1.3:80',
    proto: 'tcp',
  },
  { what: 'outside → NodePort (XDP/tc)', ns: (n) => n.clientNs, target: `${NODE_A.ip}:30080`, proto: 'tcp' },
];

async function buildLab(prefix: string): Promise<{ lab: Lab; nodes: RealNodeLab; api: FakeApiServer }> {
  const lab = new Lab(prefix);
  const nodes = new RealNodeLab(lab);
  await nodes.build({ pods: PODS, hostServers: [], loadBalancerRoutes: [] });
  const api = await fakeApiServerWith(nodes.objects(SERVICES));
  return { lab, nodes, api };
}

function loadImage(archive: string | undefined): string {
  const out = execFileSync('podman', ['load', '--quiet', '--input', archive ?? ''], { encoding: 'utf8' });
  const tag = /:([^:\s]+)\s*$/.exec(out.trim())?.[1];
  if (!tag) throw new Error(`podman load printed no image tag: ${out}`);
  return tag;
}

describeImage(['KBP_IMAGE'])('the image scripts/build-image.sh writes', () => {
  const archive = process.env.KBP_IMAGE ?? '';
  let tag = '';
  beforeAll(() => {
    tag = loadImage(archive);
  });
  // podman with the lab's containers.conf (this host's ulimits, runc).
  const podmanDir = mkdtempSync(join(tmpdir(), 'him-image-'));
  const podman = new Podman(podmanDir);
  afterAll(() => rmSync(podmanDir, { recursive: true, force: true }));
  const inImage = async (script: string) =>
    (
      await podman.run([
        'run',
        '--rm',
        '--network',
        'none',
        '--entrypoint',
        '/bin/sh',
        `kube-bpf-proxy:${tag}`,
        '-c',
        script,
      ])
    ).stdout;

  it('is at most 80 MB compressed', () => {
    // The archive is the compressed layers plus a few kB of JSON.
    const bytes = statSync(archive).size;
    console.log(`image archive: ${(bytes / 1e6).toFixed(1)} MB`);
    expect(bytes).toBeLessThanOrEqual(80e6);
  });

  it('holds no package manager, no compiler, and no bench, demo, lab or test code', async () => {
    const found = (
      await inImage(
        'for t in apt apt-get dpkg perl gcc cc clang make python3 npm npx; do command -v $t; done; ls /opt/kube-bpf-proxy/dist; true',
      )
    )
      .trim()
      .split('\n');
    // dist/ holds what tsconfig.build.json compiles from main.ts: the agent's commands, never the
    // bench's (dist/bench) nor the demo's and the lab's (src/cli/demo.js, src/lab).
    expect(found.sort()).toEqual(['native', 'src']);
    const tools = await inImage('ls /opt/kube-bpf-proxy/dist/src /opt/kube-bpf-proxy/dist/src/cli');
    expect(tools.split('\n')).not.toContain('lab');
    expect(tools.split('\n')).not.toContain('demo.js');
  });

  it('runs the CLI and has every program the agent runs', async () => {
    expect(await inImage('kube-bpf-proxy version --output json')).toContain(`"version":"${tag}"`);
    const missing = await inImage(
      'for t in ip tc iptables-legacy iptables-nft iptables-legacy-restore iptables-nft-save ip6tables-legacy nft ipset ipvsadm conntrack nfacct sysctl setpriv uname modprobe mount stat; do command -v $t >/dev/null || echo $t; done',
    );
    expect(missing.trim()).toBe('');
  });
});

describeImage(['KBP_IMAGE'])("least privilege: the chart's pod with each capability removed", () => {
  let lab: Lab;
  let nodes: RealNodeLab;
  let api: FakeApiServer;
  let chartCapabilities: string[] = [];
  const table: {
    capability: string;
    agentStarted: boolean;
    traffic: string;
    needed: boolean;
    why: string;
  }[] = [];

  beforeAll(async () => {
    loadImage(process.env.KBP_IMAGE);
    ({ lab, nodes, api } = await buildLab(`him-cap${process.pid}`));
    await nodes.startPods('bpf', { api: apiAddress(api), nodes: [NODE_A.name] });
    chartCapabilities = nodes.chartPods.get(NODE_A.name)!.capabilities;
  }, 240_000);

  afterAll(async () => {
    console.log(
      `capabilities of the chart's agent container, each removed in turn:\n${JSON.stringify(table, null, 1)}`,
    );
    await nodes?.destroy();
    await api?.stop();
  });

  it('all of them: the agent starts and every path carries traffic', async () => {
    expect(chartCapabilities).toEqual(expect.arrayContaining(['BPF', 'NET_ADMIN', 'PERFMON']));
    // What the agent's process holds: exactly these (no SYS_RESOURCE: kernels from 5.11 charge BPF
    // maps to the memory cgroup, and this host's container runtime could not grant it anyway).
    const chartPod = nodes.chartPods.get(NODE_A.name)!;
    const effective = execFileSync(
      'podman',
      ['inspect', '--format', '{{range .EffectiveCaps}}{{.}} {{end}}', chartPod.agentContainer],
      { encoding: 'utf8', env: chartPod.podman.env },
    );
    expect(effective.trim().split(' ').sort()).toEqual(['CAP_BPF', 'CAP_NET_ADMIN', 'CAP_PERFMON']);
    for (const check of CHECKS) {
      const results = await lab.requests(check.ns(nodes), check.target, { proto: check.proto, count: 10 });
      expect(failures(results), check.what).toEqual([]);
    }
  });

  it('each removed in turn', async () => {
    for (const capability of chartCapabilities) {
      await nodes.chartPods.get(NODE_A.name)!.stop(10);
      await nodes.resetNodeBpffs(NODE_A.name);
      let agentStarted = true;
      let why = '';
      try {
        await nodes.startPods('bpf', {
          api: apiAddress(api),
          nodes: [NODE_A.name],
          dropCapabilities: [capability],
          syncTimeoutMs: 45_000,
        });
      } catch (err) {
        agentStarted = false;
        why =
          (err as Error).message
            .split('\n')
            .filter((line) => /error|denied|not permitted|EPERM|kube-bpf-proxy:/i.test(line))
            .slice(-2)
            .join(' | ')
            .slice(0, 300) || (err as Error).message.slice(0, 300);
      }
      const failed: string[] = [];
      if (agentStarted) {
        for (const check of CHECKS) {
          const results = await lab.requests(check.ns(nodes), check.target, {
            proto: check.proto,
            count: 10,
            timeoutMs: 1000,
          });
          if (failures(results).length) failed.push(`${check.what}: ${failures(results).length}/10 failed`);
        }
      }
      table.push({
        capability,
        agentStarted,
        traffic: agentStarted ? (failed.length ? failed.join('; ') : 'all paths pass') : 'not tried',
        needed: !agentStarted || failed.length > 0,
        why,
      });
    }
    const needed = table.filter((row) => row.needed).map((row) => row.capability);
    // What docs/install.md records, proven again on every run.
    expect(needed.sort()).toEqual(['BPF', 'NET_ADMIN', 'PERFMON']);
  }, 600_000);
});

describeImage(['KBP_IMAGE', 'KBP_IMAGE_NEXT'])(
  "upgrade in place: the chart's pod replaced by a newer image's",
  () => {
    let lab: Lab;
    let nodes: RealNodeLab;
    let api: FakeApiServer;
    let nextTag = '';

    beforeAll(async () => {
      loadImage(process.env.KBP_IMAGE);
      nextTag = loadImage(process.env.KBP_IMAGE_NEXT);
      ({ lab, nodes, api } = await buildLab(`him-up${process.pid}`));
      await nodes.startPods('bpf', { api: apiAddress(api) });
    }, 240_000);

    afterAll(async () => {
      await nodes?.destroy();
      await api?.stop();
    });

    it('traffic through the node keeps flowing: zero failed requests', async () => {
      let upgraded = false;
      let upgradedAt = Number.POSITIVE_INFINITY;
      const startedAt = Date.now();
      const traffic = Promise.all(
        CHECKS.map(async (check) => {
          const results: RequestResult[] = [];
          // Batches until the new pod has synced and 2 s more; bounded.
          for (let batch = 0; batch < 400 && !(upgraded && Date.now() > upgradedAt + 2000); batch++) {
            results.push(
              ...(await lab.requests(check.ns(nodes), check.target, {
                proto: check.proto,
                count: 100,
                timeoutMs: 3000,
              })),
            );
          }
          return results;
        }),
      );
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const old = nodes.chartPods.get(NODE_A.name)!;
      const deleting = Date.now();
      await old.stop(10);
      const deleted = Date.now();
      await nodes.startPods('bpf', {
        api: apiAddress(api),
        nodes: [NODE_A.name],
        set: [`image.tag=${nextTag}`],
      });
      upgradedAt = Date.now();
      upgraded = true;
      const results = await traffic;
      const newPod = nodes.chartPods.get(NODE_A.name)!;
      const version = execFileSync(
        'podman',
        ['exec', newPod.agentContainer, 'kube-bpf-proxy', 'version', '--output', 'json'],
        { encoding: 'utf8', env: newPod.podman.env },
      );
      const loaded = newPod.lines.find((line) => line.msg === 'bpf programs loaded');
      const summary = {
        oldPodDeletedMs: deleted - deleting,
        withoutAgentMs: upgradedAt - deleted,
        trafficMs: Date.now() - startedAt,
        requests: Object.fromEntries(CHECKS.map((c, i) => [c.what, results[i]?.length ?? 0])),
        failed: Object.fromEntries(CHECKS.map((c, i) => [c.what, failures(results[i] ?? []).length])),
        newVersion: JSON.parse(version).version,
        reusedMaps: loaded?.reusedMaps,
      };
      console.log(`upgrade under traffic: ${JSON.stringify(summary)}`);
      expect(JSON.parse(version).version).toBe(nextTag);
      for (const [i, check] of CHECKS.entries()) {
        expect(failures(results[i] ?? []), check.what).toEqual([]);
        expect(results[i]?.length ?? 0, check.what).toBeGreaterThan(100);
      }
      // The new agent took over the old one's pinned maps (connections keep their backends).
      expect(Number(loaded?.reusedMaps)).toBeGreaterThan(0);
    }, 300_000);
  },
);
