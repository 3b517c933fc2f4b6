// Listening for the agent's small HTTP servers (/healthz and /livez, /metrics, the
// healthCheckNodePort servers), with kube-proxy's "host:port" bind address form.

import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { splitHostPort } from '../net/host-port.js';

export interface BoundServer {
  /** The port actually bound (the one asked for, or the kernel's choice for 0). */
  readonly port: number;
  close(): Promise<void>;
}

/** Listens on host (undefined: every address, IPv6 and IPv4) and port. */
export function listenHttp(
  host: string | undefined,
  port: number,
  handler: RequestListener,
): Promise<BoundServer> {
  const server = createServer(handler);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => {
      server.off('error', reject);
      resolve(bound(server));
    });
  });
}

/** "0.0.0.0:10256", "[::]:10256", "127.0.0.1:0": kube-proxy's bind address form. */
export function serveHttp(bindAddress: string, handler: RequestListener): Promise<BoundServer> {
  const split = splitHostPort(bindAddress);
  const port = split ? Number(split.port) : Number.NaN;
  if (!split || !Number.isInteger(port) || port < 0 || port > 65535) {
    return Promise.reject(new Error(`bind address ${JSON.stringify(bindAddress)} is not host:port`));
  }
  return listenHttp(split.host === '' ? undefined : split.host, port, handler);
}

function bound(server: Server): BoundServer {
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Probes keep connections alive; close must not wait for their idle timeout.
        server.closeAllConnections();
      }),
  };
}
