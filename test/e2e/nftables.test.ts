// nftables mode for real: the brain's decisions for a small cluster are applied with `nft -f`
// inside a node namespace; clients and pods are namespaces around it.
//
//   client-a 192.168.50.100 ──┐                 ┌── pod1 10.244.1.2 (client pod, node-a)
//   client-b 192.168.60.100 ──┤  node (node-a)  ├── pod2 10.244.2.2 (backend, node-a)
//   upstream (default route) ─┘                 └── pod3 10.244.3.2 (backend, "node-b")
//
// client-a, pod1, pod2 and pod3 also have IPv6 addresses (fd00:50::100, fd00:244:N::2): the
// IPv6 family runs its own table with one service, web6.

import { afterAll, beforeAll, expect, it } from 'vitest';
import { decide } from '../../src/brain/decide.js';
import type { NodeEnv, ProxyDecisions, ServicePortDecision } from '../../src/brain/types.js';
import { cleanupNftables } from '../../src/dataplanes/nftables/cleanup.js';
import { NftablesDataplane, STALE_CHAIN_DELAY_MS } from '../../src/dataplanes/nftables/dataplane.js';
import { endpointObjectNames, servicePortChainNames } from '../../src/dataplanes/nftables/names.js';
import { renderNftablesText } from '../../src/dataplanes/nftables/plan.js';
import type { CommandRunner } from '../../src/host/command.js';
import type { IpAddrInterface } from '../../src/host/interfaces.js';
import { deleteStaleNamespaces, Lab } from '../../src/lab/netns.js';
import type { EndpointSlice, Service } from '../../src/model/types.js';
import {
  type ConntrackLab,
  noEndpointsThenEndpointsScenario,
  staleEndpointScenario,
} from '../support/conntrack-scenarios.js';
import { describeConntrackSysctlsLikeKubeProxy } from '../support/conntrack-sysctls-vs-kube-proxy.js';
import {
  brainConfig,
  endpoint,
  node,
  service,
  serviceCIDR,
  serviceCIDRMap,
  slice,
} from '../support/model-fixtures.js';
import { describeRoot } from '../support/privileges.js';

// KBP_LAB_PREFIX (e.g. "hsc-nft") keeps runs of several people on one machine apart.
const PREFIX = `${process.env.KBP_LAB_PREFIX ?? 'kbpnft'}${process.pid}`;
const NODE = 'node-a';
const NS = 'e2e';

// As `run --proxy-mode nftables` resolves it: nodePortAddresses defaults to the primary IP and
// NodePorts never answer on localhost.
const brain = brainConfig({ nodePortAddresses: ['primary'], localhostNodePorts: false });

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

/** The cluster's ServiceCIDR: every ClusterIP below is allocated from it. */
const SERVICE_CIDRS = serviceCIDRMap(serviceCIDR('kubernetes', ['10.96.0.0/16', 'fd00:96::/112']));

/** emptyEndpoints: the empty Service's endpoints (on node-a), or null to leave that Service out. */
function cluster(
  webEndpoints: string[],
  emptyEndpoints: string[] | null = [],
): { services: Service[]; slices: EndpointSlice[] } {
  const both = [endpoint(POD2, local), endpoint(POD3, remote)];
  const services = [
    service(NS, 'web', { clusterIP: '10.96.0.10', ports: servicePorts }),
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
    service(NS, 'web6', {
      type: 'NodePort',
      clusterIP: 'fd00:96::10',
      clusterIPs: ['fd00:96::10'],
      ports: [
        { name: 'http', protocol: 'TCP', port: 80, nodePort: 30083 },
        { name: 'dns', protocol: 'UDP', port: 53, nodePort: 0 },
      ],
    }),
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
    slice(NS, 'web6', 'web6-1', [endpoint(POD2_V6, local), endpoint(POD3_V6, remote)], ports, 'IPv6'),
  ];
  return { services, slices };
}

function decisionsFor(
  webEndpoints: string[],
  env: NodeEnv,
  emptyEndpoints: string[] | null = [],
  serviceCIDRs = SERVICE_CIDRS,
): ProxyDecisions {
  const { services, slices } = cluster(webEndpoints, emptyEndpoints);
  return decide(
    {
      services: new Map(services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      endpointSlices: new Map(slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      node: node(NODE),
      serviceCIDRs,
    },
    env,
    brain,
    { families: ['IPv4', 'IPv6'] },
  );
}

function servicePort(decisions: ProxyDecisions, name: string, portName: string): ServicePortDecision {
  const sp = decisions.families[0]?.servicePorts.find((p) => p.name === name && p.portName === portName);
  if (!sp) throw new Error(`no service port ${name}:${portName}`);
  return sp;
}

describeRoot('nftables mode in network namespaces', () => {
  const lab = new Lab(PREFIX);
  const onNode: CommandRunner = (cmd, args, opts) => lab.exec('node', cmd, args, opts);
  let env: NodeEnv;
  let dataplane: NftablesDataplane;

  const backends = (results: { backend: string | null }[]) => new Set(results.map((r) => r.backend));
  const chains = async (): Promise<string[]> => {
    const { stdout } = await onNode('nft', ['-j', 'list', 'chains', 'ip']);
    const parsed = JSON.parse(stdout) as { nftables: { chain?: { table: string; name: string } }[] };
    return parsed.nftables.flatMap((o) => (o.chain?.table === 'kube-proxy' ? [o.chain.name] : []));
  };
  /** The rule handles of a chain: a rewritten chain gets new ones, an untouched one keeps them. */
  const ruleHandles = async (chain: string): Promise<string[]> => {
    const { stdout } = await onNode('nft', ['-a', 'list', 'chain', 'ip', 'kube-proxy', chain]);
    return [...stdout.matchAll(/# handle (\d+)/g)].map((m) => m[1] as string).slice(1);
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
    const links6: [string, string, string, string][] = [
      ['client-a', 'fd00:50::100/64', 'ca', 'fd00:50::1/64'],
      ['pod1', 'fd00:244:1::2/64', 'p1', 'fd00:244:1::1/64'],
      ['pod2', 'fd00:244:2::2/64', 'p2', 'fd00:244:2::1/64'],
      ['pod3', 'fd00:244:3::2/64', 'p3', 'fd00:244:3::1/64'],
    ];
    for (const [ns, address, nodeIf, nodeAddress] of links6) {
      // nodad: usable at once instead of after duplicate address detection.
      await lab.exec('node', 'ip', ['addr', 'add', nodeAddress, 'dev', nodeIf, 'nodad']);
      await lab.exec(ns, 'ip', ['addr', 'add', address, 'dev', 'eth0', 'nodad']);
      await lab.exec(ns, 'ip', ['-6', 'route', 'add', 'default', 'via', nodeAddress.split('/')[0] as string]);
    }
    await lab.sysctl('node', 'net.ipv4.ip_forward', '1');
    // A node as distributions ship it: loose rp_filter (systemd's default) and the conntrack INVALID drop in FORWARD.
    await lab.reversePathFilter('node', 2);
    await lab.dropInvalidForwards('node');
    await lab.sysctl('node', 'net.ipv6.conf.all.forwarding', '1');
    // A real node has a default route: traffic that is not DNATed is forwarded (and meets the
    // filter chains) instead of failing with "network unreachable" at routing.
    await lab.link('node', 'uplink', 'upstream', 'eth0');
    await lab.addAddress('node', 'uplink', '172.31.255.1/24');
    await lab.addAddress('upstream', 'eth0', '172.31.255.254/24');
    await lab.addRoute('node', 'default', 'via', '172.31.255.254');
    for (const name of ['pod2', 'pod3']) {
      await lab.startBackend(name, { name, tcpPorts: [8080], udpPorts: [8081] });
    }
    for (const ns of ['node', ...links6.map(([name]) => name)]) await lab.waitForIPv6Addresses(ns);
    const interfaces = JSON.parse((await onNode('ip', ['-j', 'addr', 'show'])).stdout) as IpAddrInterface[];
    env = {
      nodeName: NODE,
      nodeIPs: ['192.168.50.1', 'fd00:50::1'],
      interfaces,
      nodeLabels: {},
      iptables: { randomFully: true, nfacct: false },
    };
    dataplane = new NftablesDataplane({ exec: onNode });
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

  it('the real nft accepts the rendered transactions of both families (nft -c)', async () => {
    const dual = decide(
      {
        services: new Map([
          [
            `${NS}/dual`,
            service(NS, 'dual', {
              clusterIP: '10.96.1.1',
              clusterIPs: ['10.96.1.1', 'fd00:96::1'],
              sessionAffinity: 'ClientIP',
              sessionAffinityTimeoutSeconds: 60,
              type: 'LoadBalancer',
              externalTrafficPolicy: 'Local',
              loadBalancerIngress: [
                { ip: '192.168.80.20', hostname: '', ipMode: 'VIP' },
                { ip: '2001:db8:80::20', hostname: '', ipMode: 'VIP' },
              ],
              loadBalancerSourceRanges: ['192.168.50.0/24', '2001:db8:50::/64'],
              ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30090 }],
            }),
          ],
        ]),
        endpointSlices: new Map([
          [
            `${NS}/dual-4`,
            slice(NS, 'dual', 'dual-4', [endpoint(POD2, local), endpoint(POD3, remote)], ports),
          ],
          [`${NS}/dual-6`, slice(NS, 'dual', 'dual-6', [endpoint('fd00:244::2', local)], ports, 'IPv6')],
        ]),
        node: node(NODE),
        serviceCIDRs: SERVICE_CIDRS,
      },
      { ...env, nodeIPs: ['192.168.50.1', '2001:db8:50::1'] },
      { ...brain, clusterCIDRs: ['10.244.0.0/16', 'fd00:244::/64'] },
    );
    expect(dual.families.map((f) => f.family)).toEqual(['IPv4', 'IPv6']);
    const text = renderNftablesText(dual);
    expect(text).toContain('ip6 daddr { fd00:96::/112 } drop');
    const check = await onNode('nft', ['-c', '-f', '-'], { input: text, allowFailure: true });
    expect(check.stderr).toBe('');
    expect(check.code).toBe(0);
  });

  it('programs the table with its base chains and masquerading', async () => {
    const { stdout } = await onNode('nft', ['list', 'table', 'ip', 'kube-proxy']);
    expect(stdout).toContain('comment "rules for kube-proxy"');
    expect(stdout).toMatch(
      /chain nat-prerouting \{\s+type nat hook prerouting priority dstnat; policy accept;/,
    );
    // nft names the priorities back: dstnat is -100.
    expect(stdout).toMatch(
      /chain filter-prerouting-pre-dnat \{\s+type filter hook prerouting priority dstnat - 10;/,
    );
    expect(stdout).toMatch(/chain filter-input \{\s+type filter hook input priority filter;/);
    expect(stdout).toContain('masquerade fully-random');
    expect(stdout).toContain('elements = { 192.168.50.1 }');
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

  it('IPv6: ClusterIP over TCP and UDP and NodePort (masqueraded) in the ip6 table', async () => {
    const tcp = await lab.requests('pod1', '[fd00:96::10]:80', { proto: 'tcp', count: 20 });
    expect(tcp.filter((r) => r.error !== null)).toEqual([]);
    expect(backends(tcp)).toEqual(new Set(['pod2', 'pod3']));
    // The lab prints IPv6 clients as "address:port".
    expect(tcp.every((r) => r.seenClient?.startsWith('fd00:244:1::2:'))).toBe(true);
    const udp = await lab.requests('pod1', '[fd00:96::10]:53', { proto: 'udp', count: 20 });
    expect(udp.filter((r) => r.error !== null)).toEqual([]);
    expect(backends(udp)).toEqual(new Set(['pod2', 'pod3']));
    const nodePort = await lab.requests('client-a', '[fd00:50::1]:30083', { proto: 'tcp', count: 20 });
    expect(nodePort.filter((r) => r.error !== null)).toEqual([]);
    expect(backends(nodePort)).toEqual(new Set(['pod2', 'pod3']));
    for (const r of nodePort) {
      expect(r.seenClient?.startsWith(r.backend === 'pod2' ? 'fd00:244:2::1:' : 'fd00:244:3::1:')).toBe(true);
    }
    const { stdout } = await onNode('nft', ['list', 'table', 'ip6', 'kube-proxy']);
    expect(stdout).toContain('elements = { fd00:50::1 }');
  });

  it('ClusterIP from off the cluster is masqueraded: the backend sees the node address', async () => {
    await lab.addRoute('client-a', '10.96.0.0/16', 'via', '192.168.50.1');
    const results = await lab.requests('client-a', '10.96.0.10:80', { proto: 'tcp', count: 10 });
    expect(results.every((r) => r.error === null)).toBe(true);
    for (const r of results) {
      expect(r.seenClient?.split(':')[0]).toBe(r.backend === 'pod2' ? '10.244.2.1' : '10.244.3.1');
    }
  });

  it('a ClusterIP port the service does not have is rejected (cluster-ips-check)', async () => {
    const results = await lab.requests('pod1', '10.96.0.10:81', { proto: 'tcp', count: 1 });
    expect(results[0]?.error).toBe('ECONNREFUSED');
  });

  it('an unallocated ClusterIP inside the ServiceCIDR is dropped, in both families, while real ClusterIPs answer', async () => {
    const unallocated = { proto: 'tcp', count: 1, timeoutMs: 700 } as const;
    expect((await lab.requests('pod1', '10.96.0.99:80', unallocated))[0]?.error).toBe('timeout');
    expect((await lab.requests('pod1', '[fd00:96::99]:80', unallocated))[0]?.error).toBe('timeout');
    expect(
      (await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 3 })).map((r) => r.error),
    ).toEqual([null, null, null]);
    expect(
      (await lab.requests('pod1', '[fd00:96::10]:80', { proto: 'tcp', count: 3 })).map((r) => r.error),
    ).toEqual([null, null, null]);
    // The drop is the ServiceCIDR rule's: upstream owns 10.96.0.99 (and refuses port 80) once the
    // cluster has no ServiceCIDR. A sync that only changes the ServiceCIDRs is made full.
    await lab.exec('upstream', 'ip', ['addr', 'add', '10.96.0.99/32', 'dev', 'lo']);
    await lab.addRoute('upstream', '10.244.0.0/16', 'via', '172.31.255.1');
    try {
      const none = await dataplane.sync(decisionsFor([POD2, POD3], env, [], new Map()), {
        changedServices: new Set(),
        full: false,
        reason: 'changed Services',
      });
      expect(none.scope.full).toBe(true);
      const { stdout } = await onNode('nft', ['list', 'chain', 'ip', 'kube-proxy', 'cluster-ips-check']);
      expect(stdout).not.toContain('drop');
      expect((await lab.requests('pod1', '10.96.0.99:80', unallocated))[0]?.error).toBe('ECONNREFUSED');
      const back = await dataplane.sync(decisionsFor([POD2, POD3], env), {
        changedServices: new Set(),
        full: false,
        reason: 'changed Services',
      });
      expect(back.scope.full).toBe(true);
      expect((await lab.requests('pod1', '10.96.0.99:80', unallocated))[0]?.error).toBe('timeout');
    } finally {
      await lab.exec('upstream', 'ip', ['route', 'del', '10.244.0.0/16']);
      await lab.exec('upstream', 'ip', ['addr', 'del', '10.96.0.99/32', 'dev', 'lo']);
    }
  });

  it('NodePort (eTP=Cluster) on the primary IP reaches every endpoint, masqueraded', async () => {
    const results = await lab.requests('client-a', '192.168.50.1:30080', { proto: 'tcp', count: 30 });
    expect(results.every((r) => r.error === null)).toBe(true);
    expect(backends(results)).toEqual(new Set(['pod2', 'pod3']));
    expect(results.every((r) => r.seenClient?.startsWith('10.244.'))).toBe(true);
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
    // The firewall covers the LB IP only: the same client reaches the NodePort.
    const nodePort = await lab.requests('client-b', '192.168.50.1:30082', { proto: 'tcp', count: 3 });
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
    const { stdout } = await onNode('nft', ['list', 'table', 'ip', 'kube-proxy']);
    expect(stdout).toMatch(/elements = \{ 10\.244\.1\.2 (timeout 3h |expires )/);
  });

  it('a service without endpoints refuses connections (reject-chain)', async () => {
    const results = await lab.requests('pod1', '10.96.0.80:80', { proto: 'tcp', count: 2 });
    expect(results.map((r) => r.error)).toEqual(['ECONNREFUSED', 'ECONNREFUSED']);
  });

  it('a partial sync after an endpoint change rewrites only that service; its stale chains are flushed, then deleted', async () => {
    const before = decisionsFor([POD2, POD3], env);
    const web = servicePort(before, 'web', 'http');
    const webChain = servicePortChainNames(web).cluster;
    const webDns = servicePortChainNames(servicePort(before, 'web', 'dns')).cluster;
    const np = servicePort(before, 'np', 'http');
    const npChain = servicePortChainNames(np).cluster;
    const npHandles = await ruleHandles(npChain);
    const webHandles = await ruleHandles(webChain);
    // v1.37: no endpoint chains without affinity; the service chain DNATs itself.
    expect((await chains()).filter((c) => c.startsWith('endpoint-') && c.includes('/web/'))).toEqual([]);

    const result = await dataplane.sync(decisionsFor([POD2], env), {
      changedServices: new Set([`${NS}/web`]),
      full: false,
      reason: 'changed Services',
    });
    expect(result.scope.full).toBe(false);
    // web has two ports (http, dns): two blocks, nothing else.
    expect(dataplane.stats('IPv4')?.lastWritten.blocks).toBe(2);
    expect(await ruleHandles(npChain)).toEqual(npHandles);
    expect(await ruleHandles(webChain)).not.toEqual(webHandles);
    expect(dataplane.pendingStaleChains('IPv4')).toEqual([]);
    const results = await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 10 });
    expect(backends(results)).toEqual(new Set(['pod2']));

    // No endpoints at all: web's service chains fall out of use.
    const none = await dataplane.sync(decisionsFor([], env), {
      changedServices: new Set([`${NS}/web`]),
      full: false,
      reason: 'changed Services',
    });
    expect(none.scope.full).toBe(false);
    expect(await chains()).toEqual(expect.arrayContaining([webChain, webDns]));
    expect(await ruleHandles(webChain)).toEqual([]);
    expect(dataplane.pendingStaleChains('IPv4').sort()).toEqual([webChain, webDns].sort());

    await new Promise((resolve) => setTimeout(resolve, STALE_CHAIN_DELAY_MS + 100));
    const next = await dataplane.sync(decisionsFor([POD2], env), {
      changedServices: new Set([`${NS}/web`]),
      full: false,
      reason: 'changed Services',
    });
    expect(next.scope.full).toBe(false);
    // Deleted by the transaction before this sync's, which then created them again.
    expect(dataplane.pendingStaleChains('IPv4')).toEqual([]);
    expect(dataplane.stats('IPv4')?.nftablesCleanupFailures).toBe(0);
    expect(await ruleHandles(webChain)).toHaveLength(1);
    expect(backends(await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 5 }))).toEqual(
      new Set(['pod2']),
    );
  });

  it('a stale endpoint chain of an affinity service is flushed, then deleted', async () => {
    const sticky = servicePort(decisionsFor([POD2], env), 'sticky', 'http');
    const pod3 = sticky.endpoints.find((ep) => ep.ip === POD3);
    if (!pod3) throw new Error('sticky has no pod3 endpoint');
    const stickyPod3 = endpointObjectNames(sticky, pod3).chain;
    expect(await chains()).toContain(stickyPod3);
    const withoutPod3 = (): ProxyDecisions => {
      const d = decisionsFor([POD2], env);
      for (const family of d.families) {
        family.servicePorts = family.servicePorts.map((sp) =>
          sp.name !== 'sticky'
            ? sp
            : {
                ...sp,
                endpoints: sp.endpoints.filter((ep) => ep.ip !== POD3),
                clusterEndpoints: sp.clusterEndpoints.filter((ep) => ep.ip !== POD3),
                allReachableEndpoints: sp.allReachableEndpoints.filter((ep) => ep.ip !== POD3),
              },
        );
      }
      return d;
    };
    await dataplane.sync(withoutPod3(), {
      changedServices: new Set([`${NS}/sticky`]),
      full: false,
      reason: 'changed Services',
    });
    expect(await chains()).toContain(stickyPod3);
    expect(await ruleHandles(stickyPod3)).toEqual([]);
    expect(dataplane.pendingStaleChains('IPv4')).toContain(stickyPod3);
    await new Promise((resolve) => setTimeout(resolve, STALE_CHAIN_DELAY_MS + 100));
    await dataplane.sync(withoutPod3(), {
      changedServices: new Set(),
      full: false,
      reason: 'changed Services',
    });
    expect(await chains()).not.toContain(stickyPod3);
    expect(dataplane.pendingStaleChains('IPv4')).toEqual([]);
    // Back to the shared state.
    await dataplane.sync(decisionsFor([POD2], env), {
      changedServices: new Set([`${NS}/sticky`]),
      full: false,
      reason: 'changed Services',
    });
    expect(await chains()).toContain(stickyPod3);
  });

  it('a partial sync that takes the last endpoints away moves the ClusterIP to the reject map', async () => {
    const result = await dataplane.sync(decisionsFor([], env), {
      changedServices: new Set([`${NS}/web`]),
      full: false,
      reason: 'changed Services',
    });
    expect(result.scope.full).toBe(false);
    // The element moves from service-ips to no-endpoint-services, for each of web's two ports.
    expect(dataplane.stats('IPv4')?.lastWritten).toEqual({ blocks: 2, elements: 4 });
    const results = await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 2 });
    expect(results.map((r) => r.error)).toEqual(['ECONNREFUSED', 'ECONNREFUSED']);
    const back = await dataplane.sync(decisionsFor([POD2], env), {
      changedServices: new Set([`${NS}/web`]),
      full: false,
      reason: 'changed Services',
    });
    expect(back.scope.full).toBe(false);
    expect(backends(await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 5 }))).toEqual(
      new Set(['pod2']),
    );
  });

  it('a failed transaction leaves the ruleset in place, is counted, and the next sync is full', async () => {
    // Affinity entries count down; everything else must be exactly as it was.
    const listing = async () =>
      (await onNode('nft', ['list', 'table', 'ip', 'kube-proxy'])).stdout.replace(/ expires \S+/g, '');
    const before = await listing();
    const broken = decisionsFor([POD2], env);
    servicePort(broken, 'web', 'http').clusterIP = '10.96.0.300';
    await expect(
      dataplane.sync(broken, {
        changedServices: new Set([`${NS}/web`]),
        full: false,
        reason: 'changed Services',
      }),
    ).rejects.toThrow(/partial nft transaction failed/);
    expect(dataplane.stats('IPv4')?.nftablesSyncFailures).toBe(1);
    expect(await listing()).toBe(before);
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

  it('conntrack: an un-NATed UDP flow, kept while its Service has no endpoints, is answered once it has some', async () => {
    await noEndpointsThenEndpointsScenario(conntrackLab());
    // The empty Service's chains were flushed when it lost its endpoints again; a sync after the
    // delay deletes them, so the restart test below finds only its own leftover.
    await new Promise((resolve) => setTimeout(resolve, STALE_CHAIN_DELAY_MS + 100));
    await dataplane.sync(decisionsFor([POD2, POD3], env), {
      changedServices: new Set(),
      full: false,
      reason: 'changed Services',
    });
    expect(dataplane.pendingStaleChains('IPv4')).toEqual([]);
  });

  it('a restarted agent finds the chains an earlier process left and removes them', async () => {
    const leftover = 'endpoint-AAAAAAAA-e2e/gone/tcp/http__10.244.9.9/8080';
    await onNode('nft', ['add', 'chain', 'ip', 'kube-proxy', leftover]);
    const restarted = new NftablesDataplane({ exec: onNode });
    const decisions = decisionsFor([POD2, POD3], env);
    expect(
      (await restarted.sync(decisions, { changedServices: new Set(), full: true, reason: 'first sync' }))
        .scope.full,
    ).toBe(true);
    expect(restarted.pendingStaleChains('IPv4')).toEqual([leftover]);
    await new Promise((resolve) => setTimeout(resolve, STALE_CHAIN_DELAY_MS + 100));
    await restarted.sync(decisions, { changedServices: new Set(), full: false, reason: 'changed Services' });
    expect(await chains()).not.toContain(leftover);
    const results = await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 20 });
    expect(backends(results)).toEqual(new Set(['pod2', 'pod3']));
  });

  it('cleanup deletes the kube-proxy tables', async () => {
    const result = await cleanupNftables(onNode);
    expect(result).toEqual({ removed: ['nft table ip kube-proxy', 'nft table ip6 kube-proxy'], errors: [] });
    expect((await onNode('nft', ['list', 'tables'])).stdout).not.toContain('kube-proxy');
    expect(await cleanupNftables(onNode)).toEqual({ removed: [], errors: [] });
    // With the rules gone the ClusterIP is just an unrouted address.
    const results = await lab.requests('pod1', '10.96.0.10:80', { proto: 'tcp', count: 1, timeoutMs: 500 });
    expect(results[0]?.backend).toBeNull();
  });
});

describeConntrackSysctlsLikeKubeProxy('nftables', `kbpnftct${process.pid}`);
