// The health server on healthzBindAddress (kube-proxy's 10256): /healthz and /livez with
// kube-proxy v1.37.2's status codes, headers and JSON (pkg/proxy/healthcheck/proxy_health.go).

import type { RequestListener } from 'node:http';
import { type BoundServer, serveHttp } from './http.js';
import { healthBody, type ProxyHealth } from './proxy-health.js';

/** Counts each answer (kubeproxy_proxy_{healthz,livez}_total{code}); ProxyMetrics implements it. */
export interface HealthAnswerCounter {
  served(endpoint: 'healthz' | 'livez', code: number): void;
}

export interface HealthServerOptions {
  health: ProxyHealth;
  /** KEP-3836 node eligibility (brain/node.ts nodeEligible of the current Node). */
  nodeEligible: () => boolean;
  counter?: HealthAnswerCounter;
  now?: () => number;
}

export function healthHandler(opts: HealthServerOptions): RequestListener {
  const now = opts.now ?? Date.now;
  return (request, response) => {
    const path = new URL(request.url ?? '/', 'http://localhost').pathname;
    if (path !== '/healthz' && path !== '/livez') {
      response.writeHead(404, {
        'Content-Type': 'text/plain; charset=utf-8',
        'X-Content-Type-Options': 'nosniff',
      });
      response.end('404 page not found\n');
      return;
    }
    const report = opts.health.health();
    const nodeEligible = path === '/healthz' ? opts.nodeEligible() : undefined;
    const ok = report.healthy && nodeEligible !== false;
    const code = ok ? 200 : 503;
    opts.counter?.served(path === '/healthz' ? 'healthz' : 'livez', code);
    response.writeHead(code, { 'Content-Type': 'application/json', 'X-Content-Type-Options': 'nosniff' });
    response.end(healthBody(report, now(), { ok, nodeEligible }));
  };
}

export function startHealthServer(bindAddress: string, opts: HealthServerOptions): Promise<BoundServer> {
  return serveHttp(bindAddress, healthHandler(opts));
}
