// What kube-proxy's ipvs proxier (v1.37.2, pkg/proxy/ipvs/proxier.go) programs for the brain's
// decisions: virtual and real servers, the addresses bound to
// kube-ipvs0, the ipsets and the companion iptables rules. Pure; the applier diffs it against the
// kernel. `render --proxy-mode ipvs` prints it in the formats ipvsadm-save, ipset save and
// iptables-save print, so each section can be fed back to its restore tool.

import type {
  Endpoint,
  FamilyDecisions,
  ProxyDecisions,
  ScopeVerdict,
  ServicePortDecision,
} from '../../brain/types.js';
import type { IpAddrInterface } from '../../host/interfaces.js';
import type { IPFamily, Protocol } from '../../model/types.js';
import {
  canonicalIPOfFamily,
  cidrContains,
  isLoopback,
  joinHostPort,
  parseCIDR,
  parseIP,
} from '../../net/ip.js';
import { KUBE_MARK_MASQ, KUBE_POSTROUTING, KUBE_PROXY_FIREWALL, KUBE_SERVICES } from '../iptables/names.js';
import { detectorArgs, forwardAcceptRules, masqueradeRules } from '../iptables/plan.js';
import { ruleModeNodeIP } from '../types.js';
import {
  FILTER_CHAINS,
  IPSETS,
  IPVS_DUMMY_DEVICE,
  type IpsetType,
  ipsetName,
  KUBE_CLUSTER_IP,
  KUBE_EXTERNAL_IP,
  KUBE_EXTERNAL_IP_LOCAL,
  KUBE_HEALTH_CHECK_NODE_PORT,
  KUBE_IPVS_FILTER,
  KUBE_IPVS_IPS,
  KUBE_IPVS_OUT_FILTER,
  KUBE_LOAD_BALANCER,
  KUBE_LOAD_BALANCER_CHAIN,
  KUBE_LOAD_BALANCER_FW,
  KUBE_LOAD_BALANCER_LOCAL,
  KUBE_LOAD_BALANCER_SOURCE_CIDR,
  KUBE_LOAD_BALANCER_SOURCE_IP,
  KUBE_LOOP_BACK,
  KUBE_NODE_PORT,
  KUBE_NODE_PORT_LOCAL_SCTP,
  KUBE_NODE_PORT_LOCAL_TCP,
  KUBE_NODE_PORT_LOCAL_UDP,
  KUBE_NODE_PORT_SCTP,
  KUBE_NODE_PORT_TCP,
  KUBE_NODE_PORT_UDP,
  KUBE_SOURCE_RANGES_FIREWALL,
  NAT_CHAINS,
} from './names.js';

/** kube-proxy's scheduler when --ipvs-scheduler is empty. */
export const DEFAULT_SCHEDULER = 'rr';

export interface RealServer {
  address: string;
  port: number;
  weight: number;
}

export interface VirtualServer {
  protocol: Protocol;
  address: string;
  port: number;
  scheduler: string;
  /** ClientIP affinity: persistent with this timeout in seconds; 0 when not persistent. */
  persistenceTimeout: number;
  /** The flag kube-proxy adds for the mh scheduler (IP_VS_SVC_F_SCHED2, "mh-port"). */
  sourceHash: boolean;
  realServers: RealServer[];
  /** The service port it serves, for logs. */
  servicePortName: string;
}

export interface IpsetContent {
  /** The kernel name (KUBE-6-… for IPv6). */
  name: string;
  type: IpsetType;
  family: IPFamily;
  comment: string;
  /** Entries as `ipset list` prints them, sorted. */
  entries: string[];
}

export interface IpvsFamilyState {
  family: IPFamily;
  virtualServers: VirtualServer[];
  /** Addresses kube-ipvs0 carries (= the members of KUBE-IPVS-IPS), sorted. */
  boundAddresses: string[];
  /** Every set of IPSETS, in that order. */
  ipsets: IpsetContent[];
  /** The companion rules: one iptables-restore --noflush input (filter, then nat). */
  iptablesRestore: string;
}

export interface IpvsRenderOptions {
  /** --ipvs-scheduler; "" means rr. */
  scheduler: string;
  /** MASQUERADE --random-fully is supported. */
  randomFully: boolean;
  /** The node's addresses of this family outside kube-ipvs0 (nodeAddressSet()). */
  nodeAddresses: string[];
}

/**
 * GetAllLocalAddressesExcept(kube-ipvs0) filtered as the ipvs proxier's netlink handle does: this
 * family, no loopback, no IPv6 link-local. They are the NodePort addresses when nodePortAddresses
 * matches everything, and LB/external IPs among them are not bound to kube-ipvs0.
 */
export function nodeAddressSet(interfaces: IpAddrInterface[], family: IPFamily): string[] {
  const addresses: string[] = [];
  for (const iface of interfaces) {
    if (iface.ifname === IPVS_DUMMY_DEVICE) continue;
    for (const info of iface.addr_info) {
      const ip = canonicalIPOfFamily(info.local, family);
      if (ip === null || addresses.includes(ip)) continue;
      const parsed = parseIP(ip);
      if (!parsed || isLoopback(parsed)) continue;
      if (family === 'IPv6' && parsed.bytes[0] === 0xfe && (parsed.bytes[1] ?? 0) >> 6 === 2) continue;
      addresses.push(ip);
    }
  }
  return addresses;
}

/**
 * syncEndpoint's choice: the endpoints the scope forwards to, and the cluster endpoints where it
 * does not forward (kubernetes#97081: with a Local policy and no local endpoints, pods on the node
 * keep reaching the service; ipvs mode has no DROP of its own there).
 */
export function realServerEndpoints(sp: ServicePortDecision, verdict: ScopeVerdict): Endpoint[] {
  return verdict.action === 'forward' ? verdict.endpoints : sp.clusterEndpoints;
}

/** The node IPs NodePort virtual servers listen on: never loopback in ipvs mode. */
export function nodePortIPs(decisions: FamilyDecisions, nodeAddresses: string[]): string[] {
  if (decisions.nodePortAddresses.matchAll) return nodeAddresses;
  return decisions.nodePortAddresses.ips.filter((ip) => {
    const parsed = parseIP(ip);
    return parsed !== null && !isLoopback(parsed);
  });
}

const ipPort = (ip: string, proto: string, port: number) => `${ip},${proto}:${port}`;

/** A LB VIP whose source ranges do not include the node: the node may not reach it (#119656). */
interface NoNodeAccess {
  ip: string;
  protocol: string;
  port: number;
}

/** The whole state of one family, as one sync of the ipvs proxier computes it. */
/** What buildIpvsState gathers over the service ports of one family. */
interface IpvsBuild {
  family: IPFamily;
  scheduler: string;
  /** ipset name → its entries. */
  members: Map<string, Set<string>>;
  virtualServers: VirtualServer[];
  /** Addresses bound to the dummy device. */
  bound: Set<string>;
  noNodeAccess: NoNodeAccess[];
  /** Addresses already on the node's interfaces. */
  nodeAddresses: ReadonlySet<string>;
  nodeIP: ReturnType<typeof parseIP>;
  /** Where NodePorts listen; empty when there are none. */
  nodeIPs: string[];
}

const addEntry = (b: IpvsBuild, set: string, entry: string) => b.members.get(set)?.add(entry);

export function buildIpvsState(decisions: FamilyDecisions, options: IpvsRenderOptions): IpvsFamilyState {
  const family = decisions.family;
  const hasNodePort = decisions.servicePorts.some((sp) => sp.nodePort !== 0);
  const b: IpvsBuild = {
    family,
    scheduler: options.scheduler === '' ? DEFAULT_SCHEDULER : options.scheduler,
    members: new Map<string, Set<string>>(IPSETS.map((set) => [set.name, new Set<string>()])),
    virtualServers: [],
    bound: new Set<string>(),
    noNodeAccess: [],
    nodeAddresses: new Set(options.nodeAddresses),
    nodeIP: parseIP(ruleModeNodeIP(decisions)),
    nodeIPs: hasNodePort ? nodePortIPs(decisions, options.nodeAddresses) : [],
  };
  for (const sp of decisions.servicePorts) addServicePort(b, sp);
  for (const ip of b.bound) addEntry(b, KUBE_IPVS_IPS, ip);
  const ipsets = IPSETS.map((set) => ({
    name: ipsetName(set.name, family),
    type: set.type,
    family,
    comment: set.comment,
    entries: [...(b.members.get(set.name) ?? [])].sort(),
  }));
  return {
    family,
    virtualServers: b.virtualServers,
    boundAddresses: [...b.bound].sort(),
    ipsets,
    iptablesRestore: companionRules(decisions, ipsets, b.noNodeAccess, options.randomFully),
  };
}

/** One service port's virtual servers, set entries and bound addresses. */
function addServicePort(b: IpvsBuild, sp: ServicePortDecision): void {
  const proto = sp.protocol.toLowerCase();
  const virtualServer = (address: string, port: number, verdict: ScopeVerdict) =>
    b.virtualServers.push({
      protocol: sp.protocol,
      address,
      port,
      scheduler: b.scheduler,
      persistenceTimeout: sp.sessionAffinityTimeoutSeconds,
      sourceHash: b.scheduler === 'mh',
      realServers: realServerEndpoints(sp, verdict).map((ep) => ({
        address: ep.ip,
        port: ep.port,
        weight: 1,
      })),
      servicePortName: sp.servicePortName,
    });
  // The Local sets tell the companion iptables rules which VIPs keep the client's source.
  const externalLocal = sp.external.policy === 'Local';
  // Hairpin: a local endpoint reaching itself through a VIP is masqueraded.
  for (const ep of sp.endpoints) {
    if (ep.isLocal) addEntry(b, KUBE_LOOP_BACK, `${ipPort(ep.ip, proto, ep.port)},${ep.ip}`);
  }
  addEntry(b, KUBE_CLUSTER_IP, ipPort(sp.clusterIP, proto, sp.port));
  virtualServer(sp.clusterIP, sp.port, sp.internal);
  b.bound.add(sp.clusterIP);
  for (const ip of sp.externalIPs) {
    addEntry(b, externalLocal ? KUBE_EXTERNAL_IP_LOCAL : KUBE_EXTERNAL_IP, ipPort(ip, proto, sp.port));
    virtualServer(ip, sp.port, sp.external);
    // An address already on another interface must not also go on the dummy device.
    if (!b.nodeAddresses.has(ip)) b.bound.add(ip);
  }
  for (const ip of sp.loadBalancerIPs) {
    addLoadBalancerEntries(b, sp, ipPort(ip, proto, sp.port), ip, externalLocal);
    virtualServer(ip, sp.port, sp.external);
    if (!b.nodeAddresses.has(ip)) b.bound.add(ip);
  }
  // Upstream skips NodePorts altogether when it found no node IP to put them on.
  if (sp.nodePort !== 0 && b.nodeIPs.length > 0) {
    const sets = nodePortSets(sp.protocol);
    // TCP and UDP NodePorts are bitmap:port sets; SCTP ones are per node IP (hash:ip,port).
    const entries =
      sp.protocol === 'SCTP' ? b.nodeIPs.map((ip) => ipPort(ip, proto, sp.nodePort)) : [String(sp.nodePort)];
    for (const entry of entries) {
      addEntry(b, sets.all, entry);
      if (externalLocal) addEntry(b, sets.local, entry);
    }
    for (const ip of b.nodeIPs) virtualServer(ip, sp.nodePort, sp.external);
  }
  if (sp.healthCheckNodePort !== 0) addEntry(b, KUBE_HEALTH_CHECK_NODE_PORT, String(sp.healthCheckNodePort));
}

/** A LoadBalancer IP's set entries, with its source ranges and whether the node may reach it. */
function addLoadBalancerEntries(
  b: IpvsBuild,
  sp: ServicePortDecision,
  entry: string,
  ip: string,
  externalLocal: boolean,
): void {
  addEntry(b, KUBE_LOAD_BALANCER, entry);
  if (externalLocal) addEntry(b, KUBE_LOAD_BALANCER_LOCAL, entry);
  if (sp.loadBalancerSourceRanges.length === 0) return;
  addEntry(b, KUBE_LOAD_BALANCER_FW, entry);
  let allowFromNode = false;
  for (const cidrText of sp.loadBalancerSourceRanges) {
    const cidr = parseCIDR(cidrText);
    // ipset lists a host-sized net as the bare address.
    const hostSized = cidr !== null && cidr.prefixLength === (b.family === 'IPv4' ? 32 : 128);
    addEntry(b, KUBE_LOAD_BALANCER_SOURCE_CIDR, `${entry},${hostSized ? cidrText.split('/')[0] : cidrText}`);
    if (cidr && b.nodeIP && cidrContains(cidr, b.nodeIP)) allowFromNode = true;
  }
  // Requests from the node to a VIP that is local loop back with the VIP as their source.
  if (allowFromNode) addEntry(b, KUBE_LOAD_BALANCER_SOURCE_IP, `${entry},${ip}`);
  else b.noNodeAccess.push({ ip, protocol: sp.protocol.toLowerCase(), port: sp.port });
}

function nodePortSets(protocol: Protocol): { all: string; local: string } {
  switch (protocol) {
    case 'TCP':
      return { all: KUBE_NODE_PORT_TCP, local: KUBE_NODE_PORT_LOCAL_TCP };
    case 'UDP':
      return { all: KUBE_NODE_PORT_UDP, local: KUBE_NODE_PORT_LOCAL_UDP };
    case 'SCTP':
      return { all: KUBE_NODE_PORT_SCTP, local: KUBE_NODE_PORT_LOCAL_SCTP };
  }
}

/** ipsetWithIptablesChain: a match-set rule for each set, written only when the set has members. */
const SET_RULES: readonly {
  set: string;
  table: 'nat' | 'filter';
  from: string;
  to: string;
  match: string;
  protocol?: string;
}[] = [
  { set: KUBE_LOOP_BACK, table: 'nat', from: KUBE_POSTROUTING, to: 'MASQUERADE', match: 'dst,dst,src' },
  {
    set: KUBE_LOAD_BALANCER,
    table: 'nat',
    from: KUBE_SERVICES,
    to: KUBE_LOAD_BALANCER_CHAIN,
    match: 'dst,dst',
  },
  {
    set: KUBE_LOAD_BALANCER_LOCAL,
    table: 'nat',
    from: KUBE_LOAD_BALANCER_CHAIN,
    to: 'RETURN',
    match: 'dst,dst',
  },
  // The Local sets come first: their RETURN keeps such traffic from being marked.
  {
    set: KUBE_NODE_PORT_LOCAL_TCP,
    table: 'nat',
    from: KUBE_NODE_PORT,
    to: 'RETURN',
    match: 'dst',
    protocol: 'tcp',
  },
  {
    set: KUBE_NODE_PORT_TCP,
    table: 'nat',
    from: KUBE_NODE_PORT,
    to: KUBE_MARK_MASQ,
    match: 'dst',
    protocol: 'tcp',
  },
  {
    set: KUBE_NODE_PORT_LOCAL_UDP,
    table: 'nat',
    from: KUBE_NODE_PORT,
    to: 'RETURN',
    match: 'dst',
    protocol: 'udp',
  },
  {
    set: KUBE_NODE_PORT_UDP,
    table: 'nat',
    from: KUBE_NODE_PORT,
    to: KUBE_MARK_MASQ,
    match: 'dst',
    protocol: 'udp',
  },
  {
    set: KUBE_NODE_PORT_LOCAL_SCTP,
    table: 'nat',
    from: KUBE_NODE_PORT,
    to: 'RETURN',
    match: 'dst,dst',
    protocol: 'sctp',
  },
  {
    set: KUBE_NODE_PORT_SCTP,
    table: 'nat',
    from: KUBE_NODE_PORT,
    to: KUBE_MARK_MASQ,
    match: 'dst,dst',
    protocol: 'sctp',
  },
  {
    set: KUBE_LOAD_BALANCER_FW,
    table: 'filter',
    from: KUBE_PROXY_FIREWALL,
    to: KUBE_SOURCE_RANGES_FIREWALL,
    match: 'dst,dst',
  },
  {
    set: KUBE_LOAD_BALANCER_SOURCE_CIDR,
    table: 'filter',
    from: KUBE_SOURCE_RANGES_FIREWALL,
    to: 'RETURN',
    match: 'dst,dst,src',
  },
  {
    set: KUBE_LOAD_BALANCER_SOURCE_IP,
    table: 'filter',
    from: KUBE_SOURCE_RANGES_FIREWALL,
    to: 'RETURN',
    match: 'dst,dst,src',
  },
];

/** writeIptablesRules: the restore input, in kube-proxy's order (its proxier.go's writeIptablesRules). */
function companionRules(
  decisions: FamilyDecisions,
  ipsets: IpsetContent[],
  noNodeAccess: NoNodeAccess[],
  randomFully: boolean,
): string {
  const byBaseName = new Map(IPSETS.map((info, i) => [info.name, ipsets[i] as IpsetContent]));
  const set = (name: string) => byBaseName.get(name) as IpsetContent;
  const nonEmpty = (name: string) => set(name).entries.length > 0;
  const matchSet = (name: string, match: string) =>
    `-m comment --comment "${set(name).comment}" -m set --match-set ${set(name).name} ${match}`;
  const mark = decisions.masqueradeMark;
  const nat: string[] = [];
  const filter: string[] = [];

  // Connections from localhost never go through a VIP's masquerade logic.
  nat.push(`-A ${KUBE_SERVICES} -s ${decisions.family === 'IPv6' ? '::1/128' : '127.0.0.0/8'} -j RETURN`);

  for (const rule of SET_RULES) {
    if (!nonEmpty(rule.set)) continue;
    const protocol = rule.protocol ? ` -p ${rule.protocol}` : '';
    (rule.table === 'nat' ? nat : filter).push(
      `-A ${rule.from}${protocol} ${matchSet(rule.set, rule.match)} -j ${rule.to}`,
    );
  }

  if (nonEmpty(KUBE_CLUSTER_IP)) {
    const head = `-A ${KUBE_SERVICES} ${matchSet(KUBE_CLUSTER_IP, '')}`.trimEnd();
    const detector = detectorArgs(decisions.localDetector);
    if (decisions.masqueradeAll) nat.push(`${head} dst,dst -j ${KUBE_MARK_MASQ}`);
    // Off-cluster sources routed to a VIP may be forwarded to another node: masquerade them.
    else if (detector) nat.push(`${head} dst,dst ${detector.ifNotLocal} -j ${KUBE_MARK_MASQ}`);
    // Without a detector: the node's own connections get a VIP as source address (it is on
    // kube-ipvs0); masquerading them keeps replies coming back.
    else nat.push(`${head} src,dst -j ${KUBE_MARK_MASQ}`);
  }

  const externalIPRules = (head: string) => {
    // Traffic from off the machine (not from a bridge, not from a local process), and traffic
    // to external IPs that happen to be local, is accepted.
    nat.push(`${head} -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT`);
    nat.push(`${head} -m addrtype --dst-type LOCAL -j ACCEPT`);
  };
  if (nonEmpty(KUBE_EXTERNAL_IP)) {
    const head = `-A ${KUBE_SERVICES} ${matchSet(KUBE_EXTERNAL_IP, 'dst,dst')}`;
    nat.push(`${head} -j ${KUBE_MARK_MASQ}`);
    externalIPRules(head);
  }
  if (nonEmpty(KUBE_EXTERNAL_IP_LOCAL)) {
    externalIPRules(`-A ${KUBE_SERVICES} ${matchSet(KUBE_EXTERNAL_IP_LOCAL, 'dst,dst')}`);
  }

  nat.push(`-A ${KUBE_SERVICES} -m addrtype --dst-type LOCAL -j ${KUBE_NODE_PORT}`);
  nat.push(`-A ${KUBE_LOAD_BALANCER_CHAIN} -j ${KUBE_MARK_MASQ}`);
  filter.push(`-A ${KUBE_SOURCE_RANGES_FIREWALL} -j DROP`);
  // For IPVS the node's own request to a LB VIP has the VIP as both source and destination.
  for (const entry of noNodeAccess) {
    filter.push(
      `-A ${KUBE_IPVS_OUT_FILTER} -s ${entry.ip} -m ipvs --vaddr ${entry.ip} --vproto ${entry.protocol} --vport ${entry.port} -j DROP`,
    );
  }
  // Accept everything bound for a virtual server, in case other rules would drop it; these
  // must be the last rules of KUBE-SERVICES.
  for (const name of [KUBE_CLUSTER_IP, KUBE_LOAD_BALANCER]) {
    if (nonEmpty(name))
      nat.push(`-A ${KUBE_SERVICES} -m set --match-set ${set(name).name} dst,dst -j ACCEPT`);
  }

  filter.push(...forwardAcceptRules(mark));
  filter.push(
    `-A ${KUBE_NODE_PORT} ${matchSet(KUBE_HEALTH_CHECK_NODE_PORT, 'dst')} -j ACCEPT`,
    // Host ports must not be reachable through VIP addresses (kubernetes#72236).
    `-A ${KUBE_IPVS_FILTER} -m set --match-set ${set(KUBE_LOAD_BALANCER).name} dst,dst -j RETURN`,
    `-A ${KUBE_IPVS_FILTER} -m set --match-set ${set(KUBE_CLUSTER_IP).name} dst,dst -j RETURN`,
    `-A ${KUBE_IPVS_FILTER} -m set --match-set ${set(KUBE_EXTERNAL_IP).name} dst,dst -j RETURN`,
    `-A ${KUBE_IPVS_FILTER} -m set --match-set ${set(KUBE_EXTERNAL_IP_LOCAL).name} dst,dst -j RETURN`,
    `-A ${KUBE_IPVS_FILTER} -m set --match-set ${set(KUBE_HEALTH_CHECK_NODE_PORT).name} dst -j RETURN`,
    `-A ${KUBE_IPVS_FILTER} -m conntrack --ctstate NEW -m set --match-set ${set(KUBE_IPVS_IPS).name} dst -j REJECT`,
  );
  nat.push(...masqueradeRules(mark, randomFully));

  const lines = [
    '*filter',
    ...FILTER_CHAINS.map((chain) => `:${chain} - [0:0]`),
    ...filter,
    'COMMIT',
    '*nat',
    ...NAT_CHAINS.map((chain) => `:${chain} - [0:0]`),
    ...nat,
    'COMMIT',
  ];
  return `${lines.join('\n')}\n`;
}

const IPVSADM_PROTOCOL: Record<Protocol, string> = { TCP: '-t', UDP: '-u', SCTP: '--sctp-service' };

/** The service argument of ipvsadm: "-t 10.96.0.10:80", "-u [fd00::10]:53". */
export function ipvsadmService(vs: Pick<VirtualServer, 'protocol' | 'address' | 'port'>): string {
  return `${IPVSADM_PROTOCOL[vs.protocol]} ${joinHostPort(vs.address, vs.port)}`;
}

/** `-A …` line of one virtual server, as ipvsadm-save -n prints it. */
export function ipvsadmServiceLine(vs: VirtualServer): string {
  const persistent = vs.persistenceTimeout > 0 ? ` -p ${vs.persistenceTimeout}` : '';
  const flags = vs.sourceHash ? ' -b mh-port' : '';
  return `-A ${ipvsadmService(vs)} -s ${vs.scheduler}${flags}${persistent}`;
}

/** `-a …` line of one real server (masquerading, i.e. NAT forwarding, as kube-proxy uses). */
export function ipvsadmRealServerLine(vs: VirtualServer, rs: RealServer): string {
  return `-a ${ipvsadmService(vs)} -r ${joinHostPort(rs.address, rs.port)} -m -w ${rs.weight}`;
}

/** ipvsadm-save -n: every virtual server followed by its real servers (ipvsadm -R reads it back). */
export function formatIpvsadmSave(virtualServers: VirtualServer[]): string {
  const lines: string[] = [];
  for (const vs of virtualServers) {
    lines.push(ipvsadmServiceLine(vs));
    for (const rs of vs.realServers) lines.push(ipvsadmRealServerLine(vs, rs));
  }
  return lines.length > 0 ? `${lines.join('\n')}\n` : '';
}

/** The `create` line kube-proxy's ipset runner issues (ipset restore reads it back). */
export function ipsetCreateLine(set: Pick<IpsetContent, 'name' | 'type' | 'family'>): string {
  const options =
    set.type === 'bitmap:port'
      ? 'range 0-65535'
      : `family ${set.family === 'IPv6' ? 'inet6' : 'inet'} hashsize 1024 maxelem 65536`;
  return `create ${set.name} ${set.type} ${options} comment`;
}

/** ipset save: every set, then its members (kube-proxy adds members without a per-entry comment). */
export function formatIpsetSave(ipsets: IpsetContent[]): string {
  const lines: string[] = [];
  for (const set of ipsets) {
    lines.push(ipsetCreateLine(set));
    for (const entry of set.entries) lines.push(`add ${set.name} ${entry}`);
  }
  return `${lines.join('\n')}\n`;
}

/** `ip addr` arguments of a VIP on kube-ipvs0: a host route-sized prefix. */
export function boundAddressCIDR(ip: string): string {
  return `${ip}/${ip.includes(':') ? 128 : 32}`;
}

/**
 * What `render --proxy-mode ipvs` prints: per family, the three sections under comment headers
 * (ipvsadm -R, ipset restore and iptables-restore all skip # lines), then the bound addresses.
 */
export function renderIpvsText(
  decisions: ProxyDecisions,
  options: Omit<IpvsRenderOptions, 'nodeAddresses'> & { interfaces: IpAddrInterface[] },
  family?: IPFamily,
): string {
  const families = decisions.families.filter((f) => family === undefined || f.family === family);
  if (family && families.length === 0) throw new Error(`the decisions have no ${family} family`);
  const out: string[] = [];
  for (const decisionsOfFamily of families) {
    const state = buildIpvsState(decisionsOfFamily, {
      ...options,
      nodeAddresses: nodeAddressSet(options.interfaces, decisionsOfFamily.family),
    });
    const fam = decisionsOfFamily.family;
    out.push(
      `# ${fam} virtual servers (ipvsadm-save -n; ipvsadm -R reads it)\n${formatIpvsadmSave(state.virtualServers)}`,
      `# ${fam} ipsets (ipset save; ipset restore reads it)\n${formatIpsetSave(state.ipsets)}`,
      `# ${fam} companion rules (iptables-restore --noflush)\n${state.iptablesRestore}`,
      `# ${fam} addresses on ${IPVS_DUMMY_DEVICE}\n${state.boundAddresses.map((ip) => `# ${boundAddressCIDR(ip)}\n`).join('')}`,
    );
  }
  return out.join('');
}
