// What `run` serves besides the data plane: the metrics server (metricsBindAddress), the health
// server (healthzBindAddress) and the healthCheckNodePort servers, all fed by the sync loop.
// A bind failure stops the agent with bindAddressHardFail; otherwise it is logged and retried
// every 5 s, as kube-proxy does.

import { nodeEligible } from '../brain/node.js';
import type { SyncObserver } from '../brain/sync-loop.js';
import type { ProxyConfig } from '../config/types.js';
import type { BpfStatsProvider, RuleModeStatsProvider } from '../dataplanes/stats.js';
import type { BoundServer } from '../health/http.js';
import { ProxyHealth } from '../health/proxy-health.js';
import { startHealthServer } from '../health/server.js';
import { ServiceHealthServers } from '../health/service-health.js';
import type { Logger } from '../logger.js';
import type { Node } from '../model/types.js';
import type { ChangeCounts } from './kube-proxy.js';
import { ProxyMetrics } from './registry.js';
import { startMetricsServer } from './server.js';

const BIND_RETRY_MS = 5000;

export interface StatusServersOptions {
  config: ProxyConfig;
  changes: ChangeCounts;
  /** The current Node object (null when unknown): /healthz node eligibility. */
  node: () => Node | null;
  ruleStats?: RuleModeStatsProvider;
  bpfStats?: BpfStatsProvider;
  log: Logger;
}

export interface StatusServers {
  metrics: ProxyMetrics;
  health: ProxyHealth;
  serviceHealth: ServiceHealthServers;
  /** Add these to the sync loop's observers. */
  observers: SyncObserver[];
  close(): Promise<void>;
}

export async function startStatusServers(opts: StatusServersOptions): Promise<StatusServers> {
  const { config, log } = opts;
  const metrics = new ProxyMetrics({
    mode: config.mode,
    changes: opts.changes,
    ruleStats: opts.ruleStats,
    bpfStats: opts.bpfStats,
    maxBackends: config.bpf.metricsMaxBackends,
    log,
  });
  const health = new ProxyHealth({ healthTimeoutMs: 2 * config.syncPeriodSeconds * 1000 });
  const serviceHealth = new ServiceHealthServers({ proxyHealthy: () => health.isHealthy(), log });

  const servers: BoundServer[] = [];
  const retries = new Set<NodeJS.Timeout>();
  let closed = false;
  const keepServing = async (what: string, address: string, start: () => Promise<BoundServer>) => {
    if (address === '') return;
    try {
      const server = await start();
      if (closed) await server.close();
      else servers.push(server);
      log.info({ address }, `${what} server listening`);
    } catch (err) {
      if (config.bindAddressHardFail) throw new Error(`${what} server cannot listen on ${address}: ${err}`);
      log.error({ err, address }, `${what} server cannot listen; retrying in ${BIND_RETRY_MS / 1000}s`);
      const timer = setTimeout(() => {
        retries.delete(timer);
        if (!closed) void keepServing(what, address, start);
      }, BIND_RETRY_MS);
      retries.add(timer);
    }
  };
  const close = async () => {
    closed = true;
    for (const timer of retries) clearTimeout(timer);
    await Promise.all([...servers.map((server) => server.close()), serviceHealth.close()]);
  };
  try {
    await keepServing('metrics', config.metricsBindAddress, () => startMetricsServer(metrics, config, log));
    await keepServing('healthz', config.healthzBindAddress, () =>
      startHealthServer(config.healthzBindAddress, {
        health,
        nodeEligible: () => nodeEligible(opts.node()),
        counter: metrics,
      }),
    );
  } catch (err) {
    await close();
    throw err;
  }

  return {
    metrics,
    health,
    serviceHealth,
    observers: [metrics.syncObserver(), health.syncObserver(), serviceHealth.syncObserver()],
    close,
  };
}
