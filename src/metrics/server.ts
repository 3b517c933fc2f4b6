// The metrics server on metricsBindAddress (kube-proxy's 127.0.0.1:10249), with kube-proxy's
// routes: /metrics, /healthz (a plain component ping), /proxyMode and /configz.

import type { RequestListener, ServerResponse } from 'node:http';
import { configzView } from '../config/configz.js';
import type { ProxyConfig } from '../config/types.js';
import { type BoundServer, serveHttp } from '../health/http.js';
import type { Logger } from '../logger.js';
import type { ProxyMetrics } from './registry.js';

const TEXT = 'text/plain; charset=utf-8';

function send(response: ServerResponse, code: number, contentType: string, body: string): void {
  response.writeHead(code, { 'Content-Type': contentType, 'X-Content-Type-Options': 'nosniff' });
  response.end(body);
}

export function metricsHandler(metrics: ProxyMetrics, config: ProxyConfig, log: Logger): RequestListener {
  return (request, response) => {
    const path = new URL(request.url ?? '/', 'http://localhost').pathname;
    switch (path) {
      case '/metrics':
        metrics.render().then(
          (text) => send(response, 200, metrics.contentType, text),
          (err) => {
            log.error({ err }, 'rendering /metrics failed');
            send(response, 500, TEXT, 'rendering the metrics failed\n');
          },
        );
        return;
      case '/healthz':
        send(response, 200, TEXT, 'ok');
        return;
      case '/proxyMode':
        send(response, 200, TEXT, config.mode);
        return;
      case '/configz':
        send(response, 200, 'application/json', JSON.stringify(configzView(config)));
        return;
      default:
        send(response, 404, TEXT, '404 page not found\n');
    }
  };
}

export function startMetricsServer(
  metrics: ProxyMetrics,
  config: ProxyConfig,
  log: Logger,
): Promise<BoundServer> {
  return serveHttp(config.metricsBindAddress, metricsHandler(metrics, config, log));
}
