import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { BpfConfig, ProxyMode } from '../../src/config/types.js';
import { findCgroup2Root } from '../../src/host/cgroup.js';
import { deleteStaleNamespaces, Lab, type RequestResult } from '../../src/lab/netns.js';
import { tcpConntrackEntries } from '../../src/lab/node-conntrack.js';
import { RealNodeLab } from '../../src/lab/real-node.js';
import { CNI_BIN } from '../../src/lab/real-node-cni.js';
import type { LabService } from '../../src/lab/real-node-objects.js';
import { CLIENT_IP, CLIENT_IP6, ipv6Of, REAL_NODES } from '../../src/lab/real-node-plan.js';
import type { IPFamily } from '../../src/model/types.js';
import { cgroupPrograms } from '../support/cgroup-programs.js';
import type { FakeApiServer } from '../support/fake-apiserver.js';
import { apiAddress, describeImage, fakeApiServerWith } from '../support/image.js';
import { describeRoot } from '../support/privileges.js';

// Issue 10's matrix on two nodes shaped like real ones (src/lab/real-node.ts): flannel's vxlan
// overlay and masquerade rules, pods wired by the CNI bridge (node-a) and ptp (node-b) plugins,
// rp_filter 1 and 2, conntrack's INVALID drop, TSO/GRO on, host-network backends, and agents that
// run exactly what the Helm chart renders with its default values. The same cells run in each mode:
// iptables mode is kube-proxy's own rules, so a cell failing there means the lab is wrong.
//
// The agents run in their own mount namespace without bpffs, as on nodes that do not mount it:
// the bpf agents mount it themselves (the lab never does).
// Needs `npm run build` (agents and backends run dist/) and the CNI plugins of
// scripts/install-deps.sh.
//
// The "pod" variant (issue 17) runs the same cells with each agent in the chart's own pod, the
// image of scripts/build-image.sh (KBP_IMAGE) started by `podman kube play` in its node
// (src/lab/pod.ts), watching a fake API server behind the lab's control-plane host over TLS with
// the pod's ServiceAccount token; the chart's init container mounts bpffs on the node.
//
// The cluster is dual-stack (IPv6 node addresses, pod and service CIDRs; every Service
// RequireDualStack) and every cell runs once per family: the IPv6 run sends the same requests to
// the IPv6 counterparts of the cell's addresses (ipv6Of) and checks the same backends and source
// addresses. Left out over IPv6: 127.0.0.1 NodePorts (kube-proxy serves localhost NodePorts over
// IPv4 only).
//
// The datagrams larger than the MTU run over IPv6 too, as IPv6 fragments, with what differs in IPv6
// asserted as a real node does it. An IPv6 router never fragments what it forwards: a packet too
// big for the next hop is answered with an ICMPv6 packet too big and the sender fragments smaller
// next time. A node's conntrack reassembles at PREROUTING and remembers the largest fragment; it
// refragments the datagram on output to that size, and answers packet too big when that fragment
// exceeds the next hop's MTU (node-b's pods' 1450 bytes into flannel-v6.1's 1430, the client's 1500
// into a pod's 1450; bpf mode's tc answers each fragment it routes past its next hop's MTU itself;
// node-a's pods, whose datagrams conntrack reassembles in the cni0 bridge's hook, measured:
// refragmented to 1430 without one). So the first datagram on such a path is lost, in each
// direction, as for any IPv6 client until it has learned the path MTU: each IPv6 datagram cell
// first sends datagrams one at a time until every backend has echoed one (at most one lost per
// direction of each backend's path, which also proves the packet too big reached the sender
// translated back), then the same 20 as IPv4's, which must all come back. /proc/net/snmp6's
// Ip6ReasmOKs does not count netfilter's IPv6 reassembly (it stays 0 on the nodes), so over IPv6
// the reassembling node is checked by its Ip6FragCreates alone, and the client's own Ip6ReasmOKs
// show that every echo came back in fragments.

// bpf.hostRouting (docs/bpf-datapath.md, "Host routing"): the chart's default, auto, resolves to
// bpf on these nodes (the helpers are there, no NetworkPolicy chain in netfilter); bpf and stack
// are set explicitly. Each runs the whole matrix: one pass takes about 17-21 s here (8 s to build
// the lab and start the agents, 9-13 s of cells; the six process variants 124 s), so a subset
// would save seconds of CI's 30 minutes and give up the proof that the setting changes nothing but
// the flows it carries. Every cell between two pods of one node, and every one between a pod and a pod of
// the other node (across flannel's vxlan overlay, whose prefix the agents list for the bypass),
// also checks where its connections went: none in the client's node's netfilter conntrack under
// the bypass, each of them there on the stack's path (and, across nodes, in the backend's node's,
// which routes them as any pod's traffic). Two more variants run the matrix with flannel's
// host-gw backend instead of vxlan (RealNodeSpec.flannelBackend: each node's pods routed through
// it on the underlay), auto and stack: there the bypass leaves by the underlay itself.
const VARIANTS: {
  mode: ProxyMode;
  agent: 'process' | 'pod';
  hostRouting?: BpfConfig['hostRouting'];
  flannel?: 'host-gw';
}[] = [
  { mode: 'bpf', agent: 'process' },
  { mode: 'bpf', agent: 'process', hostRouting: 'bpf' },
  { mode: 'bpf', agent: 'process', hostRouting: 'stack' },
  { mode: 'bpf', agent: 'process', flannel: 'host-gw' },
  { mode: 'bpf', agent: 'process', hostRouting: 'stack', flannel: 'host-gw' },
  { mode: 'iptables', agent: 'process' },
  { mode: 'bpf', agent: 'pod' },
];
const REQUESTS = 20;
/** A UDP request is one datagram each way. A TCP request waits past TCP's 1 s initial SYN
 * retransmission timeout: a single SYN lost on a loaded machine is recovered by TCP as any client
 * would see it, while a path that drops a flow's packets still fails. (At 1 s, one lost SYN in a
 * cell of 20 failed CI once.) */
const REQUEST_TIMEOUT_MS = { udp: 1000, tcp: 3000 } as const;
const DOWNLOAD_BYTES = 64 * 1024 * 1024;
const DOWNLOAD_TIMEOUT_MS = 30_000;
/** Near the UDP maximum (65,507 bytes of payload, less the echo's answer line): 45 fragments at
 * the outside link's MTU, 46 over the overlay's. */
const BIG_DATAGRAM = 65_000;
/** IPv6 datagram cells: datagrams sent one by one to discover the path MTU before the matrix's
 * (see the header), enough for random choice to reach each of two backends. */
const PMTU_PROBES = 20;

const NODE_A = REAL_NODES[0]!;
const NODE_B = REAL_NODES[1]!;
const HTTP = 8080;
const DNS = 5353;
const API = 6443;

// a1 and b1 are the client pods (and their own hairpin backends); a2 and b2 serve the rest.
const PODS = ['a1', 'a2', 'b1', 'b2'].map((name) => ({
  name,
  node: name.startsWith('a') ? NODE_A.name : NODE_B.name,
  tcpPorts: [HTTP],
  udpPorts: [DNS],
}));

const http = (port = 80, nodePort?: number) => ({
  name: 'http',
  protocol: 'TCP' as const,
  port,
  targetPort: HTTP,
  ...(nodePort ? { nodePort } : {}),
});

const SERVICES: LabService[] = [
  {
    name: 'kubernetes',
    type: 'ClusterIP',
    clusterIP: '10.96.0.1',
    ports: [{ name: 'https', protocol: 'TCP', port: 443, targetPort: API }],
    endpoints: [{ hostNode: NODE_A.name }],
  },
  // node-b's counterpart, so each node has a host-network backend locally and one remotely.
  {
    name: 'host-b',
    type: 'ClusterIP',
    clusterIP: '10.96.0.2',
    ports: [{ name: 'https', protocol: 'TCP', port: 443, targetPort: API }],
    endpoints: [{ hostNode: NODE_B.name }],
  },
  { name: 'only-a', type: 'ClusterIP', clusterIP: '10.96.1.1', ports: [http()], endpoints: [{ pod: 'a2' }] },
  // A NodePort too: the bulk downloads and the big datagrams enter at node-b (local backend) and
  // node-a (remote).
  {
    name: 'only-b',
    type: 'NodePort',
    clusterIP: '10.96.1.2',
    ports: [http(80, 30082), { name: 'dns', protocol: 'UDP', port: 53, targetPort: DNS, nodePort: 30083 }],
    endpoints: [{ pod: 'b2' }],
  },
  {
    name: 'both',
    type: 'ClusterIP',
    clusterIP: '10.96.1.3',
    ports: [http(), { name: 'dns', protocol: 'UDP', port: 53, targetPort: DNS }],
    endpoints: [{ pod: 'a2' }, { pod: 'b2' }],
  },
  {
    name: 'np-cluster',
    type: 'NodePort',
    clusterIP: '10.96.1.4',
    externalTrafficPolicy: 'Cluster',
    ports: [http(80, 30080)],
    endpoints: [{ pod: 'a2' }, { pod: 'b2' }],
  },
  {
    name: 'np-local',
    type: 'NodePort',
    clusterIP: '10.96.1.5',
    externalTrafficPolicy: 'Local',
    healthCheckNodePort: 32001,
    ports: [http(80, 30081)],
    endpoints: [{ pod: 'a2' }, { pod: 'b2' }],
  },
  {
    name: 'lb-cluster',
    type: 'LoadBalancer',
    clusterIP: '10.96.1.6',
    externalTrafficPolicy: 'Cluster',
    loadBalancerIP: '198.51.100.10',
    ports: [http(80, 30090)],
    endpoints: [{ pod: 'a2' }, { pod: 'b2' }],
  },
  {
    name: 'lb-local',
    type: 'LoadBalancer',
    clusterIP: '10.96.1.7',
    externalTrafficPolicy: 'Local',
    healthCheckNodePort: 32002,
    loadBalancerIP: '198.51.100.11',
    ports: [http(80, 30091)],
    endpoints: [{ pod: 'a2' }, { pod: 'b2' }],
  },
  {
    name: 'ext-ip',
    type: 'ClusterIP',
    clusterIP: '10.96.1.8',
    externalIPs: ['198.51.100.20'],
    ports: [http()],
    endpoints: [{ pod: 'a2' }, { pod: 'b2' }],
  },
  { name: 'self-a', type: 'ClusterIP', clusterIP: '10.96.2.1', ports: [http()], endpoints: [{ pod: 'a1' }] },
  { name: 'self-b', type: 'ClusterIP', clusterIP: '10.96.2.2', ports: [http()], endpoints: [{ pod: 'b1' }] },
];

// lb-cluster enters at node-a, lb-local at node-b (where it has a local endpoint, as the LB's
// health checks would choose).
const LB_ROUTES = [
  { ip: '198.51.100.10', node: NODE_A.name },
  { ip: '198.51.100.11', node: NODE_B.name },
  { ip: '198.51.100.20', node: NODE_A.name },
];

interface Cell {
  name: string;
  /** A pod's name, the outside client, or a node's own network namespace (`host:<node>`). */
  from: string | 'outside';
  target: string;
  proto: 'tcp' | 'udp';
  backends: string[];
  /**
   * "preserved": every backend saw the client's own address (eTP Local, ClusterIP from pods).
   * "any": not asserted (e.g. kube-proxy masquerades eTP Cluster even to a local backend; flannel
   * masquerades pods' traffic to non-pod addresses).
   */
  clientAddress: 'preserved' | 'any';
  /** Backends that must see another address than the client's (SNAT towards another node). */
  snatAt?: string[];
  downloadBytes?: number;
  /** UDP: each datagram is this long (fragmented on the way) and must come back echoed intact,
   * from the address and port it was sent to. */
  datagramBytes?: number;
  /** Client and backend are pods of one node: host routing (bpf.hostRouting, when it resolves
   * to bpf) keeps the flow out of the node's netfilter conntrack, the stack's path puts it there. */
  localPods?: boolean;
  /** Client and backend are pods of two nodes: host routing keeps the flow out of the client's
   * node's netfilter conntrack (the overlay's prefix is one remoteBypass lists), the stack's path
   * puts it there; the backend's node routes it as any pod's traffic and holds it either way. */
  remotePods?: boolean;
  /** A node whose stack reassembles the datagrams and fragments them again (netfilter conntrack
   * at PREROUTING, then the output's MTU): its ReasmOKs and FragCreates must grow (IPv6: its
   * Ip6FragCreates, and the client's Ip6ReasmOKs by one per echo; see the header). */
  reassembledAt?: string;
}

const CLIENT_PODS = [
  { pod: 'a1', node: NODE_A, cni: 'bridge', peer: NODE_B },
  { pod: 'b1', node: NODE_B, cni: 'ptp', peer: NODE_A },
];
const HOST_SERVICE = { [NODE_A.name]: '10.96.0.1:443', [NODE_B.name]: '10.96.0.2:443' };
const ONLY = { [NODE_A.name]: ['10.96.1.1:80', 'a2'], [NODE_B.name]: ['10.96.1.2:80', 'b2'] } as const;

const CELLS: Cell[] = [
  ...CLIENT_PODS.flatMap(({ pod, node, cni, peer }): Cell[] => {
    const who = `pod on ${node.name} (${cni})`;
    return [
      {
        name: `${who} → ClusterIP, backend on the same node`,
        from: pod,
        target: ONLY[node.name]![0],
        proto: 'tcp',
        backends: [ONLY[node.name]![1]],
        clientAddress: 'preserved',
        localPods: true,
      },
      {
        name: `${who} → ClusterIP, backend on the other node`,
        from: pod,
        target: ONLY[peer.name]![0],
        proto: 'tcp',
        backends: [ONLY[peer.name]![1]],
        clientAddress: 'preserved',
        remotePods: true,
      },
      {
        name: `${who} → ClusterIP, backends on both nodes`,
        from: pod,
        target: '10.96.1.3:80',
        proto: 'tcp',
        backends: ['a2', 'b2'],
        clientAddress: 'preserved',
      },
      {
        name: `${who} → ClusterIP, host-network backend on the same node`,
        from: pod,
        target: HOST_SERVICE[node.name]!,
        proto: 'tcp',
        backends: [`host-${node.name}`],
        clientAddress: 'preserved',
      },
      {
        // flannel masquerades pods' traffic to addresses outside the pod network: the remote
        // server sees the client's node.
        name: `${who} → ClusterIP, host-network backend on the other node`,
        from: pod,
        target: HOST_SERVICE[peer.name]!,
        proto: 'tcp',
        backends: [`host-${peer.name}`],
        clientAddress: 'any',
      },
      {
        // kube-proxy masquerades hairpin connections, or the backend would answer itself directly.
        name: `${who} → its own Service (hairpin)`,
        from: pod,
        target: pod === 'a1' ? '10.96.2.1:80' : '10.96.2.2:80',
        proto: 'tcp',
        backends: [pod],
        clientAddress: 'any',
      },
      {
        name: `${who} → ClusterIP UDP, backends on both nodes`,
        from: pod,
        target: '10.96.1.3:53',
        proto: 'udp',
        backends: ['a2', 'b2'],
        clientAddress: 'preserved',
      },
    ];
  }),
  ...[NODE_A, NODE_B].flatMap((node): Cell[] => [
    {
      name: `outside → NodePort eTP=Cluster on ${node.name}`,
      from: 'outside',
      target: `${node.ip}:30080`,
      proto: 'tcp',
      backends: ['a2', 'b2'],
      clientAddress: 'any',
      snatAt: [node === NODE_A ? 'b2' : 'a2'],
    },
    {
      name: `outside → NodePort eTP=Local on ${node.name}`,
      from: 'outside',
      target: `${node.ip}:30081`,
      proto: 'tcp',
      backends: [node === NODE_A ? 'a2' : 'b2'],
      clientAddress: 'preserved',
    },
  ]),
  {
    name: 'outside → LoadBalancer IP eTP=Cluster (announced by node-a)',
    from: 'outside',
    target: '198.51.100.10:80',
    proto: 'tcp',
    backends: ['a2', 'b2'],
    clientAddress: 'any',
    snatAt: ['b2'],
  },
  {
    name: 'outside → externalIP (routed to node-a)',
    from: 'outside',
    target: '198.51.100.20:80',
    proto: 'tcp',
    backends: ['a2', 'b2'],
    clientAddress: 'any',
    snatAt: ['b2'],
  },
  {
    name: 'outside → LoadBalancer IP eTP=Local (announced by node-b)',
    from: 'outside',
    target: '198.51.100.11:80',
    proto: 'tcp',
    backends: ['b2'],
    clientAddress: 'preserved',
  },
  // The node's own network namespace (kubelet, hostNetwork pods): no tc ingress hook on the way
  // out, so bpf mode serves it with the socket hooks (bpf.socketLB host, the chart's default).
  ...[
    ['ClusterIP, backend on the same node', '10.96.1.1:80', 'tcp', ['a2']],
    ['ClusterIP, backend on the other node', '10.96.1.2:80', 'tcp', ['b2']],
    ['ClusterIP, backends on both nodes', '10.96.1.3:80', 'tcp', ['a2', 'b2']],
    ['ClusterIP UDP, backends on both nodes', '10.96.1.3:53', 'udp', ['a2', 'b2']],
    ['ClusterIP, host-network backend on the same node', '10.96.0.1:443', 'tcp', ['host-node-a']],
    ['ClusterIP, host-network backend on the other node', '10.96.0.2:443', 'tcp', ['host-node-b']],
    ['externalIP', '198.51.100.20:80', 'tcp', ['a2', 'b2']],
    ['its own NodePort on its node address', `${NODE_A.ip}:30080`, 'tcp', ['a2', 'b2']],
    ['its own NodePort on 127.0.0.1', '127.0.0.1:30080', 'tcp', ['a2', 'b2']],
    // Locally originated traffic to an eTP=Local address goes to every endpoint, as from pods.
    ['LoadBalancer IP eTP=Local', '198.51.100.11:80', 'tcp', ['a2', 'b2']],
  ].map(
    ([what, target, proto, backends]): Cell => ({
      name: `host network of node-a → ${what}`,
      from: `host:${NODE_A.name}`,
      target: target as string,
      proto: proto as 'tcp' | 'udp',
      backends: backends as string[],
      clientAddress: 'any',
    }),
  ),
  {
    name: '64 MiB: pod on node-a ← ClusterIP, backend on the same node',
    from: 'a1',
    target: '10.96.1.1:80',
    proto: 'tcp',
    backends: ['a2'],
    clientAddress: 'preserved',
    downloadBytes: DOWNLOAD_BYTES,
    localPods: true,
  },
  {
    name: '64 MiB across the overlay: pod on node-a ← ClusterIP, backend on node-b',
    from: 'a1',
    target: '10.96.1.2:80',
    proto: 'tcp',
    backends: ['b2'],
    clientAddress: 'preserved',
    downloadBytes: DOWNLOAD_BYTES,
    remotePods: true,
  },
  {
    name: '64 MiB: outside ← NodePort on node-b, local backend',
    from: 'outside',
    target: `${NODE_B.ip}:30082`,
    proto: 'tcp',
    backends: ['b2'],
    clientAddress: 'any',
    downloadBytes: DOWNLOAD_BYTES,
  },
  {
    name: '64 MiB: outside ← NodePort on node-a, remote backend',
    from: 'outside',
    target: `${NODE_A.ip}:30082`,
    proto: 'tcp',
    backends: ['b2'],
    clientAddress: 'any',
    snatAt: ['b2'],
    downloadBytes: DOWNLOAD_BYTES,
  },
  // Datagrams larger than the MTU travel as fragments, both ways: every fragment must get
  // the translation of the first, which alone carries the ports.
  {
    name: '3,000-byte UDP datagram: pod on node-a → ClusterIP UDP, backends on both nodes, echoed',
    from: 'a1',
    target: '10.96.1.3:53',
    proto: 'udp',
    backends: ['a2', 'b2'],
    clientAddress: 'preserved',
    datagramBytes: 3000,
    reassembledAt: NODE_A.name,
  },
  {
    name: '64 KiB UDP datagram: outside → NodePort on node-b, local backend, echoed',
    from: 'outside',
    target: `${NODE_B.ip}:30083`,
    proto: 'udp',
    backends: ['b2'],
    clientAddress: 'any',
    datagramBytes: BIG_DATAGRAM,
    reassembledAt: NODE_B.name,
  },
  {
    name: '64 KiB UDP datagram: outside → NodePort on node-a, remote backend (SNAT, routed by tc), echoed',
    from: 'outside',
    target: `${NODE_A.ip}:30083`,
    proto: 'udp',
    backends: ['b2'],
    clientAddress: 'any',
    snatAt: ['b2'],
    datagramBytes: BIG_DATAGRAM,
    reassembledAt: NODE_B.name,
  },
];

/** The family's form of a cell's target: an IPv4 host becomes its ipv6Of() counterpart. */
function targetOf(target: string, family: IPFamily): string {
  if (family === 'IPv4') return target;
  const split = target.lastIndexOf(':');
  return `[${ipv6Of(target.slice(0, split))}]:${target.slice(split + 1)}`;
}

/** Whether a cell runs over the family (see the header for what IPv6 leaves out). */
function runsOver(cell: Cell, family: IPFamily): boolean {
  return family === 'IPv4' || !cell.target.startsWith('127.');
}

/**
 * A namespace's reassembly and fragmentation counters for the family: IPv4's from /proc/net/snmp
 * ("Ip:" lines, ReasmOKs and FragCreates), IPv6's from /proc/net/snmp6 (Ip6ReasmOKs and
 * Ip6FragCreates, one "name value" a line).
 */
async function fragStats(
  lab: Lab,
  ns: string,
  family: IPFamily,
): Promise<{ reasmOKs: number; fragCreates: number }> {
  if (family === 'IPv4') {
    const { stdout } = await lab.exec(ns, 'cat', ['/proc/net/snmp']);
    const [names, values] = stdout.split('\n').filter((line) => line.startsWith('Ip:'));
    const keys = (names ?? '').split(/\s+/).slice(1);
    const nums = (values ?? '').split(/\s+/).slice(1).map(Number);
    const ip = Object.fromEntries(keys.map((k, i) => [k, nums[i]!]));
    return { reasmOKs: ip.ReasmOKs!, fragCreates: ip.FragCreates! };
  }
  const { stdout } = await lab.exec(ns, 'cat', ['/proc/net/snmp6']);
  const ip6 = Object.fromEntries(stdout.split('\n').map((line) => line.trim().split(/\s+/)));
  return { reasmOKs: Number(ip6.Ip6ReasmOKs), fragCreates: Number(ip6.Ip6FragCreates) };
}

/** What went wrong in a cell, one line per problem; empty when it passed. */
function problems(cell: Cell, clientIP: string, results: RequestResult[]): string[] {
  const out: string[] = [];
  const errors = new Map<string, number>();
  for (const r of results) if (r.error) errors.set(r.error, (errors.get(r.error) ?? 0) + 1);
  if (errors.size)
    out.push(
      `${results.length - [...errors.values()].reduce((a, b) => a + b, 0)}/${results.length} succeeded; errors: ${[...errors].map(([e, n]) => `${n}× ${e}`).join(', ')}`,
    );
  const answered = [...new Set(results.flatMap((r) => (r.backend ? [r.backend] : [])))].sort();
  if (answered.join() !== [...cell.backends].sort().join()) {
    out.push(`backends ${JSON.stringify(answered)}, expected ${JSON.stringify(cell.backends)}`);
  }
  for (const r of results) {
    if (!r.backend || !r.seenClient) continue;
    const seen = r.seenClient.replace(/:\d+$/, '');
    if (cell.clientAddress === 'preserved' && seen !== clientIP) {
      out.push(`${r.backend} saw ${seen}, not the client ${clientIP}`);
    }
    if (cell.snatAt?.includes(r.backend) && seen === clientIP) {
      out.push(
        `${r.backend} on another node saw the client ${clientIP}: not SNATed, its replies bypass the entry node`,
      );
    }
  }
  for (const r of results) {
    if (cell.downloadBytes !== undefined && r.backend && r.bytes !== cell.downloadBytes) {
      out.push(`${r.bytes} of ${cell.downloadBytes} bytes arrived`);
    }
    if (cell.datagramBytes !== undefined && r.backend && r.bytes !== cell.datagramBytes) {
      out.push(`${r.bytes} of ${cell.datagramBytes} bytes echoed`);
    }
  }
  return [...new Set(out)];
}

for (const { mode, agent, hostRouting, flannel } of VARIANTS) {
  const pod = agent === 'pod';
  const describeVariant = pod ? describeImage(['KBP_IMAGE']) : describeRoot;
  const title = `issue 10 matrix on real-shaped nodes, ${mode} mode${hostRouting ? `, bpf.hostRouting ${hostRouting}` : ''}${flannel ? `, flannel ${flannel}` : ''}${pod ? ", agents in the chart's pods" : ''}`;
  // auto resolves to bpf on these nodes (see VARIANTS).
  const bypass = mode === 'bpf' && hostRouting !== 'stack';
  describeVariant(title, () => {
    const lab = new Lab(
      pod
        ? `him-rn${process.pid}`
        : `kbprn${mode[0]}${hostRouting?.[0] ?? ''}${flannel ? 'h' : ''}${process.pid}`,
    );
    let nodes: RealNodeLab;
    let api: FakeApiServer | undefined;

    beforeAll(async () => {
      if (!existsSync(join(CNI_BIN, 'bridge'))) {
        throw new Error(`no CNI plugins in ${CNI_BIN}: run bash scripts/install-deps.sh`);
      }
      await deleteStaleNamespaces(lab.prefix);
      nodes = new RealNodeLab(lab);
      await nodes.build({
        pods: PODS,
        hostServers: REAL_NODES.map((node) => ({ name: `host-${node.name}`, node: node.name, port: API })),
        loadBalancerRoutes: LB_ROUTES,
        ...(flannel ? { flannelBackend: flannel } : {}),
      });
      if (pod) {
        execFileSync('podman', ['load', '--quiet', '--input', process.env.KBP_IMAGE ?? '']);
        api = await fakeApiServerWith(nodes.objects(SERVICES));
        await nodes.startPods(mode, { api: apiAddress(api) });
      } else {
        nodes.writeManifests(SERVICES);
        await nodes.startAgents(
          mode,
          { bpffs: 'own' },
          hostRouting ? [`bpf.hostRouting=${hostRouting}`] : [],
        );
      }
    }, 240_000);

    afterAll(async () => {
      await nodes?.destroy();
      await api?.stop();
    });

    if (pod) {
      it('the pods watch the API server with their ServiceAccount token over TLS', () => {
        const watches = api?.requests.filter((r) => r.query.get('watch') === 'true') ?? [];
        expect(watches.length).toBeGreaterThanOrEqual(3 * REAL_NODES.length);
        for (const request of watches) {
          expect(request.headers.authorization).toBe(`Bearer ${nodes.serviceAccountToken}`);
        }
      });

      it("the chart's probes answer as the kubelet asks them, and the init container mounted bpffs on the node", async () => {
        for (const node of REAL_NODES) {
          const chartPod = nodes.chartPods.get(node.name)!;
          const probes = await chartPod.probe(lab);
          expect(probes.map((p) => p.kind).sort()).toEqual(['liveness', 'readiness', 'startup']);
          expect(probes.filter((p) => p.status !== 200)).toEqual([]);
          expect(nodes.nodeMountType(node.name, '/sys/fs/bpf')).toBe('bpf');
        }
      });
    }

    if (mode === 'bpf') {
      it("each node's socket hooks are on its own cgroup, none at the machine's cgroup2 root", async () => {
        const atRoot = new Set((await cgroupPrograms(findCgroup2Root())).map((p) => p.id));
        for (const node of REAL_NODES) {
          const hooks = await cgroupPrograms(nodes.nodeCgroup(node.name));
          expect(hooks.map((p) => p.name)).toEqual(
            expect.arrayContaining(['kbp_sock4_connect', 'kbp_sock6_connect', 'kbp_sock4_sendmsg']),
          );
          expect(hooks.filter((p) => atRoot.has(p.id))).toEqual([]);
        }
      });
    }

    for (const cell of CELLS) {
      for (const family of (['IPv4', 'IPv6'] as const).filter((f) => runsOver(cell, f))) {
        it(family === 'IPv4' ? cell.name : `${cell.name} [IPv6]`, async () => {
          const v4 = family === 'IPv4';
          const outside = cell.from === 'outside';
          const host = cell.from.startsWith('host:') ? cell.from.slice('host:'.length) : null;
          const ns = outside ? nodes.clientNs : host ? nodes.nodeNs(host) : nodes.podNs(cell.from);
          const hostNode = REAL_NODES.find((n) => n.name === host);
          const clientIP = outside
            ? v4
              ? CLIENT_IP
              : CLIENT_IP6
            : hostNode
              ? v4
                ? hostNode.ip
                : hostNode.ip6
              : v4
                ? nodes.pod(cell.from).ip
                : nodes.pod(cell.from).ip6;
          const download = cell.downloadBytes !== undefined;
          const send = (count: number) =>
            lab.requests(ns, targetOf(cell.target, family), {
              proto: cell.proto,
              count,
              timeoutMs: download ? DOWNLOAD_TIMEOUT_MS : REQUEST_TIMEOUT_MS[cell.proto],
              downloadBytes: cell.downloadBytes,
              datagramBytes: cell.datagramBytes,
            });
          if (!v4 && cell.datagramBytes !== undefined) {
            // Path MTU discovery (see the header): datagrams until each backend has echoed one,
            // at most one lost per direction of each backend's path.
            const echoed = new Set<string>();
            const lost: string[] = [];
            for (let probe = 0; probe < PMTU_PROBES && echoed.size < cell.backends.length; probe++) {
              const [answer] = await send(1);
              if (answer?.backend && answer.bytes === cell.datagramBytes) echoed.add(answer.backend);
              else lost.push(answer?.error ?? 'no answer');
            }
            expect(
              [...echoed].sort(),
              `echoed before the matrix's datagrams (lost: ${lost.join(', ')})`,
            ).toEqual([...cell.backends].sort());
            expect(lost.length, `lost to path MTU discovery: ${lost.join(', ')}`).toBeLessThanOrEqual(
              2 * cell.backends.length,
            );
          }
          const reassembler = cell.reassembledAt ? nodes.nodeNs(cell.reassembledAt) : null;
          const before = reassembler ? await fragStats(lab, reassembler, family) : null;
          const clientBefore = reassembler && !v4 ? await fragStats(lab, ns, family) : null;
          const results = await send(download ? 1 : REQUESTS);
          expect(problems(cell, clientIP, results)).toEqual([]);
          if (cell.localPods || cell.remotePods) {
            const backend = nodes.pod(cell.backends[0]!);
            const entries = (node: string) =>
              tcpConntrackEntries(lab, nodes.nodeNs(node), family, clientIP, v4 ? backend.ip : backend.ip6);
            const clientNode = nodes.pod(cell.from).node;
            const atClient = await entries(clientNode);
            if (bypass) expect(atClient, `connections in ${clientNode}'s conntrack`).toBe(0);
            else expect(atClient, `connections in ${clientNode}'s conntrack`).toBeGreaterThan(0);
            if (cell.remotePods)
              expect(
                await entries(backend.node),
                `connections in ${backend.node}'s conntrack`,
              ).toBeGreaterThan(0);
          }
          if (reassembler && before) {
            const after = await fragStats(lab, reassembler, family);
            if (v4) {
              expect(after.reasmOKs, `${cell.reassembledAt} reassembled`).toBeGreaterThan(before.reasmOKs);
            } else if (clientBefore) {
              // netfilter's IPv6 defrag (nf_conntrack_reasm) counts nothing in snmp6: the node's
              // Ip6ReasmOKs stay 0 while it forwards reassembled datagrams. What shows its
              // reassembly is the fragmenting again (an IPv6 router never fragments what it
              // forwards, it only refragments what conntrack reassembled); what shows the echoes
              // came back in fragments is the client's own stack reassembling each of them.
              const client = await fragStats(lab, ns, family);
              expect(
                client.reasmOKs - clientBefore.reasmOKs,
                'echoes the client reassembled',
              ).toBeGreaterThanOrEqual(REQUESTS);
            }
            expect(after.fragCreates, `${cell.reassembledAt} fragmented again`).toBeGreaterThan(
              before.fragCreates,
            );
          }
        });
      }
    }
  });
}
