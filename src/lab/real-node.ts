// Two nodes shaped like real ones (issue 10), unlike the lab of cluster.ts: an underlay behind a
// router, a flannel-style vxlan overlay (or flannel's host-gw routes, RealNodeSpec.flannelBackend)
// with flannel's masquerade rules, pods wired by the real CNI
// reference plugins (bridge on node-a, ptp on node-b, host-local IPAM), distributions' kernel
// settings (rp_filter strict on node-a as RHEL ships it, loose on node-b as Ubuntu does; a
// conntrack INVALID drop in FORWARD; TSO and GRO on), host-network servers, and agents that run the
// configuration the Helm chart renders with its default values, by default in a mount namespace
// without bpffs. Pod addresses come from host-local, so manifests are written once the pods exist.
// The cluster is dual-stack, as such a cluster's nodes are: IPv6 node addresses on the underlay and
// for the client, IPv6 pod CIDRs handed out by host-local beside the IPv4 ones, flannel's
// flannel-v6.1 overlay and its ip6tables masquerade rules, IPv6 forwarding on (the node setup, as a
// dual-stack node's CNI and kubelet setup turn it on; the agent sets no sysctl), and every Service
// RequireDualStack with an EndpointSlice per address type. ipv6Of() gives each IPv4 address of the
// lab its IPv6 counterpart.
//
// This file builds the lab and runs its agents; its parts: the address plan (real-node-plan.ts),
// flannel (real-node-flannel.ts), the CNI plugins (real-node-cni.ts), the Kubernetes objects
// (real-node-objects.ts) and what the chart renders for the agents (real-node-chart.ts).

import { type ChildProcess, execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { ProxyMode } from '../config/types.js';
import { type AgentStartOptions, LabAgent } from './agent.js';
import type { SyncLine } from './agent-log.js';
import { compiledSibling, type Lab } from './netns.js';
import {
  API_SERVER_IP,
  API_SERVER_PORT,
  ChartPod,
  chartPodManifest,
  LabControlPlane,
  makeNodeRoots,
  Podman,
  removeNodeRoots,
  writeManifest,
} from './pod.js';
import { removeNodeCgroups } from './real-cluster/cgroups.js';
import {
  labCgroupName,
  makeLabCgroups,
  nodeCgroupDir,
  podsCgroupDir,
  removeStaleLabCgroups,
} from './real-node-cgroups.js';
import { type RenderedAgent, renderChart } from './real-node-chart.js';
import { runCni } from './real-node-cni.js';
import { addFlannelMasquerade, addVxlanDevices, joinHostGw, joinOverlay } from './real-node-flannel.js';
import { type LabService, labObjects } from './real-node-objects.js';
import {
  CLIENT_GATEWAY,
  CLIENT_IP,
  CLIENT_IP6,
  CLIENT_NS,
  ipv6Of,
  nodeNs,
  nodeOf,
  type PodInfo,
  podNs,
  REAL_NODES,
  type RealNode,
  type RealNodeSpec,
  UNDERLAY_GATEWAY,
} from './real-node-plan.js';

const execFileAsync = promisify(execFile);

const mainScript = compiledSibling(import.meta.url, '../cli/main.js');

/** What the tests need of an agent, whether a process (LabAgent) or the chart's pod (ChartPod). */
export interface NodeAgent {
  waitForSync(count: number, timeoutMs: number): Promise<SyncLine>;
  stop(): Promise<void>;
  tail(): string;
}

export interface ChartPodRun {
  /** The API server the pods watch, reachable from the caller (e.g. the fake API server). */
  api: { host: string; port: number };
  /** --set values for `helm template` beyond the defaults (e.g. image.tag). */
  set?: string[];
  /** Capabilities taken out of the agent container's list (least-privilege runs). */
  dropCapabilities?: string[];
  /** Nodes to start pods on; all by default. */
  nodes?: string[];
  /** How long each agent may take to its first sync (default 90 s). */
  syncTimeoutMs?: number;
}

export class RealNodeLab {
  readonly pods = new Map<string, PodInfo>();
  /** Each pod's backend process, by pod name: a caller may stop it and start another. */
  readonly backends = new Map<string, ChildProcess>();
  readonly agents = new Map<string, NodeAgent>();
  /** What startAgents() started the agents with, for restartAgent(). */
  private agentLaunch: {
    rendered: RenderedAgent;
    opts: AgentStartOptions | ((node: string) => AgentStartOptions);
    source: string[];
  } | null = null;
  /** The chart's pods, when startPods() runs the agents in containers. */
  readonly chartPods = new Map<string, ChartPod>();
  private podman: Podman | null = null;
  private controlPlane: LabControlPlane | null = null;
  private nodeRoots: string | null = null;
  /** Temporary files: host-local's leases, the manifests, the agents' config. */
  readonly workDir = mkdtempSync(join(tmpdir(), 'kbp-real-node-'));
  readonly manifestsDir = join(this.workDir, 'manifests');
  /** The lab's cgroup below the cgroup2 root (real-node-cgroups.ts); each node's is below it. */
  readonly cgroup: string;

  constructor(readonly lab: Lab) {
    mkdirSync(this.manifestsDir);
    this.cgroup = labCgroupName(lab.prefix);
  }

  /** The cgroup2 directory of a node's host processes, agent included; its socket hooks go there. */
  nodeCgroup(node: string): string {
    return nodeCgroupDir(this.cgroup, node);
  }

  nodeNs(node: string): string {
    return nodeNs(node);
  }

  podNs(pod: string): string {
    return podNs(pod);
  }

  get clientNs(): string {
    return CLIENT_NS;
  }

  pod(name: string): PodInfo {
    const pod = this.pods.get(name);
    if (!pod) throw new Error(`no pod ${name}`);
    return pod;
  }

  async build(spec: RealNodeSpec): Promise<void> {
    const { lab } = this;
    await removeStaleLabCgroups();
    makeLabCgroups(
      this.cgroup,
      REAL_NODES.map((n) => n.name),
    );
    for (const node of REAL_NODES) lab.setCgroup(nodeNs(node.name), this.nodeCgroup(node.name));
    // The router: the nodes' L2 segment (br0, the nodes' default gateway) and the client's link.
    await lab.addNamespace('wire');
    await lab.sysctl('wire', 'net.ipv4.ip_forward', '1');
    await lab.sysctl('wire', 'net.ipv6.conf.all.forwarding', '1');
    await lab.exec('wire', 'ip', ['link', 'add', 'br0', 'type', 'bridge']);
    await lab.exec('wire', 'ip', ['link', 'set', 'br0', 'up']);
    await lab.addAddress('wire', 'br0', `${UNDERLAY_GATEWAY}/24`);
    await lab.addAddress('wire', 'br0', `${ipv6Of(UNDERLAY_GATEWAY)}/64`);

    const vxlan = (spec.flannelBackend ?? 'vxlan') === 'vxlan';
    for (const [index, node] of REAL_NODES.entries()) await this.buildNode(node, `w${index}`, vxlan);
    await (vxlan ? joinOverlay(lab) : joinHostGw(lab));

    await lab.addNamespace(CLIENT_NS);
    await lab.link(CLIENT_NS, 'eth0', 'wire', 'wc');
    await lab.addAddress('wire', 'wc', `${CLIENT_GATEWAY}/24`);
    await lab.addAddress(CLIENT_NS, 'eth0', `${CLIENT_IP}/24`);
    await lab.addRoute(CLIENT_NS, 'default', 'via', CLIENT_GATEWAY);
    await lab.addAddress('wire', 'wc', `${ipv6Of(CLIENT_GATEWAY)}/64`);
    await lab.addAddress(CLIENT_NS, 'eth0', `${CLIENT_IP6}/64`);
    await lab.addRoute(CLIENT_NS, 'default', 'via', ipv6Of(CLIENT_GATEWAY));
    await this.enableOffloads(CLIENT_NS, 'eth0');
    await this.enableOffloads('wire', 'wc');
    for (const { ip, node } of spec.loadBalancerRoutes) {
      await lab.addRoute('wire', `${ip}/32`, 'via', nodeOf(node).ip);
      await lab.addRoute('wire', `${ipv6Of(ip)}/128`, 'via', nodeOf(node).ip6);
    }

    for (const pod of spec.pods) await this.addPod(pod);
    for (const server of spec.hostServers) {
      await lab.startBackend(nodeNs(server.node), { name: server.name, tcpPorts: [server.port] });
    }
    // Link-local addresses (veths, cni0, the vxlan devices) pass duplicate address detection
    // before the first IPv6 packet, as they have long done on a node that has been up a while.
    for (const ns of ['wire', CLIENT_NS, ...REAL_NODES.map((n) => nodeNs(n.name))])
      await lab.waitForIPv6Addresses(ns);
  }

  private async buildNode(node: RealNode, wirePort: string, vxlan: boolean): Promise<void> {
    const { lab } = this;
    const ns = nodeNs(node.name);
    await lab.addNamespace(ns);
    await lab.reversePathFilter(ns, node.rpFilter);
    await lab.sysctl(ns, 'net.ipv4.ip_forward', '1');
    // A dual-stack node forwards IPv6 (the CNI plugins turn it on as well when they wire a pod).
    await lab.sysctl(ns, 'net.ipv6.conf.all.forwarding', '1');
    // kubeadm's preflight demands it wherever pods share a bridge (node-a's cni0).
    await lab.sysctl(ns, 'net.bridge.bridge-nf-call-iptables', '1');
    await lab.link(ns, 'eth0', 'wire', wirePort);
    await lab.exec('wire', 'ip', ['link', 'set', wirePort, 'master', 'br0']);
    await lab.addAddress(ns, 'eth0', `${node.ip}/24`);
    await lab.addRoute(ns, 'default', 'via', UNDERLAY_GATEWAY);
    await lab.addAddress(ns, 'eth0', `${node.ip6}/64`);
    await lab.addRoute(ns, 'default', 'via', ipv6Of(UNDERLAY_GATEWAY));
    await this.enableOffloads(ns, 'eth0');
    await this.enableOffloads('wire', wirePort);
    // nf_conntrack is built into this kernel, nothing to load.
    await lab.dropInvalidForwards(ns);
    await addFlannelMasquerade(lab, ns, node);
    if (vxlan) await addVxlanDevices(lab, ns, node);
  }

  /** veths come with TSO on and GRO off; real NICs have both on. */
  private async enableOffloads(ns: string, ifname: string): Promise<void> {
    await this.lab.exec(ns, 'ethtool', ['-K', ifname, 'tso', 'on', 'gso', 'on', 'gro', 'on']);
  }

  private async addPod(pod: RealNodeSpec['pods'][number]): Promise<void> {
    const ns = podNs(pod.name);
    await this.lab.addNamespace(ns);
    this.lab.setCgroup(ns, podsCgroupDir(this.cgroup, pod.node));
    const result = await runCni(this.lab, this.workDir, 'ADD', pod);
    const addresses = (result.ips ?? []).map((i) => i.address.split('/')[0] ?? '');
    const ip = addresses.find((a) => !a.includes(':'));
    const ip6 = addresses.find((a) => a.includes(':'));
    const hostInterface = result.interfaces?.find((i) => !i.sandbox && i.name.startsWith('veth'))?.name;
    if (!ip || !ip6 || !hostInterface)
      throw new Error(
        `CNI ADD for ${pod.name} gave no address of each family or no veth: ${JSON.stringify(result)}`,
      );
    this.pods.set(pod.name, { name: pod.name, node: pod.node, ip, ip6, hostInterface });
    await this.enableOffloads(nodeNs(pod.node), hostInterface);
    await this.enableOffloads(ns, 'eth0');
    const { tcpPorts, udpPorts, streamPorts } = pod;
    this.backends.set(
      pod.name,
      await this.lab.startBackend(ns, { name: pod.name, tcpPorts, udpPorts, streamPorts }),
    );
  }

  /**
   * Writes the manifests every agent watches: the Nodes, and each Service with one EndpointSlice of
   * ready endpoints (pods by name, host-network servers by node), as the controllers make them.
   */
  writeManifests(services: LabService[]): void {
    const items = this.objects(services);
    writeFileSync(
      join(this.manifestsDir, 'cluster.json'),
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items }),
    );
  }

  /**
   * Starts one agent per node with what the chart renders for `mode` (default values otherwise):
   * the ConfigMap's config.conf and the DaemonSet's container args, with the API server replaced by
   * `source` (default --manifests; e.g. --kubeconfig FILE for a real API server); `set` adds --set
   * values (e.g. bpf.hostRouting=stack); `opts` may differ by node. With bpffs "node", each node's
   * bpffs is the directory named after it under opts.nodeBpffs. Waits for each agent's first sync.
   */
  async startAgents(
    mode: ProxyMode,
    opts: AgentStartOptions | ((node: string) => AgentStartOptions) = { bpffs: 'own' },
    set: string[] = [],
    source: string[] = ['--manifests', this.manifestsDir],
  ): Promise<void> {
    this.agentLaunch = { rendered: await renderChart(mode, this.workDir, set), opts, source };
    for (const node of REAL_NODES) this.launchAgent(node.name);
    for (const agent of this.agents.values()) await agent.waitForSync(1, 60_000);
  }

  /** Starts a node's agent again as startAgents() did (once it has stopped); waits for its first sync. */
  async restartAgent(node: string): Promise<LabAgent> {
    const agent = this.launchAgent(node);
    await agent.waitForSync(1, 60_000);
    return agent;
  }

  /** A node's agent when it runs as a process (startAgents()), not as the chart's pod. */
  labAgent(node: string): LabAgent {
    const agent = this.agents.get(node);
    if (!(agent instanceof LabAgent)) throw new Error(`no agent process on ${node}`);
    return agent;
  }

  private launchAgent(node: string): LabAgent {
    if (!this.agentLaunch) throw new Error('startAgents() has not run');
    const { rendered, source } = this.agentLaunch;
    const opts =
      typeof this.agentLaunch.opts === 'function' ? this.agentLaunch.opts(node) : this.agentLaunch.opts;
    const configDir = join(this.workDir, 'agent', node);
    mkdirSync(configDir, { recursive: true });
    writeFileSync(join(configDir, 'config.conf'), rendered.config);
    const [command, ...args] = rendered.args.map((arg) =>
      arg.replaceAll('$(NODE_NAME)', node).replace(rendered.configMountPath, configDir),
    );
    if (command !== 'run') throw new Error(`the chart's agent runs "${command}", not run`);
    const nodeBpffs = opts.bpffs === 'node' ? join(opts.nodeBpffs ?? '', node) : undefined;
    if (nodeBpffs) mkdirSync(nodeBpffs, { recursive: true });
    const agent = LabAgent.start(this.lab, nodeNs(node), mainScript, [...args, ...source], {
      hostCgroup: this.nodeCgroup(node),
      ...opts,
      ...(nodeBpffs ? { nodeBpffs } : {}),
    });
    this.agents.set(node, agent);
    return agent;
  }

  /**
   * Runs the agents as the chart's pods (src/lab/pod.ts): `helm template` with default values
   * (k8sServiceHost: the lab's control-plane host; `run.set` on top), each node's Pod started by
   * `podman kube play` in its network namespace, its hostPath volumes under a directory of its own
   * (no bpffs there: the chart's init container mounts it). The image must be loaded in podman.
   * Waits for each agent's first sync.
   */
  async startPods(mode: ProxyMode, run: ChartPodRun): Promise<void> {
    const podDir = join(this.workDir, 'pods');
    if (!this.podman) {
      mkdirSync(podDir, { recursive: true });
      this.podman = new Podman(podDir);
      await this.podman.removePods(`${this.lab.prefix}-`);
      this.nodeRoots = join(podDir, 'nodes');
      await makeNodeRoots(this.nodeRoots);
      this.controlPlane = await LabControlPlane.start(this.lab, join(podDir, 'control-plane'), run.api, {
        bridgeNs: 'wire',
        bridge: 'br0',
        gateway: UNDERLAY_GATEWAY,
      });
    }
    const rendered = await renderChart(mode, this.workDir, [
      `k8sServiceHost=${API_SERVER_IP}`,
      `k8sServicePort=${API_SERVER_PORT}`,
      ...(run.set ?? []),
    ]);
    const configMapFile = join(podDir, 'configmap.yaml');
    writeManifest(configMapFile, rendered.configMap);
    for (const node of REAL_NODES.filter((n) => !run.nodes || run.nodes.includes(n.name))) {
      const name = `${this.lab.prefix}-${node.name}`;
      const { pod, probes, capabilities } = chartPodManifest(rendered.daemonSet, {
        name,
        node: node.name,
        nodeRoot: join(this.nodeRoots ?? podDir, node.name),
        hostCgroup: this.nodeCgroup(node.name),
        serviceAccountDir: this.controlPlane?.serviceAccountDir ?? '',
        dropCapabilities: run.dropCapabilities ?? [],
      });
      const podFile = join(podDir, `${node.name}.yaml`);
      writeManifest(podFile, pod);
      await this.podman.run(['kube', 'play', '--configmap', configMapFile, podFile], {
        netns: this.lab.ns(nodeNs(node.name)),
      });
      const chartPod = new ChartPod(this.podman, name, nodeNs(node.name), node.ip, probes, capabilities);
      chartPod.follow();
      this.chartPods.set(node.name, chartPod);
      this.agents.set(node.name, chartPod);
    }
    for (const node of run.nodes ?? REAL_NODES.map((n) => n.name)) {
      await this.agents.get(node)?.waitForSync(1, run.syncTimeoutMs ?? 90_000);
    }
  }

  /** The filesystem type mounted at `path` of a node's root (startPods()), or null when none is. */
  nodeMountType(node: string, path: string): string | null {
    if (!this.nodeRoots) return null;
    const target = join(this.nodeRoots, node, path);
    let type: string | null = null;
    // mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
    for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
      const fields = line.split(' ');
      if (fields[4] === target) type = fields[fields.indexOf('-') + 1] ?? null;
    }
    return type;
  }

  /**
   * Unmounts a node's bpffs (and with it every pin), so that its next pod starts as on a node that
   * never ran the agent: the chart's init container mounts a fresh one. Only between pods.
   */
  async resetNodeBpffs(node: string): Promise<void> {
    if (!this.nodeRoots) return;
    const target = join(this.nodeRoots, node, 'sys/fs/bpf');
    for (let i = 0; i < 10 && this.nodeMountType(node, '/sys/fs/bpf') !== null; i++) {
      await execFileAsync('umount', [target]);
    }
  }

  /** The ServiceAccount token the pods present to the API server. */
  get serviceAccountToken(): string {
    return this.controlPlane?.token ?? '';
  }

  /**
   * Stops the agents, releases the pods' addresses with CNI DEL, deletes every namespace and, once
   * their processes are gone, the lab's cgroups.
   */
  async destroy(): Promise<void> {
    for (const agent of this.agents.values()) await agent.stop().catch(() => {});
    if (this.podman) await this.podman.removePods(`${this.lab.prefix}-`);
    await this.controlPlane?.stop();
    if (this.nodeRoots) await removeNodeRoots(this.nodeRoots);
    for (const pod of this.pods.values()) await runCni(this.lab, this.workDir, 'DEL', pod).catch(() => {});
    await this.lab.destroy();
    try {
      await removeNodeCgroups(this.cgroup);
    } finally {
      rmSync(this.workDir, { recursive: true, force: true });
    }
  }

  /** The Nodes, Services and EndpointSlices writeManifests() writes, for an API server to serve. */
  objects(services: LabService[]): Record<string, unknown>[] {
    return labObjects(services, (name) => this.pod(name));
  }
}
