// The nftables renderer against kube-proxy's nftables mode (kube-proxy v1.37.2's pkg/proxy/nftables/proxier.go): names
// and hashes from the spec's examples, the table setup, and per-feature rules and elements for
// decisions the brain makes from Services and EndpointSlices.

import { describe, expect, it } from 'vitest';
import { type BrainConfig, decide } from '../../src/brain/decide.js';
import type { FamilyDecisions, NodeEnv, ServicePortDecision } from '../../src/brain/types.js';
import { base32Sha256Prefix } from '../../src/dataplanes/iptables/names.js';
import {
  endpointObjectNames,
  hashAndTruncate,
  isAffinitySetName,
  isServiceChainName,
  servicePortChainNames,
  servicePortEndpointChainNameBase,
} from '../../src/dataplanes/nftables/names.js';
import { buildNftRuleset, renderFamily, renderNftablesText } from '../../src/dataplanes/nftables/plan.js';
import {
  activeObjects,
  assembleTransaction,
  desiredElements,
  diffElements,
  elementId,
} from '../../src/dataplanes/nftables/transaction.js';
import type { EndpointSlice, IPFamily, Service, ServiceCIDR } from '../../src/model/types.js';
import {
  brainConfig,
  endpoint,
  node,
  nodeEnv,
  service,
  serviceCIDR,
  serviceCIDRMap,
  slice,
} from '../support/model-fixtures.js';

const NODE = 'test-node';

const baseConfig = brainConfig({
  nodePortAddresses: ['primary'],
  clusterCIDRs: ['10.0.0.0/8', 'fd00:10::/64'],
  localhostNodePorts: false,
});

interface Cluster {
  services: Service[];
  slices: EndpointSlice[];
  config?: Partial<BrainConfig>;
  env?: Partial<NodeEnv>;
  family?: IPFamily;
  serviceCIDRs?: ServiceCIDR[];
}

function decisions({
  services,
  slices,
  config,
  env,
  family = 'IPv4',
  serviceCIDRs = [],
}: Cluster): FamilyDecisions {
  const result = decide(
    {
      services: new Map(services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      endpointSlices: new Map(slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      node: node(NODE),
      serviceCIDRs: serviceCIDRMap(...serviceCIDRs),
    },
    nodeEnv({ nodeName: NODE, nodeIPs: ['192.168.0.2', '2001:db8::2'], ...env }),
    { ...baseConfig, ...config },
    { families: [family] },
  );
  return result.families[0] as FamilyDecisions;
}

const render = (cluster: Cluster) => renderFamily(decisions(cluster)).split('\n');

const local = { nodeName: NODE };
const remote = { nodeName: 'other-node' };
const p80: EndpointSlice['ports'] = [{ name: 'p80', port: 80, protocol: 'TCP' }];

const SVC1 = 'service-ULMVA6XW-ns1/svc1/tcp/p80';
const EP1 = 'endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80';

/** The spec's ns1/svc1: ClusterIP 172.30.0.41:80 with the endpoint 10.180.0.1:80. */
function svc1(extra: Parameters<typeof service>[2] = {}, endpoints = [endpoint('10.180.0.1')]): Cluster {
  return {
    services: [service('ns1', 'svc1', extra)],
    slices: [slice('ns1', 'svc1', 'svc1-a', endpoints, p80)],
  };
}

describe('names', () => {
  it('hashes like hashAndTruncate: the spec examples', () => {
    const sp = { namespace: 'ns1', name: 'svc1', portName: 'p80' };
    expect(hashAndTruncate('ns1/svc1/tcp/p80')).toBe('ULMVA6XW-ns1/svc1/tcp/p80');
    expect(servicePortEndpointChainNameBase(sp, 'TCP', { ip: '10.180.0.1', port: 80 })).toBe(
      '5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80',
    );
  });

  it('names every chain of a service port with one hash and its prefix', () => {
    const sp = decisions(svc1()).servicePorts[0] as ServicePortDecision;
    expect(servicePortChainNames(sp)).toEqual({
      cluster: SVC1,
      local: 'local-ULMVA6XW-ns1/svc1/tcp/p80',
      external: 'external-ULMVA6XW-ns1/svc1/tcp/p80',
      firewall: 'firewall-ULMVA6XW-ns1/svc1/tcp/p80',
    });
    const ep = sp.endpoints[0];
    if (!ep) throw new Error('no endpoint');
    expect(endpointObjectNames(sp, ep)).toEqual({
      chain: EP1,
      affinitySet: 'affinity-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80',
    });
  });

  it('replaces IPv6 colons with dots, keeps an empty port name, and truncates at 240 characters', () => {
    const base = servicePortEndpointChainNameBase({ namespace: 'ns', name: 'svc', portName: '' }, 'UDP', {
      ip: 'fd00::1',
      port: 53,
    });
    expect(base).toMatch(/^[A-Z2-7]{8}-ns\/svc\/udp\/__fd00..1\/53$/);
    // The hash covers the whole name, so names differing only past the cut stay distinct.
    const long = 'x'.repeat(300);
    expect(hashAndTruncate(long)).toBe(`${base32Sha256Prefix(long, 8)}-${'x'.repeat(228)}...`);
    expect(hashAndTruncate(`${long}y`).slice(0, 8)).not.toBe(hashAndTruncate(long).slice(0, 8));
  });

  it('tells service chains and affinity sets from the fixed objects', () => {
    expect(isServiceChainName(SVC1)).toBe(true);
    expect(isServiceChainName('services')).toBe(false);
    expect(isServiceChainName('reject-chain')).toBe(false);
    expect(isAffinitySetName('affinity-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80')).toBe(true);
    expect(isAffinitySetName('cluster-ips')).toBe(false);
  });
});

describe('table setup', () => {
  const lines = render({ services: [], slices: [] });

  it('creates the table with its comment, and re-creates the base chains on the first sync', () => {
    expect(lines[0]).toBe('add table ip kube-proxy { comment "rules for kube-proxy" ; }');
    expect(lines.slice(1, 3)).toEqual([
      'add chain ip kube-proxy filter-prerouting-pre-dnat',
      'delete chain ip kube-proxy filter-prerouting-pre-dnat',
    ]);
  });

  it('hooks the base chains at kube-proxy priorities', () => {
    for (const [chain, spec] of [
      ['filter-prerouting-pre-dnat', 'type filter hook prerouting priority -110 ;'],
      ['filter-output-pre-dnat', 'type filter hook output priority -110 ;'],
      ['filter-forward', 'type filter hook forward priority 0 ;'],
      ['filter-input', 'type filter hook input priority 0 ;'],
      ['filter-output', 'type filter hook output priority 0 ;'],
      ['nat-prerouting', 'type nat hook prerouting priority -100 ;'],
      ['nat-output', 'type nat hook output priority -100 ;'],
      ['nat-postrouting', 'type nat hook postrouting priority 100 ;'],
    ]) {
      const at = lines.indexOf(`add chain ip kube-proxy ${chain} { ${spec} }`);
      expect(at).toBeGreaterThan(0);
      expect(lines[at + 1]).toBe(`flush chain ip kube-proxy ${chain}`);
    }
  });

  it('jumps from the base chains to the regular chains', () => {
    const jumps = lines.filter((l) => / jump [a-z-]+$/.test(l));
    expect(jumps).toEqual([
      'add rule ip kube-proxy filter-input ct state new jump nodeport-endpoints-check',
      'add rule ip kube-proxy filter-input ct state new jump service-endpoints-check',
      'add rule ip kube-proxy filter-forward ct state new jump service-endpoints-check',
      'add rule ip kube-proxy filter-output ct state new jump service-endpoints-check',
      'add rule ip kube-proxy filter-prerouting-pre-dnat ct state new jump firewall-check',
      'add rule ip kube-proxy filter-output-pre-dnat ct state new jump firewall-check',
      'add rule ip kube-proxy nat-output jump services',
      'add rule ip kube-proxy nat-prerouting jump services',
      'add rule ip kube-proxy nat-postrouting jump masquerading',
      'add rule ip kube-proxy filter-forward ct state new jump cluster-ips-check',
      'add rule ip kube-proxy filter-output ct state new jump cluster-ips-check',
    ]);
    for (const chain of [
      'services',
      'service-endpoints-check',
      'nodeport-endpoints-check',
      'firewall-check',
      'cluster-ips-check',
      'masquerading',
    ]) {
      expect(lines).toContain(`add chain ip kube-proxy ${chain}`);
      expect(lines).toContain(`flush chain ip kube-proxy ${chain}`);
    }
    // v1.37 sets the mark inline: no mark-for-masquerade chain.
    expect(lines.some((l) => l.includes('mark-for-masquerade'))).toBe(false);
  });

  it('masquerades what carries the mark and hairpin connections, always fully-random', () => {
    const masq = lines.filter((l) => l.startsWith('add rule ip kube-proxy masquerading '));
    expect(masq).toEqual([
      'add rule ip kube-proxy masquerading mark and 0x00004000 != 0 mark set mark xor 0x00004000 masquerade fully-random',
      'add rule ip kube-proxy masquerading ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random',
    ]);
    expect(lines).toContain(
      'add set ip kube-proxy hairpin-connections { type ipv4_addr . ipv4_addr . inet_proto . inet_service ; comment "service hairpin connections" ; }',
    );
    const bit10 = render({ services: [], slices: [], config: { masqueradeBit: 10 } });
    expect(bit10).toContain(
      'add rule ip kube-proxy masquerading mark and 0x00000400 != 0 mark set mark xor 0x00000400 masquerade fully-random',
    );
  });

  it('masquerades off-cluster ClusterIP traffic per local detector in the services chain, everything with masqueradeAll', () => {
    const masq = (config: Partial<BrainConfig>) =>
      render({ services: [], slices: [], config }).filter((l) =>
        l.startsWith('add rule ip kube-proxy services ip daddr @cluster-ips'),
      );
    const head = 'add rule ip kube-proxy services ip daddr @cluster-ips';
    expect(masq({})).toEqual([
      `${head} ip saddr != 10.0.0.0/8 mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"`,
    ]);
    expect(masq({ masqueradeAll: true })).toEqual([
      `${head} mark set mark or 0x00004000 comment "masquerade all clusterIP traffic"`,
    ]);
    expect(masq({ clusterCIDRs: [] })).toEqual([]);
    expect(
      masq({
        detectLocalMode: 'BridgeInterface',
        detectLocal: { bridgeInterface: 'cbr0', interfaceNamePrefix: '' },
      }),
    ).toEqual([
      `${head} iifname != cbr0 mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"`,
    ]);
    expect(
      masq({
        detectLocalMode: 'InterfaceNamePrefix',
        detectLocal: { bridgeInterface: '', interfaceNamePrefix: 'veth' },
      }),
    ).toEqual([
      `${head} iifname != veth* mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"`,
    ]);
    // Before the dispatch through service-ips.
    const services = lines.filter((l) => l.startsWith('add rule ip kube-proxy services '));
    expect(services[0]).toContain('@cluster-ips');
  });

  it('declares the sets and verdict maps with their types and comments', () => {
    expect(lines).toEqual(
      expect.arrayContaining([
        'add set ip kube-proxy cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }',
        'add set ip kube-proxy nodeport-ips { type ipv4_addr ; comment "IPs that accept NodePort traffic" ; }',
        'add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }',
        'add map ip kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }',
        'add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }',
        'add map ip kube-proxy no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }',
        'add map ip kube-proxy firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }',
      ]),
    );
  });

  it('dispatches services and checks endpoints through the maps', () => {
    expect(lines).toEqual(
      expect.arrayContaining([
        'add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips',
        'add rule ip kube-proxy services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports',
        'add rule ip kube-proxy service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services',
        'add rule ip kube-proxy nodeport-endpoints-check ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports',
        'add rule ip kube-proxy firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips',
      ]),
    );
  });

  it('has a reject chain with its comment', () => {
    expect(lines).toContain(
      'add chain ip kube-proxy reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }',
    );
    expect(lines).toContain('add rule ip kube-proxy reject-chain reject');
  });

  it('rejects invalid ClusterIP ports, and drops unallocated ClusterIPs only when the service CIDRs are known', () => {
    const check = (l: string[]) => l.filter((x) => x.startsWith('add rule ip kube-proxy cluster-ips-check'));
    expect(check(lines)).toEqual([
      'add rule ip kube-proxy cluster-ips-check ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"',
    ]);
    const serviceCIDRs = [
      serviceCIDR('kubernetes', ['172.31.0.0/16', 'fd00:30::/112']),
      serviceCIDR('extra', ['172.30.0.0/16']),
      // The same range written another way, and a second IPv6 range.
      serviceCIDR('again', ['172.31.0.1/16', 'fd00:31:0::/112']),
    ];
    const withCIDRs = render({ services: [], slices: [], serviceCIDRs });
    expect(check(withCIDRs)).toEqual([
      'add rule ip kube-proxy cluster-ips-check ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"',
      'add rule ip kube-proxy cluster-ips-check ip daddr { 172.30.0.0/16,172.31.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"',
    ]);
    const check6 = (l: string[]) =>
      l.filter((x) => x.startsWith('add rule ip6 kube-proxy cluster-ips-check'));
    expect(check6(render({ services: [], slices: [], family: 'IPv6' }))).toEqual([
      'add rule ip6 kube-proxy cluster-ips-check ip6 daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"',
    ]);
    expect(check6(render({ services: [], slices: [], family: 'IPv6', serviceCIDRs }))).toEqual([
      'add rule ip6 kube-proxy cluster-ips-check ip6 daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"',
      'add rule ip6 kube-proxy cluster-ips-check ip6 daddr { fd00:30::/112,fd00:31::/112 } drop comment "Drop traffic to unallocated ClusterIPs"',
    ]);
    // Only the IPv4 ranges of a dual-stack object reach the IPv4 table.
    expect(
      check(render({ services: [], slices: [], serviceCIDRs: [serviceCIDR('v6only', ['fd00:30::/112'])] })),
    ).toHaveLength(1);
  });

  it('fills nodeport-ips with the primary IP (nftables default), never loopback', () => {
    expect(lines).toContain('flush set ip kube-proxy nodeport-ips');
    expect(lines.filter((l) => l.includes('element ip kube-proxy nodeport-ips'))).toEqual([
      'add element ip kube-proxy nodeport-ips { 192.168.0.2 }',
    ]);
    const withLoopback = render({
      services: [],
      slices: [],
      config: { nodePortAddresses: ['127.0.0.0/8', '192.168.0.0/16'], localhostNodePorts: true },
    });
    expect(withLoopback.filter((l) => l.includes('element ip kube-proxy nodeport-ips'))).toEqual([
      'add element ip kube-proxy nodeport-ips { 192.168.0.2 }',
    ]);
  });

  it('matches every local address but localhost when nodePortAddresses matches all', () => {
    const all = render({ services: [], slices: [], config: { nodePortAddresses: ['0.0.0.0/0'] } });
    expect(all).toContain('delete set ip kube-proxy nodeport-ips');
    expect(all).toContain(
      'add rule ip kube-proxy services fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports',
    );
    expect(all).toContain(
      // proxier.go setupNFTables: no fib match in the endpoints check.
      'add rule ip kube-proxy nodeport-endpoints-check ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports',
    );
    const v6 = render({ services: [], slices: [], config: { nodePortAddresses: ['::/0'] }, family: 'IPv6' });
    expect(v6).toContain(
      'add rule ip6 kube-proxy services fib daddr type local ip6 daddr != ::1 meta l4proto . th dport vmap @service-nodeports',
    );
  });
});

describe('service ports', () => {
  it('ClusterIP: the service chain DNATs itself, through a numgen map over several endpoints', () => {
    // proxier_test.go TestOverallNFTablesRules (svc4) and TestServiceToEndpointDNATs.
    const lines = render(svc1({}, [endpoint('10.180.0.1', local), endpoint('10.180.0.2', remote)]));
    expect(lines).toEqual(
      expect.arrayContaining([
        `add chain ip kube-proxy ${SVC1}`,
        `flush chain ip kube-proxy ${SVC1}`,
        `add rule ip kube-proxy ${SVC1} meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.1 . 80 , 1 : 10.180.0.2 . 80 }`,
        'add element ip kube-proxy cluster-ips { 172.30.0.41 }',
        `add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto ${SVC1} }`,
        // Only the local endpoint can hairpin.
        'add element ip kube-proxy hairpin-connections { 10.180.0.1 . 10.180.0.1 . tcp . 80 }',
      ]),
    );
    expect(lines.filter((l) => l.includes('hairpin-connections {') && l.includes(' element '))).toHaveLength(
      1,
    );
    // No endpoint chains without affinity, and no per-service masquerade rule.
    expect(lines.some((l) => /endpoint-[A-Z2-7]{8}-/.test(l))).toBe(false);
    expect(lines.filter((l) => l.startsWith(`add rule ip kube-proxy ${SVC1}`))).toHaveLength(1);
    // Elements come after every chain they name.
    expect(lines.findIndex((l) => l.startsWith('add element ip kube-proxy service-ips'))).toBeGreaterThan(
      lines.lastIndexOf(`add chain ip kube-proxy ${SVC1}`),
    );
  });

  it('ClusterIP with one endpoint: a plain DNAT (proxier_test.go svc1)', () => {
    const lines = render(svc1({}, [endpoint('10.180.0.1', local)]));
    expect(lines.filter((l) => l.startsWith(`add rule ip kube-proxy ${SVC1}`))).toEqual([
      `add rule ip kube-proxy ${SVC1} meta l4proto tcp dnat to 10.180.0.1:80`,
    ]);
    expect(lines).toContain(
      'add element ip kube-proxy hairpin-connections { 10.180.0.1 . 10.180.0.1 . tcp . 80 }',
    );
  });

  it('session affinity: a timeout set per endpoint, checked by the service chain and updated by the endpoint', () => {
    const lines = render(svc1({ sessionAffinity: 'ClientIP', sessionAffinityTimeoutSeconds: 10800 }));
    const set = 'affinity-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80';
    const setLine = `add set ip kube-proxy ${set} { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }`;
    const check = `add rule ip kube-proxy ${SVC1} ip saddr @${set} goto ${EP1}`;
    const numgen = `add rule ip kube-proxy ${SVC1} numgen random mod 1 vmap { 0 : goto ${EP1} }`;
    const update = `add rule ip kube-proxy ${EP1} update @${set} { ip saddr }`;
    for (const line of [setLine, check, numgen, update]) expect(lines).toContain(line);
    expect(lines.indexOf(setLine)).toBeLessThan(lines.indexOf(check));
    expect(lines.indexOf(check)).toBeLessThan(lines.indexOf(numgen));
    // proxier_test.go svc5: the endpoint chain updates the set and DNATs, nothing else.
    expect(lines.filter((l) => l.startsWith(`add rule ip kube-proxy ${EP1} `))).toEqual([
      update,
      `add rule ip kube-proxy ${EP1} meta l4proto tcp dnat to 10.180.0.1:80`,
    ]);
  });

  it('no endpoints: reject through the no-endpoint maps, for every destination, and no chains', () => {
    const lines = render({
      services: [
        service('ns4', 'svc4', {
          type: 'LoadBalancer',
          clusterIP: '172.30.0.44',
          externalIPs: ['192.168.99.44'],
          loadBalancerIngress: [{ ip: '5.6.7.8', hostname: '', ipMode: 'VIP' }],
          ports: [{ name: 'p80', protocol: 'TCP', port: 80, nodePort: 3004 }],
        }),
      ],
      slices: [],
    });
    expect(lines.filter((l) => l.includes(' element ') && !l.includes('nodeport-ips'))).toEqual([
      'add element ip kube-proxy cluster-ips { 172.30.0.44 }',
      'add element ip kube-proxy no-endpoint-services { 172.30.0.44 . tcp . 80 comment "ns4/svc4:p80" : goto reject-chain }',
      'add element ip kube-proxy no-endpoint-services { 192.168.99.44 . tcp . 80 comment "ns4/svc4:p80" : goto reject-chain }',
      'add element ip kube-proxy no-endpoint-services { 5.6.7.8 . tcp . 80 comment "ns4/svc4:p80" : goto reject-chain }',
      'add element ip kube-proxy no-endpoint-nodeports { tcp . 3004 comment "ns4/svc4:p80" : goto reject-chain }',
    ]);
    expect(lines.some((l) => l.includes('ns4/svc4/') && l.startsWith('add chain'))).toBe(false);
  });

  it('NodePort and externalIP go to the external chain, which masquerades for eTP=Cluster', () => {
    const lines = render(
      svc1({
        type: 'NodePort',
        externalIPs: ['192.168.99.11'],
        ports: [{ name: 'p80', protocol: 'TCP', port: 80, nodePort: 3001 }],
      }),
    );
    const ext = 'external-ULMVA6XW-ns1/svc1/tcp/p80';
    expect(lines.filter((l) => l.startsWith(`add rule ip kube-proxy ${ext}`))).toEqual([
      `add rule ip kube-proxy ${ext} mark set mark or 0x00004000 comment "masquerade"`,
      `add rule ip kube-proxy ${ext} goto ${SVC1}`,
    ]);
    expect(lines).toContain(`add element ip kube-proxy service-nodeports { tcp . 3001 : goto ${ext} }`);
    expect(lines).toContain(
      `add element ip kube-proxy service-ips { 192.168.99.11 . tcp . 80 : goto ${ext} }`,
    );
  });

  const etpLocal = (endpoints: ReturnType<typeof endpoint>[], config: Partial<BrainConfig> = {}): string[] =>
    render({
      ...svc1(
        {
          type: 'LoadBalancer',
          externalTrafficPolicy: 'Local',
          healthCheckNodePort: 30000,
          loadBalancerIngress: [{ ip: '5.6.7.8', hostname: '', ipMode: 'VIP' }],
          ports: [{ name: 'p80', protocol: 'TCP', port: 80, nodePort: 3001 }],
        },
        endpoints,
      ),
      config,
    });

  it('eTP=Local: pod and host traffic short-circuit to the cluster chain, the rest goes to the local chain', () => {
    const lines = etpLocal([endpoint('10.180.0.1', local), endpoint('10.180.0.2', remote)]);
    const ext = 'external-ULMVA6XW-ns1/svc1/tcp/p80';
    const localChain = 'local-ULMVA6XW-ns1/svc1/tcp/p80';
    expect(lines.filter((l) => l.startsWith(`add rule ip kube-proxy ${ext}`))).toEqual([
      `add rule ip kube-proxy ${ext} ip saddr 10.0.0.0/8 goto ${SVC1} comment "short-circuit pod traffic"`,
      `add rule ip kube-proxy ${ext} fib saddr type local mark set mark or 0x00004000 comment "masquerade local traffic"`,
      `add rule ip kube-proxy ${ext} fib saddr type local goto ${SVC1} comment "short-circuit local traffic"`,
      `add rule ip kube-proxy ${ext} goto ${localChain}`,
    ]);
    expect(lines).toContain(`add rule ip kube-proxy ${localChain} meta l4proto tcp dnat to 10.180.0.1:80`);
    expect(lines.find((l) => l.startsWith(`add rule ip kube-proxy ${SVC1} `))).toMatch(
      /numgen random mod 2 map/,
    );
    // Without a detector there is no pod short-circuit.
    const noDetector = etpLocal([endpoint('10.180.0.1', local)], { clusterCIDRs: [] });
    expect(noDetector.some((l) => l.includes('short-circuit pod traffic'))).toBe(false);
  });

  it('eTP=Local without local endpoints: external destinations drop, the external chain still short-circuits', () => {
    const lines = etpLocal([endpoint('10.180.0.2', remote)]);
    const ext = 'external-ULMVA6XW-ns1/svc1/tcp/p80';
    expect(lines).toEqual(
      expect.arrayContaining([
        'add element ip kube-proxy no-endpoint-services { 5.6.7.8 . tcp . 80 comment "ns1/svc1:p80" : drop }',
        'add element ip kube-proxy no-endpoint-nodeports { tcp . 3001 comment "ns1/svc1:p80" : drop }',
        `add element ip kube-proxy service-ips { 5.6.7.8 . tcp . 80 : goto ${ext} }`,
        `add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto ${SVC1} }`,
      ]),
    );
    expect(lines.filter((l) => l.startsWith(`add rule ip kube-proxy ${ext}`))).toHaveLength(3);
    expect(lines.some((l) => l.includes('local-ULMVA6XW'))).toBe(false);
    const ruleset = buildNftRuleset(
      decisions({
        ...svc1(
          {
            type: 'LoadBalancer',
            externalTrafficPolicy: 'Local',
            loadBalancerIngress: [{ ip: '5.6.7.8', hostname: '', ipMode: 'VIP' }],
            ports: [{ name: 'p80', protocol: 'TCP', port: 80, nodePort: 3001 }],
          },
          [endpoint('10.180.0.2', remote)],
        ),
      }),
    );
    expect(ruleset.noLocalEndpoints).toEqual({ internal: 0, external: 1 });
  });

  it('iTP=Local: ClusterIP goes to the local chain, and drops when no endpoint is local', () => {
    const withLocal = render(
      svc1({ internalTrafficPolicy: 'Local' }, [
        endpoint('10.180.0.1', local),
        endpoint('10.180.0.2', remote),
      ]),
    );
    const localChain = 'local-ULMVA6XW-ns1/svc1/tcp/p80';
    expect(withLocal).toContain(
      `add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto ${localChain} }`,
    );
    expect(withLocal).toContain(
      `add rule ip kube-proxy ${localChain} meta l4proto tcp dnat to 10.180.0.1:80`,
    );
    expect(withLocal.some((l) => l.includes(SVC1))).toBe(false);
    const none = render(svc1({ internalTrafficPolicy: 'Local' }, [endpoint('10.180.0.2', remote)]));
    expect(none).toContain(
      'add element ip kube-proxy no-endpoint-services { 172.30.0.41 . tcp . 80 comment "ns1/svc1:p80" : drop }',
    );
    expect(none.some((l) => l.startsWith('add chain') && l.includes('ns1/svc1/'))).toBe(false);
  });

  it('loadBalancerSourceRanges: a firewall chain dropping other sources, reached through firewall-ips', () => {
    const lb = (ranges: string[]) =>
      render(
        svc1({
          type: 'LoadBalancer',
          loadBalancerIngress: [{ ip: '5.6.7.8', hostname: '', ipMode: 'VIP' }],
          loadBalancerSourceRanges: ranges,
          ports: [{ name: 'p80', protocol: 'TCP', port: 80, nodePort: 3001 }],
        }),
      );
    const fw = 'firewall-ULMVA6XW-ns1/svc1/tcp/p80';
    const lines = lb([' 203.0.113.0/25', '203.0.113.128/25']);
    expect(lines).toEqual(
      expect.arrayContaining([
        `add chain ip kube-proxy ${fw}`,
        `add rule ip kube-proxy ${fw} ip saddr != { 203.0.113.0/25 , 203.0.113.128/25 } drop`,
        `add element ip kube-proxy firewall-ips { 5.6.7.8 . tcp . 80 : goto ${fw} }`,
        'add element ip kube-proxy service-ips { 5.6.7.8 . tcp . 80 : goto external-ULMVA6XW-ns1/svc1/tcp/p80 }',
      ]),
    );
    // NodePorts are not subject to source ranges.
    expect(lines).toContain(
      'add element ip kube-proxy service-nodeports { tcp . 3001 : goto external-ULMVA6XW-ns1/svc1/tcp/p80 }',
    );
    // A range holding the node's own IP also admits the LB IP (hairpin from the node).
    expect(lb(['192.168.0.0/24'])).toContain(
      `add rule ip kube-proxy ${fw} ip saddr != { 192.168.0.0/24 , 5.6.7.8 } drop`,
    );
  });

  it('IPv6: ip6 table, ipv6_addr types, ip6 matches and bracketed DNAT targets', () => {
    const lines = render({
      services: [service('ns1', 'svc1', { clusterIP: 'fd00:30::41', clusterIPs: ['fd00:30::41'] })],
      slices: [slice('ns1', 'svc1', 'svc1-a', [endpoint('fd00:10::1')], p80, 'IPv6')],
      family: 'IPv6',
    });
    const ep = `endpoint-${servicePortEndpointChainNameBase({ namespace: 'ns1', name: 'svc1', portName: 'p80' }, 'TCP', { ip: 'fd00:10::1', port: 80 })}`;
    expect(ep).toContain('__fd00.10..1/80');
    expect(lines).toEqual(
      expect.arrayContaining([
        'add table ip6 kube-proxy { comment "rules for kube-proxy" ; }',
        'add set ip6 kube-proxy cluster-ips { type ipv6_addr ; comment "Active ClusterIPs" ; }',
        'add element ip6 kube-proxy nodeport-ips { 2001:db8::2 }',
        'add rule ip6 kube-proxy services ip6 daddr @cluster-ips ip6 saddr != fd00:10::/64 mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"',
        `add rule ip6 kube-proxy ${SVC1} meta l4proto tcp dnat to [fd00:10::1]:80`,
        'add rule ip6 kube-proxy masquerading ct status dnat ip6 saddr . ip6 daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random',
        `add element ip6 kube-proxy service-ips { fd00:30::41 . tcp . 80 : goto ${SVC1} }`,
      ]),
    );
  });

  it('IPv6 without an IPv6 node IP: ::1 stands for the node in loadBalancerSourceRanges, as in kube-proxy', () => {
    const lines = render({
      services: [
        service('ns1', 'svc1', {
          type: 'LoadBalancer',
          clusterIP: 'fd00:30::41',
          clusterIPs: ['fd00:30::41'],
          loadBalancerIngress: [{ ip: '2001:db8:80::20', hostname: '', ipMode: 'VIP' }],
          loadBalancerSourceRanges: ['::/0'],
          ports: [{ name: 'p80', protocol: 'TCP', port: 80, nodePort: 3001 }],
        }),
      ],
      slices: [slice('ns1', 'svc1', 'svc1-a', [endpoint('fd00:10::1')], p80, 'IPv6')],
      env: { nodeIPs: ['192.168.0.2'] },
      family: 'IPv6',
    });
    expect(lines).toContain(
      'add rule ip6 kube-proxy firewall-ULMVA6XW-ns1/svc1/tcp/p80 ip6 saddr != { ::/0 , 2001:db8:80::20 } drop',
    );
  });

  it('UDP and SCTP use their lower-case protocol in names, matches and keys', () => {
    const lines = render({
      services: [
        service('ns1', 'dns', {
          clusterIP: '172.30.0.53',
          ports: [
            { name: 'dns', protocol: 'UDP', port: 53, nodePort: 0 },
            { name: 'sc', protocol: 'SCTP', port: 99, nodePort: 0 },
          ],
        }),
      ],
      slices: [
        slice(
          'ns1',
          'dns',
          'dns-a',
          [endpoint('10.180.0.53')],
          [
            { name: 'dns', port: 5353, protocol: 'UDP' },
            { name: 'sc', port: 99, protocol: 'SCTP' },
          ],
        ),
      ],
    });
    expect(
      lines.some((l) =>
        /add element ip kube-proxy service-ips \{ 172\.30\.0\.53 \. udp \. 53 : goto service-[A-Z2-7]{8}-ns1\/dns\/udp\/dns \}/.test(
          l,
        ),
      ),
    ).toBe(true);
    expect(lines.some((l) => l.endsWith('meta l4proto udp dnat to 10.180.0.53:5353'))).toBe(true);
    expect(lines.some((l) => l.endsWith('meta l4proto sctp dnat to 10.180.0.53:99'))).toBe(true);
    // One ClusterIP for both ports: one cluster-ips element.
    expect(lines.filter((l) => l === 'add element ip kube-proxy cluster-ips { 172.30.0.53 }')).toHaveLength(
      1,
    );
  });
});

describe('transactions', () => {
  const two = (svc1Endpoints: string[], svc1Extra: Parameters<typeof service>[2] = {}): Cluster => ({
    services: [service('ns1', 'svc1', svc1Extra), service('ns2', 'svc2', { clusterIP: '172.30.0.42' })],
    slices: [
      slice(
        'ns1',
        'svc1',
        'svc1-a',
        svc1Endpoints.map((ip) => endpoint(ip)),
        p80,
      ),
      slice('ns2', 'svc2', 'svc2-a', [endpoint('10.180.0.9')], p80),
    ],
  });

  it('a partial sync writes only the written blocks, element changes and stale objects', () => {
    // Endpoint chains exist only with affinity.
    const sticky = { sessionAffinity: 'ClientIP' as const, sessionAffinityTimeoutSeconds: 10800 };
    const before = buildNftRuleset(decisions(two(['10.180.0.1', '10.180.0.2'], sticky)));
    const after = buildNftRuleset(decisions(two(['10.180.0.1'], sticky)));
    const changes = diffElements(desiredElements(before), desiredElements(after));
    expect(changes).toEqual({ remove: [], add: [] });
    const stale = [...activeObjects(before).chains].filter((c) => !activeObjects(after).chains.has(c));
    expect(stale).toEqual([
      'endpoint-' +
        servicePortEndpointChainNameBase({ namespace: 'ns1', name: 'svc1', portName: 'p80' }, 'TCP', {
          ip: '10.180.0.2',
          port: 80,
        }),
    ]);
    const tx = assembleTransaction(after, {
      full: false,
      recreateBaseChains: false,
      writeBlock: (block) => block.service === 'ns1/svc1',
      elementChanges: changes,
      staleChains: stale,
      staleAffinitySets: ['affinity-X-ns1/svc1/tcp/p80__10.180.0.2/80'],
    });
    const lines = tx.text.trimEnd().split('\n');
    expect(tx.blocksWritten).toBe(1);
    expect(lines.some((l) => l.includes('table'))).toBe(false);
    expect(lines.some((l) => l.includes('ns2/svc2'))).toBe(false);
    expect(lines).toContain(`add rule ip kube-proxy ${SVC1} numgen random mod 1 vmap { 0 : goto ${EP1} }`);
    expect(lines.slice(-2)).toEqual([
      `flush chain ip kube-proxy ${stale[0]}`,
      'delete set ip kube-proxy affinity-X-ns1/svc1/tcp/p80__10.180.0.2/80',
    ]);
    // Affinity turned off: the endpoint chains and affinity sets fall out of use.
    const plain = activeObjects(buildNftRuleset(decisions(two(['10.180.0.1']))));
    expect([...plain.chains].filter((c) => c.startsWith('endpoint-'))).toEqual([]);
    expect(plain.affinitySets.size).toBe(0);
  });

  it('hairpin-connections follows the local endpoints through element changes', () => {
    const withLocal = desiredElements(
      buildNftRuleset(decisions({ ...svc1({}, [endpoint('10.180.0.1', local)]) })),
    );
    const withoutLocal = desiredElements(
      buildNftRuleset(decisions({ ...svc1({}, [endpoint('10.180.0.1', remote)]) })),
    );
    const changes = diffElements(withLocal, withoutLocal);
    expect(changes.remove.map(elementId)).toEqual(['hairpin-connections 10.180.0.1 . 10.180.0.1 . tcp . 80']);
    expect(changes.add).toEqual([]);
  });

  it('a full sync that finds the old mark-for-masquerade chain deletes it last', () => {
    const ruleset = buildNftRuleset(decisions(two(['10.180.0.1'])));
    const text = assembleTransaction(ruleset, {
      full: true,
      recreateBaseChains: false,
      writeBlock: () => true,
      elementChanges: { remove: [], add: [] },
      staleChains: ['endpoint-OLD'],
      staleAffinitySets: [],
      legacyChains: ['mark-for-masquerade'],
    }).text;
    expect(text.trimEnd().split('\n').slice(-2)).toEqual([
      'flush chain ip kube-proxy endpoint-OLD',
      'delete chain ip kube-proxy mark-for-masquerade',
    ]);
  });

  it('element diffs: removed and changed elements are deleted, new and changed ones added', () => {
    const before = desiredElements(buildNftRuleset(decisions(two(['10.180.0.1']))));
    const after = desiredElements(buildNftRuleset(decisions(two([]))));
    const changes = diffElements(before, after);
    expect(changes.remove.map(elementId)).toEqual(['service-ips 172.30.0.41 . tcp . 80']);
    expect(changes.add.map(elementId)).toEqual(['no-endpoint-services 172.30.0.41 . tcp . 80']);
    const tx = assembleTransaction(buildNftRuleset(decisions(two([]))), {
      full: false,
      recreateBaseChains: false,
      writeBlock: () => false,
      elementChanges: changes,
      staleChains: [],
      staleAffinitySets: [],
    });
    expect(tx.text).toBe(
      'delete element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 }\n' +
        'add element ip kube-proxy no-endpoint-services { 172.30.0.41 . tcp . 80 comment "ns1/svc1:p80" : goto reject-chain }\n',
    );
    expect(tx.elementsWritten).toBe(2);
  });

  it('a full sync flushes every element container and refills it, without re-creating base chains after the first', () => {
    const ruleset = buildNftRuleset(decisions(two(['10.180.0.1'])));
    const text = assembleTransaction(ruleset, {
      full: true,
      recreateBaseChains: false,
      writeBlock: () => false,
      elementChanges: { remove: [], add: [] },
      staleChains: [],
      staleAffinitySets: [],
    }).text;
    expect(text).not.toContain('delete chain');
    for (const container of [
      'service-ips',
      'service-nodeports',
      'no-endpoint-services',
      'no-endpoint-nodeports',
      'firewall-ips',
    ]) {
      expect(text).toContain(`flush map ip kube-proxy ${container}\n`);
    }
    expect(text).toContain('flush set ip kube-proxy cluster-ips\n');
    expect(text).toContain('flush set ip kube-proxy hairpin-connections\n');
    expect(text).toContain(`add rule ip kube-proxy ${SVC1} meta l4proto tcp dnat to 10.180.0.1:80`);
  });

  it('render text: one family exactly, or all families under comment lines', () => {
    const dual = decide(
      {
        services: new Map([
          ['ns1/svc1', service('ns1', 'svc1', { clusterIPs: ['172.30.0.41', 'fd00:30::41'] })],
        ]),
        endpointSlices: new Map(),
        node: node(NODE),
        serviceCIDRs: new Map(),
      },
      nodeEnv({ nodeName: NODE, nodeIPs: ['192.168.0.2', '2001:db8::2'] }),
      baseConfig,
    );
    expect(dual.families.map((f) => f.family)).toEqual(['IPv4', 'IPv6']);
    const all = renderNftablesText(dual);
    expect(all.startsWith('# IPv4 (table ip kube-proxy)\nadd table ip kube-proxy')).toBe(true);
    expect(all).toContain('# IPv6 (table ip6 kube-proxy)\nadd table ip6 kube-proxy');
    expect(renderNftablesText(dual, 'IPv6')).toBe(renderFamily(dual.families[1] as FamilyDecisions));
    expect(renderNftablesText(dual, 'IPv6')).toContain(
      'add element ip6 kube-proxy no-endpoint-services { fd00:30::41 . tcp . 80',
    );
  });
});
