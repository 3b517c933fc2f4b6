// The soak's traffic client: one process per network namespace, running several streams at once
// until a deadline. Each stream sends one request at a time, paced by its interval, and prints a
// JSON line per request as it ends: {"s": stream index, "t": Date.now(), "b": backend or null,
// "e": error or null, "r": true when the request went over a reused connection or socket}.
// A stream's kind says how it opens connections:
//   - "new": a new TCP connection per HTTP request (as most clients of a Service do);
//   - "keepalive": HTTP over one kept-alive connection, opened again when the server closes it;
//   - "udp": a new UDP socket per datagram (a resolver's query);
//   - "udp-stream": one connected UDP socket for the whole run (one conntrack flow, as a statsd
//     sender or a QUIC client keeps);
//   - "datagram": a new UDP socket per datagram of `bytes` bytes, echoed back whole (fragments).
// Bounded: each stream stops at the deadline and after at most `count` requests.
// Usage: node client.js SPEC_JSON, SPEC = {"deadline": ms since epoch, "streams": [{"target":
// "host:port", "kind", "intervalMs", "timeoutMs", "count", "bytes"?}]}

import { createSocket, type Socket } from 'node:dgram';
import { Agent, request } from 'node:http';

export type StreamKind = 'new' | 'keepalive' | 'udp' | 'udp-stream' | 'datagram';

export interface StreamSpec {
  target: string;
  kind: StreamKind;
  intervalMs: number;
  timeoutMs: number;
  count: number;
  /** "datagram": the datagram's size. */
  bytes?: number;
}

export interface ClientSpec {
  deadline: number;
  streams: StreamSpec[];
}

/** One request's outcome, as the client prints it. */
export interface ClientLine {
  s: number;
  t: number;
  b: string | null;
  e: string | null;
  r?: boolean;
}

interface Outcome {
  backend: string;
  reused?: boolean;
}

function hostPort(target: string): { host: string; port: number } {
  const split = target.lastIndexOf(':');
  return { host: target.slice(0, split).replace(/^\[|\]$/g, ''), port: Number(target.slice(split + 1)) };
}

/** The backend named in an answer's first line (backend-server.ts answers JSON, then any echo). */
function backendOf(answer: Buffer): string {
  const end = answer.indexOf(10);
  return String(
    (JSON.parse(answer.subarray(0, end < 0 ? answer.length : end).toString()) as { backend: unknown })
      .backend,
  );
}

function httpGet(spec: StreamSpec, agent: Agent | false): Promise<Outcome> {
  const { host, port } = hostPort(spec.target);
  return new Promise((resolve, reject) => {
    const req = request({ host, port, path: '/', agent, timeout: spec.timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => {
        try {
          resolve({ backend: backendOf(Buffer.concat(chunks)), reused: req.reusedSocket });
        } catch {
          reject(new Error('bad answer'));
        }
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** Sends one datagram on `socket` and waits for the first answer (or an ICMP error, or the timeout). */
function exchange(socket: Socket, payload: Buffer, spec: StreamSpec, connected: boolean): Promise<Outcome> {
  const { host, port } = hostPort(spec.target);
  return new Promise((resolve, reject) => {
    const done = (error: Error | null, outcome?: Outcome) => {
      clearTimeout(timer);
      socket.off('message', onMessage);
      socket.off('error', onError);
      if (error) reject(error);
      else if (outcome) resolve(outcome);
    };
    const onMessage = (msg: Buffer) => {
      try {
        const echoed = spec.kind !== 'datagram' || msg.subarray(msg.indexOf(10) + 1).equals(payload);
        done(echoed ? null : new Error('echo differs'), { backend: backendOf(msg), reused: connected });
      } catch {
        done(new Error('bad answer'));
      }
    };
    const onError = (err: NodeJS.ErrnoException) => done(new Error(err.code ?? err.message));
    const timer = setTimeout(() => done(new Error('timeout')), spec.timeoutMs);
    socket.on('message', onMessage);
    socket.on('error', onError);
    // With a callback, a send the kernel refuses (a socket hook's reject: ECONNREFUSED) fails the
    // request with its error; without one, node:dgram drops the error and the request times out.
    const sent = (err: Error | null) => {
      if (err) onError(err as NodeJS.ErrnoException);
    };
    if (connected) socket.send(payload, sent);
    else socket.send(payload, port, host, sent);
  });
}

/** A datagram the backend echoes: ECHO, then a pattern no two nearby offsets share. */
function echoPayload(bytes: number): Buffer {
  const payload = Buffer.alloc(Math.max(bytes, 4));
  for (let i = 4; i < payload.length; i++) payload[i] = (i * 31 + 7) & 0xff;
  payload.write('ECHO', 0);
  return payload;
}

/** The request function of a stream, with whatever it keeps between requests. */
async function requester(spec: StreamSpec): Promise<() => Promise<Outcome>> {
  const { host, port } = hostPort(spec.target);
  const family = host.includes(':') ? 'udp6' : 'udp4';
  switch (spec.kind) {
    case 'new':
      return () => httpGet(spec, false);
    case 'keepalive': {
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      return () => httpGet(spec, agent);
    }
    case 'udp-stream': {
      const socket = createSocket(family);
      await new Promise<void>((resolve) => socket.connect(port, host, resolve));
      const ping = Buffer.from('ping');
      return () => exchange(socket, ping, spec, true);
    }
    case 'udp':
    case 'datagram': {
      const payload = spec.kind === 'datagram' ? echoPayload(spec.bytes ?? 3000) : Buffer.from('ping');
      return async () => {
        const socket = createSocket(family);
        try {
          return await exchange(socket, payload, spec, false);
        } finally {
          socket.close();
        }
      };
    }
  }
}

async function runStream(index: number, spec: StreamSpec, deadline: number): Promise<void> {
  const send = await requester(spec);
  for (let i = 0; i < spec.count && Date.now() < deadline; i++) {
    const line: ClientLine = { s: index, t: 0, b: null, e: null };
    try {
      const outcome = await send();
      line.b = outcome.backend;
      if (outcome.reused) line.r = true;
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      line.e = e.code ?? e.message;
    }
    line.t = Date.now();
    process.stdout.write(`${JSON.stringify(line)}\n`);
    await new Promise((resolve) => setTimeout(resolve, spec.intervalMs));
  }
}

const spec = JSON.parse(process.argv[2] ?? '{}') as ClientSpec;
await Promise.all(spec.streams.map((s, i) => runStream(i, s, spec.deadline)));
process.exit(0);
