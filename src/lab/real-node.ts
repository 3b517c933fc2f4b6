// Two nodes shaped like real ones (issue 10), unlike the lab of cluster.ts: an underlay behind a
// router, a flannel-style vxlan overlay with flannel's masquerade rules, pods wired by the real CNI
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

import { type ChildProcess, execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import type { ProxyMode } from '../config/types.js';
import { canonicalIP } from '../net/ip.js';
import { type AgentStartOptions, LabAgent } from './agent.js';
import type { SyncLine } from './agent-log.js';
import { CHART, helm } from './helm.js';
import { compiledSibling, type Lab, type ReversePathFilter } from './netns.js';
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

const execFileAsync = promisify(execFile);

// The checkout's root, from src/lab (vitest) or dist/src/lab (the build).
const ROOT = fileURLToPath(
  new URL(import.meta.url.includes('/dist/src/') ? '../../../' : '../../', import.meta.url),
);
/** Where scripts/install-deps.sh builds the CNI plugins and scripts/install-helm.sh helm. */
export const CNI_BIN = join(ROOT, '.tools/cni/bin');
const mainScript = compiledSibling(import.meta.url, '../cli/main.js');

/**
 * The lab's IPv6 counterpart of an IPv4 address a.b.c.d: fd00:a:b::c:d (the groups written as the
 * decimal digits read), e.g. 10.96.1.3 -> fd00:10:96::1:3, 192.0.2.100 -> fd00:192::2:100.
 */
export function ipv6Of(ipv4: string): string {
  const [a, b, c, d] = ipv4.split('.');
  const ip = canonicalIP(`fd00:${a}:${b}::${c}:${d}`);
  if (!ip) throw new Error(`no IPv6 counterpart for ${ipv4}`);
  return ip;
}

const CLUSTER_CIDR = '10.244.0.0/16';
/** The IPv6 cluster CIDR: each node's IPv6 pod CIDR is a /64 of it, as kube-controller-manager
 * allocates them (--node-cidr-mask-size-ipv6 64). */
const CLUSTER_CIDR6 = 'fd00:244::/48';
const UNDERLAY_GATEWAY = '10.10.0.254';
/** The outside client, behind the router that joins it to the nodes' underlay. */
export const CLIENT_IP = '192.0.2.100';
export const CLIENT_IP6 = ipv6Of(CLIENT_IP);
const CLIENT_GATEWAY = '192.0.2.1';
const VXLAN_MTU = 1450;

export interface RealNode {
  name: string;
  ip: string;
  podCIDR: string;
  /** flannel.1's address: the pod CIDR's network address, as flannel assigns it. */
  vtep: string;
  /** The node's IPv6 address on the underlay (a /64), its IPv6 pod CIDR and flannel-v6.1's address. */
  ip6: string;
  podCIDR6: string;
  vtep6: string;
  cni: 'bridge' | 'ptp';
  rpFilter: ReversePathFilter;
}

export const REAL_NODES: RealNode[] = [
  {
    name: 'node-a',
    ip: '10.10.0.1',
    podCIDR: '10.244.1.0/24',
    vtep: '10.244.1.0',
    ip6: ipv6Of('10.10.0.1'),
    podCIDR6: 'fd00:244:0:1::/64',
    vtep6: 'fd00:244:0:1::',
    cni: 'bridge',
    rpFilter: 1,
  },
  {
    name: 'node-b',
    ip: '10.10.0.2',
    podCIDR: '10.244.2.0/24',
    vtep: '10.244.2.0',
    ip6: ipv6Of('10.10.0.2'),
    podCIDR6: 'fd00:244:0:2::/64',
    vtep6: 'fd00:244:0:2::',
    cni: 'ptp',
    rpFilter: 2,
  },
];

export interface RealNodeSpec {
  /** Pods by name, each on a node, serving HTTP on tcpPorts and UDP echo on udpPorts. */
  pods: { name: string; node: string; tcpPorts: number[]; udpPorts: number[]; streamPorts?: number[] }[];
  /** Servers in the nodes' own network namespaces (host network), e.g. an API server on 6443. */
  hostServers: { name: string; node: string; port: number }[];
  /** LoadBalancer IPs and the node the router sends each to (as a BGP or L2 announcement would). */
  loadBalancerRoutes: { ip: string; node: string }[];
}

export interface PodInfo {
  name: string;
  node: string;
  ip: string;
  /** Its IPv6 address, from host-local's IPv6 range. */
  ip6: string;
  /** The host side of its veth, named by the CNI plugin. */
  hostInterface: string;
}

const nodeNs = (node: string) => `n-${node}`;
const podNs = (pod: string) => `p-${pod}`;
const CLIENT_NS = 'client';

function nodeOf(name: string): RealNode {
  const node = REAL_NODES.find((n) => n.name === name);
  if (!node) throw new Error(`no node ${name}`);
  return node;
}

/**
 * flannel's nat rules (its iptables trafficmngr) for one node and family, as `iptables -t nat` /
 * `ip6tables -t nat` argument lists.
 */
function flannelMasqueradeRules(node: RealNode, family: 'IPv4' | 'IPv6'): string[][] {
  const v4 = family === 'IPv4';
  const podCIDR = v4 ? node.podCIDR : node.podCIDR6;
  const clusterCIDR = v4 ? CLUSTER_CIDR : CLUSTER_CIDR6;
  const multicast = v4 ? '224.0.0.0/4' : 'ff00::/8';
  const rule = (...spec: string[]) => [
    '-A',
    'FLANNEL-POSTRTG',
    ...spec,
    '-m',
    'comment',
    '--comment',
    'flanneld masq',
  ];
  return [
    ['-N', 'FLANNEL-POSTRTG'],
    ['-A', 'POSTROUTING', '-m', 'comment', '--comment', 'flanneld masq', '-j', 'FLANNEL-POSTRTG'],
    // kube-proxy's masquerade mark: kube-proxy masquerades those itself.
    rule('-m', 'mark', '--mark', '0x4000/0x4000', '-j', 'RETURN'),
    rule('-s', podCIDR, '-d', clusterCIDR, '-j', 'RETURN'),
    rule('-s', clusterCIDR, '-d', podCIDR, '-j', 'RETURN'),
    rule('!', '-s', clusterCIDR, '-d', podCIDR, '-j', 'RETURN'),
    rule('-s', clusterCIDR, '!', '-d', multicast, '-j', 'MASQUERADE', '--random-fully'),
    rule('!', '-s', clusterCIDR, '-d', clusterCIDR, '-j', 'MASQUERADE', '--random-fully'),
  ];
}

/** The netconf flannel's CNI plugin delegates to bridge (kube-flannel.yml's delegate), or ptp. */
function cniConfig(node: RealNode, dataDir: string): Record<string, unknown> {
  // One range per family: host-local hands each pod an address of both (flannel's dual-stack
  // netconf gives the delegate the same two ranges).
  const ipam = {
    type: 'host-local',
    ranges: [[{ subnet: node.podCIDR }], [{ subnet: node.podCIDR6 }]],
    dataDir,
    routes:
      node.cni === 'bridge'
        ? [{ dst: CLUSTER_CIDR }, { dst: CLUSTER_CIDR6 }]
        : [{ dst: '0.0.0.0/0' }, { dst: '::/0' }],
  };
  const common = { cniVersion: '1.0.0', name: 'cbr0', mtu: VXLAN_MTU, ipMasq: false, ipam };
  return node.cni === 'bridge'
    ? {
        ...common,
        type: 'bridge',
        bridge: 'cni0',
        isGateway: true,
        isDefaultGateway: true,
        hairpinMode: true,
      }
    : { ...common, type: 'ptp' };
}

interface CniResult {
  interfaces?: { name: string; sandbox?: string }[];
  ips?: { address: string; interface?: number }[];
}

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

  constructor(readonly lab: Lab) {
    mkdirSync(this.manifestsDir);
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
    // The router: the nodes' L2 segment (br0, the nodes' default gateway) and the client's link.
    await lab.addNamespace('wire');
    await lab.sysctl('wire', 'net.ipv4.ip_forward', '1');
    await lab.sysctl('wire', 'net.ipv6.conf.all.forwarding', '1');
    await lab.exec('wire', 'ip', ['link', 'add', 'br0', 'type', 'bridge']);
    await lab.exec('wire', 'ip', ['link', 'set', 'br0', 'up']);
    await lab.addAddress('wire', 'br0', `${UNDERLAY_GATEWAY}/24`);
    await lab.addAddress('wire', 'br0', `${ipv6Of(UNDERLAY_GATEWAY)}/64`);

    for (const [index, node] of REAL_NODES.entries()) await this.buildNode(node, `w${index}`);
    await this.joinOverlay();

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

  private async buildNode(node: RealNode, wirePort: string): Promise<void> {
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
    for (const args of flannelMasqueradeRules(node, 'IPv4'))
      await lab.exec(ns, 'iptables', ['-t', 'nat', ...args]);
    for (const args of flannelMasqueradeRules(node, 'IPv6'))
      await lab.exec(ns, 'ip6tables', ['-t', 'nat', ...args]);
    // flannel's vxlan backend: flannel.1 over the IPv4 underlay, flannel-v6.1 over the IPv6 one.
    for (const [device, local, vtep] of [
      ['flannel.1', node.ip, `${node.vtep}/32`],
      ['flannel-v6.1', node.ip6, `${node.vtep6}/128`],
    ] as const) {
      await lab.exec(ns, 'ip', [
        'link',
        'add',
        device,
        'type',
        'vxlan',
        'id',
        '1',
        'local',
        local,
        'dev',
        'eth0',
        'dstport',
        '8472',
        'nolearning',
      ]);
      await lab.exec(ns, 'ip', [
        'link',
        'set',
        device,
        'mtu',
        String(VXLAN_MTU - (device === 'flannel.1' ? 0 : 20)),
        'up',
      ]);
      await lab.addAddress(ns, device, vtep);
    }
  }

  /** What flanneld programs for each remote lease: route, permanent neighbour, FDB entry. */
  private async joinOverlay(): Promise<void> {
    for (const v4 of [true, false]) {
      const device = v4 ? 'flannel.1' : 'flannel-v6.1';
      const macs = new Map<string, string>();
      for (const node of REAL_NODES) {
        const { stdout } = await this.lab.exec(nodeNs(node.name), 'ip', ['-j', 'link', 'show', device]);
        macs.set(node.name, (JSON.parse(stdout) as { address: string }[])[0]?.address ?? '');
      }
      for (const node of REAL_NODES) {
        const ns = nodeNs(node.name);
        for (const remote of REAL_NODES) {
          if (remote === node) continue;
          const mac = macs.get(remote.name) ?? '';
          const vtep = v4 ? remote.vtep : remote.vtep6;
          const podCIDR = v4 ? remote.podCIDR : remote.podCIDR6;
          await this.lab.addRoute(ns, podCIDR, 'via', vtep, 'dev', device, 'onlink');
          await this.lab.exec(ns, 'ip', [
            'neigh',
            'replace',
            vtep,
            'lladdr',
            mac,
            'dev',
            device,
            'nud',
            'permanent',
          ]);
          await this.lab.exec(ns, 'bridge', [
            'fdb',
            'append',
            mac,
            'dev',
            device,
            'dst',
            v4 ? remote.ip : remote.ip6,
            'self',
            'permanent',
          ]);
        }
      }
    }
  }

  /** veths come with TSO on and GRO off; real NICs have both on. */
  private async enableOffloads(ns: string, ifname: string): Promise<void> {
    await this.lab.exec(ns, 'ethtool', ['-K', ifname, 'tso', 'on', 'gso', 'on', 'gro', 'on']);
  }

  /** Runs a CNI plugin the way the container runtime does: env, netconf on stdin, in the node's netns. */
  private async cni(command: 'ADD' | 'DEL', pod: { name: string; node: string }): Promise<CniResult> {
    const node = nodeOf(pod.node);
    const conf = cniConfig(node, join(this.workDir, 'cni', node.name));
    const { stdout } = await this.lab.exec(
      nodeNs(node.name),
      'env',
      [
        `CNI_COMMAND=${command}`,
        `CNI_CONTAINERID=${this.lab.prefix}-${pod.name}`,
        `CNI_NETNS=/run/netns/${this.lab.ns(podNs(pod.name))}`,
        'CNI_IFNAME=eth0',
        `CNI_PATH=${CNI_BIN}`,
        join(CNI_BIN, conf.type as string),
      ],
      { input: JSON.stringify(conf) },
    );
    return command === 'ADD' ? (JSON.parse(stdout) as CniResult) : {};
  }

  private async addPod(pod: RealNodeSpec['pods'][number]): Promise<void> {
    const ns = podNs(pod.name);
    await this.lab.addNamespace(ns);
    const result = await this.cni('ADD', pod);
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
    opts: AgentStartOptions | ((node: string) => AgentStartOptions) = { bpffs: 'absent' },
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

  /** Stops the agents, releases the pods' addresses with CNI DEL and deletes every namespace. */
  async destroy(): Promise<void> {
    for (const agent of this.agents.values()) await agent.stop().catch(() => {});
    if (this.podman) await this.podman.removePods(`${this.lab.prefix}-`);
    await this.controlPlane?.stop();
    if (this.nodeRoots) await removeNodeRoots(this.nodeRoots);
    for (const pod of this.pods.values()) await this.cni('DEL', pod).catch(() => {});
    await this.lab.destroy();
    rmSync(this.workDir, { recursive: true, force: true });
  }

  /** The Nodes, Services and EndpointSlices writeManifests() writes, for an API server to serve. */
  objects(services: LabService[]): Record<string, unknown>[] {
    return [
      ...REAL_NODES.map(nodeObject),
      ...services.flatMap((svc) => this.serviceObjects(svc) as Record<string, unknown>[]),
    ];
  }

  /** A RequireDualStack Service (each address with its ipv6Of() counterpart) and a slice per family. */
  private serviceObjects(svc: LabService): unknown[] {
    const metadata = { name: svc.name, namespace: 'default' };
    const service = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata,
      spec: {
        type: svc.type,
        clusterIP: svc.clusterIP,
        clusterIPs: [svc.clusterIP, ipv6Of(svc.clusterIP)],
        ipFamilies: ['IPv4', 'IPv6'],
        ipFamilyPolicy: 'RequireDualStack',
        ports: svc.ports,
        ...(svc.type === 'ClusterIP'
          ? {}
          : { externalTrafficPolicy: svc.externalTrafficPolicy ?? 'Cluster' }),
        ...(svc.healthCheckNodePort ? { healthCheckNodePort: svc.healthCheckNodePort } : {}),
        ...(svc.externalIPs ? { externalIPs: svc.externalIPs.flatMap((ip) => [ip, ipv6Of(ip)]) } : {}),
      },
      status: svc.loadBalancerIP
        ? {
            loadBalancer: {
              ingress: [svc.loadBalancerIP, ipv6Of(svc.loadBalancerIP)].map((ip) => ({ ip, ipMode: 'VIP' })),
            },
          }
        : {},
    };
    const slice = (addressType: 'IPv4' | 'IPv6') => {
      const v4 = addressType === 'IPv4';
      const endpoints = svc.endpoints.map((endpoint) => {
        const conditions = { ready: true, serving: true, terminating: false };
        if ('hostNode' in endpoint) {
          const node = nodeOf(endpoint.hostNode);
          return { addresses: [v4 ? node.ip : node.ip6], conditions, nodeName: endpoint.hostNode };
        }
        const pod = this.pod(endpoint.pod);
        return {
          addresses: [v4 ? pod.ip : pod.ip6],
          conditions,
          nodeName: pod.node,
          targetRef: { kind: 'Pod', namespace: 'default', name: pod.name },
        };
      });
      return {
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: {
          name: `${svc.name}-lab${v4 ? '' : '-v6'}`,
          namespace: 'default',
          labels: { 'kubernetes.io/service-name': svc.name },
        },
        addressType,
        ports: svc.ports.map((p) => ({ name: p.name, protocol: p.protocol, port: p.targetPort })),
        endpoints,
      };
    };
    return [service, slice('IPv4'), slice('IPv6')];
  }
}

/** Addresses are IPv4; each Service also gets every address's ipv6Of() counterpart (dual-stack). */
export interface LabService {
  name: string;
  type: 'ClusterIP' | 'NodePort' | 'LoadBalancer';
  clusterIP: string;
  ports: { name: string; protocol: 'TCP' | 'UDP'; port: number; targetPort: number; nodePort?: number }[];
  externalTrafficPolicy?: 'Cluster' | 'Local';
  healthCheckNodePort?: number;
  /** status.loadBalancer.ingress, as the cloud or MetalLB writes it. */
  loadBalancerIP?: string;
  /** spec.externalIPs: addresses the cluster's network routes to some node. */
  externalIPs?: string[];
  /** Pods by name; host-network servers by their node. */
  endpoints: ({ pod: string } | { hostNode: string })[];
}

function nodeObject(node: RealNode): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: node.name,
      labels: { 'kubernetes.io/hostname': node.name, 'kubernetes.io/os': 'linux' },
    },
    spec: { podCIDR: node.podCIDR, podCIDRs: [node.podCIDR, node.podCIDR6] },
    status: {
      addresses: [
        { type: 'InternalIP', address: node.ip },
        { type: 'InternalIP', address: node.ip6 },
        { type: 'Hostname', address: node.name },
      ],
    },
  };
}

interface RenderedAgent {
  config: string;
  args: string[];
  /** Where the DaemonSet mounts the ConfigMap. */
  configMountPath: string;
  // biome-ignore lint/suspicious/noExplicitAny: rendered manifests are untyped YAML
  configMap: any;
  // biome-ignore lint/suspicious/noExplicitAny: rendered manifests are untyped YAML
  daemonSet: any;
}

/** `helm template` of the chart with its defaults (plus the required API server address and the mode). */
export async function renderChart(
  mode: ProxyMode,
  workDir: string,
  set: string[] = [],
): Promise<RenderedAgent> {
  const home = join(workDir, 'helm');
  const stdout = await helm(home, [
    'template',
    'kbp',
    CHART,
    '-n',
    'kube-system',
    '--set',
    'k8sServiceHost=10.10.0.1',
    '--set',
    `proxyMode=${mode}`,
    ...set.flatMap((value) => ['--set', value]),
  ]);

  // biome-ignore lint/suspicious/noExplicitAny: rendered manifests are untyped YAML
  const objects = parseAllDocuments(stdout).map((doc) => doc.toJS() as any);
  const configMap = objects.find((o) => o?.kind === 'ConfigMap' && o.data?.['config.conf']);
  const daemonSet = objects.find((o) => o?.kind === 'DaemonSet');
  const pod = daemonSet?.spec?.template?.spec;
  const container = pod?.containers?.find((c: { name: string }) => c.name === 'kube-bpf-proxy');
  const configVolume = pod?.volumes?.find(
    (v: { configMap?: { name: string } }) => v.configMap?.name === configMap?.metadata?.name,
  );
  const mount = container?.volumeMounts?.find((m: { name: string }) => m.name === configVolume?.name);
  if (!configMap || !container?.args || !mount)
    throw new Error('the chart rendered no agent ConfigMap or DaemonSet');
  return {
    config: configMap.data['config.conf'],
    args: container.args,
    configMountPath: mount.mountPath,
    configMap,
    daemonSet,
  };
}
