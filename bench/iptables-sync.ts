// How big and how slow kube-proxy's iptables mode gets: rule counts and sync times for N Services
// with E endpoints each, applied for real with iptables-restore in a fresh network namespace.
// Usage (root, after `npx tsc -p .`):
//   node dist/bench/iptables-sync.js [--services 1000,10000] [--endpoints 10] [--backend nft|legacy]
// Prints one JSON line per size, then a Markdown table (docs/iptables.md records the figures).

import { parseArgs } from 'node:util';
import { type BrainConfig, decide } from '../src/brain/decide.js';
import type { NodeEnv, ProxyDecisions } from '../src/brain/types.js';
import type { IptablesBackend } from '../src/dataplanes/iptables/backend.js';
import { openIptablesDataplane } from '../src/dataplanes/iptables/dataplane.js';
import { assembleRestoreInput, buildIptablesRuleset } from '../src/dataplanes/iptables/plan.js';
import type { CommandRunner } from '../src/host/command.js';
import { deleteStaleNamespaces, Lab } from '../src/lab/netns.js';
import type { ClusterState, EndpointSlice, Service } from '../src/model/types.js';

const { values } = parseArgs({
  options: {
    services: { type: 'string', default: '1000,10000' },
    endpoints: { type: 'string', default: '10' },
    backend: { type: 'string', default: 'nft' },
  },
});
const sizes = (values.services ?? '').split(',').map(Number);
const endpointsPerService = Number(values.endpoints);
const backend = values.backend as IptablesBackend;

const NODE = 'bench-node';
const brainConfig: BrainConfig = {
  nodePortAddresses: [],
  detectLocalMode: 'ClusterCIDR',
  detectLocal: { bridgeInterface: '', interfaceNamePrefix: '' },
  clusterCIDRs: ['10.0.0.0/8'],
  masqueradeBit: 14,
  masqueradeAll: false,
  localhostNodePorts: true,
  featureGates: {},
};
const meta = (namespace: string, name: string) => ({
  namespace,
  name,
  uid: `${namespace}/${name}`,
  resourceVersion: '1',
  labels: {},
  annotations: {},
});

/** Service i: ClusterIP 172.16.x.y:80, every tenth one also a NodePort; endpoints 10.x.y.(1..E). */
function clusterState(services: number, generation: number): ClusterState {
  const serviceMap = new Map<string, Service>();
  const sliceMap = new Map<string, EndpointSlice>();
  for (let i = 0; i < services; i++) {
    const name = `svc${i}`;
    serviceMap.set(`bench/${name}`, {
      meta: meta('bench', name),
      type: i % 10 === 0 ? 'NodePort' : 'ClusterIP',
      clusterIP: `172.16.${i >> 8}.${i & 255}`,
      clusterIPs: [],
      ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: i % 10 === 0 ? 30000 + i / 10 : 0 }],
      externalIPs: [],
      loadBalancerIngress: [],
      loadBalancerSourceRanges: [],
      externalTrafficPolicy: 'Cluster',
      internalTrafficPolicy: 'Cluster',
      sessionAffinity: 'None',
      sessionAffinityTimeoutSeconds: 0,
      healthCheckNodePort: 0,
    });
    // Generation 1 moves service 0's endpoints: the change a partial sync rewrites.
    const base = i === 0 ? generation * 100 : 0;
    sliceMap.set(`bench/${name}-1`, {
      meta: meta('bench', `${name}-1`),
      serviceName: name,
      addressType: 'IPv4',
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
      endpoints: Array.from({ length: endpointsPerService }, (_, e) => ({
        addresses: [`10.${i >> 8}.${i & 255}.${base + e + 1}`],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: `node-${e}`,
        zone: null,
        zoneHints: [],
        nodeHints: [],
      })),
    });
  }
  return { services: serviceMap, endpointSlices: sliceMap, node: null, serviceCIDRs: new Map() };
}

const env: NodeEnv = {
  nodeName: NODE,
  nodeIPs: ['192.168.0.2'],
  interfaces: [{ ifname: 'eth0', addr_info: [{ family: 'inet', local: '192.168.0.2', prefixlen: 24 }] }],
  nodeLabels: {},
  iptables: { randomFully: true, nfacct: false },
};

interface Figures {
  services: number;
  endpoints: number;
  backend: IptablesBackend;
  natRules: number;
  filterRules: number;
  restoreInputMiB: number;
  renderMs: number;
  fullSyncMs: number;
  fullRestoreMs: number;
  partialSyncMs: number;
  partialRestoreMs: number;
  partialNatRulesWritten: number;
}

async function measure(lab: Lab, services: number): Promise<Figures> {
  const ns = `n${services}`;
  await lab.addNamespace(ns);
  const restoreTimes: number[] = [];
  const exec: CommandRunner = async (cmd, args, opts) => {
    const started = performance.now();
    const result = await lab.exec(ns, cmd, args, opts);
    if (cmd.endsWith('-restore')) restoreTimes.push(performance.now() - started);
    return result;
  };
  const dataplane = await openIptablesDataplane({
    config: { syncPeriodSeconds: 30, conntrack: { tcpBeLiberal: false } },
    exec,
    backend,
    capabilities: env.iptables,
  });
  const decisions: ProxyDecisions = decide(clusterState(services, 0), env, brainConfig, {
    families: ['IPv4'],
  });
  const family = decisions.families[0];
  if (!family) throw new Error('no IPv4 decisions');

  let started = performance.now();
  const input = assembleRestoreInput(buildIptablesRuleset(family, { ...env.iptables, tcpBeLiberal: false }), {
    writeBlock: () => true,
    staleChains: [],
  });
  const renderMs = performance.now() - started;

  started = performance.now();
  await dataplane.sync(decisions, { changedServices: new Set(), full: true, reason: 'first sync' });
  const fullSyncMs = performance.now() - started;
  const fullRestoreMs = restoreTimes.at(-1) ?? Number.NaN;
  const fullStats = dataplane.stats('IPv4');

  const changed = decide(clusterState(services, 1), env, brainConfig, { families: ['IPv4'] });
  started = performance.now();
  const partial = await dataplane.sync(changed, {
    changedServices: new Set(['bench/svc0']),
    full: false,
    reason: 'changed Services',
  });
  const partialSyncMs = performance.now() - started;
  if (partial.scope.full) throw new Error('expected a partial sync');
  return {
    services,
    endpoints: endpointsPerService,
    backend,
    natRules: fullStats?.rulesTotal.nat ?? 0,
    filterRules: fullStats?.rulesTotal.filter ?? 0,
    restoreInputMiB: Number((Buffer.byteLength(input.text) / 2 ** 20).toFixed(1)),
    renderMs: Math.round(renderMs),
    fullSyncMs: Math.round(fullSyncMs),
    fullRestoreMs: Math.round(fullRestoreMs),
    partialSyncMs: Math.round(partialSyncMs),
    partialRestoreMs: Math.round(restoreTimes.at(-1) ?? Number.NaN),
    partialNatRulesWritten: dataplane.stats('IPv4')?.rulesLast.nat ?? 0,
  };
}

const prefix = `kbpbench${process.pid}`;
await deleteStaleNamespaces(prefix);
const lab = new Lab(prefix);
// iptables-nft restores can run for a long time at 10k services: an interrupted run still
// deletes its namespace (which also ends the restore).
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void lab.destroy().finally(() => process.exit(130));
  });
}
const rows: Figures[] = [];
try {
  for (const services of sizes) {
    const figures = await measure(lab, services);
    console.log(JSON.stringify(figures));
    rows.push(figures);
  }
} finally {
  await lab.destroy();
}
console.log(
  '\n| services × endpoints | backend | nat rules | filter rules | restore input | render | full sync (restore) | partial sync (restore), nat rules written |',
);
console.log('|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(
    `| ${r.services} × ${r.endpoints} | ${r.backend} | ${r.natRules} | ${r.filterRules} | ${r.restoreInputMiB} MiB | ${r.renderMs} ms | ${r.fullSyncMs} ms (${r.fullRestoreMs} ms) | ${r.partialSyncMs} ms (${r.partialRestoreMs} ms), ${r.partialNatRulesWritten} |`,
  );
}
