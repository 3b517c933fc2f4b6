// iptables mode for real: the brain's decisions for a small cluster are applied with
// iptables-restore inside a node namespace; clients and pods are namespaces around it.
//
//   client-a 192.168.50.100 ──┐                 ┌── pod1 10.244.1.2 (client pod, node-a)
//   client-b 192.168.60.100 ──┤  node (node-a)  ├── pod2 10.244.2.2 (backend, node-a)
//   upstream (default route) ─┘                 └── pod3 10.244.3.2 (backend, "node-b")
//
// Pods also have fd00:244:N::2 and the web service an IPv6 ClusterIP (ip6tables-restore).

import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { decide } from '../../src/brain/decide.js';
import type { NodeEnv, ProxyDecisions } from '../../src/brain/types.js';
import { PIN_LAYOUT_VERSION } from '../../src/dataplanes/bpf/object.js';
import { cleanupNode } from '../../src/dataplanes/cleanup.js';
import {
  detectIptablesBackend,
  probeIptablesCapabilities,
  readNfacctCounters,
} from '../../src/dataplanes/iptables/backend.js';
import { type IptablesDataplane, openIptablesDataplane } from '../../src/dataplanes/iptables/dataplane.js';
import { endpointChain, servicePortChains } from '../../src/dataplanes/iptables/names.js';
import { BPFFS_ROOT, makeBpffsDir } from '../../src/host/bpffs.js';
import type { CommandRunner, ExecResult } from '../../src/host/command.js';
import type { IpAddrInterface } from '../../src/host/interfaces.js';
import { deleteStaleNamespaces, Lab } from '../../src/lab/netns.js';
import { silentLogger } from '../../src/logger.js';
import type { EndpointSlice, Service } from '../../src/model/types.js';
import {
  type ConntrackLab,
  noEndpointsThenEndpointsScenario,
  staleEndpointScenario,
} from '../support/conntrack-scenarios.js';
import { describeConntrackSysctlsLikeKubeProxy } from '../support/conntrack-sysctls-vs-kube-proxy.js';
import { brainConfig, endpoint, node, service, slice } from '../support/model-fixtures.js';
import { describeRoot } from '../support/privileges.js';

const PREFIX = `kbpipt${process.pid}`;
const NODE = 'node-a';
const NS = 'e2e';

const brain = brainConfig();

const POD2 = '10.244.2.2';
const POD3 = '10.244.3.2';
const POD2_V6 = 'fd00:244:2::2';
const POD3_V6 = 'fd00:244:3::2';
const local = { nodeName: NODE };
const remote = { nodeName: 'node-b' };
const ports: EndpointSlice['ports'] = [
  { name: 'http', port: 8080, protocol: 'TCP' },
  { name: 'dns', port: 8081, protocol: 'UDP' },
];
const servicePorts: Service['ports'] = [
  { name: 'http', protocol: 'TCP', port: 80, nodePort: 0 },
  { name: 'dns', protocol: 'UDP', port: 53, nodePort: 0 },
];

/** emptyEndpoints: the empty Service's endpoints (on node-a), or null to leave that Service out. */
function cluster(
  webEndpoints: string[],
  emptyEndpoints: string[] | null = [],
): { services: Service[]; slices: EndpointSlice[] } {
  const both = [endpoint(POD2, local), endpoint(POD3, remote)];
  const services = [
    service(NS, 'web', {
      clusterIP: '10.96.0.10',
      clusterIPs: ['10.96.0.10', 'fd00:96::10'],
      ports: servicePorts,
    }),
    service(NS, 'np', {
      type: 'NodePort',
      clusterIP: '10.96.0.20',
      ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 }],
    }),
    service(NS, 'local', {
      type: 'NodePort',
      clusterIP: '10.96.0.30',
      externalTrafficPolicy: 'Local',
      ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30081 }],
    }),
    service(NS, 'ext', { clusterIP: '10.96.0.40', externalIPs: ['192.168.70.10'], ports: servicePorts }),
    service(NS, 'lb', {
      type: 'LoadBalancer',
      clusterIP: '10.96.0.50',
      ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30082 }],
      loadBalancerIngress: [{ ip: '192.168.80.10', hostname: '', ipMode: 'VIP' }],
      loadBalancerSourceRanges: ['192.168.50.0/24'],
    }),
    service(NS, 'itp', { clusterIP: '10.96.0.60', internalTrafficPolicy: 'Local', ports: servicePorts }),
    service(NS, 'sticky', {
      clusterIP: '10.96.0.70',
      sessionAffinity: 'ClientIP',
      sessionAffinityTimeoutSeconds: 10800,
      ports: servicePorts,
    }),
    ...(emptyEndpoints === null
      ? []
      : [service(NS, 'empty', { clusterIP: '10.96.0.80', ports: servicePorts })]),
  ];
  const slices = [
    slice(
      NS,
      'web',
      'web-1',
      webEndpoints.map((ip) => endpoint(ip, ip === POD2 ? local : remote)),
      ports,
    ),
    ...['np', 'local', 'ext', 'lb', 'itp', 'sticky'].map((name) => slice(NS, name, `${name}-1`, both, ports)),
    ...(emptyEndpoints === null
      ? []
      : [
          slice(
            NS,
            'empty',
            'empty-1',
            emptyEndpoints.map((ip) => endpoint(ip, local)),
            ports,
          ),
        ]),
    slice(NS, 'web', 'web-v6', [endpoint(POD2_V6, local), endpoint(POD3_V6, remote)], ports, 'IPv6'),
  ];
  return { services, slices };
}

function decisionsFor(
  webEndpoints: string[],
  env: NodeEnv,
  emptyEndpoints: string[] | null = [],
): ProxyDecisions {
  const { services, slices } = cluster(webEndpoints, emptyEndpoints);
  return decide(
    {
      services: new Map(services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      endpointSlices: new Map(slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      node: node(NODE),
      serviceCIDRs: new Map(),
    },
    env,
    brain,
    { families: ['IPv4', 'IPv6'] },
  );
}

describeRoot('iptables mode in network namespaces', () => {
  const lab = new Lab(PREFIX);
  const onNode: CommandRunner = (cmd, args, opts) => lab.exec('node', cmd, args, opts);
  let env: NodeEnv;
  let dataplane: IptablesDataplane;

  const backends = (results: { backend: string | null }[]) => new Set(results.map((r) => r.backend));
  const natSave = async (): Promise<string> =>
    (await onNode(`iptables-${dataplane.backend}-save`, ['-c', '-t', 'nat'])).stdout;
  const allTables = async (): Promise<string> => {
    const outputs: ExecResult[] = [];
    for (const binary of [
      'iptables-nft-save',
      'iptables-legacy-save',
      'ip6tables-nft-save',
      'ip6tables-legacy-save',
    ]) {
      outputs.push(await onNode(binary, [], { allowFailure: true }));
    }
    return outputs.map((o) => o.stdout).join('');
  };

  beforeAll(async () => {
    await deleteStaleNamespaces(PREFIX);
    for (const ns of ['node', 'client-a', 'client-b', 'pod1', 'pod2', 'pod3', 'upstream'])
      await lab.addNamespace(ns);
    const links: [string, string, string, string][] = [
      ['client-a', '192.168.50.100/24', 'ca', '192.168.50.1/24'],
      ['client-b', '192.168.60.100/24', 'cb', '192.168.60.1/24'],
      ['pod1', '10.244.1.2/24', 'p1', '10.244.1.1/24'],
      ['pod2', '10.244.2.2/24', 'p2', '10.244.2.1/24'],
      ['pod3', '10.244.3.2/24', 'p3', '10.244.3.1/24'],
    ];
    for (const [ns, address, nodeIf, nodeAddress] of links) {
      await lab.link('node', nodeIf, ns, 'eth0');
      await lab.addAddress('node', nodeIf, nodeAddress);
      await lab.addAddress(ns, 'eth0', address);
      await lab.addRoute(ns, 'default', 'via', nodeAddress.split('/')[0] as string);
    }
    await lab.sysctl('node', 'net.ipv4.ip_forward', '1');
    // A node as distributions ship it: strict rp_filter (as RHEL ships it) and the conntrack INVALID drop in FORWARD.
    await lab.reversePathFilter('node', 1);
    await lab.dropInvalidForwards('node');
    // The pods are dual-stack (nodad: no duplicate address detection delay in a fresh namespace).
    await lab.sysctl('node', 'net.ipv6.conf.all.forwarding', '1');
    for (const pod of [1, 2, 3]) {
      await onNode('ip', ['-6', 'addr', 'add', `fd00:244:${pod}::1/64`, 'dev', `p${pod}`, 'nodad']);
      await lab.exec(`pod${pod}`, 'ip', [
        '-6',
        'addr',
        'add',
        `fd00:244:${pod}::2/64`,
        'dev',
        'eth0',
        'nodad',
      ]);
      await lab.exec(`pod${pod}`, 'ip', ['-6', 'route', 'add', 'default', 'via', `fd00:244:${pod}::1`]);
    }
    // A real node has a default route: traffic kube-proxy does not DNAT is forwarded (and meets
    // the filter rules) instead of failing with "network unreachable" at routing.
    await lab.link('node', 'uplink', 'upstream', 'eth0');
    await lab.addAddress('node', 'uplink', '172.31.255.1/24');
    await lab.addAddress('upstream', 'eth0', '172.31.255.254/24');
    await lab.addRoute('node', 'default', 'via', '172.31.255.254');
    for (const [ns, name] of [
      ['pod2', 'pod2'],
      ['pod3', 'pod3'],
    ] as const) {
      await lab.startBackend(ns, { name, tcpPorts: [8080], udpPorts: [8081] });
    }
    for (const ns of ['node', 'pod1', 'pod2', 'pod3']) await lab.waitForIPv6Addresses(ns);
    const interfaces = JSON.parse((await onNode('ip', ['-j', 'addr', 'show'])).stdout) as IpAddrInterface[];
    env = {
      nodeName: NODE,
      nodeIPs: ['192.168.50.1', 'fd00:244:1::1'],
      interfaces,
      nodeLabels: {},
      iptables: await probeIptablesCapabilities({ exec: onNode }),
    };
    dataplane = await openIptablesDataplane({
      config: { syncPeriodSeconds: 30, conntrack: { tcpBeLiberal: false } },
      exec: onNode,
      capabilities: env.iptables,
    });
    const result = await dataplane.sync(decisionsFor([POD2, POD3], env), {
      changedServices: new Set(),
      full: true,
      reason: 'first sync',
    });
    expect(result.scope.full).toBe(true);
  });

  afterAll(async () => {
    await lab.destroy();
  });

  it('uses the nft backend of a fresh namespace, with random-fully and the nfacct counters', async () => {
    expect(await detectIptablesBackend(onNode)).toBe('nft');
    expect(dataplane.backend).toBe('nft');
    // Debian 12's iptables 1.8.9 has --random-fully; nfacct needs the nfacct tool and xt_nfacct.
    expect(env.iptables.randomFully).toBe(true);
    const filter = (await onNode('iptables-nft-save', ['-t', 'filter'])).stdout;
    expect(filter).toContain(
      '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
    );
    expect(filter.includes('ct_state_invalid_dropped_pkts')).toBe(env.iptables.nfacct);
    if (env.iptables.nfacct) {
      const counters = await readNfacctCounters(onNode);
      expect([...counters.keys()].sort()).toEqual([
        'ct_state_invalid_dropped_pkts',
        'localhost_nps_accepted_pkts',
      ]);
    }
    expect(await natSave()).toContain('--random-fully');
  });

  it('ClusterIP from a pod reaches every endpoint over TCP and UDP, keeping the pod source', async () => {
    const tcp = await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 30 });
    expect(tcp.every((r) => r.error === null)).toBe(true);
    expect(backends(tcp)).toEqual(new Set(['pod2', 'pod3']));
    expect(tcp.every((r) => r.seenClient?.startsWith('10.244.1.2:'))).toBe(true);
    const udp = await lab.requests('pod1', '10.96.0.10:53', { proto: 'udp', count: 30 });
    expect(udp.every((r) => r.error === null)).toBe(true);
    expect(backends(udp)).toEqual(new Set(['pod2', 'pod3']));
  });

  it('ClusterIP over IPv6 (ip6tables-restore) reaches every endpoint over TCP and UDP', async () => {
    const tcp = await lab.requests('pod1', '[fd00:96::10]:80', { proto: 'tcp', count: 30 });
    expect(tcp.every((r) => r.error === null)).toBe(true);
    expect(backends(tcp)).toEqual(new Set(['pod2', 'pod3']));
    expect(tcp.every((r) => r.seenClient?.startsWith('fd00:244:1::2:'))).toBe(true);
    const udp = await lab.requests('pod1', '[fd00:96::10]:53', { proto: 'udp', count: 10 });
    expect(udp.every((r) => r.error === null)).toBe(true);
    const nat6 = (await onNode('ip6tables-nft-save', ['-t', 'nat'])).stdout;
    expect(nat6).toContain('! -d ::1/128');
    expect(nat6).toContain(`--to-destination [${POD2_V6}]:8080`);
  });

  it('ClusterIP from off the cluster is masqueraded to the node address', async () => {
    await lab.addRoute('client-a', '10.96.0.0/16', 'via', '192.168.50.1');
    const results = await lab.requests('client-a', '10.96.0.10:80', { proto: 'tcp', count: 10 });
    expect(results.every((r) => r.error === null)).toBe(true);
    for (const r of results) {
      expect(r.seenClient?.split(':')[0]).toBe(r.backend === 'pod2' ? '10.244.2.1' : '10.244.3.1');
    }
  });

  it('NodePort (eTP=Cluster) reaches every endpoint, masqueraded', async () => {
    const results = await lab.requests('client-a', '192.168.50.1:30080', { proto: 'tcp', count: 30 });
    expect(results.every((r) => r.error === null)).toBe(true);
    expect(backends(results)).toEqual(new Set(['pod2', 'pod3']));
    expect(results.every((r) => r.seenClient?.startsWith('10.244.'))).toBe(true);
  });

  it('NodePort on 127.0.0.1 from the node itself (route_localnet), counted by nfacct', async () => {
    const before = (await readNfacctCounters(onNode)).get('localhost_nps_accepted_pkts') ?? 0;
    const results = await lab.requests('node', '127.0.0.1:30080', { proto: 'tcp', count: 5 });
    expect(results.every((r) => r.error === null)).toBe(true);
    expect((await onNode('sysctl', ['-n', 'net.ipv4.conf.all.route_localnet'])).stdout.trim()).toBe('1');
    if (env.iptables.nfacct) {
      // Only the first packet of each connection traverses nat.
      expect((await readNfacctCounters(onNode)).get('localhost_nps_accepted_pkts')).toBe(before + 5);
    }
  });

  it('NodePort with eTP=Local reaches only the local endpoint and keeps the client address', async () => {
    const results = await lab.requests('client-a', '192.168.50.1:30081', { proto: 'tcp', count: 20 });
    expect(results.every((r) => r.error === null)).toBe(true);
    expect(backends(results)).toEqual(new Set(['pod2']));
    expect(results.every((r) => r.seenClient?.startsWith('192.168.50.100:'))).toBe(true);
  });

  it('externalIP reaches the endpoints over TCP and UDP', async () => {
    await lab.addRoute('client-a', '192.168.70.0/24', 'via', '192.168.50.1');
    const tcp = await lab.requests('client-a', '192.168.70.10:80', { proto: 'tcp', count: 20 });
    expect(tcp.every((r) => r.error === null)).toBe(true);
    expect(backends(tcp)).toEqual(new Set(['pod2', 'pod3']));
    const udp = await lab.requests('client-a', '192.168.70.10:53', { proto: 'udp', count: 10 });
    expect(udp.every((r) => r.error === null)).toBe(true);
  });

  it('LB IP accepts sources inside loadBalancerSourceRanges and drops the others', async () => {
    await lab.addRoute('client-a', '192.168.80.0/24', 'via', '192.168.50.1');
    await lab.addRoute('client-b', '192.168.80.0/24', 'via', '192.168.60.1');
    const allowed = await lab.requests('client-a', '192.168.80.10:80', { proto: 'tcp', count: 10 });
    expect(allowed.every((r) => r.error === null)).toBe(true);
    const blocked = await lab.requests('client-b', '192.168.80.10:80', {
      proto: 'tcp',
      count: 2,
      timeoutMs: 700,
    });
    expect(blocked.map((r) => r.error)).toEqual(['timeout', 'timeout']);
    // The drop is KUBE-PROXY-FIREWALL's, for the LB IP only: the same client reaches the NodePort.
    const nodePort = await lab.requests('client-b', '192.168.60.1:30082', { proto: 'tcp', count: 3 });
    expect(nodePort.every((r) => r.error === null)).toBe(true);
  });

  it('iTP=Local sends ClusterIP traffic only to the local endpoint', async () => {
    const results = await lab.requests('pod1', '10.96.0.60:80', { proto: 'tcp', count: 20 });
    expect(results.every((r) => r.error === null)).toBe(true);
    expect(backends(results)).toEqual(new Set(['pod2']));
  });

  it('ClientIP affinity keeps a client on one backend', async () => {
    const results = await lab.requests('pod1', '10.96.0.70:80', { proto: 'tcp', count: 15 });
    expect(results.every((r) => r.error === null)).toBe(true);
    expect(backends(results).size).toBe(1);
  });

  it('a service without endpoints refuses connections (REJECT)', async () => {
    const results = await lab.requests('pod1', '10.96.0.80:80', { proto: 'tcp', count: 2 });
    expect(results.map((r) => r.error)).toEqual(['ECONNREFUSED', 'ECONNREFUSED']);
  });

  it('a partial sync after an endpoint change rewrites only that service and deletes its stale chains', async () => {
    const webSep3 = endpointChain(`${NS}/web:http`, 'TCP', `${POD3}:8080`);
    const npSeps = [POD2, POD3].map((ip) => endpointChain(`${NS}/np:http`, 'TCP', `${ip}:8080`));
    const before = await natSave();
    expect(before).toContain(`:${webSep3} `);
    // The np chains carry packet counters from the NodePort test; a chain that is rewritten
    // loses them, one that is left alone keeps them.
    const dnatCounters = (save: string, chain: string) =>
      save
        .split('\n')
        .filter((l) => l.includes(`-A ${chain} `) && l.includes('DNAT'))
        .map((l) => l.split(' ')[0]);
    const npCountersBefore = npSeps.map((c) => dnatCounters(before, c)[0]);
    expect(npCountersBefore.every((c) => c !== undefined && c !== '[0:0]')).toBe(true);

    const result = await dataplane.sync(decisionsFor([POD2], env), {
      changedServices: new Set([`${NS}/web`]),
      full: false,
      reason: 'changed Services',
    });
    expect(result.scope.full).toBe(false);
    const after = await natSave();
    expect(after).not.toContain(webSep3);
    expect(npSeps.map((c) => dnatCounters(after, c)[0])).toEqual(npCountersBefore);
    const stats = dataplane.stats('IPv4');
    expect(stats?.rulesLast.nat).toBeLessThan(stats?.rulesTotal.nat ?? 0);

    const results = await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 10 });
    expect(backends(results)).toEqual(new Set(['pod2']));
  });

  it('a failed restore leaves the rules in place, is counted, and the next sync is full', async () => {
    const before = (await onNode('iptables-nft-save', ['-t', 'nat'])).stdout.replace(/^#.*\n/gm, '');
    const broken = decisionsFor([POD2], env);
    const web = broken.families[0]?.servicePorts.find((sp) => sp.name === 'web');
    if (!web) throw new Error('web service port missing');
    web.clusterIP = '10.96.0.300';
    await expect(
      dataplane.sync(broken, {
        changedServices: new Set([`${NS}/web`]),
        full: false,
        reason: 'changed Services',
      }),
    ).rejects.toThrow(/partial iptables-restore failed/);
    expect(dataplane.stats('IPv4')?.partialRestoreFailures).toBe(1);
    const after = (await onNode('iptables-nft-save', ['-t', 'nat'])).stdout.replace(/^#.*\n/gm, '');
    expect(after).toBe(before);
    const retry = await dataplane.sync(decisionsFor([POD2, POD3], env), {
      changedServices: new Set(),
      full: false,
      reason: 'changed Services',
    });
    expect(retry.scope.full).toBe(true);
    const results = await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 20 });
    expect(backends(results)).toEqual(new Set(['pod2', 'pod3']));
  });

  const conntrackLab = (): ConntrackLab => ({
    lab,
    onNode,
    dataplane,
    decisions: (web, empty) => decisionsFor(web, env, empty),
    client: 'pod1',
    clientIP: '10.244.1.2',
    backends: { pod2: POD2, pod3: POD3 },
    namespace: NS,
  });

  it('conntrack: a UDP flow whose endpoint goes away reaches the remaining one after the sync', () =>
    staleEndpointScenario(conntrackLab()));

  it('conntrack: an un-NATed UDP flow, kept while its Service has no endpoints, is answered once it has some', () =>
    noEndpointsThenEndpointsScenario(conntrackLab()));

  it('cleanup removes every KUBE-* chain and jump, ipvs-mode ipsets, the nftables tables and the bpf pins', async () => {
    const svc = servicePortChains(`${NS}/web:http`, 'TCP').cluster;
    expect(await allTables()).toContain(svc);
    // What kube-proxy's other modes leave behind: an ipvs-mode ipset referenced from a rule
    // (it can only go after the rule), and the nftables mode's table.
    await onNode('ipset', ['create', 'KUBE-LOOP-BACK', 'hash:ip,port,ip']);
    await onNode('iptables-nft', ['-t', 'nat', '-N', 'KUBE-LOAD-BALANCER']);
    await onNode('iptables-nft', [
      '-t',
      'nat',
      '-A',
      'KUBE-LOAD-BALANCER',
      '-m',
      'set',
      '--match-set',
      'KUBE-LOOP-BACK',
      'dst,dst,src',
      '-j',
      'MASQUERADE',
    ]);
    await onNode('nft', ['add', 'table', 'ip', 'kube-proxy']);
    const pinPath = join(BPFFS_ROOT, `${PREFIX}-pins`);
    makeBpffsDir(join(pinPath, PIN_LAYOUT_VERSION, 'maps'), silentLogger);

    // The bpf detach works in this process's namespace, not the node's: the bpf tests cover it.
    const report = await cleanupNode({ pinPath, exec: onNode, detachBpf: false });
    expect(report.errors).toEqual([]);
    expect(report.removed).toEqual(
      expect.arrayContaining([
        'iptables nft IPv4 nat/KUBE-SERVICES',
        'iptables nft IPv4 nat/KUBE-LOAD-BALANCER',
        'iptables nft IPv4 filter/KUBE-FIREWALL',
        'nft table ip kube-proxy',
        'ipset KUBE-LOOP-BACK',
        `bpf pins ${pinPath}`,
      ]),
    );
    expect(await allTables()).not.toMatch(/KUBE-/);
    expect((await onNode('ipset', ['list', '-n'])).stdout.trim()).toBe('');
    expect((await onNode('nft', ['list', 'tables'])).stdout).not.toContain('kube-proxy');
    await expect(stat(pinPath)).rejects.toThrow();
    // With the rules gone the ClusterIP is just an address routed upstream.
    const results = await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 1, timeoutMs: 500 });
    expect(results[0]?.backend).toBeNull();
    // A second run finds nothing.
    expect(await cleanupNode({ pinPath, exec: onNode, detachBpf: false })).toEqual({
      removed: [],
      errors: [],
    });
  });

  it('cleanup leaves alone a --bpf-pin-path that is not on bpffs: it holds no pins', async () => {
    const elsewhere = await mkdtemp(join(tmpdir(), `${PREFIX}-pins-`));
    try {
      const report = await cleanupNode({ pinPath: elsewhere, exec: onNode, detachBpf: false });
      expect(report.errors.filter((e) => e.startsWith('bpf'))).toEqual([
        expect.stringMatching(
          new RegExp(`^bpf pins ${elsewhere}: left alone, ${elsewhere} is on .*, not bpffs$`),
        ),
      ]);
      expect((await stat(elsewhere)).isDirectory()).toBe(true);
    } finally {
      await rm(elsewhere, { recursive: true, force: true });
    }
  });
});

describeConntrackSysctlsLikeKubeProxy('iptables', `kbpiptct${process.pid}`);
