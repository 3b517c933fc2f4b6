// The agent against a real control plane (etcd, kube-apiserver and kube-controller-manager's
// EndpointSlice controllers, built by scripts/install-control-plane.sh): nothing here is written by
// hand but what a user and the kubelet write. Services, Pods and Nodes go through the API; the
// harness plays the kubelet for pods backed by network namespaces (podIP, Ready, deletion); the
// real controller writes every EndpointSlice (topology hints, terminating endpoints, several slices
// for more than 100 endpoints); the agent runs in bpf mode in node-a's namespace with a kubeconfig
// holding a ServiceAccount token bound to the chart's own ClusterRole (so RBAC is the chart's), and
// traffic from a pod on node-a follows every change, an API server restart and an etcd compaction.
//
//   c1, a1, a2 ── node-a 10.10.0.1 (zone-a, agent) ──┐
//                                                     ├── wire ── cp 10.10.0.200 (etcd, apiserver, KCM)
//   b1, b2, bulk ─ node-b 10.10.0.2 (zone-b) ────────┘        └── host (this process) on a /30
//
// Needs `npm run build` (agent, backends), helm (scripts/install-helm.sh) and the control plane.

import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { LabAgent } from '../../src/lab/agent.js';
import { type BuiltCluster, buildCluster } from '../../src/lab/cluster.js';
import { ControlPlane } from '../../src/lab/control-plane.js';
import { CHART, helm } from '../../src/lab/helm.js';
import {
  create,
  createNamespace,
  createNode,
  createPod,
  deletePod,
  type NodeFacts,
  objectPath,
  type PodFacts,
  setPodStatus,
  slicesOf,
} from '../../src/lab/kube-objects.js';
import { deleteStaleNamespaces, Lab, type RequestResult } from '../../src/lab/netns.js';
import { until } from '../../src/lab/until.js';
import { describeControlPlane } from '../support/control-plane.js';
import { type K8sObject, parseObjects } from '../support/helm.js';
import { PodAgent } from '../support/pod-agent.js';

const PREFIX = `hcp-rcp${process.pid}`;
const repo = (path: string) => fileURLToPath(new URL(`../../${path}`, import.meta.url));
const CLI = repo('dist/src/cli/main.js');
const ADDRESS_BACKEND = repo('test/support/address-backend.mjs');
const NS = 'hcp';
const BULK = 110;
const RELEASE = 'kbp';
const FULLNAME = 'kbp-kube-bpf-proxy';
/** What a user sets: the API server's real address (the chart requires it). */
const CHART_VALUES = ['k8sServiceHost=10.10.0.200', 'k8sServicePort=6443'];

const NODES: (NodeFacts & { zone: string })[] = [
  { name: 'node-a', ip: '10.10.0.1', podCIDR: '10.244.1.0/24', zone: 'zone-a' },
  { name: 'node-b', ip: '10.10.0.2', podCIDR: '10.244.2.0/24', zone: 'zone-b' },
];
const nodeIP = (name: string) => NODES.find((n) => n.name === name)?.ip ?? '';

/** Pods with a namespace (and a backend named after the pod) in the lab. */
const PODS = [
  { name: 'a1', ip: '10.244.1.10', node: 'node-a', app: 'web' },
  { name: 'a2', ip: '10.244.1.11', node: 'node-a', app: 'web' },
  { name: 'b1', ip: '10.244.2.10', node: 'node-b', app: 'web' },
  { name: 'b2', ip: '10.244.2.11', node: 'node-b', app: 'web' },
  { name: 'c1', ip: '10.244.1.50', node: 'node-a', app: 'client' },
];
const podFacts = (name: string): PodFacts => {
  const pod = PODS.find((p) => p.name === name);
  if (!pod) throw new Error(`no pod ${name}`);
  const labels: Record<string, string> = { app: pod.app, ...(name === 'b1' ? { solo: 'yes' } : {}) };
  return { name, namespace: NS, node: pod.node, nodeIP: nodeIP(pod.node), ip: pod.ip, labels };
};
const bulkIP = (i: number) => `10.244.2.${100 + i}`;
const bulkPod = (i: number): PodFacts => ({
  name: `bulk-${i}`,
  namespace: NS,
  node: 'node-b',
  nodeIP: nodeIP('node-b'),
  ip: bulkIP(i),
  labels: { app: 'bulk' },
});

function service(name: string, selector: Record<string, string>, annotations: Record<string, string> = {}) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: NS, annotations },
    spec: { selector, ports: [{ name: 'http', protocol: 'TCP', port: 80, targetPort: 8080 }] },
  };
}

const backendsOf = (results: RequestResult[]) =>
  [...new Set(results.map((r) => r.backend ?? `error:${r.error}`))].sort();

describeControlPlane(
  'the agent against a real control plane (etcd, kube-apiserver, EndpointSlice controller)',
  () => {
    const lab = new Lab(PREFIX);
    let cp: ControlPlane;
    let cluster: BuiltCluster;
    let agent: LabAgent | null = null;
    let kubeconfigPath = '';
    let helmHome = '';
    let helmKubeconfig = '';
    let installOutput = '';
    let podAgent: PodAgent | null = null;
    const clusterIPs = new Map<string, string>();

    const request = (svc: string, count: number, timeoutMs = 1500) =>
      lab.requests(cluster.podNs('c1'), `${clusterIPs.get(svc)}:80`, { proto: 'tcp', count, timeoutMs });

    /** Sends bursts until the answering set is `expected` (bounded: 30 s). */
    async function trafficReaches(svc: string, expected: string[], count = 24): Promise<void> {
      let last: string[] = [];
      try {
        await until(
          `${svc} answered by ${expected.join(',')}`,
          async () => {
            last = backendsOf(await request(svc, count));
            return JSON.stringify(last) === JSON.stringify([...expected].sort());
          },
          30_000,
        );
      } catch (error) {
        throw new Error(`${(error as Error).message}; last answers: ${last.join(',')}`);
      }
    }

    async function slicesSettle(
      svc: string,
      check: (endpoints: SliceEndpointView[]) => boolean,
    ): Promise<void> {
      let last: SliceEndpointView[] = [];
      try {
        await until(
          `EndpointSlices of ${svc}`,
          async () => {
            last = (await slicesOf(cp, NS, svc)).flatMap((s) =>
              (s.endpoints ?? []).map((e) => ({ slice: s.metadata.name, ...e })),
            );
            return check(last);
          },
          30_000,
        );
      } catch (error) {
        throw new Error(`${(error as Error).message}; last: ${JSON.stringify(last).slice(0, 2000)}`);
      }
    }

    beforeAll(async () => {
      await deleteStaleNamespaces(PREFIX);
      // Before any process starts: the lab's processes start in it, the agents' socket hooks go there.
      await lab.ownCgroup();
      cluster = await buildCluster(lab, {
        nodes: NODES,
        pods: PODS.map((p) => ({ name: p.name, ip: p.ip, node: p.node, tcpPorts: [8080], udpPorts: [] })),
        clients: [],
        clientRoutes: [],
      });
      await addBulkPodNamespace(lab, cluster);
      cp = await ControlPlane.start(lab, { wire: { ns: 'wire', bridge: 'br0', address: '10.10.0.200/24' } });
      // The control plane's host routes the pod CIDRs to their nodes, as a cluster's network does.
      for (const node of NODES) await lab.addRoute(cp.ns, node.podCIDR, 'via', node.ip);

      // The chart, installed for real: every object passes the API server's own validation, and its
      // ServiceAccount and ClusterRole are the agent's credentials.
      helmHome = join(cp.workDir, 'helm');
      helmKubeconfig = join(cp.workDir, 'admin.kubeconfig');
      writeFileSync(helmKubeconfig, cp.kubeconfig(cp.adminToken, cp.url));
      installOutput = await helm(helmHome, [
        'install',
        RELEASE,
        CHART,
        '-n',
        'kube-system',
        '--kubeconfig',
        helmKubeconfig,
        ...CHART_VALUES.flatMap((v) => ['--set', v]),
      ]);
      const daemonSet = await cp.api<K8sObject>(
        'GET',
        `/apis/apps/v1/namespaces/kube-system/daemonsets/${FULLNAME}`,
      );
      const account = daemonSet.spec.template.spec.serviceAccountName as string;
      const token = await cp.serviceAccountToken('kube-system', account);
      kubeconfigPath = join(cp.workDir, 'agent.kubeconfig');
      writeFileSync(kubeconfigPath, cp.kubeconfig(token));

      await createNamespace(cp, NS);
      for (const node of NODES) await createNode(cp, node);
      for (const pod of PODS) await createPod(cp, podFacts(pod.name));
      const services = [
        service('web', { app: 'web' }, { 'service.kubernetes.io/topology-mode': 'Auto' }),
        service('plain', { app: 'web' }),
        service('solo', { solo: 'yes' }),
      ];
      for (const svc of services) {
        const created = await create(cp, svc as never);
        clusterIPs.set(svc.metadata.name, created.spec.clusterIP);
      }

      agent = LabAgent.start(
        lab,
        cluster.nodeNs('node-a'),
        CLI,
        [
          '--kubeconfig',
          kubeconfigPath,
          '--hostname-override',
          'node-a',
          '--proxy-mode',
          'bpf',
          '--cluster-cidr',
          '10.244.0.0/16',
          '--min-sync-period',
          '200ms',
          // The lab's cgroup, which the private mounts bind here, as the chart's bpf.cgroupPath.
          '--bpf-cgroup-path',
          '/run/kube-bpf-proxy/cgroupv2',
        ],
        { bpffs: 'own' },
      );
      await agent.waitForSync(1, 60_000);
    });

    afterEach((context) => {
      if (context.task.result?.state === 'fail') {
        cp?.printLogs();
        console.log(`----- agent (last lines) -----\n${agent?.tail() ?? ''}`);
        if (podAgent) console.log(`----- chart agent (last lines) -----\n${podAgent.tail()}`);
      }
    });

    afterAll(async () => {
      await agent?.stop();
      await cp?.stop();
      await lab.destroy();
    });

    it('the controller wrote the slices and topology hints; traffic from zone-a stays in zone-a', async () => {
      await slicesSettle(
        'web',
        (eps) =>
          eps.length === 4 &&
          eps.every((e) => e.conditions.ready === true && e.hints?.forZones?.[0]?.name === e.zone),
      );
      // The agent lists (and watches) in protobuf, kube-proxy's default content type.
      const listed = (agent?.lines ?? []).filter((l) => l.msg === 'listed');
      expect(listed.length).toBeGreaterThanOrEqual(3);
      expect(new Set(listed.map((l) => l.contentType))).toEqual(
        new Set(['application/vnd.kubernetes.protobuf']),
      );
      await trafficReaches('plain', ['a1', 'a2', 'b1', 'b2']);
      await trafficReaches('web', ['a1', 'a2']);
      await trafficReaches('solo', ['b1']);
    });

    it('the kubernetes Service reaches the API server through the agent', async () => {
      const answer = await lab.exec(cluster.podNs('c1'), process.execPath, [
        '-e',
        `require('node:https').get({ host: '10.96.0.1', port: 443, path: '/readyz', rejectUnauthorized: false },
        (r) => { process.stdout.write(String(r.statusCode)); r.resume(); })
        .on('error', (e) => process.stdout.write('error ' + e.message))`,
      ]);
      // Anonymous requests are refused (401) by the real API server: it answered.
      expect(['200', '401', '403']).toContain(answer.stdout);
    });

    it('readiness flips: a pod that turns unready leaves, and comes back', async () => {
      await setPodStatus(cp, podFacts('b2'), false);
      await slicesSettle('plain', (eps) =>
        eps.some((e) => e.addresses[0] === podFacts('b2').ip && e.conditions.ready === false),
      );
      await trafficReaches('plain', ['a1', 'a2', 'b1']);
      await setPodStatus(cp, podFacts('b2'), true);
      await trafficReaches('plain', ['a1', 'a2', 'b1', 'b2']);
    });

    it('a deleted pod is terminating (serving, not ready): it gets no new traffic unless nothing else serves', async () => {
      await deletePod(cp, NS, 'b1', 600);
      await slicesSettle('solo', (eps) =>
        eps.some(
          (e) =>
            e.addresses[0] === podFacts('b1').ip &&
            e.conditions.terminating === true &&
            e.conditions.serving === true &&
            e.conditions.ready === false,
        ),
      );
      await trafficReaches('plain', ['a1', 'a2', 'b2']);
      // kube-proxy's fallback: with no ready endpoint left, serving terminating ones are used.
      await trafficReaches('solo', ['b1']);
      await deletePod(cp, NS, 'b1', 0);
      await slicesSettle('solo', (eps) => eps.length === 0);
      await trafficReaches('solo', ['error:ECONNREFUSED'], 4);
      // The kubelet would start a new pod; the harness brings b1 back under the same name and address.
      await createPod(cp, podFacts('b1'));
      await trafficReaches('solo', ['b1']);
      await trafficReaches('plain', ['a1', 'a2', 'b1', 'b2']);
    });

    it(`${BULK} endpoints: several slices, every endpoint reached`, async () => {
      await create(cp, service('bulk', { app: 'bulk' }) as never);
      clusterIPs.set(
        'bulk',
        (await cp.api<{ spec: { clusterIP: string } }>('GET', `/api/v1/namespaces/${NS}/services/bulk`)).spec
          .clusterIP,
      );
      for (let i = 0; i < BULK; i++) await createPod(cp, bulkPod(i));
      let sliceCount = 0;
      await slicesSettle('bulk', (eps) => {
        sliceCount = new Set(eps.map((e) => (e as SliceEndpointView).slice)).size;
        return eps.filter((e) => e.conditions.ready).length === BULK;
      });
      expect(sliceCount).toBeGreaterThanOrEqual(2);
      // The agent follows the slices a moment after the API server has them.
      await until(
        'the bulk Service answers',
        async () => (await request('bulk', 20)).every((r) => r.error === null),
        30_000,
      );
      // 600 random picks over 110 endpoints miss a given one with probability (109/110)^600 < 0.5 %.
      let seen = new Set<string>();
      await until(
        'every bulk endpoint answered',
        async () => {
          const results = await request('bulk', 300);
          expect(results.filter((r) => r.error !== null)).toEqual([]);
          for (const r of results) if (r.backend) seen.add(r.backend);
          return seen.size === BULK;
        },
        60_000,
      );
      // Down to 40: the removed ones get nothing.
      for (let i = 40; i < BULK; i++) await deletePod(cp, NS, `bulk-${i}`, 0);
      await slicesSettle('bulk', (eps) => eps.length === 40);
      await until(
        'only the 40 remaining bulk endpoints answer',
        async () => {
          seen = new Set((await request('bulk', 200)).map((r) => r.backend ?? 'error'));
          return [...seen].every((b) => Number(b.split('.')[3]) < 140) && seen.size > 30;
        },
        30_000,
      );
    });

    it('an API server restart loses nothing: traffic flows through it, and changes after it arrive', async () => {
      const during = request('plain', 400, 3000);
      await cp.restartApiServer();
      const results = await during;
      expect(results.filter((r) => r.error !== null)).toEqual([]);
      await setPodStatus(cp, podFacts('a2'), false);
      await trafficReaches('plain', ['a1', 'b1', 'b2']);
      await setPodStatus(cp, podFacts('a2'), true);
      await trafficReaches('plain', ['a1', 'a2', 'b1', 'b2']);
    });

    it('etcd compacted while the agent was away: its watch gets 410 Gone, it relists and catches up', async () => {
      const pid = agentPid(kubeconfigPath);
      const before = await cp.api<{ metadata: { resourceVersion: string } }>(
        'GET',
        `/api/v1/namespaces/${NS}/services`,
      );
      const linesBefore = agent?.lines.length ?? 0;
      process.kill(pid, 'SIGSTOP');
      try {
        // The API server goes away with the agent's watches; what changes next the agent never hears of.
        await cp.restartApiServer();
        await cp.api('DELETE', `/api/v1/namespaces/${NS}/services/solo`);
        await create(cp, service('late', { app: 'web' }) as never);
        clusterIPs.set(
          'late',
          (await cp.api<{ spec: { clusterIP: string } }>('GET', `/api/v1/namespaces/${NS}/services/late`))
            .spec.clusterIP,
        );
        const revision = await cp.compactEtcd();
        expect(revision).toBeGreaterThan(Number(before.metadata.resourceVersion));
        // A watch from before the compaction is refused with 410 Gone.
        const stale = await cp.request<{ code?: number; reason?: string }>(
          'GET',
          `/api/v1/namespaces/${NS}/services?watch=true&resourceVersion=${before.metadata.resourceVersion}&timeoutSeconds=1`,
        );
        expect(JSON.stringify(stale.body)).toMatch(/"code":410|Expired|too old/);
      } finally {
        process.kill(pid, 'SIGCONT');
      }
      await trafficReaches('late', ['a1', 'a2', 'b1', 'b2']);
      // solo was deleted while the agent was away: its ClusterIP leads nowhere now.
      await until(
        'the deleted solo Service no longer answers',
        async () => (await request('solo', 2, 1000)).every((r) => r.error !== null),
        30_000,
      );
      const relisted = (agent?.lines ?? [])
        .slice(linesBefore)
        .filter((l) => /410|expired/i.test(String(l.msg)) && l.kind === 'Service');
      expect(relisted.length).toBeGreaterThan(0);
    });

    it('helm install: the API server accepted every object of the chart', async () => {
      expect(installOutput).toMatch(/STATUS: deployed/);
      const manifest = parseObjects(
        await helm(helmHome, [
          'get',
          'manifest',
          RELEASE,
          '-n',
          'kube-system',
          '--kubeconfig',
          helmKubeconfig,
        ]),
      );
      expect(manifest.map((o) => o.kind).sort()).toEqual(
        ['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'DaemonSet', 'ServiceAccount'].sort(),
      );
      for (const object of manifest) {
        const namespace = object.metadata.namespace ?? 'kube-system';
        const stored = await cp.request(
          'GET',
          objectPath({ ...object, metadata: { ...object.metadata, namespace } }),
        );
        expect(stored.status, `${object.kind} ${object.metadata.name}`).toBe(200);
      }
    });

    /** Starts the agent exactly as the stored DaemonSet, ConfigMap and ServiceAccount say; waits for its first sync. */
    async function startChartAgent(): Promise<PodAgent> {
      const ds = await cp.api<K8sObject>(
        'GET',
        `/apis/apps/v1/namespaces/kube-system/daemonsets/${FULLNAME}`,
      );
      const configVolume = ds.spec.template.spec.volumes.find(
        (v: { configMap?: { name: string } }) => v.configMap,
      );
      const configMap = await cp.api<K8sObject>(
        'GET',
        `/api/v1/namespaces/kube-system/configmaps/${configVolume.configMap.name}`,
      );
      const token = await cp.serviceAccountToken('kube-system', ds.spec.template.spec.serviceAccountName);
      const started = PodAgent.start(lab, cluster.nodeNs('node-a'), {
        daemonSet: ds,
        configMap,
        nodeName: 'node-a',
        token,
        caPem: cp.caPem,
        cli: CLI,
        workDir: mkdtempSync(join(cp.workDir, 'pod-')),
      });
      podAgent = started;
      await started.waitForLine((l) => l.msg === 'synced', 60_000);
      return started;
    }

    async function configz(): Promise<string> {
      const { stdout } = await lab.exec(cluster.nodeNs('node-a'), process.execPath, [
        '-e',
        "fetch('http://127.0.0.1:10249/configz').then((r) => r.text()).then((t) => process.stdout.write(t), (e) => process.stdout.write(String(e)))",
      ]);
      return stdout;
    }

    it('the agent as the chart runs it (DaemonSet args, ConfigMap, in-cluster ServiceAccount) serves every Service', async () => {
      await agent?.stop();
      agent = null;
      const chartAgent = await startChartAgent();
      expect(chartAgent.args).toEqual([
        'run',
        '--config',
        '/etc/kube-bpf-proxy/config.conf',
        '--hostname-override=node-a',
      ]);
      expect(
        chartAgent.lines.some((l) => l.msg === 'connecting to the API server' && l.server === cp.nodeUrl),
      ).toBe(true);
      await trafficReaches('plain', ['a1', 'a2', 'b1', 'b2']);
      await trafficReaches('late', ['a1', 'a2', 'b1', 'b2']);
      await setPodStatus(cp, podFacts('b1'), false);
      await trafficReaches('plain', ['a1', 'a2', 'b2']);
      await setPodStatus(cp, podFacts('b1'), true);
      await trafficReaches('plain', ['a1', 'a2', 'b1', 'b2']);
    });

    it('helm upgrade: the server takes the new objects, and the agent restarted with them runs the new config', async () => {
      const before = await cp.api<K8sObject>(
        'GET',
        `/apis/apps/v1/namespaces/kube-system/daemonsets/${FULLNAME}`,
      );
      const output = await helm(helmHome, [
        'upgrade',
        RELEASE,
        CHART,
        '-n',
        'kube-system',
        '--kubeconfig',
        helmKubeconfig,
        '--reuse-values',
        '--set',
        'bpf.scheduler=maglev',
      ]);
      expect(output).toMatch(/REVISION: 2/);
      const after = await cp.api<K8sObject>(
        'GET',
        `/apis/apps/v1/namespaces/kube-system/daemonsets/${FULLNAME}`,
      );
      const checksum = (ds: K8sObject) => ds.spec.template.metadata.annotations['checksum/config'];
      expect(checksum(after)).not.toEqual(checksum(before));
      expect(Number(after.metadata.generation)).toBeGreaterThan(Number(before.metadata.generation));
      await podAgent?.stop();
      await startChartAgent();
      expect(await configz()).toContain('maglev');
      await trafficReaches('plain', ['a1', 'a2', 'b1', 'b2']);
    });
  },
);

interface SliceEndpointView {
  slice: string;
  addresses: string[];
  conditions: { ready?: boolean; serving?: boolean; terminating?: boolean };
  zone?: string;
  hints?: { forZones?: { name: string }[] };
}

/** The agent's pid: the node process whose command line names this run's kubeconfig. */
function agentPid(kubeconfigPath: string): number {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let cmdline = '';
    try {
      cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    const args = cmdline.split('\0');
    if (args.includes(kubeconfigPath) && args.includes('run') && args[0]?.endsWith('node'))
      return Number(entry);
  }
  throw new Error(`no agent process with ${kubeconfigPath}`);
}

/**
 * One namespace behind node-b holding BULK pod addresses (each a /32 routed to it, as CNIs route
 * pods) with one backend answering on all of them with the address it was reached at.
 */
async function addBulkPodNamespace(lab: Lab, cluster: BuiltCluster): Promise<void> {
  const node = cluster.nodeNs('node-b');
  await lab.addNamespace('p-bulk');
  await lab.link('p-bulk', 'eth0', node, 'vethbulk');
  await lab.addAddress(node, 'vethbulk', '10.244.2.1/32');
  await lab.addRoute('p-bulk', '10.244.2.1', 'dev', 'eth0', 'scope', 'link');
  await lab.addRoute('p-bulk', 'default', 'via', '10.244.2.1', 'dev', 'eth0');
  const podSide: string[] = [];
  const nodeSide: string[] = [];
  for (let i = 0; i < BULK; i++) {
    podSide.push(`addr add ${bulkIP(i)}/32 dev eth0`);
    nodeSide.push(`route add ${bulkIP(i)}/32 dev vethbulk`);
  }
  await lab.exec('p-bulk', 'ip', ['-batch', '-'], { input: `${podSide.join('\n')}\n` });
  await lab.exec(node, 'ip', ['-batch', '-'], { input: `${nodeSide.join('\n')}\n` });
  const backend = lab.spawn('p-bulk', process.execPath, [ADDRESS_BACKEND, '8080']);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the bulk backend did not start')), 10_000);
    backend.stdout?.on('data', (d: Buffer) => {
      if (d.toString().includes('listening')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}
