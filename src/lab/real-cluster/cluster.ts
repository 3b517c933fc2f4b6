// A real two-node Kubernetes v1.37.2 cluster on this machine, as kubeadm would leave it but with no
// kube-proxy: the project's control plane (etcd, kube-apiserver, kube-controller-manager with every
// controller and pod CIDR allocation) plus kube-scheduler in one network namespace; two nodes
// (node.ts), node1 on Debian's containerd 1.6 and node2 on containerd 2.4, on one wire (a bridge in
// a namespace of its own) with routes to each other's pod CIDRs; the pause, agnhost and CoreDNS
// images and the agent's imported into each node's containerd. Single-stack IPv4 or dual-stack
// (addresses.ts): dual-stack gives the Services, the pods and the nodes an address of each family. Nothing is set up in the root
// network namespace but the control plane's management link (src/lab/control-plane.ts), which
// the harness, kubectl and helm use. down() removes all of it; removeStale() what a killed run left.

import { randomBytes } from 'node:crypto';
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ControlPlane, type StaticToken } from '../control-plane.js';
import { Lab } from '../netns.js';
import { until } from '../until.js';
import {
  anyRoute,
  clusterFamilies,
  controllerManagerArgs,
  type FamilyAddresses,
  type IpFamilyMode,
  joined,
  ofFamily,
} from './addresses.js';
import { ClusterNode } from './node.js';
import type { NodeSpec, Runtime } from './node-config.js';
import type { ClusterParts } from './parts.js';

/** kube-dns's ClusterIP, the kubelets' clusterDNS: IPv4 in either mode (kubeadm's is single-stack). */
export const CLUSTER_DNS = '10.96.0.10';
/** The API server's address on the wire, the control plane's IPv4 one (it advertises one). */
export const API_SERVER_IP = clusterFamilies('ipv4')[0]?.wireAddress(1) as string;
const RUNTIMES: Runtime[] = ['containerd-1.6', 'containerd-2.4'];
/** Names of the run's namespaces, cgroups and state directories start with this, then the pid. */
export const RUN_PREFIX = 'kbpc';

interface NodeObject {
  metadata: { name: string };
  spec: { podCIDRs?: string[] };
  status?: { conditions?: { type: string; status: string }[] };
}

export class RealCluster {
  readonly lab: Lab;
  readonly stateDir: string;
  readonly nodes: ClusterNode[];
  /** kube-proxy's static token (user system:kube-proxy, which kubeadm's RBAC binds to system:node-proxier). */
  readonly kubeProxyToken = randomBytes(16).toString('hex');
  private readonly nodeTokens: StaticToken[];
  cp: ControlPlane | null = null;

  readonly families: FamilyAddresses[];

  constructor(
    readonly parts: ClusterParts,
    readonly ipFamily: IpFamilyMode = 'ipv4',
  ) {
    this.families = clusterFamilies(ipFamily);
    this.lab = new Lab(`${RUN_PREFIX}${process.pid}`);
    this.stateDir = mkdtempSync(join(tmpdir(), `${RUN_PREFIX}${process.pid}-`));
    const specs: NodeSpec[] = RUNTIMES.map((runtime, i) => ({
      name: `node${i + 1}`,
      ips: this.families.map((f) => f.wireAddress(i + 2)),
      runtime,
      stateDir: join(this.stateDir, `node${i + 1}`),
      cgroupRoot: `/${RUN_PREFIX}${process.pid}-node${i + 1}`,
    }));
    this.nodes = specs.map((spec) => new ClusterNode(spec, this.lab, parts));
    // The kubelet's identity as the Node authorizer knows it.
    this.nodeTokens = specs.map((spec) => ({
      token: randomBytes(16).toString('hex'),
      user: `system:node:${spec.name}`,
      groups: ['system:nodes'],
    }));
  }

  /** The pod CIDRs, comma-separated (kube-proxy's clusterCIDR, the chart's config.clusterCIDR). */
  get clusterCIDRs(): string {
    return joined(this.families, 'clusterCIDR');
  }

  get controlPlane(): ControlPlane {
    if (!this.cp) throw new Error('the control plane is not running');
    return this.cp;
  }

  /** An admin kubeconfig file for this process (server: the management link) or the wire's side. */
  adminKubeconfig(side: 'host' | 'wire'): string {
    const cp = this.controlPlane;
    const path = join(this.stateDir, `admin-${side}.kubeconfig`);
    writeFileSync(path, cp.kubeconfig(cp.adminToken, side === 'host' ? cp.url : cp.nodeUrl));
    return path;
  }

  /** Everything up to Ready nodes whose containerd holds the images. */
  async up(images: string[]): Promise<void> {
    await this.wire();
    await this.startControlPlane();
    const cp = this.controlPlane;
    for (const node of this.nodes) {
      await this.joinWire(node);
      const { token } = this.nodeTokens.find(
        (t) => t.user === `system:node:${node.spec.name}`,
      ) as StaticToken;
      node.prepare(cp.kubeconfig(token, cp.nodeUrl), CLUSTER_DNS);
      node.start();
    }
    await Promise.all(
      this.nodes.map(async (node) => {
        await node.waitForRuntime();
        for (const image of images) await node.importImage(image);
      }),
    );
    await this.podNetwork();
    await this.waitForReadyNodes();
  }

  private async wire(): Promise<void> {
    await this.lab.addNamespace('wire');
    await this.lab.exec('wire', 'ip', ['link', 'add', 'br0', 'type', 'bridge']);
    await this.lab.exec('wire', 'ip', ['link', 'set', 'br0', 'up']);
  }

  private async startControlPlane(): Promise<void> {
    const [primary, ...secondary] = this.families as [FamilyAddresses, ...FamilyAddresses[]];
    this.cp = await ControlPlane.start(this.lab, {
      wire: { ns: 'wire', bridge: 'br0', address: `${primary.wireAddress(1)}/${primary.wirePrefix}` },
      serviceCIDRs: this.families.map((f) => f.serviceCIDR),
      // As kubeadm: the API server reaches kubelets (logs, exec) at the node's address, not by a
      // host name nothing here resolves.
      apiServerArgs: ['--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname'],
      authorizationModes: 'Node,RBAC',
      tokens: [...this.nodeTokens, { token: this.kubeProxyToken, user: 'system:kube-proxy', groups: [] }],
      controllers: '*',
      controllerManagerArgs: controllerManagerArgs(this.families),
    });
    // The control plane's side of the wire in the other family: the nodes' default route of that
    // family, and where the e2e tests reach pods from.
    for (const f of secondary)
      await this.lab.addAddress(this.cp.ns, 'eth0', `${f.wireAddress(1)}/${f.wirePrefix}`);
    const kubeconfig = join(this.stateDir, 'scheduler.kubeconfig');
    writeFileSync(kubeconfig, this.cp.kubeconfig(this.cp.adminToken, 'https://127.0.0.1:6443'));
    this.cp.startComponent('kube-scheduler', join(this.parts.dirs.node, 'kube-scheduler'), [
      `--kubeconfig=${kubeconfig}`,
      `--authentication-kubeconfig=${kubeconfig}`,
      `--authorization-kubeconfig=${kubeconfig}`,
      '--leader-elect=false',
      '--bind-address=127.0.0.1',
      '--secure-port=10259',
    ]);
  }

  /**
   * The node's link to the wire, its address and a default route via the control plane's address
   * in each family (a node has one; kube-proxy's iptables rules need a route to a ClusterIP before
   * they rewrite it), and the sysctls kubeadm's preflight asks for (the IPv6 ones too when the
   * cluster is dual-stack).
   */
  private async joinWire(node: ClusterNode): Promise<void> {
    const { name, ips } = node.spec;
    await this.lab.addNamespace(name);
    await this.lab.link(name, 'eth0', 'wire', `w-${name}`);
    await this.lab.exec('wire', 'ip', ['link', 'set', `w-${name}`, 'master', 'br0']);
    for (const [i, f] of this.families.entries()) {
      await this.lab.addAddress(name, 'eth0', `${ips[i]}/${f.wirePrefix}`);
      await this.lab.addRoute(name, anyRoute(f.clusterCIDR), 'via', f.wireAddress(1));
    }
    await this.lab.sysctl(name, 'net.ipv4.ip_forward', '1');
    await this.lab.sysctl(name, 'net.bridge.bridge-nf-call-iptables', '1');
    if (this.families.length > 1) {
      await this.lab.sysctl(name, 'net.ipv6.conf.all.forwarding', '1');
      await this.lab.sysctl(name, 'net.bridge.bridge-nf-call-ip6tables', '1');
    }
  }

  private async nodeObjects(): Promise<NodeObject[]> {
    const list = await this.controlPlane.api<{ items: NodeObject[] }>('GET', '/api/v1/nodes');
    return list.items;
  }

  /**
   * Once the controller manager has given every node its pod CIDRs (one per family): each node's
   * CNI network, and routes to each pod CIDR on the other nodes and on the control plane's side
   * (where the API server answers pods, and the e2e tests run), via the node's address of the
   * CIDR's family.
   */
  private async podNetwork(): Promise<void> {
    const cidrs = new Map<string, string[]>();
    await until(
      'every node registered with its pod CIDRs',
      async () => {
        for (const node of await this.nodeObjects().catch(() => []))
          if (node.spec.podCIDRs?.length === this.families.length)
            cidrs.set(node.metadata.name, node.spec.podCIDRs);
        const exited = this.nodes.find((node) => !node.running);
        if (exited) throw new Error(`${exited.spec.name} exited:\n${exited.logTail('kubelet')}`);
        return this.nodes.every((node) => cidrs.has(node.spec.name));
      },
      90_000,
    );
    for (const node of this.nodes) {
      const podCIDRs = cidrs.get(node.spec.name) as string[];
      node.writeCniConfig(podCIDRs);
      for (const other of ['cp', ...this.nodes.filter((n) => n !== node).map((n) => n.ns)])
        for (const cidr of podCIDRs)
          await this.lab.addRoute(other, cidr, 'via', ofFamily(node.spec.ips, cidr));
    }
  }

  private async waitForReadyNodes(): Promise<void> {
    await until(
      'every node Ready',
      async () => {
        const nodes = await this.nodeObjects().catch(() => []);
        const ready = nodes.filter((n) =>
          n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        );
        return ready.length === this.nodes.length;
      },
      120_000,
    );
  }

  /** Copies every component's log into dir. */
  saveLogs(dir: string): void {
    mkdirSync(dir, { recursive: true });
    for (const node of this.nodes) {
      cpSync(node.logDir, join(dir, node.spec.name), { recursive: true, force: true });
      if (existsSync(node.podLogDir))
        cpSync(node.podLogDir, join(dir, node.spec.name, 'pods'), { recursive: true, force: true });
    }
    if (this.cp)
      for (const file of readdirSync(this.cp.workDir).filter((f) => f.endsWith('.log')))
        copyFileSync(join(this.cp.workDir, file), join(dir, file));
  }

  /** Stops the nodes, then the control plane; removes the namespaces and the state. */
  async down(): Promise<void> {
    for (const node of this.nodes) await node.stop().catch((e) => console.error(`${node.spec.name}: ${e}`));
    await this.cp?.stop();
    this.cp = null;
    await this.lab.destroy();
    rmSync(this.stateDir, { recursive: true, force: true });
  }
}
