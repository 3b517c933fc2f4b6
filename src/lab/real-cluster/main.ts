// scripts/conformance.sh's work: the real cluster up, the proxy of --mode installed, CoreDNS, the
// upstream e2e specs, the results, and the cluster down again, also on a failure or a signal.
//
//   node dist/src/lab/real-cluster/main.js --mode MODE --agent-image ARCHIVE --report-dir DIR
//                                          [--focus REGEX] [--ip-family ipv4|dual]
//
// --ip-family dual brings up a dual-stack cluster and runs the dual-stack specs instead of the
// Services set (e2e.ts's specSelection).
//
// Writes e2e.test's junit_01.xml, a summary.json (every spec that ran, with its result) and, when
// something failed, the components' logs into the report directory; ends with "N passed,
// N failed, N skipped" and exits 1 when a spec failed or none ran.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { IP_FAMILY_MODES, type IpFamilyMode } from './addresses.js';
import { RealCluster } from './cluster.js';
import { installCoreDns } from './coredns.js';
import { countResults, narrowFocus, runE2e, type SpecResult, specSelection } from './e2e.js';
import { locateAllParts } from './parts.js';
import { installProxy, PROXY_MODES, type ProxyMode } from './proxy.js';
import { removeStaleRuns } from './stale.js';

interface Options {
  mode: ProxyMode;
  ipFamily: IpFamilyMode;
  focus: string | undefined;
  reportDir: string;
  agentImage: string | undefined;
}

function options(): Options {
  const { values } = parseArgs({
    options: {
      mode: { type: 'string', default: 'bpf' },
      'ip-family': { type: 'string', default: 'ipv4' },
      focus: { type: 'string' },
      'report-dir': { type: 'string', default: 'conformance-report' },
      'agent-image': { type: 'string' },
    },
  });
  const mode = values.mode as ProxyMode;
  if (!PROXY_MODES.includes(mode)) throw new Error(`--mode ${mode}: one of ${PROXY_MODES.join(', ')}`);
  const ipFamily = values['ip-family'] as IpFamilyMode;
  if (!IP_FAMILY_MODES.includes(ipFamily))
    throw new Error(`--ip-family ${ipFamily}: one of ${IP_FAMILY_MODES.join(', ')}`);
  if (!mode.startsWith('kube-proxy-') && !values['agent-image'])
    throw new Error(`--mode ${mode} needs --agent-image (the archive scripts/build-image.sh writes)`);
  return {
    mode,
    ipFamily,
    focus: values.focus,
    reportDir: resolve(values['report-dir'] ?? ''),
    agentImage: values['agent-image'],
  };
}

function report(o: Options, results: SpecResult[], seconds: Record<string, number>): boolean {
  const counts = countResults(results);
  writeFileSync(
    join(o.reportDir, 'summary.json'),
    `${JSON.stringify({ mode: o.mode, ipFamily: o.ipFamily, focus: o.focus ?? null, ...counts, seconds, specs: results }, null, 2)}\n`,
  );
  for (const r of results.filter((r) => r.status !== 'passed'))
    console.log(`${r.status.toUpperCase()}: ${r.name}\n  ${r.message.split('\n')[0]}`);
  console.log(
    `bring-up ${seconds.bringUp} s, proxy ${seconds.proxy} s, CoreDNS ${seconds.coreDns} s, specs ${seconds.specs} s`,
  );
  console.log(`${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped`);
  return counts.failed === 0 && counts.passed > 0;
}

async function main(): Promise<boolean> {
  const o = options();
  mkdirSync(o.reportDir, { recursive: true });
  const parts = locateAllParts();
  await removeStaleRuns();
  const cluster = new RealCluster(parts, o.ipFamily);
  let stopping: Promise<void> | null = null;
  const down = () => {
    stopping ??= cluster.down();
    return stopping;
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const)
    process.once(signal, () => void down().finally(() => process.exit(130)));
  const seconds: Record<string, number> = {};
  const timed = async (what: string, step: () => Promise<unknown>) => {
    const started = Date.now();
    await step();
    seconds[what] = Math.round((Date.now() - started) / 100) / 10;
  };
  try {
    const images = ['pause.tar', 'agnhost.tar', 'coredns.tar'].map((f) => join(parts.dirs.images, f));
    await timed('bringUp', () => cluster.up(o.agentImage ? [...images, o.agentImage] : images));
    await timed('proxy', () => installProxy(cluster, o.mode, o.agentImage));
    await timed('coreDns', () => installCoreDns(cluster));
    let results: SpecResult[] = [];
    const specs = specSelection(o.ipFamily);
    await timed('specs', async () => {
      results = await runE2e({
        e2eBin: parts.dirs.e2e,
        kubectl: join(parts.dirs.node, 'kubectl'),
        kubeconfig: cluster.adminKubeconfig('wire'),
        netns: cluster.lab.ns(cluster.controlPlane.ns),
        focus: narrowFocus(specs.focus, o.focus),
        skip: specs.skip,
        reportDir: o.reportDir,
      });
    });
    const ok = report(o, results, seconds);
    if (!ok) cluster.saveLogs(join(o.reportDir, 'logs'));
    return ok;
  } catch (error) {
    cluster.saveLogs(join(o.reportDir, 'logs'));
    throw error;
  } finally {
    await down();
  }
}

main().then(
  (ok) => process.exit(ok ? 0 : 1),
  (error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  },
);
