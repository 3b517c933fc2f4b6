// HTTP GETs to the API server with the source's credentials (credentials.ts: client certificates,
// bearer and rotated token files; exec plugins and proxies through client-node's KubeConfig), rate
// limited. Plain
// node:http(s) rather than client-node's fetch so that a watch response is a stream we can close
// ourselves and whose every chunk we see as it arrives.

import http from 'node:http';
import https from 'node:https';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ApiCredentials } from './credentials.js';
import type { RequestRateLimiter } from './flow-control.js';
import { PROTOBUF_CONTENT_TYPE } from './protobuf.js';

const USER_AGENT = 'kube-bpf-proxy';
/** Same probe interval client-node uses for its watch sockets: a dead peer is noticed without traffic. */
const TCP_KEEPALIVE_MS = 30_000;

/** The fields of a metav1.Status the source acts on. */
export interface ApiStatus {
  code?: number;
  reason?: string;
  message?: string;
}

export class ApiError extends Error {
  constructor(
    readonly statusCode: number,
    readonly status: ApiStatus | null,
  ) {
    super(`API server answered ${statusCode}${status?.message ? `: ${status.message}` : ''}`);
    this.name = 'ApiError';
  }
}

/** What a GET asks for: protobuf with JSON as the fallback (a server may not offer protobuf), or JSON. */
export function acceptHeader(contentType: string): string {
  return contentType === PROTOBUF_CONTENT_TYPE
    ? `${PROTOBUF_CONTENT_TYPE}, application/json`
    : 'application/json';
}

export class ApiTransport {
  private readonly accept: string;

  constructor(
    private readonly credentials: ApiCredentials,
    private readonly limiter: RequestRateLimiter,
    /** clientConnection.contentType: application/vnd.kubernetes.protobuf (kube-proxy's default) or application/json. */
    contentType: string,
  ) {
    this.accept = acceptHeader(contentType);
  }

  get server(): string {
    return this.credentials.server;
  }

  /** Starts a GET and resolves with the response once it is a 200; any other status throws ApiError. */
  async open(
    path: string,
    query: Record<string, string>,
    signal: AbortSignal,
  ): Promise<http.IncomingMessage> {
    const wait = this.limiter.reserve();
    if (wait > 0) await sleep(wait, undefined, { signal });
    const url = new URL(this.credentials.server.replace(/\/+$/, '') + path);
    for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);

    // Asked per request: token files and exec credentials rotate.
    const auth: https.RequestOptions = {};
    await this.credentials.applyToHTTPSOptions(auth);
    const agent = auth.agent;
    const releaseAgent = () => {
      if (agent instanceof http.Agent) agent.destroy();
    };
    const request = (url.protocol === 'https:' ? https : http).request(url, {
      method: 'GET',
      agent,
      auth: auth.auth,
      headers: { ...auth.headers, Accept: this.accept, 'User-Agent': USER_AGENT },
      signal,
    });
    return new Promise((resolve, reject) => {
      let answered = false;
      request.on('error', (error) => {
        if (answered) return; // the response stream reports it
        releaseAgent();
        reject(error);
      });
      request.once('response', (response) => {
        answered = true;
        response.once('close', releaseAgent);
        response.socket?.setKeepAlive(true, TCP_KEEPALIVE_MS);
        if (response.statusCode === 200) {
          resolve(response);
          return;
        }
        const statusCode = response.statusCode ?? 0;
        readBody(response).then(
          (body) => reject(new ApiError(statusCode, parseStatus(body.toString('utf8')))),
          reject,
        );
      });
      request.end();
    });
  }

  /** A whole response body with the content type the server chose. */
  async get(
    path: string,
    query: Record<string, string>,
    signal: AbortSignal,
  ): Promise<{ contentType: string; body: Buffer }> {
    const response = await this.open(path, query, signal);
    return { contentType: response.headers['content-type'] ?? '', body: await readBody(response) };
  }
}

function readBody(response: http.IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    response.on('data', (chunk: Buffer) => chunks.push(chunk));
    response.on('end', () => resolve(Buffer.concat(chunks)));
    response.on('error', reject);
  });
}

/** A metav1.Status from an error body, or null when the body is not one. */
export function parseStatus(body: string): ApiStatus | null {
  try {
    const value: unknown = JSON.parse(body);
    if (typeof value !== 'object' || value === null) return null;
    const { code, reason, message } = value as Record<string, unknown>;
    return {
      ...(typeof code === 'number' ? { code } : {}),
      ...(typeof reason === 'string' ? { reason } : {}),
      ...(typeof message === 'string' ? { message } : {}),
    };
  } catch {
    return null;
  }
}
