// The nft transaction kube-proxy's nftables proxier (v1.37.2) writes, built from the brain's
// decisions (pkg/proxy/nftables/proxier.go), in the syntax knftables prints and `nft -f`
// reads. Pure: the applier decides which per-service blocks a partial sync writes, which map
// elements changed and which chains went stale, and assembles the text with assembleTransaction
// (transaction.ts).

import type {
  Endpoint,
  FamilyDecisions,
  LocalDetector,
  ProxyDecisions,
  ScopeVerdict,
  ServicePortDecision,
} from '../../brain/types.js';
import type { IPFamily } from '../../model/types.js';
import { cidrContains, isLoopback, parseCIDR, parseIP } from '../../net/ip.js';
import { ruleModeNodeIP, serviceKey } from '../types.js';
import {
  BASE_CHAINS,
  CLUSTER_IPS,
  CLUSTER_IPS_CHECK,
  type ElementContainer,
  endpointObjectNames,
  FIREWALL_CHECK,
  FIREWALL_IPS,
  HAIRPIN_CONNECTIONS,
  JUMP_CHAINS,
  MASQUERADING,
  type NftFamily,
  NO_ENDPOINT_NODEPORTS,
  NO_ENDPOINT_SERVICES,
  NODEPORT_ENDPOINTS_CHECK,
  NODEPORT_IPS,
  nftFamily,
  REJECT_CHAIN,
  SERVICE_ENDPOINTS_CHECK,
  SERVICE_IPS,
  SERVICE_NODEPORTS,
  SERVICES,
  servicePortChainNames,
  TABLE,
  TABLE_COMMENT,
} from './names.js';
import { assembleTransaction, elementLine, quote } from './transaction.js';
import { Writer } from './writer.js';

/** One element of a set (value null) or verdict map. */
export interface NftElement {
  container: string;
  key: string[];
  value: string[] | null;
  comment: string | null;
}

/** The chains and sets of one service port: what a partial sync leaves out when the service is unchanged. */
export interface NftServicePortBlock {
  /** "namespace/name": partial syncs are decided per Service, as upstream does. */
  service: string;
  /** servicePortName + "/" + protocol: unique within a family. */
  key: string;
  /** Every chain of the block, in declaration order. */
  chains: string[];
  affinitySets: string[];
  /** add/flush chain, add set and add rule lines, in order. */
  lines: string[];
  elements: NftElement[];
}

export interface NftRuleset {
  family: IPFamily;
  /** `add table`: first in every full sync. */
  tableLine: string;
  /** Fixed chains, sets and maps with their rules (and the nodeport-ips elements). */
  setupLines: string[];
  /** kube-proxy's first sync adds and deletes every base chain so changed hooks or priorities take. */
  recreateBaseChainLines: string[];
  servicePorts: NftServicePortBlock[];
  /** Service ports with a Local policy and no local endpoints (sync_proxy_rules_no_local_endpoints_total). */
  noLocalEndpoints: { internal: number; external: number };
}

interface DetectorNft {
  ifLocal: string;
  ifNotLocal: string;
}

function detectorNft(detector: LocalDetector, ipX: NftFamily): DetectorNft | null {
  switch (detector.mode) {
    case 'None':
      return null;
    case 'ClusterCIDR':
    case 'NodeCIDR': {
      // kube-proxy builds one detector per family from the first CIDR of that family.
      const cidr = detector.cidrs[0];
      return cidr === undefined
        ? null
        : { ifLocal: `${ipX} saddr ${cidr}`, ifNotLocal: `${ipX} saddr != ${cidr}` };
    }
    case 'BridgeInterface':
      return {
        ifLocal: `iifname ${detector.interfaceName}`,
        ifNotLocal: `iifname != ${detector.interfaceName}`,
      };
    case 'InterfaceNamePrefix':
      return { ifLocal: `iifname ${detector.prefix}*`, ifNotLocal: `iifname != ${detector.prefix}*` };
  }
}

/** What each part of the table's setup writes with. */
interface Setup {
  decisions: FamilyDecisions;
  family: NftFamily;
  addrType: string;
  /** Destinations other than localhost, which the nftables mode never serves NodePorts on. */
  noLocalhost: string;
  mark: string;
  w: Writer;
  /** Creates a chain once. */
  ensure: (chain: string) => void;
}

/** setupNFTables: everything outside the per-service chains and the service elements, in its order. */
function setupLines(decisions: FamilyDecisions): string[] {
  const family = nftFamily(decisions.family);
  const w = new Writer(family);
  const created = new Set<string>();
  const setup: Setup = {
    decisions,
    family,
    addrType: decisions.family === 'IPv4' ? 'ipv4_addr' : 'ipv6_addr',
    noLocalhost: decisions.family === 'IPv4' ? 'ip daddr != 127.0.0.0/8' : 'ip6 daddr != ::1',
    mark: decisions.masqueradeMark,
    w,
    ensure: (chain) => {
      if (created.has(chain)) return;
      created.add(chain);
      w.ensureChain(chain);
    },
  };
  setupChains(setup);
  setupMasquerading(setup);
  setupClusterIPs(setup);
  const nodePortDestinations = setupNodePorts(setup);
  setupDispatch(setup, nodePortDestinations);
  return w.lines;
}

/** The base chains with their hooks, and the jumps to ours. */
function setupChains({ w, ensure }: Setup): void {
  for (const chain of BASE_CHAINS) {
    w.chain(chain.name, `type ${chain.type} hook ${chain.hook} priority ${chain.priority} ;`);
    w.raw('flush', 'chain', chain.name);
  }

  for (const jump of JUMP_CHAINS) {
    ensure(jump.to);
    w.rule(jump.from, jump.match === '' ? `jump ${jump.to}` : `${jump.match} jump ${jump.to}`);
  }
  for (const chain of [SERVICES, CLUSTER_IPS_CHECK, MASQUERADING]) ensure(chain);
}

function setupMasquerading({ w, family, addrType, mark }: Setup): void {
  w.set(
    HAIRPIN_CONNECTIONS,
    `type ${addrType} . ${addrType} . inet_proto . inet_service ; comment ${quote('service hairpin connections')} ;`,
  );
  // Clear the mark and masquerade what carries it; and a pod reaching itself through a service
  // (its local endpoints are in hairpin-connections), whose reply would otherwise skip the DNAT.
  w.rule(MASQUERADING, `mark and ${mark} != 0 mark set mark xor ${mark} masquerade fully-random`);
  w.rule(
    MASQUERADING,
    `ct status dnat ${family} saddr . ${family} daddr . meta l4proto . th dport @${HAIRPIN_CONNECTIONS} masquerade fully-random`,
  );
}

function setupClusterIPs({ w, family, addrType, decisions }: Setup): void {
  w.set(CLUSTER_IPS, `type ${addrType} ; comment ${quote('Active ClusterIPs')} ;`);
  w.rule(
    CLUSTER_IPS_CHECK,
    `${family} daddr @${CLUSTER_IPS} reject`,
    'Reject traffic to invalid ports of ClusterIPs',
  );
  // The ServiceCIDRs of this family (kube-proxy's OnServiceCIDRsChanged); none known, no rule.
  if (decisions.serviceCIDRs.length > 0) {
    w.rule(
      CLUSTER_IPS_CHECK,
      `${family} daddr { ${decisions.serviceCIDRs.join(',')} } drop`,
      'Drop traffic to unallocated ClusterIPs',
    );
  }
}

/** The NodePort addresses; returns the match for a NodePort's destination. */
function setupNodePorts({ w, family, addrType, decisions, noLocalhost }: Setup): string {
  // add + delete ensures the set is gone without failing when it never existed.
  w.set(NODEPORT_IPS, `type ${addrType} ; comment ${quote('IPs that accept NodePort traffic')} ;`);
  const matchAll = decisions.nodePortAddresses.matchAll;
  if (matchAll) {
    w.raw('delete', 'set', NODEPORT_IPS);
  } else {
    w.raw('flush', 'set', NODEPORT_IPS);
    for (const ip of decisions.nodePortAddresses.ips) {
      // The nftables mode never accepts NodePort connections on localhost.
      const parsed = parseIP(ip);
      if (parsed && isLoopback(parsed)) continue;
      w.lines.push(
        elementLine(family, 'add', { container: NODEPORT_IPS, key: [ip], value: null, comment: null }),
      );
    }
  }
  const nodePortDestinations = matchAll
    ? `fib daddr type local ${noLocalhost}`
    : `${family} daddr @${NODEPORT_IPS}`;

  w.map(
    NO_ENDPOINT_SERVICES,
    `type ${addrType} . inet_proto . inet_service : verdict ; comment ${quote('vmap to drop or reject packets to services with no endpoints')} ;`,
  );
  w.map(
    NO_ENDPOINT_NODEPORTS,
    `type inet_proto . inet_service : verdict ; comment ${quote('vmap to drop or reject packets to service nodeports with no endpoints')} ;`,
  );
  w.rule(SERVICE_ENDPOINTS_CHECK, `${family} daddr . meta l4proto . th dport vmap @${NO_ENDPOINT_SERVICES}`);
  // Hung off filter-input, which sees only local destinations: no `fib daddr type local` here.
  w.rule(
    NODEPORT_ENDPOINTS_CHECK,
    `${matchAll ? noLocalhost : `${family} daddr @${NODEPORT_IPS}`} meta l4proto . th dport vmap @${NO_ENDPOINT_NODEPORTS}`,
  );
  return nodePortDestinations;
}

/** The verdict maps the service elements go into, and the rules that consult them. */
function setupDispatch(
  { w, family, addrType, decisions, ensure, mark }: Setup,
  nodePortDestinations: string,
): void {
  w.map(
    FIREWALL_IPS,
    `type ${addrType} . inet_proto . inet_service : verdict ; comment ${quote('destinations that are subject to LoadBalancerSourceRanges')} ;`,
  );
  ensure(FIREWALL_CHECK);
  w.rule(FIREWALL_CHECK, `${family} daddr . meta l4proto . th dport vmap @${FIREWALL_IPS}`);

  w.map(
    SERVICE_IPS,
    `type ${addrType} . inet_proto . inet_service : verdict ; comment ${quote('ClusterIP, ExternalIP and LoadBalancer IP traffic')} ;`,
  );
  w.map(
    SERVICE_NODEPORTS,
    `type inet_proto . inet_service : verdict ; comment ${quote('NodePort traffic')} ;`,
  );
  const masqueradeRule = `mark set mark or ${mark}`;
  const detector = detectorNft(decisions.localDetector, family);
  if (decisions.masqueradeAll) {
    w.rule(SERVICES, `${family} daddr @${CLUSTER_IPS} ${masqueradeRule}`, 'masquerade all clusterIP traffic');
  } else if (detector) {
    // Off-cluster sources reaching a ClusterIP (a static route to the service range) may be
    // forwarded to another node, so they are masqueraded.
    w.rule(
      SERVICES,
      `${family} daddr @${CLUSTER_IPS} ${detector.ifNotLocal} ${masqueradeRule}`,
      'masquerade clusterIP traffic from outside cluster',
    );
  }
  w.rule(SERVICES, `${family} daddr . meta l4proto . th dport vmap @${SERVICE_IPS}`);
  w.rule(SERVICES, `${nodePortDestinations} meta l4proto . th dport vmap @${SERVICE_NODEPORTS}`);

  w.chain(REJECT_CHAIN, `comment ${quote('helper for @no-endpoint-services / @no-endpoint-nodeports')} ;`);
  w.raw('flush', 'chain', REJECT_CHAIN);
  w.rule(REJECT_CHAIN, 'reject');
}

interface FamilyContext {
  decisions: FamilyDecisions;
  family: NftFamily;
  detector: DetectorNft | null;
  nodeIP: ReturnType<typeof parseIP>;
}

/** The whole ruleset of one family, as a full sync writes it. */
export function buildNftRuleset(decisions: FamilyDecisions): NftRuleset {
  const family = nftFamily(decisions.family);
  const context: FamilyContext = {
    decisions,
    family,
    detector: detectorNft(decisions.localDetector, family),
    nodeIP: parseIP(ruleModeNodeIP(decisions)),
  };
  const recreate = new Writer(family);
  for (const chain of BASE_CHAINS) {
    recreate.raw('add', 'chain', chain.name);
    recreate.raw('delete', 'chain', chain.name);
  }
  const noLocalEndpoints = { internal: 0, external: 0 };
  return {
    family: decisions.family,
    tableLine: `add table ${family} ${TABLE} { comment ${quote(TABLE_COMMENT)} ; }`,
    setupLines: setupLines(decisions),
    recreateBaseChainLines: recreate.lines,
    servicePorts: decisions.servicePorts.map((sp) => servicePortBlock(context, sp, noLocalEndpoints)),
    noLocalEndpoints,
  };
}

/** The nft verdict of a scope that does not forward; "" when it forwards. */
function nftVerdictOf(verdict: ScopeVerdict): string {
  if (verdict.action === 'reject') return `goto ${REJECT_CHAIN}`;
  return verdict.action === 'drop' ? 'drop' : '';
}

/** One service port's names, chains and the choices every one of its objects depends on. */
interface NftPortInputs {
  context: FamilyContext;
  sp: ServicePortDecision;
  w: Writer;
  proto: string;
  chainNames: ReturnType<typeof servicePortChainNames>;
  hasEndpoints: boolean;
  hasInternal: boolean;
  hasExternal: boolean;
  /** Endpoint chains (and their affinity sets) exist only for ClientIP affinity. */
  affinity: boolean;
  usesClusterChain: boolean;
  usesLocalChain: boolean;
  /** Needed even without external endpoints: it short-circuits pod and host traffic. */
  usesExternalChain: boolean;
  /** A filter of its own (before DNAT), so unlike iptables it does not depend on endpoints. */
  usesFirewallChain: boolean;
  /** Hashed once per endpoint: the service chains and the endpoint's own rules all name them. */
  epNames: (ep: Endpoint) => ReturnType<typeof endpointObjectNames>;
}

function servicePortBlock(
  context: FamilyContext,
  sp: ServicePortDecision,
  noLocalEndpoints: { internal: number; external: number },
): NftServicePortBlock {
  const hasEndpoints = sp.internal.action !== 'reject';
  const endpointNames = new Map(
    sp.allReachableEndpoints.map((ep) => [ep.endpoint, endpointObjectNames(sp, ep)]),
  );
  const p: NftPortInputs = {
    context,
    sp,
    w: new Writer(context.family),
    proto: sp.protocol.toLowerCase(),
    chainNames: servicePortChainNames(sp),
    hasEndpoints,
    hasInternal: sp.internal.action === 'forward',
    hasExternal: sp.external.action === 'forward',
    affinity: sp.sessionAffinityTimeoutSeconds > 0,
    usesClusterChain: sp.clusterEndpoints.length > 0 && sp.usesClusterEndpoints,
    usesLocalChain: sp.localEndpoints.length > 0 && sp.usesLocalEndpoints,
    usesExternalChain: hasEndpoints && sp.externallyAccessible,
    usesFirewallChain: sp.loadBalancerIPs.length > 0 && sp.loadBalancerSourceRanges.length > 0,
    epNames: (ep) => endpointNames.get(ep.endpoint) ?? endpointObjectNames(sp, ep),
  };
  const chains = declareChains(p);
  if (sp.internal.action === 'drop') noLocalEndpoints.internal++;
  if (sp.external.action === 'drop') noLocalEndpoints.external++;
  const elements = dispatchElements(p);
  if (p.usesFirewallChain) firewallRule(p);
  // Sets are declared before the rules that test or update them.
  const affinitySets = p.affinity ? declareAffinitySets(p) : [];
  if (p.usesExternalChain) externalChainRules(p);
  endpointRules(p);
  return {
    service: serviceKey(sp.namespace, sp.name),
    key: `${sp.servicePortName}/${sp.protocol}`,
    chains,
    affinitySets,
    lines: p.w.lines,
    elements,
  };
}

/** The service port's chains, in the order they are created. */
function declareChains(p: NftPortInputs): string[] {
  const { sp, chainNames } = p;
  const chains: string[] = [];
  const ensure = (chain: string) => {
    chains.push(chain);
    p.w.ensureChain(chain);
  };
  if (p.affinity) for (const ep of sp.allReachableEndpoints) ensure(p.epNames(ep).chain);
  if (p.usesClusterChain) ensure(chainNames.cluster);
  if (p.usesLocalChain) ensure(chainNames.local);
  if (p.usesExternalChain) ensure(chainNames.external);
  if (p.usesFirewallChain) ensure(chainNames.firewall);
  return chains;
}

/** The elements of the shared maps and sets that send the service's traffic to its chains. */
function dispatchElements(p: NftPortInputs): NftElement[] {
  const { sp, proto, chainNames, hasEndpoints, hasExternal } = p;
  const elements: NftElement[] = [];
  const element = (
    container: ElementContainer,
    key: string[],
    value: string[] | null,
    comment: string | null,
  ) => elements.push({ container, key, value, comment });
  const port = String(sp.port);
  const name = sp.servicePortName;
  const externalVerdict = nftVerdictOf(sp.external);
  const toExternal = [`goto ${chainNames.external}`];
  // A local endpoint reaching itself through the service is masqueraded (the masquerading chain).
  for (const ep of sp.allReachableEndpoints) {
    if (ep.isLocal) element(HAIRPIN_CONNECTIONS, [ep.ip, ep.ip, proto, String(ep.port)], null, null);
  }
  element(CLUSTER_IPS, [sp.clusterIP], null, null);
  if (p.hasInternal) {
    const internalChain = sp.internal.policy === 'Local' ? chainNames.local : chainNames.cluster;
    element(SERVICE_IPS, [sp.clusterIP, proto, port], [`goto ${internalChain}`], null);
  } else element(NO_ENDPOINT_SERVICES, [sp.clusterIP, proto, port], [nftVerdictOf(sp.internal)], name);
  for (const ip of sp.externalIPs) {
    if (hasEndpoints) element(SERVICE_IPS, [ip, proto, port], toExternal, null);
    // No endpoints at all (reject), or none for external traffic (drop what the external chain did not short-circuit).
    if (!hasExternal) element(NO_ENDPOINT_SERVICES, [ip, proto, port], [externalVerdict], name);
  }
  for (const ip of sp.loadBalancerIPs) {
    if (hasEndpoints) element(SERVICE_IPS, [ip, proto, port], toExternal, null);
    if (p.usesFirewallChain) element(FIREWALL_IPS, [ip, proto, port], [`goto ${chainNames.firewall}`], null);
  }
  if (!hasExternal) {
    for (const ip of sp.loadBalancerIPs)
      element(NO_ENDPOINT_SERVICES, [ip, proto, port], [externalVerdict], name);
  }
  if (sp.nodePort !== 0) {
    const nodePort = String(sp.nodePort);
    // NodePorts are not subject to loadBalancerSourceRanges (upstream cannot change that).
    if (hasEndpoints) element(SERVICE_NODEPORTS, [proto, nodePort], toExternal, null);
    if (!hasExternal) element(NO_ENDPOINT_NODEPORTS, [proto, nodePort], [externalVerdict], name);
  }
  return elements;
}

function firewallRule({ sp, context, w, chainNames }: NftPortInputs): void {
  const sources: string[] = [];
  let allowFromNode = false;
  for (const cidrText of sp.loadBalancerSourceRanges) {
    sources.push(cidrText);
    const cidr = parseCIDR(cidrText);
    if (cidr && context.nodeIP && cidrContains(cidr, context.nodeIP)) allowFromNode = true;
  }
  // A VIP-like load balancer's address is often local to the node, so a request from the node
  // to the VIP loops back with the VIP as its source.
  if (allowFromNode) sources.push(...sp.loadBalancerIPs);
  w.rule(chainNames.firewall, `${context.family} saddr != { ${sources.join(' , ')} } drop`);
}

function declareAffinitySets({ sp, context, w, epNames }: NftPortInputs): string[] {
  const addrType = context.decisions.family === 'IPv4' ? 'ipv4_addr' : 'ipv6_addr';
  return sp.allReachableEndpoints.map((ep) => {
    const set = epNames(ep).affinitySet;
    // "dynamic" too: some kernels add it on their own, and a later add without it would conflict.
    w.set(set, `type ${addrType} ; flags dynamic,timeout ; timeout ${sp.sessionAffinityTimeoutSeconds}s ;`);
    return set;
  });
}

function externalChainRules({ sp, context, w, chainNames, hasExternal }: NftPortInputs): void {
  const { detector } = context;
  const masqueradeRule = `mark set mark or ${context.decisions.masqueradeMark}`;
  if (sp.externalFromCluster === null) {
    // Endpoints may be on other nodes: masquerade so replies come back through this one.
    w.rule(chainNames.external, masqueradeRule, 'masquerade');
  } else {
    if (detector) {
      // Pod traffic to an external destination ignores the policy, as if it had gone out to
      // the load balancer and come back.
      w.rule(
        chainNames.external,
        `${detector.ifLocal} goto ${chainNames.cluster}`,
        'short-circuit pod traffic',
      );
    }
    // The host's own traffic has a local source (often the VIP itself): masquerade and route it
    // to any endpoint.
    w.rule(chainNames.external, `fib saddr type local ${masqueradeRule}`, 'masquerade local traffic');
    w.rule(
      chainNames.external,
      `fib saddr type local goto ${chainNames.cluster}`,
      'short-circuit local traffic',
    );
  }
  const externalPolicyChain = sp.external.policy === 'Local' ? chainNames.local : chainNames.cluster;
  if (hasExternal) w.rule(chainNames.external, `goto ${externalPolicyChain}`);
}

/** The policy chains' way to the endpoints: DNAT there, or (with affinity) jumps to each
 * endpoint's chain, which remembers the client and DNATs. */
function endpointRules(p: NftPortInputs): void {
  const { sp, w, chainNames, epNames } = p;
  if (!p.affinity) {
    if (p.usesClusterChain) serviceToEndpointDNATs(w, sp, chainNames.cluster, sp.clusterEndpoints);
    if (p.usesLocalChain) serviceToEndpointDNATs(w, sp, chainNames.local, sp.localEndpoints);
    return;
  }
  if (p.usesClusterChain) serviceToEndpointJumps(w, sp, chainNames.cluster, sp.clusterEndpoints, epNames);
  if (p.usesLocalChain) serviceToEndpointJumps(w, sp, chainNames.local, sp.localEndpoints, epNames);
  for (const ep of sp.allReachableEndpoints) {
    const { chain, affinitySet } = epNames(ep);
    w.rule(chain, `update @${affinitySet} { ${p.context.family} saddr }`);
    w.rule(chain, `meta l4proto ${p.proto} dnat to ${ep.endpoint}`);
  }
}

/**
 * Without affinity the policy chain DNATs itself: one endpoint, straight to it (a map costs more
 * to insert than it saves); several, through an anonymous map picked by a random number.
 */
function serviceToEndpointDNATs(
  w: Writer,
  sp: ServicePortDecision,
  chain: string,
  endpoints: Endpoint[],
): void {
  const proto = sp.protocol.toLowerCase();
  const [only] = endpoints;
  if (endpoints.length === 1 && only) {
    w.rule(chain, `meta l4proto ${proto} dnat to ${only.endpoint}`);
    return;
  }
  const family = nftFamily(sp.family);
  const targets = endpoints.map((ep, i) => `${i} : ${ep.ip} . ${ep.port}`).join(' , ');
  w.rule(
    chain,
    `meta l4proto ${proto} dnat ${family} addr . port to numgen random mod ${endpoints.length} map { ${targets} }`,
  );
}

/** With affinity: the endpoint a source is remembered for, else one at random, each a chain of its own. */
function serviceToEndpointJumps(
  w: Writer,
  sp: ServicePortDecision,
  chain: string,
  endpoints: Endpoint[],
  epNames: (ep: Endpoint) => { chain: string; affinitySet: string },
): void {
  const family = nftFamily(sp.family);
  for (const ep of endpoints) {
    const { chain: target, affinitySet } = epNames(ep);
    w.rule(chain, `${family} saddr @${affinitySet} goto ${target}`);
  }
  const targets = endpoints.map((ep, i) => `${i} : goto ${epNames(ep).chain}`).join(' , ');
  w.rule(chain, `numgen random mod ${endpoints.length} vmap { ${targets} }`);
}

/** Every chain and affinity set a sync of this ruleset keeps (written or skipped). */
export function renderFamily(decisions: FamilyDecisions): string {
  const ruleset = buildNftRuleset(decisions);
  return assembleTransaction(ruleset, {
    full: true,
    recreateBaseChains: true,
    writeBlock: () => true,
    elementChanges: { remove: [], add: [] },
    staleChains: [],
    staleAffinitySets: [],
  }).text;
}

/**
 * What `render --proxy-mode nftables` prints: with a family, exactly that family's transaction;
 * without, every family under a comment line naming it (one `nft -f` file takes them all).
 */
export function renderNftablesText(decisions: ProxyDecisions, family?: IPFamily): string {
  const families = family ? decisions.families.filter((f) => f.family === family) : decisions.families;
  if (family && families.length === 0) throw new Error(`the decisions have no ${family} family`);
  const rendered = families.map((f) => ({ family: f.family, text: renderFamily(f) }));
  if (family) return rendered[0]?.text ?? '';
  return rendered.map((r) => `# ${r.family} (table ${nftFamily(r.family)} ${TABLE})\n${r.text}`).join('');
}
