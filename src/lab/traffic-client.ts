// The lab's traffic client: sends --count requests to --target one after another, each a new
// TCP connection carrying one HTTP request, or one UDP datagram, and prints one JSON line per
// request: {"backend", "seenClient", "error", "ms"}. Bounded by count and per-request timeout.
// With --download BYTES each request fetches that many bytes (GET /bytes/BYTES) and its line also
// has "bytes", the count received; the timeout then bounds the whole transfer.
// With --interval MS (UDP), one connected socket sends a datagram every MS, --count times, as a
// DNS client or a statsd sender does, and prints {"backend", "error", "at"} (Date.now()) for each
// answer or socket error as it comes: one conntrack flow whose fate a test can follow
// (--source-port fixes its tuple).
// With --datagram BYTES (UDP) each datagram is that long and asks the backend to echo it
// (backend-server.ts); its line has "bytes", the count echoed back unchanged, or the error
// "echo differs", or "answer from <ip:port>" when the echo did not come from the target (an
// untranslated reply, which a connected socket would drop).
// Usage: node traffic-client.js --proto tcp|udp --target HOST:PORT --count N [--timeout MS] [--source-port P] [--source-address IP] [--download BYTES] [--interval MS] [--datagram BYTES]

import { createSocket } from 'node:dgram';
import { request } from 'node:http';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    proto: { type: 'string', default: 'tcp' },
    target: { type: 'string' },
    count: { type: 'string', default: '1' },
    timeout: { type: 'string', default: '2000' },
    'source-port': { type: 'string' },
    'source-address': { type: 'string' },
    download: { type: 'string' },
    interval: { type: 'string' },
    datagram: { type: 'string' },
  },
});
const target = values.target ?? '';
const split = target.lastIndexOf(':');
const host = target.slice(0, split).replace(/^\[|\]$/g, '');
const port = Number(target.slice(split + 1));
const timeoutMs = Number(values.timeout);
const sourcePort = values['source-port'] ? Number(values['source-port']) : undefined;
const sourceAddress = values['source-address'];

interface Answer {
  backend: string;
  client: string;
  bytes?: number;
}

/**
 * GET /bytes/N, counting what arrives without keeping it; the timer covers the whole transfer, and
 * a timeout says how far it got (a stall after the first segments points at offloads or MTUs).
 */
function download(total: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let bytes = 0;
    const req = request(
      { host, port, path: `/bytes/${total}`, agent: false, localPort: sourcePort },
      (res) => {
        res.on('data', (d: Buffer) => {
          bytes += d.length;
        });
        res.on('end', () => {
          clearTimeout(timer);
          resolve({
            backend: String(res.headers['x-backend']),
            client: String(res.headers['x-client']),
            bytes,
          });
        });
        res.on('error', (err) => {
          clearTimeout(timer);
          reject(err);
        });
      },
    );
    const timer = setTimeout(
      () => req.destroy(new Error(`timeout after ${bytes} of ${total} bytes`)),
      timeoutMs,
    );
    req.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.end();
  });
}

function tcpRequest(): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host, port, path: '/', agent: false, timeout: timeoutMs, localPort: sourcePort },
      (res) => {
        let body = '';
        res.on('data', (d) => {
          body += d;
        });
        res.on('end', () => {
          try {
            resolve(JSON.parse(body) as Answer);
          } catch {
            reject(new Error(`bad answer: ${body}`));
          }
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** The datagram --datagram sends: ECHO, then a pattern no two nearby offsets share. */
function echoDatagram(size: number): Buffer {
  const d = Buffer.alloc(Math.max(size, 4));
  for (let i = 4; i < d.length; i++) d[i] = (i * 31 + 7) & 0xff;
  d.write('ECHO', 0);
  return d;
}

function udpRequest(datagramBytes?: number): Promise<Answer> {
  const sent = datagramBytes !== undefined ? echoDatagram(datagramBytes) : Buffer.from('ping');
  return new Promise((resolve, reject) => {
    const socket = createSocket(host.includes(':') ? 'udp6' : 'udp4');
    const timer = setTimeout(() => {
      socket.close();
      reject(new Error('timeout'));
    }, timeoutMs);
    socket.on('message', (msg, rinfo) => {
      clearTimeout(timer);
      socket.close();
      if (datagramBytes !== undefined && (rinfo.address !== host || rinfo.port !== port)) {
        reject(new Error(`answer from ${rinfo.address}:${rinfo.port}`));
        return;
      }
      const line = datagramBytes !== undefined ? msg.indexOf(10) : msg.length;
      let answer: Answer;
      try {
        answer = JSON.parse(msg.subarray(0, line < 0 ? msg.length : line).toString()) as Answer;
      } catch {
        reject(new Error(`bad answer: ${msg.subarray(0, 200)}`));
        return;
      }
      if (datagramBytes === undefined) resolve(answer);
      else if (line >= 0 && msg.subarray(line + 1).equals(sent)) resolve({ ...answer, bytes: sent.length });
      else reject(new Error('echo differs'));
    });
    socket.on('error', (err) => {
      clearTimeout(timer);
      socket.close();
      reject(err);
    });
    const send = () => socket.send(sent, port, host);
    if (sourcePort || sourceAddress) socket.bind({ port: sourcePort ?? 0, address: sourceAddress }, send);
    else send();
  });
}

/** --interval: answers and errors (an ICMP error turns into ECONNREFUSED) as they come. */
function udpStream(count: number, intervalMs: number): Promise<void> {
  const socket = createSocket(host.includes(':') ? 'udp6' : 'udp4');
  const print = (backend: string | null, error: string | null) =>
    console.log(JSON.stringify({ backend, error, at: Date.now() }));
  socket.on('message', (msg) => {
    try {
      print((JSON.parse(msg.toString()) as Answer).backend, null);
    } catch {
      print(null, `bad answer: ${msg}`);
    }
  });
  socket.on('error', (err: NodeJS.ErrnoException) => print(null, err.code ?? err.message));
  return new Promise((resolve) => {
    const connect = () =>
      socket.connect(port, host, () => {
        let sent = 0;
        const timer = setInterval(() => {
          if (sent++ === count) {
            clearInterval(timer);
            setTimeout(() => socket.close(resolve), timeoutMs);
            return;
          }
          socket.send('ping', (err) => {
            if (err) print(null, (err as NodeJS.ErrnoException).code ?? err.message);
          });
        }, intervalMs);
      });
    if (sourcePort) socket.bind({ port: sourcePort }, connect);
    else connect();
  });
}

const count = Number(values.count);
if (values.interval) {
  await udpStream(count, Number(values.interval));
  process.exit(0);
}
const downloadBytes = values.download ? Number(values.download) : undefined;
for (let i = 0; i < count; i++) {
  const started = performance.now();
  try {
    const answer = await (downloadBytes !== undefined
      ? download(downloadBytes)
      : values.proto === 'udp'
        ? udpRequest(values.datagram ? Number(values.datagram) : undefined)
        : tcpRequest());
    const ms = performance.now() - started;
    console.log(
      JSON.stringify({
        backend: answer.backend,
        seenClient: answer.client,
        error: null,
        ms,
        bytes: answer.bytes,
      }),
    );
  } catch (err) {
    const ms = performance.now() - started;
    const e = err as NodeJS.ErrnoException;
    console.log(JSON.stringify({ backend: null, seenClient: null, error: e.code ?? e.message, ms }));
  }
}
