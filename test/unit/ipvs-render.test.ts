// The ipvs renderer against kube-proxy's ipvs proxier (kube-proxy v1.37.2's pkg/proxy/ipvs/proxier.go): decisions come
// from the brain for small clusters, expectations from the spec.
import { describe, expect, it } from 'vitest';
import { type BrainConfig, decide } from '../../src/brain/decide.js';
import type { FamilyDecisions } from '../../src/brain/types.js';
import { ipsetName } from '../../src/dataplanes/ipvs/names.js';
import {
  buildIpvsState,
  formatIpsetSave,
  formatIpvsadmSave,
  type IpvsFamilyState,
  type IpvsRenderOptions,
  nodeAddressSet,
  renderIpvsText,
  type VirtualServer,
} from '../../src/dataplanes/ipvs/plan.js';
import type { IpAddrInterface } from '../../src/host/interfaces.js';
import type { EndpointSlice, IPFamily, Service, SliceEndpoint } from '../../src/model/types.js';
import { brainConfig, endpoint, node, nodeEnv, service, slice } from '../support/model-fixtures.js';

const NODE = 'node-a';
const NODE_IP = '192.168.0.2';
const local = { nodeName: NODE };
const remote = { nodeName: 'node-b' };

const brain = brainConfig({ clusterCIDRs: ['10.244.0.0/16', 'fd00:244::/48'] });

const interfaces: IpAddrInterface[] = [
  {
    ifname: 'lo',
    addr_info: [
      { family: 'inet', local: '127.0.0.1', prefixlen: 8 },
      { family: 'inet6', local: '::1', prefixlen: 128 },
    ],
  },
  {
    ifname: 'eth0',
    addr_info: [
      { family: 'inet', local: NODE_IP, prefixlen: 24 },
      { family: 'inet6', local: '2001:db8::2', prefixlen: 64 },
      { family: 'inet6', local: 'fe80::1', prefixlen: 64 },
    ],
  },
  { ifname: 'eth1', addr_info: [{ family: 'inet', local: '172.16.0.2', prefixlen: 24 }] },
  // Addresses kube-proxy bound earlier are not node addresses.
  { ifname: 'kube-ipvs0', addr_info: [{ family: 'inet', local: '10.96.0.99', prefixlen: 32 }] },
];

const HTTP_SLICE_PORTS: EndpointSlice['ports'] = [{ name: 'http', port: 8080, protocol: 'TCP' }];
const HTTP: Service['ports'] = [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 0 }];

interface Cluster {
  services: Service[];
  slices: EndpointSlice[];
}

function familyDecisions(
  cluster: Cluster,
  opts: { config?: Partial<BrainConfig>; family?: IPFamily } = {},
): FamilyDecisions {
  const family = opts.family ?? 'IPv4';
  const decisions = decide(
    {
      services: new Map(cluster.services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      endpointSlices: new Map(cluster.slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      node: node(NODE),
      serviceCIDRs: new Map(),
    },
    nodeEnv({ nodeName: NODE, nodeIPs: [NODE_IP, '2001:db8::2'], interfaces }),
    { ...brain, ...opts.config },
    { families: [family] },
  );
  return decisions.families[0] as FamilyDecisions;
}

function state(
  cluster: Cluster,
  opts: { config?: Partial<BrainConfig>; family?: IPFamily; render?: Partial<IpvsRenderOptions> } = {},
): IpvsFamilyState {
  const decisions = familyDecisions(cluster, opts);
  return buildIpvsState(decisions, {
    scheduler: '',
    randomFully: false,
    nodeAddresses: nodeAddressSet(interfaces, decisions.family),
    ...opts.render,
  });
}

/** One service "ns/name" with one slice of the given endpoints on port 8080. */
function one(spec: Partial<Service>, endpoints: SliceEndpoint[], name = 'web'): Cluster {
  return {
    services: [service('ns', name, { ports: HTTP, clusterIP: '10.96.0.10', ...spec })],
    slices: [slice('ns', name, `${name}-1`, endpoints, HTTP_SLICE_PORTS)],
  };
}

const vsKey = (vs: VirtualServer) => `${vs.protocol} ${vs.address}:${vs.port}`;
const realServers = (vs: VirtualServer | undefined) =>
  vs?.realServers.map((rs) => `${rs.address}:${rs.port}`);
const find = (s: IpvsFamilyState, address: string, port: number) =>
  s.virtualServers.find((vs) => vs.address === address && vs.port === port);
const members = (s: IpvsFamilyState, name: string) => s.ipsets.find((set) => set.name === name)?.entries;
const ruleLines = (s: IpvsFamilyState, table: 'filter' | 'nat') => {
  const text = s.iptablesRestore;
  const start = text.indexOf(`*${table}\n`);
  return text
    .slice(start, text.indexOf('COMMIT', start))
    .split('\n')
    .filter((l) => l.startsWith('-A '));
};

const twoEndpoints = [endpoint('10.244.1.10', local), endpoint('10.244.2.10', remote)];

describe('virtual servers', () => {
  it('a ClusterIP service is one virtual server, rr by default, every ready endpoint a real server of weight 1', () => {
    const s = state(one({}, twoEndpoints));
    expect(s.virtualServers.map(vsKey)).toEqual(['TCP 10.96.0.10:80']);
    const vs = s.virtualServers[0] as VirtualServer;
    expect(vs.scheduler).toBe('rr');
    expect(vs.persistenceTimeout).toBe(0);
    expect(vs.realServers).toEqual([
      { address: '10.244.1.10', port: 8080, weight: 1 },
      { address: '10.244.2.10', port: 8080, weight: 1 },
    ]);
    expect(formatIpvsadmSave(s.virtualServers)).toBe(
      [
        '-A -t 10.96.0.10:80 -s rr',
        '-a -t 10.96.0.10:80 -r 10.244.1.10:8080 -m -w 1',
        '-a -t 10.96.0.10:80 -r 10.244.2.10:8080 -m -w 1',
        '',
      ].join('\n'),
    );
  });

  it('externalIPs and LB ingress IPs get their own virtual servers, after the ClusterIP', () => {
    const s = state(
      one(
        {
          type: 'LoadBalancer',
          externalIPs: ['192.168.70.10'],
          loadBalancerIngress: [{ ip: '192.168.80.10', hostname: '', ipMode: 'VIP' }],
          ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 0 }],
        },
        twoEndpoints,
      ),
    );
    expect(s.virtualServers.map(vsKey)).toEqual([
      'TCP 10.96.0.10:80',
      'TCP 192.168.70.10:80',
      'TCP 192.168.80.10:80',
    ]);
    for (const vs of s.virtualServers)
      expect(realServers(vs)).toEqual(['10.244.1.10:8080', '10.244.2.10:8080']);
  });

  it('a LB ingress with ipMode Proxy gets no virtual server', () => {
    const s = state(
      one(
        {
          type: 'LoadBalancer',
          loadBalancerIngress: [{ ip: '192.168.80.10', hostname: '', ipMode: 'Proxy' }],
          ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 0 }],
        },
        twoEndpoints,
      ),
    );
    expect(s.virtualServers.map(vsKey)).toEqual(['TCP 10.96.0.10:80']);
  });

  it('NodePorts listen on every node address except loopback, IPv6 link-local and kube-ipvs0', () => {
    const s = state(
      one(
        { type: 'NodePort', ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 }] },
        twoEndpoints,
      ),
    );
    expect(s.virtualServers.map(vsKey)).toEqual([
      'TCP 10.96.0.10:80',
      'TCP 192.168.0.2:30080',
      'TCP 172.16.0.2:30080',
    ]);
    const v6 = state(
      {
        services: [
          service('ns', 'web', {
            type: 'NodePort',
            clusterIP: 'fd00:96::10',
            clusterIPs: ['fd00:96::10'],
            ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 }],
          }),
        ],
        slices: [slice('ns', 'web', 'web-6', [endpoint('fd00:244:1::10', local)], HTTP_SLICE_PORTS, 'IPv6')],
      },
      { family: 'IPv6' },
    );
    expect(v6.virtualServers.map(vsKey)).toEqual(['TCP fd00:96::10:80', 'TCP 2001:db8::2:30080']);
    expect(formatIpvsadmSave(v6.virtualServers).split('\n')[0]).toBe('-A -t [fd00:96::10]:80 -s rr');
    expect(realServers(v6.virtualServers[1])).toEqual(['fd00:244:1::10:8080']);
  });

  it('nodePortAddresses CIDRs restrict the NodePort virtual servers to matching addresses, never loopback', () => {
    const s = state(
      one(
        { type: 'NodePort', ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 }] },
        twoEndpoints,
      ),
      { config: { nodePortAddresses: ['172.16.0.0/16', '127.0.0.0/8'] } },
    );
    expect(s.virtualServers.map(vsKey)).toEqual(['TCP 10.96.0.10:80', 'TCP 172.16.0.2:30080']);
  });

  it('UDP and SCTP virtual servers use -u and --sctp-service', () => {
    const s = state({
      services: [
        service('ns', 'dns', {
          clusterIP: '10.96.0.53',
          ports: [
            { name: 'dns', protocol: 'UDP', port: 53, nodePort: 0 },
            { name: 'sig', protocol: 'SCTP', port: 3868, nodePort: 0 },
          ],
        }),
      ],
      slices: [
        slice(
          'ns',
          'dns',
          'dns-1',
          [endpoint('10.244.1.53', local)],
          [
            { name: 'dns', port: 5353, protocol: 'UDP' },
            { name: 'sig', port: 3868, protocol: 'SCTP' },
          ],
        ),
      ],
    });
    expect(formatIpvsadmSave(s.virtualServers)).toBe(
      [
        '-A -u 10.96.0.53:53 -s rr',
        '-a -u 10.96.0.53:53 -r 10.244.1.53:5353 -m -w 1',
        '-A --sctp-service 10.96.0.53:3868 -s rr',
        '-a --sctp-service 10.96.0.53:3868 -r 10.244.1.53:3868 -m -w 1',
        '',
      ].join('\n'),
    );
  });

  it('the configured scheduler applies to every virtual server; mh adds the source-hash flag', () => {
    const cluster = one(
      { type: 'NodePort', ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 }] },
      twoEndpoints,
    );
    for (const scheduler of ['wrr', 'lc', 'sh']) {
      const s = state(cluster, { render: { scheduler } });
      expect(s.virtualServers.map((vs) => vs.scheduler)).toEqual([scheduler, scheduler, scheduler]);
      expect(s.virtualServers.every((vs) => !vs.sourceHash)).toBe(true);
    }
    const mh = state(cluster, { render: { scheduler: 'mh' } });
    expect(mh.virtualServers.every((vs) => vs.sourceHash)).toBe(true);
    expect(formatIpvsadmSave(mh.virtualServers).split('\n')[0]).toBe('-A -t 10.96.0.10:80 -s mh -b mh-port');
  });

  it('ClientIP affinity makes every virtual server of the port persistent with the timeout', () => {
    const s = state(
      one(
        {
          type: 'NodePort',
          sessionAffinity: 'ClientIP',
          sessionAffinityTimeoutSeconds: 600,
          externalIPs: ['192.168.70.10'],
          ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 }],
        },
        twoEndpoints,
      ),
    );
    expect(s.virtualServers.map((vs) => vs.persistenceTimeout)).toEqual([600, 600, 600, 600]);
    expect(formatIpvsadmSave(s.virtualServers).split('\n')[0]).toBe('-A -t 10.96.0.10:80 -s rr -p 600');
  });

  it('a service without endpoints keeps its virtual server, with no real servers', () => {
    const s = state(one({}, []));
    expect(s.virtualServers.map(vsKey)).toEqual(['TCP 10.96.0.10:80']);
    expect(s.virtualServers[0]?.realServers).toEqual([]);
  });
});

describe('real servers per traffic policy', () => {
  const np = { name: 'http', protocol: 'TCP' as const, port: 80, nodePort: 30080 };
  const eps = [
    endpoint('10.244.1.10', local),
    endpoint('10.244.2.10', remote),
    endpoint('10.244.3.10', { ...remote, conditions: { ready: false, serving: true, terminating: true } }),
  ];

  it('eTP=Local: external virtual servers get the local endpoints, the ClusterIP all ready ones', () => {
    const s = state(
      one({ type: 'NodePort', externalTrafficPolicy: 'Local', externalIPs: [], ports: [np] }, eps),
    );
    expect(realServers(find(s, '10.96.0.10', 80))).toEqual(['10.244.1.10:8080', '10.244.2.10:8080']);
    expect(realServers(find(s, NODE_IP, 30080))).toEqual(['10.244.1.10:8080']);
    const lb = state(
      one(
        {
          type: 'LoadBalancer',
          externalTrafficPolicy: 'Local',
          loadBalancerIngress: [{ ip: '192.168.80.10', hostname: '', ipMode: 'VIP' }],
          ports: [np],
        },
        eps,
      ),
    );
    expect(realServers(find(lb, '192.168.80.10', 80))).toEqual(['10.244.1.10:8080']);
  });

  it('eTP=Local without local endpoints falls back to the cluster endpoints (kubernetes#97081)', () => {
    const s = state(one({ type: 'NodePort', externalTrafficPolicy: 'Local', ports: [np] }, eps.slice(1)));
    expect(realServers(find(s, NODE_IP, 30080))).toEqual(['10.244.2.10:8080']);
  });

  it('eTP=Local on a ClusterIP-type service with externalIPs is Cluster', () => {
    const s = state(one({ externalTrafficPolicy: 'Local', externalIPs: ['192.168.70.10'] }, eps));
    expect(realServers(find(s, '192.168.70.10', 80))).toEqual(['10.244.1.10:8080', '10.244.2.10:8080']);
    expect(members(s, 'KUBE-EXTERNAL-IP')).toEqual(['192.168.70.10,tcp:80']);
    expect(members(s, 'KUBE-EXTERNAL-IP-LOCAL')).toEqual([]);
  });

  it('iTP=Local: the ClusterIP gets local endpoints only; none local means no real servers', () => {
    const s = state(one({ internalTrafficPolicy: 'Local' }, eps));
    expect(realServers(find(s, '10.96.0.10', 80))).toEqual(['10.244.1.10:8080']);
    const none = state(one({ internalTrafficPolicy: 'Local' }, eps.slice(1)));
    expect(realServers(find(none, '10.96.0.10', 80))).toEqual([]);
  });

  it('only serving-terminating endpoints left: they become the real servers', () => {
    const s = state(one({}, [eps[2] as SliceEndpoint]));
    expect(realServers(find(s, '10.96.0.10', 80))).toEqual(['10.244.3.10:8080']);
  });
});

describe('addresses bound to kube-ipvs0', () => {
  it('every ClusterIP; LB and external IPs only when no other interface has them', () => {
    const s = state({
      services: [
        service('ns', 'a', {
          type: 'LoadBalancer',
          clusterIP: '10.96.0.10',
          externalIPs: ['192.168.70.10', NODE_IP],
          loadBalancerIngress: [
            { ip: '192.168.80.10', hostname: '', ipMode: 'VIP' },
            { ip: '172.16.0.2', hostname: '', ipMode: 'VIP' },
          ],
          ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 }],
        }),
        service('ns', 'b', { clusterIP: '10.96.0.20', ports: HTTP }),
      ],
      slices: [],
    });
    expect(s.boundAddresses).toEqual(['10.96.0.10', '10.96.0.20', '192.168.70.10', '192.168.80.10']);
    expect(members(s, 'KUBE-IPVS-IPS')).toEqual(s.boundAddresses);
    // The local ones still get virtual servers.
    expect(find(s, NODE_IP, 80)).toBeDefined();
    expect(find(s, '172.16.0.2', 80)).toBeDefined();
  });

  it('nodeAddressSet leaves out kube-ipvs0, loopback and IPv6 link-local', () => {
    expect(nodeAddressSet(interfaces, 'IPv4')).toEqual([NODE_IP, '172.16.0.2']);
    expect(nodeAddressSet(interfaces, 'IPv6')).toEqual(['2001:db8::2']);
  });
});

describe('ipsets', () => {
  const full = (): Cluster => ({
    services: [
      service('ns', 'lb', {
        type: 'LoadBalancer',
        clusterIP: '10.96.0.10',
        externalTrafficPolicy: 'Local',
        healthCheckNodePort: 32000,
        externalIPs: ['192.168.70.10'],
        loadBalancerIngress: [{ ip: '192.168.80.10', hostname: '', ipMode: 'VIP' }],
        loadBalancerSourceRanges: ['203.0.113.0/24', '192.168.0.0/16'],
        ports: [
          { name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 },
          { name: 'dns', protocol: 'UDP', port: 53, nodePort: 30053 },
          { name: 'sig', protocol: 'SCTP', port: 3868, nodePort: 30868 },
        ],
      }),
      service('ns', 'np', {
        type: 'NodePort',
        clusterIP: '10.96.0.20',
        externalIPs: ['192.168.70.20'],
        loadBalancerIngress: [],
        ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30090 }],
      }),
      service('ns', 'fw', {
        type: 'LoadBalancer',
        clusterIP: '10.96.0.30',
        loadBalancerIngress: [{ ip: '192.168.80.30', hostname: '', ipMode: 'VIP' }],
        loadBalancerSourceRanges: ['203.0.113.0/24', '198.51.100.7/32'],
        ports: [{ name: 'http', protocol: 'TCP', port: 443, nodePort: 0 }],
      }),
    ],
    slices: [
      slice('ns', 'lb', 'lb-1', twoEndpoints, [
        { name: 'http', port: 8080, protocol: 'TCP' },
        { name: 'dns', port: 5353, protocol: 'UDP' },
        { name: 'sig', port: 3868, protocol: 'SCTP' },
      ]),
      slice('ns', 'np', 'np-1', twoEndpoints, HTTP_SLICE_PORTS),
      slice('ns', 'fw', 'fw-1', twoEndpoints, HTTP_SLICE_PORTS),
    ],
  });

  it('every set exists with its type and comment, in kube-proxy order', () => {
    const s = state(one({}, []));
    expect(formatIpsetSave(s.ipsets)).toBe(
      [
        'create KUBE-LOOP-BACK hash:ip,port,ip family inet hashsize 1024 maxelem 65536 comment',
        'create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 comment',
        'add KUBE-CLUSTER-IP 10.96.0.10,tcp:80',
        'create KUBE-EXTERNAL-IP hash:ip,port family inet hashsize 1024 maxelem 65536 comment',
        'create KUBE-EXTERNAL-IP-LOCAL hash:ip,port family inet hashsize 1024 maxelem 65536 comment',
        'create KUBE-LOAD-BALANCER hash:ip,port family inet hashsize 1024 maxelem 65536 comment',
        'create KUBE-LOAD-BALANCER-FW hash:ip,port family inet hashsize 1024 maxelem 65536 comment',
        'create KUBE-LOAD-BALANCER-LOCAL hash:ip,port family inet hashsize 1024 maxelem 65536 comment',
        'create KUBE-LOAD-BALANCER-SOURCE-IP hash:ip,port,ip family inet hashsize 1024 maxelem 65536 comment',
        'create KUBE-LOAD-BALANCER-SOURCE-CIDR hash:ip,port,net family inet hashsize 1024 maxelem 65536 comment',
        'create KUBE-NODE-PORT-TCP bitmap:port range 0-65535 comment',
        'create KUBE-NODE-PORT-LOCAL-TCP bitmap:port range 0-65535 comment',
        'create KUBE-NODE-PORT-UDP bitmap:port range 0-65535 comment',
        'create KUBE-NODE-PORT-LOCAL-UDP bitmap:port range 0-65535 comment',
        'create KUBE-NODE-PORT-SCTP-HASH hash:ip,port family inet hashsize 1024 maxelem 65536 comment',
        'create KUBE-NODE-PORT-LOCAL-SCTP-HASH hash:ip,port family inet hashsize 1024 maxelem 65536 comment',
        'create KUBE-HEALTH-CHECK-NODE-PORT bitmap:port range 0-65535 comment',
        'create KUBE-IPVS-IPS hash:ip family inet hashsize 1024 maxelem 65536 comment',
        'add KUBE-IPVS-IPS 10.96.0.10',
        '',
      ].join('\n'),
    );
    expect(s.ipsets.find((set) => set.name === 'KUBE-NODE-PORT-SCTP-HASH')?.comment).toBe(
      "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'",
    );
    expect(s.ipsets.find((set) => set.name === 'KUBE-LOOP-BACK')?.comment).toBe(
      'Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose',
    );
  });

  it('members per VIP kind, policy and protocol', () => {
    const s = state(full());
    // Hairpin: local endpoints only.
    expect(members(s, 'KUBE-LOOP-BACK')).toEqual([
      '10.244.1.10,sctp:3868,10.244.1.10',
      '10.244.1.10,tcp:8080,10.244.1.10',
      '10.244.1.10,udp:5353,10.244.1.10',
    ]);
    expect(members(s, 'KUBE-CLUSTER-IP')).toEqual([
      '10.96.0.10,sctp:3868',
      '10.96.0.10,tcp:80',
      '10.96.0.10,udp:53',
      '10.96.0.20,tcp:80',
      '10.96.0.30,tcp:443',
    ]);
    expect(members(s, 'KUBE-EXTERNAL-IP')).toEqual(['192.168.70.20,tcp:80']);
    expect(members(s, 'KUBE-EXTERNAL-IP-LOCAL')).toEqual([
      '192.168.70.10,sctp:3868',
      '192.168.70.10,tcp:80',
      '192.168.70.10,udp:53',
    ]);
    expect(members(s, 'KUBE-LOAD-BALANCER')).toEqual([
      '192.168.80.10,sctp:3868',
      '192.168.80.10,tcp:80',
      '192.168.80.10,udp:53',
      '192.168.80.30,tcp:443',
    ]);
    expect(members(s, 'KUBE-LOAD-BALANCER-LOCAL')).toEqual([
      '192.168.80.10,sctp:3868',
      '192.168.80.10,tcp:80',
      '192.168.80.10,udp:53',
    ]);
    expect(members(s, 'KUBE-LOAD-BALANCER-FW')).toEqual(members(s, 'KUBE-LOAD-BALANCER'));
    expect(members(s, 'KUBE-LOAD-BALANCER-SOURCE-CIDR')).toEqual([
      '192.168.80.10,sctp:3868,192.168.0.0/16',
      '192.168.80.10,sctp:3868,203.0.113.0/24',
      '192.168.80.10,tcp:80,192.168.0.0/16',
      '192.168.80.10,tcp:80,203.0.113.0/24',
      '192.168.80.10,udp:53,192.168.0.0/16',
      '192.168.80.10,udp:53,203.0.113.0/24',
      // A host-sized range is listed as the bare address, as `ipset list` prints it.
      '192.168.80.30,tcp:443,198.51.100.7',
      '192.168.80.30,tcp:443,203.0.113.0/24',
    ]);
    // 192.168.0.0/16 holds the node IP: the node may reach the LB IP (source = the VIP itself).
    expect(members(s, 'KUBE-LOAD-BALANCER-SOURCE-IP')).toEqual([
      '192.168.80.10,sctp:3868,192.168.80.10',
      '192.168.80.10,tcp:80,192.168.80.10',
      '192.168.80.10,udp:53,192.168.80.10',
    ]);
    expect(members(s, 'KUBE-NODE-PORT-TCP')).toEqual(['30080', '30090']);
    expect(members(s, 'KUBE-NODE-PORT-LOCAL-TCP')).toEqual(['30080']);
    expect(members(s, 'KUBE-NODE-PORT-UDP')).toEqual(['30053']);
    expect(members(s, 'KUBE-NODE-PORT-LOCAL-UDP')).toEqual(['30053']);
    // SCTP NodePorts are per node IP.
    expect(members(s, 'KUBE-NODE-PORT-SCTP-HASH')).toEqual([
      '172.16.0.2,sctp:30868',
      '192.168.0.2,sctp:30868',
    ]);
    expect(members(s, 'KUBE-NODE-PORT-LOCAL-SCTP-HASH')).toEqual(members(s, 'KUBE-NODE-PORT-SCTP-HASH'));
    expect(members(s, 'KUBE-HEALTH-CHECK-NODE-PORT')).toEqual(['32000']);
    expect(members(s, 'KUBE-IPVS-IPS')).toEqual([
      '10.96.0.10',
      '10.96.0.20',
      '10.96.0.30',
      '192.168.70.10',
      '192.168.70.20',
      '192.168.80.10',
      '192.168.80.30',
    ]);
    // The LB without the node in its source ranges is blocked from the node (kubernetes#119656).
    expect(ruleLines(s, 'filter')).toContain(
      '-A KUBE-IPVS-OUT-FILTER -s 192.168.80.30 -m ipvs --vaddr 192.168.80.30 --vproto tcp --vport 443 -j DROP',
    );
    expect(ruleLines(s, 'filter').filter((r) => r.includes('KUBE-IPVS-OUT-FILTER'))).toHaveLength(1);
  });

  it('IPv6 sets are KUBE-6-…, cut to 31 characters, with family inet6', () => {
    expect(ipsetName('KUBE-CLUSTER-IP', 'IPv6')).toBe('KUBE-6-CLUSTER-IP');
    expect(ipsetName('KUBE-LOAD-BALANCER-SOURCE-CIDR', 'IPv6')).toBe('KUBE-6-LOAD-BALANCER-SOURCE-CID');
    expect(ipsetName('KUBE-NODE-PORT-LOCAL-SCTP-HASH', 'IPv6')).toBe('KUBE-6-NODE-PORT-LOCAL-SCTP-HAS');
    expect(ipsetName('KUBE-CLUSTER-IP', 'IPv4')).toBe('KUBE-CLUSTER-IP');
    const s = state(
      {
        services: [
          service('ns', 'web', { clusterIP: 'fd00:96::10', clusterIPs: ['fd00:96::10'], ports: HTTP }),
        ],
        slices: [slice('ns', 'web', 'web-6', [endpoint('fd00:244:1::10', local)], HTTP_SLICE_PORTS, 'IPv6')],
      },
      { family: 'IPv6' },
    );
    expect(s.ipsets.map((set) => set.name)).toContain('KUBE-6-LOAD-BALANCER-SOURCE-CID');
    expect(s.ipsets.every((set) => set.name.startsWith('KUBE-6-') && set.name.length <= 31)).toBe(true);
    const save = formatIpsetSave(s.ipsets);
    expect(save).toContain(
      'create KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536 comment',
    );
    expect(save).toContain('add KUBE-6-CLUSTER-IP fd00:96::10,tcp:80');
    expect(save).toContain('add KUBE-6-LOOP-BACK fd00:244:1::10,tcp:8080,fd00:244:1::10');
    expect(save).toContain('create KUBE-6-NODE-PORT-TCP bitmap:port range 0-65535 comment');
    expect(ruleLines(s, 'nat')[0]).toBe('-A KUBE-SERVICES -s ::1/128 -j RETURN');
    expect(s.iptablesRestore).toContain('--match-set KUBE-6-CLUSTER-IP dst,dst');
  });
});

describe('companion iptables rules', () => {
  it('writes kube-proxy’s chains and rules in its exact order (§3.2)', () => {
    const s = state(
      {
        services: [
          service('ns', 'lb', {
            type: 'LoadBalancer',
            clusterIP: '10.96.0.10',
            externalIPs: ['192.168.70.10'],
            loadBalancerIngress: [{ ip: '192.168.80.10', hostname: '', ipMode: 'VIP' }],
            loadBalancerSourceRanges: ['203.0.113.0/24'],
            ports: [
              { name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 },
              { name: 'dns', protocol: 'UDP', port: 53, nodePort: 30053 },
            ],
          }),
          service('ns', 'loc', {
            type: 'LoadBalancer',
            clusterIP: '10.96.0.20',
            externalTrafficPolicy: 'Local',
            healthCheckNodePort: 32000,
            externalIPs: ['192.168.70.20'],
            loadBalancerIngress: [{ ip: '192.168.80.20', hostname: '', ipMode: 'VIP' }],
            ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30081 }],
          }),
        ],
        slices: [
          slice('ns', 'lb', 'lb-1', twoEndpoints, [
            { name: 'http', port: 8080, protocol: 'TCP' },
            { name: 'dns', port: 5353, protocol: 'UDP' },
          ]),
          slice('ns', 'loc', 'loc-1', twoEndpoints, HTTP_SLICE_PORTS),
        ],
      },
      { render: { randomFully: true } },
    );
    const c = (set: string, comment: string) => `-m comment --comment "${comment}" -m set --match-set ${set}`;
    expect(s.iptablesRestore).toBe(
      [
        '*filter',
        ':KUBE-FORWARD - [0:0]',
        ':KUBE-NODE-PORT - [0:0]',
        ':KUBE-PROXY-FIREWALL - [0:0]',
        ':KUBE-SOURCE-RANGES-FIREWALL - [0:0]',
        ':KUBE-IPVS-FILTER - [0:0]',
        ':KUBE-IPVS-OUT-FILTER - [0:0]',
        `-A KUBE-PROXY-FIREWALL ${c('KUBE-LOAD-BALANCER-FW', 'Kubernetes service load balancer ip + port for load balancer with sourceRange')} dst,dst -j KUBE-SOURCE-RANGES-FIREWALL`,
        `-A KUBE-SOURCE-RANGES-FIREWALL ${c('KUBE-LOAD-BALANCER-SOURCE-CIDR', 'Kubernetes service load balancer ip + port + source cidr for packet filter purpose')} dst,dst,src -j RETURN`,
        '-A KUBE-SOURCE-RANGES-FIREWALL -j DROP',
        // Service ports come sorted by name: ns/lb:dns before ns/lb:http.
        '-A KUBE-IPVS-OUT-FILTER -s 192.168.80.10 -m ipvs --vaddr 192.168.80.10 --vproto udp --vport 53 -j DROP',
        '-A KUBE-IPVS-OUT-FILTER -s 192.168.80.10 -m ipvs --vaddr 192.168.80.10 --vproto tcp --vport 80 -j DROP',
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x00004000/0x00004000 -j ACCEPT',
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
        `-A KUBE-NODE-PORT ${c('KUBE-HEALTH-CHECK-NODE-PORT', 'Kubernetes health check node port')} dst -j ACCEPT`,
        '-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN',
        '-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN',
        '-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN',
        '-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN',
        '-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN',
        '-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT',
        'COMMIT',
        '*nat',
        ':KUBE-SERVICES - [0:0]',
        ':KUBE-POSTROUTING - [0:0]',
        ':KUBE-NODE-PORT - [0:0]',
        ':KUBE-LOAD-BALANCER - [0:0]',
        ':KUBE-MARK-MASQ - [0:0]',
        '-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN',
        `-A KUBE-POSTROUTING ${c('KUBE-LOOP-BACK', 'Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose')} dst,dst,src -j MASQUERADE`,
        `-A KUBE-SERVICES ${c('KUBE-LOAD-BALANCER', 'Kubernetes service lb portal')} dst,dst -j KUBE-LOAD-BALANCER`,
        `-A KUBE-LOAD-BALANCER ${c('KUBE-LOAD-BALANCER-LOCAL', 'Kubernetes service load balancer ip + port with externalTrafficPolicy=local')} dst,dst -j RETURN`,
        `-A KUBE-NODE-PORT -p tcp ${c('KUBE-NODE-PORT-LOCAL-TCP', 'Kubernetes nodeport TCP port with externalTrafficPolicy=local')} dst -j RETURN`,
        `-A KUBE-NODE-PORT -p tcp ${c('KUBE-NODE-PORT-TCP', 'Kubernetes nodeport TCP port for masquerade purpose')} dst -j KUBE-MARK-MASQ`,
        `-A KUBE-NODE-PORT -p udp ${c('KUBE-NODE-PORT-UDP', 'Kubernetes nodeport UDP port for masquerade purpose')} dst -j KUBE-MARK-MASQ`,
        `-A KUBE-SERVICES ${c('KUBE-CLUSTER-IP', 'Kubernetes service cluster ip + port for masquerade purpose')} dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ`,
        `-A KUBE-SERVICES ${c('KUBE-EXTERNAL-IP', 'Kubernetes service external ip + port for masquerade and filter purpose')} dst,dst -j KUBE-MARK-MASQ`,
        `-A KUBE-SERVICES ${c('KUBE-EXTERNAL-IP', 'Kubernetes service external ip + port for masquerade and filter purpose')} dst,dst -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT`,
        `-A KUBE-SERVICES ${c('KUBE-EXTERNAL-IP', 'Kubernetes service external ip + port for masquerade and filter purpose')} dst,dst -m addrtype --dst-type LOCAL -j ACCEPT`,
        `-A KUBE-SERVICES ${c('KUBE-EXTERNAL-IP-LOCAL', 'Kubernetes service external ip + port with externalTrafficPolicy=local')} dst,dst -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT`,
        `-A KUBE-SERVICES ${c('KUBE-EXTERNAL-IP-LOCAL', 'Kubernetes service external ip + port with externalTrafficPolicy=local')} dst,dst -m addrtype --dst-type LOCAL -j ACCEPT`,
        '-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT',
        '-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ',
        '-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT',
        '-A KUBE-SERVICES -m set --match-set KUBE-LOAD-BALANCER dst,dst -j ACCEPT',
        '-A KUBE-POSTROUTING -m mark ! --mark 0x00004000/0x00004000 -j RETURN',
        '-A KUBE-POSTROUTING -j MARK --xor-mark 0x00004000',
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
        '-A KUBE-MARK-MASQ -j MARK --or-mark 0x00004000',
        'COMMIT',
        '',
      ].join('\n'),
    );
  });

  it('match-set rules are left out for empty sets', () => {
    const s = state(one({}, [endpoint('10.244.2.10', remote)]));
    const nat = ruleLines(s, 'nat');
    expect(nat.filter((r) => r.includes('--match-set'))).toEqual([
      '-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ',
      '-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT',
    ]);
    // The filter chain's RETURN/REJECT rules reference every set, empty or not.
    expect(ruleLines(s, 'filter').filter((r) => r.startsWith('-A KUBE-IPVS-FILTER'))).toHaveLength(6);
  });

  it('KUBE-CLUSTER-IP masquerade: masqueradeAll, then each local detector, then src,dst without one', () => {
    const clusterIPRule = (config: Partial<BrainConfig>) =>
      ruleLines(state(one({}, twoEndpoints), { config }), 'nat').find(
        (r) => r.includes('--match-set KUBE-CLUSTER-IP') && r.endsWith('-j KUBE-MARK-MASQ'),
      );
    const head =
      '-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP';
    expect(clusterIPRule({ masqueradeAll: true })).toBe(`${head} dst,dst -j KUBE-MARK-MASQ`);
    expect(clusterIPRule({})).toBe(`${head} dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ`);
    expect(
      clusterIPRule({
        detectLocalMode: 'BridgeInterface',
        detectLocal: { bridgeInterface: 'cbr0', interfaceNamePrefix: '' },
      }),
    ).toBe(`${head} dst,dst ! -i cbr0 -j KUBE-MARK-MASQ`);
    expect(
      clusterIPRule({
        detectLocalMode: 'InterfaceNamePrefix',
        detectLocal: { bridgeInterface: '', interfaceNamePrefix: 'veth' },
      }),
    ).toBe(`${head} dst,dst ! -i veth+ -j KUBE-MARK-MASQ`);
    expect(clusterIPRule({ clusterCIDRs: [] })).toBe(`${head} src,dst -j KUBE-MARK-MASQ`);
  });

  it('the masquerade mark follows masqueradeBit; --random-fully only when supported', () => {
    const s = state(one({}, twoEndpoints), { config: { masqueradeBit: 5 } });
    expect(ruleLines(s, 'nat').slice(-4)).toEqual([
      '-A KUBE-POSTROUTING -m mark ! --mark 0x00000020/0x00000020 -j RETURN',
      '-A KUBE-POSTROUTING -j MARK --xor-mark 0x00000020',
      '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE',
      '-A KUBE-MARK-MASQ -j MARK --or-mark 0x00000020',
    ]);
  });
});

describe('render --proxy-mode ipvs text', () => {
  it('prints the three sections per family under comment headers, plus the bound addresses', () => {
    const cluster = one({}, twoEndpoints);
    const decisions = decide(
      {
        services: new Map(cluster.services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
        endpointSlices: new Map(cluster.slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
        node: node(NODE),
        serviceCIDRs: new Map(),
      },
      nodeEnv({ nodeName: NODE, interfaces }),
      brain,
      { families: ['IPv4'] },
    );
    const text = renderIpvsText(decisions, { scheduler: 'rr', randomFully: false, interfaces });
    const headers = text.split('\n').filter((l) => l.startsWith('# IPv4'));
    expect(headers).toEqual([
      '# IPv4 virtual servers (ipvsadm-save -n; ipvsadm -R reads it)',
      '# IPv4 ipsets (ipset save; ipset restore reads it)',
      '# IPv4 companion rules (iptables-restore --noflush)',
      '# IPv4 addresses on kube-ipvs0',
    ]);
    expect(text).toContain('-A -t 10.96.0.10:80 -s rr\n-a -t 10.96.0.10:80 -r 10.244.1.10:8080 -m -w 1\n');
    expect(text).toContain('add KUBE-CLUSTER-IP 10.96.0.10,tcp:80\n');
    expect(text.endsWith('# 10.96.0.10/32\n')).toBe(true);
    expect(() =>
      renderIpvsText(decisions, { scheduler: 'rr', randomFully: false, interfaces }, 'IPv6'),
    ).toThrow(/no IPv6/);
  });
});
