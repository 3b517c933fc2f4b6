import { describe, expect, it } from 'vitest';
import type { Endpoint, FamilyDecisions, ServicePortDecision } from '../../src/brain/types.js';
import { type ScopePolicies, scopeVerdicts } from '../../src/brain/verdicts.js';
import {
  endpointChain,
  JUMP_RULES,
  jumpRuleArgs,
  servicePortChains,
  servicePortHash,
} from '../../src/dataplanes/iptables/names.js';
import {
  activeNatChains,
  assembleRestoreInput,
  buildIptablesRuleset,
  type IptablesRenderOptions,
  renderFamily,
  renderIptablesText,
} from '../../src/dataplanes/iptables/plan.js';
import { formatFixedLikeGo, probability } from '../../src/dataplanes/iptables/probability.js';
import { joinHostPort } from '../../src/net/ip.js';

const OFF: IptablesRenderOptions = { randomFully: false, nfacct: false, tcpBeLiberal: false };

function ep(ip: string, port: number, extra: Partial<Endpoint> = {}): Endpoint {
  return {
    ip,
    port,
    endpoint: joinHostPort(ip, port),
    isLocal: false,
    ready: true,
    serving: true,
    terminating: false,
    nodeName: null,
    zoneHints: [],
    nodeHints: [],
    ...extra,
  };
}

/** A service port as the brain decides it; endpoint lists default to "every endpoint is usable". */
function sp(
  namespace: string,
  name: string,
  input: Partial<ServicePortDecision> & { endpoints?: Endpoint[] } & Partial<ScopePolicies> = {},
): ServicePortDecision {
  const { internalPolicyLocal = false, externalPolicyLocal = false, ...extra } = input;
  const portName = extra.portName ?? 'p80';
  const protocol = extra.protocol ?? 'TCP';
  const endpoints = extra.endpoints ?? [];
  const externallyAccessible =
    (extra.nodePort ?? 0) !== 0 ||
    (extra.externalIPs ?? []).length > 0 ||
    (extra.loadBalancerIPs ?? []).length > 0;
  const decision: Omit<ServicePortDecision, 'internal' | 'external' | 'externalFromCluster'> = {
    family: 'IPv4',
    namespace,
    name,
    portName,
    protocol,
    servicePortName: portName === '' ? `${namespace}/${name}` : `${namespace}/${name}:${portName}`,
    type: 'ClusterIP',
    clusterIP: '172.30.0.41',
    port: 80,
    nodePort: 0,
    externalIPs: [],
    loadBalancerIPs: [],
    loadBalancerSourceRanges: [],
    healthCheckNodePort: 0,
    externallyAccessible,
    usesClusterEndpoints: true,
    usesLocalEndpoints: false,
    sessionAffinityTimeoutSeconds: 0,
    schedulerAnnotation: null,
    topologyMode: '',
    clusterEndpoints: endpoints,
    localEndpoints: [],
    allReachableEndpoints: endpoints,
    hasAnyEndpoints: endpoints.length > 0,
    localReadyEndpoints: 0,
    ...extra,
    endpoints,
  };
  return {
    ...decision,
    ...scopeVerdicts({ internalPolicyLocal, externalPolicyLocal }, decision),
  };
}

function fam(servicePorts: ServicePortDecision[], extra: Partial<FamilyDecisions> = {}): FamilyDecisions {
  return {
    family: 'IPv4',
    nodeIP: '192.168.0.2',
    servicePorts,
    nodePortAddresses: { matchAll: true, ips: [] },
    localDetector: { mode: 'ClusterCIDR', cidrs: ['10.0.0.0/8'] },
    masqueradeMark: '0x00004000',
    masqueradeAll: false,
    localhostNodePorts: true,
    serviceCIDRs: [],
    ...extra,
  };
}

const lines = (text: string) => text.split('\n');
/** The rules of one chain, in order, from a restore input. */
const chainRules = (text: string, chain: string) => lines(text).filter((l) => l.startsWith(`-A ${chain} `));
/** A table's section (between *table and COMMIT). */
function section(text: string, table: 'filter' | 'nat'): string[] {
  const all = lines(text);
  const start = all.indexOf(`*${table}`);
  return all.slice(start + 1, all.indexOf('COMMIT', start));
}

const SVC1 = 'KUBE-SVC-XPGD46QRK7WJZT7O';
const SEP1 = 'KUBE-SEP-SXIVWICOYRO3J4NJ';

describe('chain names (§2.2)', () => {
  it('match the worked examples', () => {
    expect(servicePortHash('ns1/svc1:p80', 'TCP')).toBe('XPGD46QRK7WJZT7O');
    expect(servicePortChains('ns1/svc1:p80', 'TCP').cluster).toBe(SVC1);
    expect(endpointChain('ns1/svc1:p80', 'TCP', '10.180.0.1:80')).toBe(SEP1);
    expect(servicePortHash('ns1/svc1', 'TCP')).toBe('AQI2S6QIMU7PVVRP');
    expect(endpointChain('ns5/svc5:p80', 'TCP', '10.180.0.3:80')).toBe('KUBE-SEP-I77PXRDZVX7PMWMN');
  });

  it('share one hash across SVC/SVL/EXT/FW, use the lower-case protocol and stay within 28 characters', () => {
    const chains = servicePortChains('ns1/svc1:p80', 'UDP');
    const hash = servicePortHash('ns1/svc1:p80', 'UDP');
    expect(hash).not.toBe('XPGD46QRK7WJZT7O');
    expect(chains).toEqual({
      cluster: `KUBE-SVC-${hash}`,
      local: `KUBE-SVL-${hash}`,
      external: `KUBE-EXT-${hash}`,
      firewall: `KUBE-FW-${hash}`,
    });
    expect(hash).toMatch(/^[A-Z2-7]{16}$/);
    expect(endpointChain('ns1/svc1:p80', 'TCP', '[fd00::1]:80').length).toBeLessThanOrEqual(28);
  });
});

describe('probability (§2.4)', () => {
  it('prints Go %0.10f of 1/n', () => {
    expect(probability(1)).toBe('1.0000000000');
    expect(probability(2)).toBe('0.5000000000');
    expect(probability(3)).toBe('0.3333333333');
    expect(probability(4)).toBe('0.2500000000');
    expect(probability(7)).toBe('0.1428571429');
    expect(probability(10)).toBe('0.1000000000');
    expect(probability(1000)).toBe('0.0010000000');
    expect(probability(100001)).toBe('0.0000099999');
  });

  it('rounds the exact tie at n=2048 half to even, unlike toFixed', () => {
    // 1/2048 = 0.00048828125 exactly: the 10-digit neighbours are ...812 and ...813, ...812 is even.
    expect(probability(2048)).toBe('0.0004882812');
    expect((1 / 2048).toFixed(10)).toBe('0.0004882813');
    expect(probability(4096)).toBe('0.0002441406'); // 0.000244140625: rounds down past the tie
  });

  it('agrees with the exact-value rounding of toFixed for every n up to 200000 but 2048', () => {
    const differing: number[] = [];
    for (let n = 1; n <= 200_000; n++) if (probability(n) !== (1 / n).toFixed(10)) differing.push(n);
    expect(differing).toEqual([2048]);
  });

  it('formats other values like strconv.FormatFloat(x, f, prec, 64)', () => {
    expect(formatFixedLikeGo(2.5, 0)).toBe('2');
    expect(formatFixedLikeGo(3.5, 0)).toBe('4');
    expect(formatFixedLikeGo(0.125, 2)).toBe('0.12');
    expect(formatFixedLikeGo(0.375, 2)).toBe('0.38');
    expect(formatFixedLikeGo(0.1, 20)).toBe('0.10000000000000000555');
    expect(formatFixedLikeGo(1234.5, 3)).toBe('1234.500');
    expect(formatFixedLikeGo(0, 3)).toBe('0.000');
  });
});

describe('restore input of a ClusterIP service', () => {
  it('is exactly what kube-proxy writes', () => {
    const text = renderFamily(fam([sp('ns1', 'svc1', { endpoints: [ep('10.180.0.1', 80)] })]), OFF);
    expect(text).toBe(
      `*filter
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-FIREWALL - [0:0]
-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x00004000/0x00004000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:${SVC1} - [0:0]
:${SEP1} - [0:0]
-A KUBE-POSTROUTING -m mark ! --mark 0x00004000/0x00004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x00004000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
-A KUBE-MARK-MASQ -j MARK --or-mark 0x00004000
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j ${SVC1}
-A ${SVC1} -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A ${SVC1} -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j ${SEP1}
-A ${SEP1} -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
-A ${SEP1} -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
COMMIT
`,
    );
  });

  it('spreads over n endpoints with probabilities 1/n, 1/(n-1), ... and no match on the last', () => {
    const eps = [ep('10.180.0.1', 80), ep('10.180.0.10', 80), ep('10.180.0.2', 80)];
    const text = renderFamily(fam([sp('ns1', 'svc1', { endpoints: eps })]), OFF);
    const seps = eps.map((e) => endpointChain('ns1/svc1:p80', 'TCP', e.endpoint));
    expect(chainRules(text, SVC1).slice(1)).toEqual([
      `-A ${SVC1} -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -m statistic --mode random --probability 0.3333333333 -j ${seps[0]}`,
      `-A ${SVC1} -m comment --comment "ns1/svc1:p80 -> 10.180.0.10:80" -m statistic --mode random --probability 0.5000000000 -j ${seps[1]}`,
      `-A ${SVC1} -m comment --comment "ns1/svc1:p80 -> 10.180.0.2:80" -j ${seps[2]}`,
    ]);
    for (const [i, e] of eps.entries()) {
      expect(chainRules(text, seps[i] as string)).toEqual([
        `-A ${seps[i]} -m comment --comment ns1/svc1:p80 -s ${e.ip} -j KUBE-MARK-MASQ`,
        `-A ${seps[i]} -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination ${e.endpoint}`,
      ]);
    }
  });

  it('uses the unnamed-port hash and the lower-case protocol in matches (UDP, SCTP)', () => {
    const udp = sp('ns1', 'svc1', {
      portName: '',
      protocol: 'UDP',
      port: 53,
      endpoints: [ep('10.180.0.1', 53)],
    });
    const sctp = sp('ns1', 'svc2', {
      portName: '',
      protocol: 'SCTP',
      port: 7,
      endpoints: [ep('10.180.0.2', 7)],
    });
    const text = renderFamily(fam([udp, sctp]), OFF);
    const udpSvc = `KUBE-SVC-${servicePortHash('ns1/svc1', 'UDP')}`;
    expect(chainRules(text, 'KUBE-SERVICES')).toContain(
      `-A KUBE-SERVICES -m comment --comment "ns1/svc1 cluster IP" -m udp -p udp -d 172.30.0.41 --dport 53 -j ${udpSvc}`,
    );
    const sctpSep = endpointChain('ns1/svc2', 'SCTP', '10.180.0.2:7');
    expect(chainRules(text, sctpSep)[1]).toBe(
      `-A ${sctpSep} -m comment --comment ns1/svc2 -m sctp -p sctp -j DNAT --to-destination 10.180.0.2:7`,
    );
  });
});

describe('masquerade and local traffic detectors (§1.13)', () => {
  const one = [sp('ns1', 'svc1', { endpoints: [ep('10.180.0.1', 80)] })];
  const clusterIPMasq = (text: string) => chainRules(text, SVC1)[0];
  const head = `-A ${SVC1} -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80`;

  it('masqueradeAll marks every ClusterIP packet', () => {
    expect(clusterIPMasq(renderFamily(fam(one, { masqueradeAll: true }), OFF))).toBe(
      `${head} -j KUBE-MARK-MASQ`,
    );
  });

  it('interface detectors match with -i', () => {
    const bridge = renderFamily(
      fam(one, { localDetector: { mode: 'BridgeInterface', interfaceName: 'cbr0' } }),
      OFF,
    );
    expect(clusterIPMasq(bridge)).toBe(`${head} ! -i cbr0 -j KUBE-MARK-MASQ`);
    const prefix = renderFamily(
      fam(one, { localDetector: { mode: 'InterfaceNamePrefix', prefix: 'veth' } }),
      OFF,
    );
    expect(clusterIPMasq(prefix)).toBe(`${head} ! -i veth+ -j KUBE-MARK-MASQ`);
    const nodeCIDR = renderFamily(
      fam(one, { localDetector: { mode: 'NodeCIDR', cidrs: ['10.244.1.0/24'] } }),
      OFF,
    );
    expect(clusterIPMasq(nodeCIDR)).toBe(`${head} ! -s 10.244.1.0/24 -j KUBE-MARK-MASQ`);
  });

  it('without a detector there is no ClusterIP masquerade rule', () => {
    const text = renderFamily(fam(one, { localDetector: { mode: 'None' } }), OFF);
    expect(clusterIPMasq(text)).toBe(
      `-A ${SVC1} -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j ${SEP1}`,
    );
  });

  it('prints the mark it is given', () => {
    const text = renderFamily(fam(one, { masqueradeMark: '0x00000001' }), OFF);
    expect(chainRules(text, 'KUBE-MARK-MASQ')).toEqual(['-A KUBE-MARK-MASQ -j MARK --or-mark 0x00000001']);
    expect(chainRules(text, 'KUBE-POSTROUTING')[0]).toBe(
      '-A KUBE-POSTROUTING -m mark ! --mark 0x00000001/0x00000001 -j RETURN',
    );
  });
});

describe('session affinity (§1.8)', () => {
  it('checks the recent list before load balancing and sets it in the endpoint chain', () => {
    const eps = [ep('10.180.0.1', 80), ep('10.180.0.2', 80)];
    const text = renderFamily(
      fam([sp('ns1', 'svc1', { sessionAffinityTimeoutSeconds: 10800, endpoints: eps })]),
      OFF,
    );
    const [sepA, sepB] = eps.map((e) => endpointChain('ns1/svc1:p80', 'TCP', e.endpoint));
    expect(chainRules(text, SVC1).slice(1)).toEqual([
      `-A ${SVC1} -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -m recent --name ${sepA} --rcheck --seconds 10800 --reap -j ${sepA}`,
      `-A ${SVC1} -m comment --comment "ns1/svc1:p80 -> 10.180.0.2:80" -m recent --name ${sepB} --rcheck --seconds 10800 --reap -j ${sepB}`,
      `-A ${SVC1} -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -m statistic --mode random --probability 0.5000000000 -j ${sepA}`,
      `-A ${SVC1} -m comment --comment "ns1/svc1:p80 -> 10.180.0.2:80" -j ${sepB}`,
    ]);
    expect(chainRules(text, sepA as string)[1]).toBe(
      `-A ${sepA} -m comment --comment ns1/svc1:p80 -m recent --name ${sepA} --set -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80`,
    );
  });
});

describe('external destinations', () => {
  const np = servicePortChains('ns2/svc2:p80', 'TCP');

  it('eTP=Cluster: NodePort, externalIP and LB IP go to KUBE-EXT, which masquerades', () => {
    const service = sp('ns2', 'svc2', {
      type: 'LoadBalancer',
      clusterIP: '172.30.0.42',
      nodePort: 3001,
      externalIPs: ['192.168.99.22'],
      loadBalancerIPs: ['1.2.3.4'],
      endpoints: [ep('10.180.0.2', 80)],
    });
    const text = renderFamily(fam([service]), OFF);
    expect(chainRules(text, 'KUBE-SERVICES').slice(0, 3)).toEqual([
      `-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 -j ${np.cluster}`,
      `-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 external IP" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j ${np.external}`,
      `-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j ${np.external}`,
    ]);
    expect(chainRules(text, 'KUBE-NODEPORTS')).toEqual([
      `-A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp --dport 3001 -j ${np.external}`,
    ]);
    expect(chainRules(text, np.external)).toEqual([
      `-A ${np.external} -m comment --comment "masquerade traffic for ns2/svc2:p80 external destinations" -j KUBE-MARK-MASQ`,
      `-A ${np.external} -j ${np.cluster}`,
    ]);
    // After the fixed chains, a service's chains are declared in the order EXT, SVC, SEP.
    const natChains = section(text, 'nat').filter(
      (l) => l.startsWith(':KUBE-EXT') || l.startsWith(':KUBE-S'),
    );
    expect(natChains.map((l) => l.split(' ')[0])).toEqual([
      ':KUBE-SERVICES',
      `:${np.external}`,
      `:${np.cluster}`,
      `:${endpointChain('ns2/svc2:p80', 'TCP', '10.180.0.2:80')}`,
    ]);
  });

  it('eTP=Local with local endpoints: pod and host traffic short-circuit to KUBE-SVC, the rest to KUBE-SVL', () => {
    const local = ep('10.180.0.2', 80, { isLocal: true });
    const remote = ep('10.180.1.2', 80);
    const service = sp('ns2', 'svc2', {
      type: 'LoadBalancer',
      nodePort: 3001,
      loadBalancerIPs: ['1.2.3.4'],
      healthCheckNodePort: 30000,
      externalPolicyLocal: true,
      usesLocalEndpoints: true,
      endpoints: [local, remote],
      clusterEndpoints: [local, remote],
      localEndpoints: [local],
      allReachableEndpoints: [local, remote],
    });
    const text = renderFamily(fam([service]), OFF);
    expect(chainRules(text, np.external)).toEqual([
      `-A ${np.external} -m comment --comment "pod traffic for ns2/svc2:p80 external destinations" -s 10.0.0.0/8 -j ${np.cluster}`,
      `-A ${np.external} -m comment --comment "masquerade LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ`,
      `-A ${np.external} -m comment --comment "route LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j ${np.cluster}`,
      `-A ${np.external} -j ${np.local}`,
    ]);
    expect(chainRules(text, np.local)).toEqual([
      `-A ${np.local} -m comment --comment "ns2/svc2:p80 -> 10.180.0.2:80" -j ${endpointChain('ns2/svc2:p80', 'TCP', '10.180.0.2:80')}`,
    ]);
    expect(chainRules(text, np.cluster)).toHaveLength(3); // ClusterIP masquerade + 2 endpoints
    expect(section(text, 'filter')).toContain(
      '-A KUBE-NODEPORTS -m comment --comment "ns2/svc2:p80 health check node port" -m tcp -p tcp --dport 30000 -j ACCEPT',
    );
    expect(chainRules(text, 'KUBE-EXTERNAL-SERVICES')).toEqual([]);
  });

  it('eTP=Local without local endpoints: DROP for external destinations, EXT still short-circuits', () => {
    const remote = ep('10.180.1.2', 80);
    const service = sp('ns2', 'svc2', {
      type: 'LoadBalancer',
      nodePort: 3001,
      externalIPs: ['192.168.99.22'],
      loadBalancerIPs: ['1.2.3.4'],
      externalPolicyLocal: true,
      usesLocalEndpoints: true,
      endpoints: [remote],
      clusterEndpoints: [remote],
      localEndpoints: [],
      allReachableEndpoints: [remote],
    });
    const ruleset = buildIptablesRuleset(fam([service]), OFF);
    const text = renderFamily(fam([service]), OFF);
    const drop = '-m comment --comment "ns2/svc2:p80 has no local endpoints"';
    expect(chainRules(text, 'KUBE-EXTERNAL-SERVICES')).toEqual([
      `-A KUBE-EXTERNAL-SERVICES ${drop} -m tcp -p tcp -d 192.168.99.22 --dport 80 -j DROP`,
      `-A KUBE-EXTERNAL-SERVICES ${drop} -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP`,
      `-A KUBE-EXTERNAL-SERVICES ${drop} -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j DROP`,
    ]);
    expect(chainRules(text, np.external).map((r) => r.split(' -j ')[1])).toEqual([
      np.cluster,
      'KUBE-MARK-MASQ',
      np.cluster,
    ]);
    expect(text).not.toContain(np.local);
    expect(ruleset.noLocalEndpoints).toEqual({ internal: 0, external: 1 });
  });

  it('a ClusterIP-type service with externalIPs stays Cluster (the brain says so) and masquerades', () => {
    const service = sp('ns2', 'svc2', { externalIPs: ['192.168.99.22'], endpoints: [ep('10.180.0.2', 80)] });
    const text = renderFamily(fam([service]), OFF);
    expect(chainRules(text, np.external)[0]).toContain(
      'masquerade traffic for ns2/svc2:p80 external destinations',
    );
  });
});

describe('iTP=Local (§1.10)', () => {
  const np = servicePortChains('ns3/svc3:p80', 'TCP');

  it('ClusterIP traffic goes to KUBE-SVL, which carries the ClusterIP masquerade rule', () => {
    const local = ep('10.180.0.3', 80, { isLocal: true });
    const service = sp('ns3', 'svc3', {
      internalPolicyLocal: true,
      usesClusterEndpoints: false,
      usesLocalEndpoints: true,
      endpoints: [local, ep('10.180.1.3', 80)],
      clusterEndpoints: [],
      localEndpoints: [local],
      allReachableEndpoints: [local],
    });
    const text = renderFamily(fam([service]), OFF);
    expect(chainRules(text, 'KUBE-SERVICES')[0]).toBe(
      `-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j ${np.local}`,
    );
    expect(chainRules(text, np.local)[0]).toBe(
      `-A ${np.local} -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ`,
    );
    expect(text).not.toContain(np.cluster);
    expect(text).not.toContain(endpointChain('ns3/svc3:p80', 'TCP', '10.180.1.3:80'));
  });

  it('without local endpoints ClusterIP traffic is dropped in filter KUBE-SERVICES', () => {
    const service = sp('ns3', 'svc3', {
      internalPolicyLocal: true,
      usesClusterEndpoints: false,
      usesLocalEndpoints: true,
      endpoints: [ep('10.180.1.3', 80)],
      clusterEndpoints: [],
      localEndpoints: [],
      allReachableEndpoints: [],
      hasAnyEndpoints: true,
    });
    const text = renderFamily(fam([service]), OFF);
    expect(chainRules(text, 'KUBE-SERVICES')).toEqual([
      '-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 has no local endpoints" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j DROP',
      expect.stringContaining('-j KUBE-NODEPORTS'),
    ]);
    expect(section(text, 'nat').filter((l) => l.includes('ns3/svc3'))).toEqual([]);
    expect(buildIptablesRuleset(fam([service]), OFF).noLocalEndpoints).toEqual({ internal: 1, external: 0 });
  });
});

describe('services without endpoints (§1.12)', () => {
  it('REJECT every destination in filter and write no nat chains', () => {
    const service = sp('ns4', 'svc4', {
      type: 'LoadBalancer',
      nodePort: 3004,
      externalIPs: ['192.168.99.33'],
      loadBalancerIPs: ['5.6.7.8'],
      loadBalancerSourceRanges: ['203.0.113.0/25'],
    });
    const text = renderFamily(fam([service]), OFF);
    const reject = '-m comment --comment "ns4/svc4:p80 has no endpoints"';
    expect(section(text, 'filter').filter((l) => l.includes('ns4/svc4'))).toEqual([
      `-A KUBE-SERVICES ${reject} -m tcp -p tcp -d 172.30.0.41 --dport 80 -j REJECT`,
      `-A KUBE-EXTERNAL-SERVICES ${reject} -m tcp -p tcp -d 192.168.99.33 --dport 80 -j REJECT`,
      `-A KUBE-EXTERNAL-SERVICES ${reject} -m tcp -p tcp -d 5.6.7.8 --dport 80 -j REJECT`,
      `-A KUBE-EXTERNAL-SERVICES ${reject} -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3004 -j REJECT`,
    ]);
    expect(section(text, 'nat').filter((l) => l.includes('ns4/svc4') || l.includes('KUBE-FW'))).toEqual([]);
  });
});

describe('loadBalancerSourceRanges (§1.11)', () => {
  const np = servicePortChains('ns5/svc5:p80', 'TCP');
  const service = (ranges: string[], lbIPs = ['1.2.3.4', '1.2.3.5']) =>
    sp('ns5', 'svc5', {
      type: 'LoadBalancer',
      nodePort: 3005,
      loadBalancerIPs: lbIPs,
      loadBalancerSourceRanges: ranges,
      endpoints: [ep('10.180.0.3', 80)],
    });

  it('LB IPs go through KUBE-FW, which accepts the ranges; the rest is dropped in KUBE-PROXY-FIREWALL', () => {
    const text = renderFamily(fam([service(['203.0.113.0/25'])]), OFF);
    expect(chainRules(text, 'KUBE-SERVICES')[1]).toBe(
      `-A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j ${np.firewall}`,
    );
    expect(chainRules(text, np.firewall)).toEqual([
      `-A ${np.firewall} -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 203.0.113.0/25 -j ${np.external}`,
      `-A ${np.firewall} -m comment --comment "other traffic to ns5/svc5:p80 will be dropped by KUBE-PROXY-FIREWALL"`,
    ]);
    expect(chainRules(text, 'KUBE-PROXY-FIREWALL')).toEqual([
      `-A KUBE-PROXY-FIREWALL -m comment --comment "ns5/svc5:p80 traffic not accepted by ${np.firewall}" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP`,
      `-A KUBE-PROXY-FIREWALL -m comment --comment "ns5/svc5:p80 traffic not accepted by ${np.firewall}" -m tcp -p tcp -d 1.2.3.5 --dport 80 -j DROP`,
    ]);
    // NodePorts are not subject to source ranges.
    expect(chainRules(text, 'KUBE-NODEPORTS')[0]).toContain(`-j ${np.external}`);
  });

  it('a range containing the node IP also accepts the LB IPs as sources (hairpin from the node)', () => {
    const text = renderFamily(fam([service(['203.0.113.0/25', '192.168.0.0/16'])]), OFF);
    expect(chainRules(text, np.firewall)).toEqual([
      `-A ${np.firewall} -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 203.0.113.0/25 -j ${np.external}`,
      `-A ${np.firewall} -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 192.168.0.0/16 -j ${np.external}`,
      `-A ${np.firewall} -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 1.2.3.4 -j ${np.external}`,
      `-A ${np.firewall} -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 1.2.3.5 -j ${np.external}`,
      `-A ${np.firewall} -m comment --comment "other traffic to ns5/svc5:p80 will be dropped by KUBE-PROXY-FIREWALL"`,
    ]);
  });

  it('no FW chain without LB IPs', () => {
    const text = renderFamily(fam([service(['203.0.113.0/25'], [])]), OFF);
    expect(text).not.toContain(np.firewall);
    expect(chainRules(text, 'KUBE-PROXY-FIREWALL')).toEqual([]);
  });
});

describe('NodePort addresses and localhost (§1.5)', () => {
  const nodePort = [sp('ns2', 'svc2', { nodePort: 3001, endpoints: [ep('10.180.0.2', 80)] })];
  const tail = (text: string) =>
    chainRules(text, 'KUBE-SERVICES').filter((l) => l.endsWith('-j KUBE-NODEPORTS'));
  const comment =
    '-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain"';

  it('match-all IPv4 with localhost NodePorts: every local address, KUBE-FIREWALL guards 127/8', () => {
    const text = renderFamily(fam(nodePort), OFF);
    expect(tail(text)).toEqual([
      `-A KUBE-SERVICES ${comment} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`,
    ]);
    expect(chainRules(text, 'KUBE-FIREWALL')).toHaveLength(1);
  });

  it('match-all IPv4 without localhost NodePorts excludes 127/8 and writes no KUBE-FIREWALL', () => {
    const text = renderFamily(fam(nodePort, { localhostNodePorts: false }), OFF);
    expect(tail(text)).toEqual([
      `-A KUBE-SERVICES ${comment} -m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS`,
    ]);
    expect(text).not.toContain('KUBE-FIREWALL');
  });

  it('explicit addresses: one jump per node address, none when nothing matched', () => {
    const text = renderFamily(
      fam(nodePort, { nodePortAddresses: { matchAll: false, ips: ['192.168.0.2', '127.0.0.1'] } }),
      OFF,
    );
    expect(tail(text)).toEqual([
      `-A KUBE-SERVICES ${comment} -d 192.168.0.2 -j KUBE-NODEPORTS`,
      `-A KUBE-SERVICES ${comment} -d 127.0.0.1 -j KUBE-NODEPORTS`,
    ]);
    const none = renderFamily(fam(nodePort, { nodePortAddresses: { matchAll: false, ips: [] } }), OFF);
    expect(tail(none)).toEqual([]);
    // The NodePort chain itself is still filled.
    expect(chainRules(none, 'KUBE-NODEPORTS')).toHaveLength(1);
  });
});

describe('host capabilities and conntrack settings', () => {
  const nodePort = [sp('ns2', 'svc2', { nodePort: 3001, endpoints: [ep('10.180.0.2', 80)] })];
  const ext = servicePortChains('ns2/svc2:p80', 'TCP').external;

  it('--random-fully on MASQUERADE when supported', () => {
    const text = renderFamily(fam(nodePort), { ...OFF, randomFully: true });
    expect(chainRules(text, 'KUBE-POSTROUTING')[2]).toBe(
      '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
    );
  });

  it('nfacct counters on the INVALID drop and on localhost NodePorts', () => {
    const text = renderFamily(fam(nodePort), { ...OFF, nfacct: true });
    expect(chainRules(text, 'KUBE-FORWARD')[0]).toBe(
      '-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP',
    );
    expect(chainRules(text, 'KUBE-NODEPORTS')).toEqual([
      `-A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j ${ext}`,
      `-A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp --dport 3001 -j ${ext}`,
    ]);
    // No localhost counter rule when NodePorts do not answer on loopback.
    const noLocalhost = renderFamily(fam(nodePort, { localhostNodePorts: false }), { ...OFF, nfacct: true });
    expect(chainRules(noLocalhost, 'KUBE-NODEPORTS')).toHaveLength(1);
    const explicit = renderFamily(
      fam(nodePort, { nodePortAddresses: { matchAll: false, ips: ['192.168.0.2'] } }),
      {
        ...OFF,
        nfacct: true,
      },
    );
    expect(chainRules(explicit, 'KUBE-NODEPORTS')).toHaveLength(1);
  });

  it('no INVALID drop with tcp_be_liberal', () => {
    const text = renderFamily(fam(nodePort), { ...OFF, tcpBeLiberal: true });
    expect(chainRules(text, 'KUBE-FORWARD').map((r) => r.includes('INVALID'))).toEqual([false, false]);
  });
});

describe('IPv6 (ip6tables-restore)', () => {
  const ep6 = ep('fd00:10:180::1', 80);
  const service = sp('ns1', 'svc1', {
    family: 'IPv6',
    clusterIP: 'fd00:172:30::41',
    nodePort: 3001,
    loadBalancerIPs: ['2001:db8::4'],
    loadBalancerSourceRanges: ['2001:db8:1::/48'],
    endpoints: [ep6],
  });
  const family6 = fam([service], {
    family: 'IPv6',
    nodeIP: '2001:db8:1::2',
    localDetector: { mode: 'ClusterCIDR', cidrs: ['fd00:10::/64'] },
    localhostNodePorts: false,
  });

  it('brackets endpoints, never touches loopback NodePorts and has no KUBE-FIREWALL', () => {
    const text = renderFamily(family6, { ...OFF, nfacct: true });
    const sep = endpointChain('ns1/svc1:p80', 'TCP', '[fd00:10:180::1]:80');
    const chains = servicePortChains('ns1/svc1:p80', 'TCP');
    expect(chainRules(text, sep)).toEqual([
      `-A ${sep} -m comment --comment ns1/svc1:p80 -s fd00:10:180::1 -j KUBE-MARK-MASQ`,
      `-A ${sep} -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination [fd00:10:180::1]:80`,
    ]);
    expect(chainRules(text, chains.cluster)[0]).toBe(
      `-A ${chains.cluster} -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d fd00:172:30::41 --dport 80 ! -s fd00:10::/64 -j KUBE-MARK-MASQ`,
    );
    expect(chainRules(text, 'KUBE-SERVICES').at(-1)).toBe(
      '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL ! -d ::1/128 -j KUBE-NODEPORTS',
    );
    expect(text).not.toContain('KUBE-FIREWALL');
    expect(text).not.toContain('127.0.0.0/8');
    expect(text).not.toContain('localhost_nps_accepted_pkts');
    // The node IP is inside the range: the LB IP is accepted as a source.
    expect(chainRules(text, chains.firewall)).toContain(
      `-A ${chains.firewall} -m comment --comment "ns1/svc1:p80 loadbalancer IP" -s 2001:db8::4 -j ${chains.external}`,
    );
  });
});

describe('large-cluster mode (§2.3)', () => {
  const manyEndpoints = (services: number, perService: number) =>
    Array.from({ length: services }, (_, s) =>
      sp('ns', `svc${s}`, {
        clusterIP: `172.30.${s >> 8}.${s & 255}`,
        endpoints: Array.from({ length: perService }, (_, e) => ep(`10.${s >> 8}.${s & 255}.${e + 1}`, 80)),
      }),
    );

  it('keeps per-endpoint comments at 1000 endpoints', () => {
    const ruleset = buildIptablesRuleset(fam(manyEndpoints(100, 10)), OFF);
    expect(ruleset.largeClusterMode).toBe(false);
    expect(ruleset.servicePorts[0]?.block.rules.at(-1)).toContain('-m comment --comment ns/svc0:p80 ');
  });

  it('drops them above 1000 endpoints, but keeps the dispatch comments', () => {
    const services = manyEndpoints(100, 10);
    services.push(sp('ns', 'extra', { clusterIP: '172.30.1.1', endpoints: [ep('10.9.9.9', 80)] }));
    const text = renderFamily(fam(services), OFF);
    const svc = servicePortChains('ns/extra:p80', 'TCP').cluster;
    const sep = endpointChain('ns/extra:p80', 'TCP', '10.9.9.9:80');
    expect(chainRules(text, svc)).toEqual([
      `-A ${svc} -m comment --comment "ns/extra:p80 cluster IP" -m tcp -p tcp -d 172.30.1.1 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ`,
      `-A ${svc} -j ${sep}`,
    ]);
    expect(chainRules(text, sep)).toEqual([
      `-A ${sep} -s 10.9.9.9 -j KUBE-MARK-MASQ`,
      `-A ${sep} -m tcp -p tcp -j DNAT --to-destination 10.9.9.9:80`,
    ]);
    expect(chainRules(text, 'KUBE-SERVICES')[0]).toContain('--comment "ns/svc0:p80 cluster IP"');
  });
});

describe('scale', () => {
  it('renders a service with 150 000 endpoints (more than a call can take as arguments)', () => {
    const endpoints = Array.from({ length: 150_000 }, (_, i) =>
      ep(`10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, 80),
    );
    const text = renderFamily(fam([sp('ns', 'huge', { endpoints })]), OFF);
    const svc = servicePortChains('ns/huge:p80', 'TCP').cluster;
    const rules = chainRules(text, svc);
    expect(rules).toHaveLength(150_001);
    expect(rules[1]).toContain('--probability 0.0000066667 ');
    expect(rules.at(-1)).toBe(`-A ${svc} -j ${endpointChain('ns/huge:p80', 'TCP', '10.2.73.239:80')}`);
  });
});

describe('partial sync assembly (§2.7)', () => {
  const services = [
    sp('ns1', 'svc1', { endpoints: [ep('10.180.0.1', 80)] }),
    sp('ns2', 'svc2', { clusterIP: '172.30.0.42', nodePort: 3001, endpoints: [ep('10.180.0.2', 80)] }),
  ];
  const ruleset = buildIptablesRuleset(fam(services), OFF);
  const svc2 = servicePortChains('ns2/svc2:p80', 'TCP');
  const sep2 = endpointChain('ns2/svc2:p80', 'TCP', '10.180.0.2:80');
  const stale = 'KUBE-SEP-OLDOLDOLDOLDOLD7';

  it('leaves unchanged services out of nat but keeps their dispatch rules, and deletes stale chains', () => {
    const full = assembleRestoreInput(ruleset, { writeBlock: () => true, staleChains: [] });
    const partial = assembleRestoreInput(ruleset, {
      writeBlock: (block) => block.service === 'ns1/svc1',
      staleChains: [stale],
    });
    const nat = section(partial.text, 'nat');
    expect(nat).toContain(`:${SVC1} - [0:0]`);
    expect(nat).not.toContain(`:${svc2.cluster} - [0:0]`);
    expect(nat.filter((l) => l.startsWith(`-A ${svc2.cluster}`) || l.startsWith(`-A ${sep2}`))).toEqual([]);
    // KUBE-SERVICES and KUBE-NODEPORTS are rewritten in full, so they still jump to svc2's chains.
    expect(chainRules(partial.text, 'KUBE-SERVICES')).toEqual(chainRules(full.text, 'KUBE-SERVICES'));
    expect(chainRules(partial.text, 'KUBE-NODEPORTS')).toEqual(chainRules(full.text, 'KUBE-NODEPORTS'));
    expect(section(partial.text, 'filter')).toEqual(section(full.text, 'filter'));
    // Stale chains are declared (flushed) after the active ones, then deleted before the NodePorts jump.
    expect(nat.indexOf(`:${stale} - [0:0]`)).toBe(nat.filter((l) => l.startsWith(':')).length - 1);
    expect(nat.slice(-2)[0]).toBe(`-X ${stale}`);
    expect(nat.at(-1)).toContain('-j KUBE-NODEPORTS');
  });

  it('counts rules as kube-proxy does (written vs owned)', () => {
    const full = assembleRestoreInput(ruleset, { writeBlock: () => true, staleChains: [] });
    const partial = assembleRestoreInput(ruleset, {
      writeBlock: (block) => block.service === 'ns1/svc1',
      staleChains: [stale],
    });
    const skipped = ruleset.servicePorts[1]?.block.rules.length ?? 0;
    expect(skipped).toBe(6); // KUBE-EXT ×2, KUBE-SVC ×2 (masquerade, endpoint), KUBE-SEP ×2
    expect(full.rulesTotal).toEqual(full.rulesWritten);
    expect(partial.rulesTotal).toEqual(full.rulesTotal);
    expect(partial.rulesWritten.nat).toBe(full.rulesWritten.nat - skipped);
    expect(full.rulesWritten.filter).toBe(4);
  });

  it('knows every active chain, written or skipped', () => {
    const active = activeNatChains(ruleset);
    for (const chain of [SVC1, SEP1, svc2.cluster, svc2.external, sep2, 'KUBE-SERVICES', 'KUBE-MARK-MASQ']) {
      expect(active.has(chain)).toBe(true);
    }
    expect(active.has(stale)).toBe(false);
  });
});

describe('render output', () => {
  const decisions = {
    nodeName: 'test-node',
    families: [
      fam([sp('ns1', 'svc1', { endpoints: [ep('10.180.0.1', 80)] })]),
      fam([], { family: 'IPv6' as const, nodeIP: '2001:db8::2', localhostNodePorts: false }),
    ],
    skipped: [],
    ignored: [],
  };

  it('prints one family alone with --ip-family, all families under a comment otherwise', () => {
    const v4 = renderIptablesText(decisions, OFF, 'IPv4');
    expect(v4.startsWith('*filter\n')).toBe(true);
    expect(v4).toBe(renderFamily(decisions.families[0] as FamilyDecisions, OFF));
    const both = renderIptablesText(decisions, OFF);
    expect(both).toBe(
      `# IPv4 (iptables-restore)\n${v4}# IPv6 (ip6tables-restore)\n${renderIptablesText(decisions, OFF, 'IPv6')}`,
    );
    expect(() => renderIptablesText({ ...decisions, families: [] }, OFF, 'IPv6')).toThrow(/IPv6/);
  });
});

describe('jump rules (§2.1)', () => {
  it('are the prepended jumps from the built-in chains', () => {
    const described = JUMP_RULES.map((r) => `${r.table} ${r.from} ${jumpRuleArgs(r).join(' ')}`);
    expect(described).toEqual([
      'filter INPUT -m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES',
      'filter FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES',
      'filter INPUT -m comment --comment kubernetes health check service ports -j KUBE-NODEPORTS',
      'filter FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes service portals -j KUBE-SERVICES',
      'filter OUTPUT -m conntrack --ctstate NEW -m comment --comment kubernetes service portals -j KUBE-SERVICES',
      'filter FORWARD -m comment --comment kubernetes forwarding rules -j KUBE-FORWARD',
      'filter INPUT -m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL',
      'filter OUTPUT -m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL',
      'filter FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL',
      'nat OUTPUT -m comment --comment kubernetes service portals -j KUBE-SERVICES',
      'nat PREROUTING -m comment --comment kubernetes service portals -j KUBE-SERVICES',
      'nat POSTROUTING -m comment --comment kubernetes postrouting rules -j KUBE-POSTROUTING',
      'filter INPUT -j KUBE-FIREWALL',
      'filter OUTPUT -j KUBE-FIREWALL',
    ]);
  });
});
