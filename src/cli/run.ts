// `kube-bpf-proxy run`: the agent. Source (the API server, or manifest files with --manifests)
// → change tracker → bounded-frequency runner → the brain → the data plane of --proxy-mode.

import type { Command } from 'commander';
import type { BoundedFrequencyRunner } from '../brain/runner.js';
import type { SyncObserver } from '../brain/sync-loop.js';
import { readConfigFlags, registerConfigFlags } from '../config/flags.js';
import { formatProblems, loadConfigFile } from '../config/load.js';
import type { ProxyConfig } from '../config/types.js';
import { openDataplane } from '../dataplanes/open.js';
import { applyConntrackSysctls, netfilterConntrackPresent } from '../host/conntrack-sysctls.js';
import { collectHeapSoon } from '../host/heap.js';
import { LinkWatch } from '../host/link-watch.js';
import { applyOomScoreAdj } from '../host/oom-score.js';
import { createLogger, type Logger } from '../logger.js';
import type { ObjectProblem } from '../model/parse.js';
import type { Source } from '../sources/types.js';

/**
 * The modules of the first sync that the data plane's open does not use: the parser and change
 * tracker (with their zod schemas), the brain and its sync loop, the status servers (prom-client),
 * the node's addresses and environment (zod as well). They are imported once the open has started
 * the BPF load (openDataplane starts it within the call), so that their loading runs beside the
 * kernel's map creation rather than before it; no module of the start-up closure loads zod.
 */
function importSyncModules() {
  return Promise.all([
    import('../model/tracker.js'),
    import('../model/parse.js'),
    import('../brain/sync-loop.js'),
    import('../brain/runner.js'),
    import('../metrics/status-servers.js'),
    import('../sources/host.js'),
    import('../host/interfaces.js'),
  ]);
}

export const SYNC_BURST = 2;
const RETRY_AFTER_FAILURE_MS = 1000;

export interface RunOptions {
  config?: string;
  manifests?: string[];
}

/** One log line per sync at the default level; nothing per packet. */
export function loggingObserver(log: Logger): SyncObserver {
  return {
    synced: (report) =>
      log.info(
        {
          full: report.full,
          // Why it was full (the sync loop's reason, or the layer that widened it), or "changed Services".
          reason: report.reason,
          durationMs: Math.round(report.durationSeconds * 1000),
          families: report.decisions.families.map((f) => ({
            family: f.family,
            servicePorts: f.servicePorts.length,
          })),
          changedServices: report.changes.changedServices.size,
          skipped: report.decisions.skipped.length,
        },
        'synced',
      ),
    failed: ({ full, error, durationSeconds }) =>
      log.error(
        { full, err: error, durationMs: Math.round(durationSeconds * 1000) },
        'sync failed; keeping the last good state, retrying',
      ),
  };
}

/** The source's module is imported for the source used: an agent on the API server loads no YAML
 * parser, one on manifests no protobuf schemas. */
async function openSource(
  opts: RunOptions,
  config: ProxyConfig,
  nodeName: string,
  log: Logger,
  formatProblem: (problem: ObjectProblem) => string,
): Promise<Source> {
  if (opts.manifests && opts.manifests.length > 0) {
    const { ManifestSource } = await import('../sources/manifests.js');
    return new ManifestSource({
      paths: opts.manifests,
      nodeName,
      watch: true,
      onProblems: (problems) => {
        for (const problem of problems)
          log.warn({ origin: problem.origin }, `skipped: ${formatProblem(problem)}`);
      },
    });
  }
  const { KubeSource } = await import('../sources/kube.js');
  return new KubeSource({
    clientConnection: config.clientConnection,
    master: config.master,
    nodeName,
    logger: log,
  });
}

/** A full sync's garbage collected once it is over; incremental syncs are left alone. */
export function heapAfterFullSyncs(log: Logger, quietDelayMs?: number): SyncObserver {
  return {
    synced(report) {
      if (report.full) collectHeapSoon(log, quietDelayMs);
    },
  };
}

/**
 * What kube-proxy sets on the node before it proxies, in every mode, besides its own
 * oom_score_adj (startAgent): the netfilter conntrack sysctls of `conntrack.*` (a failure stops
 * the start). In bpf mode netfilter conntrack still tracks what the stack carries past the
 * programs (the node's own connections, the CNI's masquerade), so the sysctls matter there too,
 * unless the kernel has no netfilter conntrack at all.
 */
export function applyNodeSettings(config: ProxyConfig, log: Logger): void {
  if (config.mode === 'bpf' && !netfilterConntrackPresent()) {
    log.info('netfilter conntrack is not loaded: the conntrack.* sysctls are not applied');
    return;
  }
  applyConntrackSysctls(config.conntrack, log);
}

export interface RunningAgent {
  stop(): Promise<void>;
}

/** The bounded-frequency runner of the sync loop: a failed sync is retried soon, not at the next period. */
function syncRunner(
  Runner: typeof BoundedFrequencyRunner,
  loop: { syncOnce(): Promise<boolean> },
  config: ProxyConfig,
  log: Logger,
) {
  const runner: BoundedFrequencyRunner = new Runner(
    async () => {
      if (!(await loop.syncOnce())) runner.retryAfter(RETRY_AFTER_FAILURE_MS);
    },
    {
      minIntervalMs: config.minSyncPeriodSeconds * 1000,
      maxIntervalMs: config.syncPeriodSeconds * 1000,
      burst: SYNC_BURST,
      onError: (err) => log.error({ err }, 'sync crashed'),
    },
  );
  return runner;
}

export async function startAgent(
  opts: RunOptions,
  config: ProxyConfig,
  log: Logger,
  observers: SyncObserver[] = [],
): Promise<RunningAgent> {
  // Both start at once: the data plane's BPF programs are verified off the event loop while the
  // source lists (or reads) and parses the objects. Events that arrive before the first sync only
  // fill the tracker.
  let onChange = () => {};
  // The process's own score (a refusal is logged, not fatal) touches nothing of the node's, so it
  // is written while the data plane opens: where the kernel refuses the first write, kube-proxy's
  // retry 100 ms later is not on the way to the first sync.
  const oomScore = applyOomScoreAdj(config.oomScoreAdj, log);
  const opening = openDataplane(config, log);
  // Awaited below; a failure meanwhile is not an unhandled rejection.
  opening.catch(() => {});
  const [
    { ChangeTracker },
    { formatProblem },
    { SyncLoop },
    { BoundedFrequencyRunner },
    { startStatusServers },
    { probeNodeEnv, proxyFamiliesFor, resolveNodeName },
    { CachedHostAddresses },
  ] = await importSyncModules();
  const nodeName = resolveNodeName(config.hostnameOverride);
  const tracker = new ChangeTracker(nodeName);
  const source = await openSource(opts, config, nodeName, log, formatProblem);
  // kube-proxy waits for the initial lists before its first sync, so a restart never programs a
  // half-known cluster (which would scale services down to nothing).
  const listed = source.start((events) => {
    // Each problem once, when it appears or its reason changes; the metric counts the current ones.
    for (const problem of tracker.apply(events))
      log.warn({ origin: problem.origin }, `skipped: ${formatProblem(problem)}`);
    onChange();
  });
  // Settled below, after the status servers are up (probes answer while a large list is read).
  listed.catch(() => {});
  let opened: Awaited<typeof opening> | undefined;
  try {
    opened = await opening;
    // Once the bpf data plane holds its pin path: a second agent there stops before it touches the node.
    applyNodeSettings(config, log);
    await oomScore;
  } catch (err) {
    await source.stop().catch(() => {});
    await opened?.dataplane.close().catch(() => {});
    throw err;
  }
  const { dataplane, iptables, ruleStats, bpfStats } = opened;
  // Decided once, as kube-proxy decides them at start.
  const proxyFamilies = await proxyFamiliesFor(config.mode);
  if (proxyFamilies) log.info({ families: proxyFamilies }, 'IP families');
  const status = await startStatusServers({
    config,
    changes: tracker,
    node: () => tracker.currentNode(),
    ruleStats,
    bpfStats,
    log,
  });
  // Probed again only when netlink reports a change: a sync spawns no `ip` for what stayed.
  const hostAddresses = new CachedHostAddresses();
  const addressWatch = new LinkWatch(() => hostAddresses.changed(), log);
  addressWatch.start();
  const loop = new SyncLoop({
    tracker,
    nodeEnv: () =>
      probeNodeEnv({ nodeName, node: tracker.state().node, iptables, proxyFamilies }, hostAddresses),
    config,
    dataplane,
    observers: [loggingObserver(log), ...status.observers, heapAfterFullSyncs(log), ...observers],
  });
  const runner = syncRunner(BoundedFrequencyRunner, loop, config, log);
  await listed;
  onChange = () => {
    loop.noteQueued();
    runner.run();
  };
  log.info({ mode: config.mode, node: nodeName }, 'initial state received; starting the sync loop');
  loop.noteQueued();
  runner.start();
  return {
    async stop() {
      await source.stop();
      await runner.stop();
      await dataplane.close();
      await status.close();
      addressWatch.close();
    },
  };
}

export function registerRunCommand(program: Command): void {
  const command = program
    .command('run')
    .description('run the proxy agent on this node (in place of kube-proxy)')
    .option(
      '--manifests <path...>',
      'standalone mode: read Services, EndpointSlices and Nodes from these files/directories (watched) instead of the API server',
    );
  registerConfigFlags(command);
  command.action(async (opts: RunOptions) => {
    const loaded = await loadConfigFile(opts.config, readConfigFlags(command));
    if (!loaded.ok) throw new Error(`invalid configuration:\n${formatProblems(loaded.problems)}`);
    const log = createLogger(loaded.config.logging.verbosity);
    for (const warning of loaded.warnings) log.warn(warning);
    const agent = await startAgent(opts, loaded.config, log);
    await new Promise<void>((resolve) => {
      const shutdown = (signal: string) => {
        log.info({ signal }, 'stopping; the kernel state stays in place for the next start');
        agent.stop().then(resolve, resolve);
      };
      process.once('SIGINT', () => shutdown('SIGINT'));
      process.once('SIGTERM', () => shutdown('SIGTERM'));
    });
  });
}
