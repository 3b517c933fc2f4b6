// The iptables-restore input kube-proxy's iptables proxier (v1.37.2, pkg/proxy/iptables/proxier.go) writes, built from the brain's
// decisions. Pure: the applier decides which per-service nat
// blocks a partial sync writes and which stale chains to delete, then assembles the text.

import type {
  Endpoint,
  FamilyDecisions,
  LocalDetector,
  ProxyDecisions,
  ScopeVerdict,
  ServicePortDecision,
} from '../../brain/types.js';
import type { IPFamily } from '../../model/types.js';
import { cidrContains, parseCIDR, parseIP } from '../../net/ip.js';
import { ruleModeNodeIP, serviceKey } from '../types.js';
import {
  endpointChain,
  KUBE_EXTERNAL_SERVICES,
  KUBE_FIREWALL,
  KUBE_FORWARD,
  KUBE_MARK_MASQ,
  KUBE_NODEPORTS,
  KUBE_POSTROUTING,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
  NFACCT_CT_STATE_INVALID_DROPPED,
  NFACCT_LOCALHOST_NODEPORTS_ACCEPTED,
  servicePortChains,
} from './names.js';
import { probability } from './probability.js';

/** Above this many endpoints (all service ports together) per-endpoint comments are left out. */
export const LARGE_CLUSTER_ENDPOINTS_THRESHOLD = 1000;

export interface IptablesRenderOptions {
  /** The iptables binary supports MASQUERADE --random-fully (iptables >= 1.6.2). */
  randomFully: boolean;
  /** The nfacct counters exist and the nfacct match works. */
  nfacct: boolean;
  /** net.netfilter.nf_conntrack_tcp_be_liberal=1: no INVALID drop in KUBE-FORWARD. */
  tcpBeLiberal: boolean;
}

/** The nat chains of one service port: what a partial sync leaves out when the service is unchanged. */
export interface ServicePortNatBlock {
  /** "namespace/name": partial syncs are decided per Service, as upstream does. */
  service: string;
  /** servicePortName + "/" + protocol: unique within a family. */
  key: string;
  /** Every chain of the block (its KUBE-EXT/FW/SVC/SVL/SEP chains), in declaration order. */
  chains: string[];
  rules: string[];
}

export interface ServicePortRules {
  filterRules: string[];
  /** Rules in nat KUBE-SERVICES and KUBE-NODEPORTS, written on every sync. */
  natDispatchRules: string[];
  block: ServicePortNatBlock;
}

export interface IptablesRuleset {
  family: IPFamily;
  largeClusterMode: boolean;
  filterChains: string[];
  /** Filter rules written before the service ports (KUBE-FIREWALL). */
  filterHeadRules: string[];
  natChains: string[];
  /** KUBE-POSTROUTING and KUBE-MARK-MASQ. */
  natHeadRules: string[];
  servicePorts: ServicePortRules[];
  /** The jump(s) to KUBE-NODEPORTS: the last rules of nat KUBE-SERVICES. */
  natTailRules: string[];
  /** KUBE-FORWARD. */
  filterTailRules: string[];
  /** Service ports with a Local policy and no local endpoints (sync_proxy_rules_no_local_endpoints_total). */
  noLocalEndpoints: { internal: number; external: number };
}

const chainLine = (chain: string) => `:${chain} - [0:0]`;

export interface DetectorArgs {
  ifLocal: string;
  ifNotLocal: string;
}

export function detectorArgs(detector: LocalDetector): DetectorArgs | null {
  switch (detector.mode) {
    case 'None':
      return null;
    case 'ClusterCIDR':
    case 'NodeCIDR': {
      // kube-proxy builds one detector per family from the first CIDR of that family.
      const cidr = detector.cidrs[0];
      return cidr === undefined ? null : { ifLocal: `-s ${cidr}`, ifNotLocal: `! -s ${cidr}` };
    }
    case 'BridgeInterface':
      return { ifLocal: `-i ${detector.interfaceName}`, ifNotLocal: `! -i ${detector.interfaceName}` };
    case 'InterfaceNamePrefix':
      return { ifLocal: `-i ${detector.prefix}+`, ifNotLocal: `! -i ${detector.prefix}+` };
  }
}

/** nodePortAddresses.ContainsIPv4Loopback(): NodePorts are reachable on 127.0.0.0/8. */
export function nodePortsOnLoopback(decisions: FamilyDecisions): boolean {
  if (decisions.family !== 'IPv4' || !decisions.localhostNodePorts) return false;
  return (
    decisions.nodePortAddresses.matchAll ||
    decisions.nodePortAddresses.ips.some((ip) => ip.startsWith('127.'))
  );
}

/** KUBE-POSTROUTING and KUBE-MARK-MASQ: the same in the iptables and ipvs modes. */
export function masqueradeRules(mark: string, randomFully: boolean): string[] {
  return [
    `-A ${KUBE_POSTROUTING} -m mark ! --mark ${mark}/${mark} -j RETURN`,
    `-A ${KUBE_POSTROUTING} -j MARK --xor-mark ${mark}`,
    `-A ${KUBE_POSTROUTING} -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE${randomFully ? ' --random-fully' : ''}`,
    `-A ${KUBE_MARK_MASQ} -j MARK --or-mark ${mark}`,
  ];
}

/** KUBE-FORWARD's accept rules, so marked (NodePort) traffic passes a FORWARD DROP policy: both modes. */
export function forwardAcceptRules(mark: string): string[] {
  return [
    `-A ${KUBE_FORWARD} -m comment --comment "kubernetes forwarding rules" -m mark --mark ${mark}/${mark} -j ACCEPT`,
    `-A ${KUBE_FORWARD} -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
  ];
}

interface FamilyContext {
  decisions: FamilyDecisions;
  options: IptablesRenderOptions;
  largeClusterMode: boolean;
  detector: DetectorArgs | null;
  localhostNodePortCounter: boolean;
  nodeIP: ReturnType<typeof parseIP>;
}

/** The whole ruleset of one family, as a full sync writes it. */
export function buildIptablesRuleset(
  decisions: FamilyDecisions,
  options: IptablesRenderOptions,
): IptablesRuleset {
  const isIPv6 = decisions.family === 'IPv6';
  const mark = decisions.masqueradeMark;
  const totalEndpoints = decisions.servicePorts.reduce((sum, sp) => sum + sp.endpoints.length, 0);
  const context: FamilyContext = {
    decisions,
    options,
    largeClusterMode: totalEndpoints > LARGE_CLUSTER_ENDPOINTS_THRESHOLD,
    detector: detectorArgs(decisions.localDetector),
    localhostNodePortCounter: options.nfacct && nodePortsOnLoopback(decisions),
    nodeIP: parseIP(ruleModeNodeIP(decisions)),
  };

  const filterChains = [
    KUBE_SERVICES,
    KUBE_EXTERNAL_SERVICES,
    KUBE_FORWARD,
    KUBE_NODEPORTS,
    KUBE_PROXY_FIREWALL,
  ];
  const filterHeadRules: string[] = [];
  if (!isIPv6 && decisions.localhostNodePorts) {
    // The anti-martian rule for route_localnet (kubernetes#90259); kubelet writes the same rule.
    filterChains.push(KUBE_FIREWALL);
    filterHeadRules.push(
      `-A ${KUBE_FIREWALL} -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`,
    );
  }

  const natHeadRules = masqueradeRules(mark, options.randomFully);

  const noLocalEndpoints = { internal: 0, external: 0 };
  const servicePorts = decisions.servicePorts.map((sp) => servicePortRules(context, sp, noLocalEndpoints));

  const nodePortsComment = '"kubernetes service nodeports; NOTE: this must be the last rule in this chain"';
  const natTailRules: string[] = [];
  if (decisions.nodePortAddresses.matchAll) {
    let destinations = '-m addrtype --dst-type LOCAL';
    // Localhost NodePorts never work on IPv6, and on IPv4 only with route_localnet.
    if (isIPv6) destinations += ' ! -d ::1/128';
    else if (!decisions.localhostNodePorts) destinations += ' ! -d 127.0.0.0/8';
    natTailRules.push(
      `-A ${KUBE_SERVICES} -m comment --comment ${nodePortsComment} ${destinations} -j ${KUBE_NODEPORTS}`,
    );
  } else {
    for (const ip of decisions.nodePortAddresses.ips) {
      natTailRules.push(
        `-A ${KUBE_SERVICES} -m comment --comment ${nodePortsComment} -d ${ip} -j ${KUBE_NODEPORTS}`,
      );
    }
  }

  const filterTailRules: string[] = [];
  if (!options.tcpBeLiberal) {
    // Without tcp_be_liberal conntrack marks out-of-window packets INVALID; left alone they reach
    // the pod un-NATed and it answers with a RST (kubernetes#74839).
    const counter = options.nfacct ? ` -m nfacct --nfacct-name ${NFACCT_CT_STATE_INVALID_DROPPED}` : '';
    filterTailRules.push(`-A ${KUBE_FORWARD} -m conntrack --ctstate INVALID${counter} -j DROP`);
  }
  filterTailRules.push(...forwardAcceptRules(mark));

  return {
    family: decisions.family,
    largeClusterMode: context.largeClusterMode,
    filterChains,
    filterHeadRules,
    natChains: [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ],
    natHeadRules,
    servicePorts,
    natTailRules,
    filterTailRules,
    noLocalEndpoints,
  };
}

/** The filter rule of a scope that does not forward: REJECT without endpoints, DROP without local ones. */
function filterOf(verdict: ScopeVerdict, name: string): { target: string; comment: string } {
  if (verdict.action === 'reject') return { target: 'REJECT', comment: `"${name} has no endpoints"` };
  if (verdict.action === 'drop') return { target: 'DROP', comment: `"${name} has no local endpoints"` };
  return { target: '', comment: '' };
}

/** One service port's names, chains and the choices every one of its rules depends on. */
interface PortRuleInputs {
  context: FamilyContext;
  sp: ServicePortDecision;
  name: string;
  /** `-m tcp -p tcp` (likewise udp, sctp). */
  match: string;
  chains: ReturnType<typeof servicePortChains>;
  hasEndpoints: boolean;
  hasInternal: boolean;
  hasExternal: boolean;
  /** The chain internal traffic goes to (by the internal traffic policy). */
  internalChain: string;
  /** The EXT chain is needed even without external endpoints: it short-circuits pod and host traffic. */
  usesExtChain: boolean;
  usesFwChain: boolean;
  internalFilter: { target: string; comment: string };
  externalFilter: { target: string; comment: string };
}

function servicePortRules(
  context: FamilyContext,
  sp: ServicePortDecision,
  noLocalEndpoints: { internal: number; external: number },
): ServicePortRules {
  const name = sp.servicePortName;
  const proto = sp.protocol.toLowerCase();
  const chains = servicePortChains(name, sp.protocol);
  const hasEndpoints = sp.internal.action !== 'reject';
  const policyChain = (verdict: ScopeVerdict) => (verdict.policy === 'Local' ? chains.local : chains.cluster);
  const usesFwChain = hasEndpoints && sp.loadBalancerIPs.length > 0 && sp.loadBalancerSourceRanges.length > 0;
  const p: PortRuleInputs = {
    context,
    sp,
    name,
    match: `-m ${proto} -p ${proto}`,
    chains,
    hasEndpoints,
    hasInternal: sp.internal.action === 'forward',
    hasExternal: sp.external.action === 'forward',
    internalChain: policyChain(sp.internal),
    usesExtChain: hasEndpoints && sp.externallyAccessible,
    usesFwChain,
    internalFilter: filterOf(sp.internal, name),
    externalFilter: filterOf(sp.external, name),
  };
  if (sp.internal.action === 'drop') noLocalEndpoints.internal++;
  if (sp.external.action === 'drop') noLocalEndpoints.external++;
  const filterRules: string[] = [];
  const natDispatchRules: string[] = [];
  clusterIPDispatch(p, filterRules, natDispatchRules);
  externalIPDispatch(p, filterRules, natDispatchRules);
  loadBalancerDispatch(p, filterRules, natDispatchRules);
  nodePortDispatch(p, filterRules, natDispatchRules);
  if (sp.healthCheckNodePort !== 0) {
    filterRules.push(
      `-A ${KUBE_NODEPORTS} -m comment --comment "${name} health check node port" -m tcp -p tcp --dport ${sp.healthCheckNodePort} -j ACCEPT`,
    );
  }
  const blockChains: string[] = [];
  const rules: string[] = [];
  clusterIPMasquerade(p, rules);
  if (p.usesExtChain) externalChain(p, blockChains, rules, policyChain(sp.external));
  if (usesFwChain) firewallChain(p, blockChains, rules);
  endpointChains(p, blockChains, rules);
  return {
    filterRules,
    natDispatchRules,
    block: {
      service: serviceKey(sp.namespace, sp.name),
      key: `${name}/${sp.protocol}`,
      chains: blockChains,
      rules,
    },
  };
}

function clusterIPDispatch(p: PortRuleInputs, filterRules: string[], natDispatchRules: string[]): void {
  const { sp, name, match } = p;
  if (p.hasInternal) {
    natDispatchRules.push(
      `-A ${KUBE_SERVICES} -m comment --comment "${name} cluster IP" ${match} -d ${sp.clusterIP} --dport ${sp.port} -j ${p.internalChain}`,
    );
  } else {
    filterRules.push(
      `-A ${KUBE_SERVICES} -m comment --comment ${p.internalFilter.comment} ${match} -d ${sp.clusterIP} --dport ${sp.port} -j ${p.internalFilter.target}`,
    );
  }
}

function externalIPDispatch(p: PortRuleInputs, filterRules: string[], natDispatchRules: string[]): void {
  const { sp, name, match, externalFilter } = p;
  for (const ip of sp.externalIPs) {
    if (p.hasEndpoints) {
      natDispatchRules.push(
        `-A ${KUBE_SERVICES} -m comment --comment "${name} external IP" ${match} -d ${ip} --dport ${sp.port} -j ${p.chains.external}`,
      );
    }
    if (!p.hasExternal) {
      filterRules.push(
        `-A ${KUBE_EXTERNAL_SERVICES} -m comment --comment ${externalFilter.comment} ${match} -d ${ip} --dport ${sp.port} -j ${externalFilter.target}`,
      );
    }
  }
}

function loadBalancerDispatch(p: PortRuleInputs, filterRules: string[], natDispatchRules: string[]): void {
  const { sp, name, match, chains, externalFilter } = p;
  const lbChain = p.usesFwChain ? chains.firewall : chains.external;
  for (const ip of sp.loadBalancerIPs) {
    if (p.hasEndpoints) {
      natDispatchRules.push(
        `-A ${KUBE_SERVICES} -m comment --comment "${name} loadbalancer IP" ${match} -d ${ip} --dport ${sp.port} -j ${lbChain}`,
      );
    }
    if (p.usesFwChain) {
      filterRules.push(
        `-A ${KUBE_PROXY_FIREWALL} -m comment --comment "${name} traffic not accepted by ${chains.firewall}" ${match} -d ${ip} --dport ${sp.port} -j DROP`,
      );
    }
  }
  if (!p.hasExternal) {
    for (const ip of sp.loadBalancerIPs) {
      filterRules.push(
        `-A ${KUBE_EXTERNAL_SERVICES} -m comment --comment ${externalFilter.comment} ${match} -d ${ip} --dport ${sp.port} -j ${externalFilter.target}`,
      );
    }
  }
}

function nodePortDispatch(p: PortRuleInputs, filterRules: string[], natDispatchRules: string[]): void {
  const { sp, name, match, externalFilter } = p;
  if (sp.nodePort === 0) return;
  if (p.hasEndpoints) {
    if (p.context.localhostNodePortCounter) {
      natDispatchRules.push(
        `-A ${KUBE_NODEPORTS} -m comment --comment ${name} ${match} -d 127.0.0.0/8 --dport ${sp.nodePort} -m nfacct --nfacct-name ${NFACCT_LOCALHOST_NODEPORTS_ACCEPTED} -j ${p.chains.external}`,
      );
    }
    // NodePorts are not subject to loadBalancerSourceRanges (upstream cannot change that).
    natDispatchRules.push(
      `-A ${KUBE_NODEPORTS} -m comment --comment ${name} ${match} --dport ${sp.nodePort} -j ${p.chains.external}`,
    );
  }
  if (!p.hasExternal) {
    filterRules.push(
      `-A ${KUBE_EXTERNAL_SERVICES} -m comment --comment ${externalFilter.comment} -m addrtype --dst-type LOCAL ${match} --dport ${sp.nodePort} -j ${externalFilter.target}`,
    );
  }
}

function clusterIPMasquerade(p: PortRuleInputs, rules: string[]): void {
  const { sp, name, match, internalChain } = p;
  const { decisions, detector } = p.context;
  if (!p.hasInternal) return;
  const clusterIPMatch = `-m comment --comment "${name} cluster IP" ${match} -d ${sp.clusterIP} --dport ${sp.port}`;
  if (decisions.masqueradeAll) {
    rules.push(`-A ${internalChain} ${clusterIPMatch} -j ${KUBE_MARK_MASQ}`);
  } else if (detector) {
    // Off-cluster sources reaching a ClusterIP (a static route to the service range) may be
    // forwarded to another node, so they are masqueraded.
    rules.push(`-A ${internalChain} ${clusterIPMatch} ${detector.ifNotLocal} -j ${KUBE_MARK_MASQ}`);
  }
}

function externalChain(p: PortRuleInputs, blockChains: string[], rules: string[], policyChain: string): void {
  const { sp, name, chains } = p;
  const { detector } = p.context;
  blockChains.push(chains.external);
  if (sp.externalFromCluster === null) {
    rules.push(
      `-A ${chains.external} -m comment --comment "masquerade traffic for ${name} external destinations" -j ${KUBE_MARK_MASQ}`,
    );
  } else {
    if (detector) {
      // Pod traffic to an external destination ignores the policy, as if it had gone out to
      // the load balancer and come back.
      rules.push(
        `-A ${chains.external} -m comment --comment "pod traffic for ${name} external destinations" ${detector.ifLocal} -j ${chains.cluster}`,
      );
    }
    rules.push(
      `-A ${chains.external} -m comment --comment "masquerade LOCAL traffic for ${name} external destinations" -m addrtype --src-type LOCAL -j ${KUBE_MARK_MASQ}`,
      `-A ${chains.external} -m comment --comment "route LOCAL traffic for ${name} external destinations" -m addrtype --src-type LOCAL -j ${chains.cluster}`,
    );
  }
  if (p.hasExternal) rules.push(`-A ${chains.external} -j ${policyChain}`);
}

function firewallChain(p: PortRuleInputs, blockChains: string[], rules: string[]): void {
  const { sp, name, chains, context } = p;
  blockChains.push(chains.firewall);
  const head = `-A ${chains.firewall} -m comment --comment "${name} loadbalancer IP"`;
  let allowFromNode = false;
  for (const cidrText of sp.loadBalancerSourceRanges) {
    rules.push(`${head} -s ${cidrText} -j ${chains.external}`);
    const cidr = parseCIDR(cidrText);
    if (cidr && context.nodeIP && cidrContains(cidr, context.nodeIP)) allowFromNode = true;
  }
  // A VIP-like load balancer's address is often local to the node, so a request from the node
  // to the VIP loops back with the VIP as its source.
  if (allowFromNode) {
    for (const ip of sp.loadBalancerIPs) rules.push(`${head} -s ${ip} -j ${chains.external}`);
  }
  rules.push(
    `-A ${chains.firewall} -m comment --comment "other traffic to ${name} will be dropped by ${KUBE_PROXY_FIREWALL}"`,
  );
}

/** The SVC and SVL chains' jumps to the endpoints, and each endpoint's SEP chain. */
function endpointChains(p: PortRuleInputs, blockChains: string[], rules: string[]): void {
  const { sp, name, match, chains } = p;
  const { largeClusterMode } = p.context;
  // An endpoint's chain name is a sha256; it is needed in up to three rules, so hash it once.
  const sepChains = new Map<string, string>();
  const sepChain = (ep: Endpoint) => {
    let chain = sepChains.get(ep.endpoint);
    if (chain === undefined) {
      chain = endpointChain(name, sp.protocol, ep.endpoint);
      sepChains.set(ep.endpoint, chain);
    }
    return chain;
  };
  if (sp.clusterEndpoints.length > 0 && sp.usesClusterEndpoints) {
    blockChains.push(chains.cluster);
    serviceToEndpointRules(rules, sp, chains.cluster, sp.clusterEndpoints, sepChain, largeClusterMode);
  }
  if (sp.localEndpoints.length > 0 && sp.usesLocalEndpoints) {
    blockChains.push(chains.local);
    serviceToEndpointRules(rules, sp, chains.local, sp.localEndpoints, sepChain, largeClusterMode);
  }
  const endpointComment = largeClusterMode ? '' : ` -m comment --comment ${name}`;
  for (const ep of sp.allReachableEndpoints) {
    const chain = sepChain(ep);
    blockChains.push(chain);
    // Hairpin: a pod reaching itself through the service is SNATed.
    rules.push(`-A ${chain}${endpointComment} -s ${ep.ip} -j ${KUBE_MARK_MASQ}`);
    const affinity = sp.sessionAffinityTimeoutSeconds > 0 ? ` -m recent --name ${chain} --set` : '';
    rules.push(`-A ${chain}${endpointComment}${affinity} ${match} -j DNAT --to-destination ${ep.endpoint}`);
  }
}

function serviceToEndpointRules(
  rules: string[],
  sp: ServicePortDecision,
  chain: string,
  endpoints: Endpoint[],
  sepChain: (ep: Endpoint) => string,
  largeClusterMode: boolean,
): void {
  const comment = (ep: Endpoint) =>
    largeClusterMode ? '' : ` -m comment --comment "${sp.servicePortName} -> ${ep.endpoint}"`;
  if (sp.sessionAffinityTimeoutSeconds > 0) {
    for (const ep of endpoints) {
      const sep = sepChain(ep);
      rules.push(
        `-A ${chain}${comment(ep)} -m recent --name ${sep} --rcheck --seconds ${sp.sessionAffinityTimeoutSeconds} --reap -j ${sep}`,
      );
    }
  }
  endpoints.forEach((ep, i) => {
    const statistic =
      i < endpoints.length - 1
        ? ` -m statistic --mode random --probability ${probability(endpoints.length - i)}`
        : '';
    rules.push(`-A ${chain}${comment(ep)}${statistic} -j ${sepChain(ep)}`);
  });
}

export interface AssembleOptions {
  /** Whether a service port's nat block is written; a partial sync leaves unchanged services out. */
  writeBlock: (block: ServicePortNatBlock) => boolean;
  /** Existing per-service chains no longer in use: flushed and deleted by this restore. */
  staleChains: string[];
}

export interface RestoreInput {
  text: string;
  /** sync_proxy_rules_iptables_last: rules written by this restore, per table. */
  rulesWritten: { filter: number; nat: number };
  /** sync_proxy_rules_iptables_total: rules owned after this restore, per table. */
  rulesTotal: { filter: number; nat: number };
}

/** Every chain a sync of this ruleset keeps (written or skipped). */
export function activeNatChains(ruleset: IptablesRuleset): Set<string> {
  const active = new Set(ruleset.natChains);
  for (const sp of ruleset.servicePorts) for (const chain of sp.block.chains) active.add(chain);
  return active;
}

/** push(...source) passes every element as an argument, which overflows the stack for a service with ~100k endpoints. */
function append(target: string[], source: readonly string[]): void {
  for (const item of source) target.push(item);
}

/** `*filter ... COMMIT\n*nat ... COMMIT\n`, as one iptables-restore --noflush call takes it. */
export function assembleRestoreInput(ruleset: IptablesRuleset, options: AssembleOptions): RestoreInput {
  const filterRules = [...ruleset.filterHeadRules];
  const natChainLines = ruleset.natChains.map(chainLine);
  const natRules = [...ruleset.natHeadRules];
  let skippedNatRules = 0;
  for (const sp of ruleset.servicePorts) {
    append(filterRules, sp.filterRules);
    append(natRules, sp.natDispatchRules);
    if (options.writeBlock(sp.block)) {
      for (const chain of sp.block.chains) natChainLines.push(chainLine(chain));
      append(natRules, sp.block.rules);
    } else {
      skippedNatRules += sp.block.rules.length;
    }
  }
  for (const chain of options.staleChains) {
    // Declaring the chain flushes it, so nothing references it when it is deleted.
    natChainLines.push(chainLine(chain));
    natRules.push(`-X ${chain}`);
  }
  append(natRules, ruleset.natTailRules);
  append(filterRules, ruleset.filterTailRules);

  const lines = [
    '*filter',
    ...ruleset.filterChains.map(chainLine),
    ...filterRules,
    'COMMIT',
    '*nat',
    ...natChainLines,
    ...natRules,
    'COMMIT',
  ];
  const deleted = options.staleChains.length;
  return {
    text: `${lines.join('\n')}\n`,
    rulesWritten: { filter: filterRules.length, nat: natRules.length - deleted },
    rulesTotal: { filter: filterRules.length, nat: natRules.length + skippedNatRules - deleted },
  };
}

/** A full sync's restore input for one family (nothing skipped, no kernel to find stale chains in). */
export function renderFamily(decisions: FamilyDecisions, options: IptablesRenderOptions): string {
  return assembleRestoreInput(buildIptablesRuleset(decisions, options), {
    writeBlock: () => true,
    staleChains: [],
  }).text;
}

/** The restore input of every family in the decisions. */
export function renderIptables(
  decisions: ProxyDecisions,
  options: IptablesRenderOptions,
): Map<IPFamily, string> {
  return new Map(decisions.families.map((family) => [family.family, renderFamily(family, options)]));
}

const RESTORE_COMMAND: Record<IPFamily, string> = { IPv4: 'iptables-restore', IPv6: 'ip6tables-restore' };

/**
 * What `render --proxy-mode iptables` prints: with a family, exactly that family's restore input;
 * without, every family under a comment line naming it (iptables-restore skips # lines).
 */
export function renderIptablesText(
  decisions: ProxyDecisions,
  options: IptablesRenderOptions,
  family?: IPFamily,
): string {
  const rendered = renderIptables(decisions, options);
  if (family) {
    const text = rendered.get(family);
    if (text === undefined) throw new Error(`the decisions have no ${family} family`);
    return text;
  }
  return [...rendered].map(([fam, text]) => `# ${fam} (${RESTORE_COMMAND[fam]})\n${text}`).join('');
}
