// healthCheckNodePort servers (kube-proxy's pkg/proxy/healthcheck/service_health.go, reference
// §1.9): one HTTP listener per LoadBalancer Service with externalTrafficPolicy=Local, on its
// healthCheckNodePort, bound to each nodePortAddresses IP (every address when that matches all).
// Cloud load balancers probe it to send traffic only to nodes with local, ready endpoints. Any
// path answers. Servers follow the decisions: opened, moved and closed on every sync.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { SyncObserver } from '../brain/sync-loop.js';
import type { ProxyDecisions } from '../brain/types.js';
import type { Logger } from '../logger.js';
import { type BoundServer, listenHttp } from './http.js';

export interface HealthCheckService {
  namespace: string;
  name: string;
  port: number;
  /** Unique local, ready endpoints ("ip:port") over the Service's ports and families. */
  localEndpoints: number;
}

/** The Services that need a healthCheckNodePort server, sorted by namespace/name. */
export function healthCheckServices(decisions: ProxyDecisions): HealthCheckService[] {
  const byService = new Map<
    string,
    { namespace: string; name: string; port: number; endpoints: Set<string> }
  >();
  for (const family of decisions.families) {
    for (const sp of family.servicePorts) {
      if (sp.healthCheckNodePort === 0) continue;
      const key = `${sp.namespace}/${sp.name}`;
      let entry = byService.get(key);
      if (!entry) {
        entry = {
          namespace: sp.namespace,
          name: sp.name,
          port: sp.healthCheckNodePort,
          endpoints: new Set(),
        };
        byService.set(key, entry);
      }
      // Terminating endpoints are not ready: load balancers drain the node.
      for (const ep of sp.endpoints) if (ep.isLocal && ep.ready) entry.endpoints.add(ep.endpoint);
    }
  }
  return [...byService.entries()]
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([, { namespace, name, port, endpoints }]) => ({
      namespace,
      name,
      port,
      localEndpoints: endpoints.size,
    }));
}

/** The addresses to listen on: null for every address (nodePortAddresses matches all in a family). */
export function healthCheckAddresses(decisions: ProxyDecisions): string[] | null {
  if (decisions.families.some((f) => f.nodePortAddresses.matchAll)) return null;
  return [...new Set(decisions.families.flatMap((f) => f.nodePortAddresses.ips))];
}

/** kube-proxy's body: tab-indented, no trailing newline. */
export function serviceHealthBody(
  namespace: string,
  name: string,
  localEndpoints: number,
  healthy: boolean,
): string {
  return [
    '{',
    '\t"service": {',
    `\t\t"namespace": ${JSON.stringify(namespace)},`,
    `\t\t"name": ${JSON.stringify(name)}`,
    '\t},',
    `\t"localEndpoints": ${localEndpoints},`,
    `\t"serviceProxyHealthy": ${healthy}`,
    '}',
  ].join('\n');
}

interface RunningServer {
  namespace: string;
  name: string;
  port: number;
  /** Sorted addresses joined, or "*" for every address: a change reopens the listeners. */
  where: string;
  localEndpoints: number;
  listeners: BoundServer[];
}

export interface ServiceHealthServersOptions {
  /** The proxy's health without node eligibility (ProxyHealth.isHealthy). */
  proxyHealthy: () => boolean;
  log: Logger;
}

export class ServiceHealthServers {
  private readonly running = new Map<string, RunningServer>();
  /** Updates run one after the other, in sync order. */
  private work: Promise<void> = Promise.resolve();

  constructor(private readonly options: ServiceHealthServersOptions) {}

  /** Brings the servers to these Services; resolves once listeners are opened and closed. */
  update(services: readonly HealthCheckService[], addresses: string[] | null): Promise<void> {
    this.work = this.work
      .then(() => this.reconcile(services, addresses))
      .catch((err) => this.options.log.error({ err }, 'updating the healthCheckNodePort servers failed'));
    return this.work;
  }

  /** Resolves when every update asked for so far is done. */
  settled(): Promise<void> {
    return this.work;
  }

  /** The Services with a listening server, sorted by namespace/name. */
  listening(): { namespace: string; name: string; port: number; localEndpoints: number }[] {
    return [...this.running.entries()]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([, { namespace, name, port, localEndpoints }]) => ({ namespace, name, port, localEndpoints }));
  }

  syncObserver(): SyncObserver {
    return {
      synced: (report) => {
        void this.update(healthCheckServices(report.decisions), healthCheckAddresses(report.decisions));
      },
    };
  }

  close(): Promise<void> {
    return this.update([], []);
  }

  private async reconcile(
    services: readonly HealthCheckService[],
    addresses: string[] | null,
  ): Promise<void> {
    const where = addresses === null ? '*' : [...addresses].sort().join(',');
    const wanted = new Map(services.map((s) => [`${s.namespace}/${s.name}`, s]));
    for (const [key, server] of this.running) {
      const next = wanted.get(key);
      if (next && next.port === server.port && server.where === where) continue;
      this.running.delete(key);
      await Promise.all(server.listeners.map((listener) => listener.close()));
      this.options.log.info({ service: key, port: server.port }, 'closed healthCheckNodePort server');
    }
    for (const [key, service] of wanted) {
      const current = this.running.get(key);
      if (current) {
        current.localEndpoints = service.localEndpoints;
        continue;
      }
      const server: RunningServer = { ...service, where, listeners: [] };
      try {
        for (const host of addresses ?? [undefined]) {
          server.listeners.push(
            await listenHttp(host, service.port, (req, res) => this.answer(server, req, res)),
          );
        }
      } catch (err) {
        // Left out of `running`, so the next sync tries again.
        await Promise.all(server.listeners.map((listener) => listener.close()));
        this.options.log.warn(
          { err, service: key, port: service.port },
          'cannot open healthCheckNodePort server',
        );
        continue;
      }
      this.running.set(key, server);
      this.options.log.info({ service: key, port: service.port }, 'opened healthCheckNodePort server');
    }
  }

  private answer(server: RunningServer, _request: IncomingMessage, response: ServerResponse): void {
    const count = server.localEndpoints;
    const healthy = this.options.proxyHealthy();
    response.writeHead(count !== 0 && healthy ? 200 : 503, {
      'Content-Type': 'application/json',
      'X-Content-Type-Options': 'nosniff',
      'X-Load-Balancing-Endpoint-Weight': String(count),
    });
    response.end(serviceHealthBody(server.namespace, server.name, count, healthy));
  }
}
