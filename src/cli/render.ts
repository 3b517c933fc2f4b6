// `kube-bpf-proxy render`: offline, from manifest files, what this proxy would program on a node:
// the brain's decisions (--output json or a text summary), or a data plane's own format
// (--proxy-mode iptables: the iptables-restore input).

import { type Command, Option } from 'commander';
import { decide } from '../brain/decide.js';
import type { Endpoint, NodeEnv, ProxyDecisions, ScopeVerdict, ServicePortDecision } from '../brain/types.js';
import { readConfigFlags, registerConfigFlags } from '../config/flags.js';
import { formatProblems, loadConfigFile } from '../config/load.js';
import type { ProxyConfig, ProxyMode } from '../config/types.js';
import { renderBpfText } from '../dataplanes/bpf/render.js';
import { renderIptablesText } from '../dataplanes/iptables/plan.js';
import { renderIpvsText } from '../dataplanes/ipvs/plan.js';
import { renderNftablesText } from '../dataplanes/nftables/plan.js';
import { formatProblem, type ObjectProblem } from '../model/parse.js';
import { ChangeTracker } from '../model/tracker.js';
import type { IPFamily } from '../model/types.js';
import { nodeIPsFromNode, readNodeEnvFile, resolveNodeName } from '../sources/host.js';
import { readManifests } from '../sources/manifests.js';

export const DECISIONS_FORMAT_VERSION = 1;

export interface RenderOptions {
  manifests: string[];
  config?: string;
  nodeEnv?: string;
  ipFamily?: IPFamily;
  output: 'text' | 'json';
  strict: boolean;
}

/** Renders one mode's kernel input. Modes land one by one; the others say so. */
type ModeRenderer = (
  decisions: ProxyDecisions,
  env: NodeEnv,
  config: ProxyConfig,
  family?: IPFamily,
) => string;

const MODE_RENDERERS: Record<ProxyMode, ModeRenderer> = {
  bpf: (decisions, _env, config, family) => renderBpfText(decisions, config.bpf, family),
  iptables: (decisions, env, config, family) =>
    renderIptablesText(decisions, { ...env.iptables, tcpBeLiberal: config.conntrack.tcpBeLiberal }, family),
  nftables: (decisions, _env, _config, family) => renderNftablesText(decisions, family),
  ipvs: (decisions, env, config, family) =>
    renderIpvsText(
      decisions,
      { scheduler: config.ipvs.scheduler, randomFully: env.iptables.randomFully, interfaces: env.interfaces },
      family,
    ),
};

const endpointStrings = (endpoints: Endpoint[]) => endpoints.map((ep) => ep.endpoint);

const verdictJson = (verdict: ScopeVerdict) => ({
  action: verdict.action,
  policy: verdict.policy,
  endpoints: endpointStrings(verdict.endpoints),
});

/** The documented JSON view of the decisions (docs/decisions-json.md). */
export function decisionsJson(decisions: ProxyDecisions): unknown {
  return {
    formatVersion: DECISIONS_FORMAT_VERSION,
    nodeName: decisions.nodeName,
    families: decisions.families.map((family) => ({
      family: family.family,
      nodeIP: family.nodeIP,
      nodePortAddresses: family.nodePortAddresses,
      localDetector: family.localDetector,
      masqueradeMark: family.masqueradeMark,
      masqueradeAll: family.masqueradeAll,
      localhostNodePorts: family.localhostNodePorts,
      serviceCIDRs: family.serviceCIDRs,
      servicePorts: family.servicePorts.map((sp) => ({
        servicePortName: sp.servicePortName,
        namespace: sp.namespace,
        name: sp.name,
        portName: sp.portName,
        protocol: sp.protocol,
        type: sp.type,
        clusterIP: sp.clusterIP,
        port: sp.port,
        nodePort: sp.nodePort,
        externalIPs: sp.externalIPs,
        loadBalancerIPs: sp.loadBalancerIPs,
        loadBalancerSourceRanges: sp.loadBalancerSourceRanges,
        healthCheckNodePort: sp.healthCheckNodePort,
        externalTrafficPolicy: sp.external.policy,
        internalTrafficPolicy: sp.internal.policy,
        externallyAccessible: sp.externallyAccessible,
        usesClusterEndpoints: sp.usesClusterEndpoints,
        usesLocalEndpoints: sp.usesLocalEndpoints,
        sessionAffinity:
          sp.sessionAffinityTimeoutSeconds > 0
            ? { type: 'ClientIP', timeoutSeconds: sp.sessionAffinityTimeoutSeconds }
            : { type: 'None' },
        scheduler: sp.schedulerAnnotation,
        topologyMode: sp.topologyMode,
        hasAnyEndpoints: sp.hasAnyEndpoints,
        localReadyEndpoints: sp.localReadyEndpoints,
        endpoints: sp.endpoints.map((ep) => ({
          endpoint: ep.endpoint,
          ip: ep.ip,
          port: ep.port,
          ready: ep.ready,
          serving: ep.serving,
          terminating: ep.terminating,
          isLocal: ep.isLocal,
          nodeName: ep.nodeName,
          zoneHints: ep.zoneHints,
          nodeHints: ep.nodeHints,
        })),
        clusterEndpoints: endpointStrings(sp.clusterEndpoints),
        localEndpoints: endpointStrings(sp.localEndpoints),
        allReachableEndpoints: endpointStrings(sp.allReachableEndpoints),
        verdicts: {
          internal: verdictJson(sp.internal),
          external: verdictJson(sp.external),
          externalFromCluster: sp.externalFromCluster && verdictJson(sp.externalFromCluster),
        },
      })),
    })),
    skipped: decisions.skipped,
    ignored: decisions.ignored,
  };
}

function describeServicePort(sp: ServicePortDecision): string {
  const frontends = [`${sp.clusterIP}:${sp.port}`];
  if (sp.nodePort) frontends.push(`nodePort ${sp.nodePort}`);
  for (const ip of sp.externalIPs) frontends.push(`externalIP ${ip}`);
  for (const ip of sp.loadBalancerIPs) frontends.push(`LB ${ip}`);
  const policy = [
    sp.external.policy === 'Local' ? 'eTP=Local' : '',
    sp.internal.policy === 'Local' ? 'iTP=Local' : '',
    sp.sessionAffinityTimeoutSeconds ? `affinity ${sp.sessionAffinityTimeoutSeconds}s` : '',
    sp.loadBalancerSourceRanges.length ? `sourceRanges ${sp.loadBalancerSourceRanges.join(',')}` : '',
  ].filter(Boolean);
  const backends = sp.hasAnyEndpoints
    ? endpointStrings(sp.allReachableEndpoints).join(' ') || '(none local)'
    : '(no endpoints: rejected)';
  return `  ${sp.servicePortName}/${sp.protocol}  ${frontends.join(', ')}${policy.length ? `  [${policy.join(' ')}]` : ''}\n    -> ${backends}`;
}

/** The text summary: one block per family, one entry per service port. */
export function decisionsText(decisions: ProxyDecisions): string {
  const lines = [`node ${decisions.nodeName}`];
  for (const family of decisions.families) {
    const serviceCIDRs =
      family.serviceCIDRs.length > 0 ? `, ServiceCIDRs ${family.serviceCIDRs.join(',')}` : '';
    lines.push(
      `${family.family} (node IP ${family.nodeIP || 'none'}, ${family.servicePorts.length} service ports${serviceCIDRs})`,
    );
    for (const sp of family.servicePorts) lines.push(describeServicePort(sp));
  }
  for (const ignored of decisions.ignored)
    lines.push(`ignored ${ignored.kind} ${ignored.namespace}/${ignored.name}: ${ignored.reason}`);
  return `${lines.join('\n')}\n`;
}

/** Without --node-env: the node named by --hostname-override, with the addresses its Node manifest lists. */
function nodeEnvFromManifests(nodeName: string, tracker: ChangeTracker): NodeEnv {
  const nodeIPs = nodeIPsFromNode(tracker.state().node);
  return {
    nodeName,
    nodeIPs,
    interfaces: [
      {
        ifname: 'node',
        addr_info: nodeIPs.map((ip) => ({
          family: ip.includes(':') ? ('inet6' as const) : ('inet' as const),
          local: ip,
          prefixlen: ip.includes(':') ? 128 : 32,
        })),
      },
    ],
    nodeLabels: tracker.state().node?.meta.labels ?? {},
    iptables: { randomFully: true, nfacct: false },
  };
}

export interface RenderOutcome {
  stdout: string;
  problems: ObjectProblem[];
  exitCode: number;
}

export async function renderCommand(opts: RenderOptions, command: Command): Promise<RenderOutcome> {
  const flags = readConfigFlags(command);
  const loaded = await loadConfigFile(opts.config, flags);
  if (!loaded.ok) throw new Error(`invalid configuration:\n${formatProblems(loaded.problems)}`);
  const config = loaded.config;
  const fileEnv = opts.nodeEnv ? await readNodeEnvFile(opts.nodeEnv) : null;
  const nodeName =
    flags['hostname-override'] !== undefined || !fileEnv
      ? resolveNodeName(config.hostnameOverride)
      : fileEnv.nodeName;

  const read = readManifests(opts.manifests, { nodeName });
  const tracker = new ChangeTracker(nodeName);
  tracker.apply(read.events);
  const env = fileEnv ? { ...fileEnv, nodeName } : nodeEnvFromManifests(nodeName, tracker);
  const problems = [...read.problems, ...tracker.skipped()];
  const decisions = decide(tracker.state(), env, config, {
    families: opts.ipFamily ? [opts.ipFamily] : undefined,
    skipped: problems,
  });
  // Objects kube-proxy's informers would not even see (label selector, other nodes' Nodes).
  decisions.ignored.push(...read.ignored);

  let stdout: string;
  const explicitMode = flags['proxy-mode'] !== undefined ? config.mode : undefined;
  if (opts.output === 'json') {
    stdout = `${JSON.stringify(decisionsJson(decisions), null, 2)}\n`;
  } else if (explicitMode) {
    stdout = MODE_RENDERERS[explicitMode](decisions, env, config, opts.ipFamily);
  } else {
    stdout = decisionsText(decisions);
  }
  return { stdout, problems, exitCode: opts.strict && problems.length > 0 ? 1 : 0 };
}

export function registerRenderCommand(program: Command): void {
  const command = program
    .command('render')
    .description(
      'Show, offline, what kube-bpf-proxy would program for Services, EndpointSlices, Nodes and ServiceCIDRs in manifest files',
    )
    .requiredOption(
      '--manifests <path...>',
      'YAML/JSON files or directories holding Services, EndpointSlices, Nodes and ServiceCIDRs',
    )
    .option(
      '--node-env <file>',
      'host facts of the node to render for (JSON: nodeName, nodeIPs, interfaces as `ip -j addr show`, nodeLabels, iptables)',
    )
    .addOption(new Option('--ip-family <family>', 'render only this family').choices(['IPv4', 'IPv6']))
    .addOption(
      new Option(
        '--output <format>',
        "decisions as JSON, or text (the mode's kernel input with --proxy-mode)",
      )
        .choices(['text', 'json'])
        .default('text'),
    )
    .option('--strict', 'exit with status 1 when any object was skipped', false);
  registerConfigFlags(command);
  command.action(async (opts: RenderOptions) => {
    const outcome = await renderCommand(opts, command);
    for (const problem of outcome.problems) process.stderr.write(`skipped: ${formatProblem(problem)}\n`);
    process.stdout.write(outcome.stdout);
    process.exitCode = outcome.exitCode;
  });
}
