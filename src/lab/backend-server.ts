// A backend for the namespace lab: answers each HTTP request and each UDP datagram with
// {"backend": <name>, "client": "<ip>:<port>"}, so a client learns which backend it reached and
// a test learns which source address the backend saw (masquerade or not). GET /bytes/<N> answers
// with N bytes instead (the same facts in x-backend and x-client headers), for bulk transfers
// that exercise segmentation offloads and MTUs, which one-line answers never do. A UDP datagram
// that starts with ECHO comes back whole after the answer line (the JSON, then "\n"), so a client
// can check that a datagram larger than the MTU (fragments) made it intact both ways.
// A client that asks for keep-alive keeps its connection; after SIGTERM the server drains as a
// well-behaved pod does in its termination grace period: it still answers every request, new
// connections too, but closes each connection after its answer, so keep-alive clients move on.
// A stream port answers each line a connection sends with that JSON and "\n", for as long as the
// connection lasts: one long-lived TCP connection whose backend a client can ask again and again.
// Usage: node backend-server.js --name be1 [--tcp 8080[,9100...]] [--udp 5353[,...]] [--stream 7000[,...]]

import { createSocket } from 'node:dgram';
import { createServer, type ServerResponse } from 'node:http';
import { createServer as createTcpServer } from 'node:net';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    name: { type: 'string' },
    tcp: { type: 'string' },
    udp: { type: 'string' },
    stream: { type: 'string' },
  },
});
const name = values.name ?? 'backend';
const pending: Promise<void>[] = [];
// Dual-stack sockets report IPv4 peers as ::ffff:a.b.c.d; clients compare plain IPv4.
const plain = (address: string | undefined) => (address ?? '').replace(/^::ffff:/, '');

/** SIGTERM seen: answers close their connections (the kubelet's SIGKILL ends the process). */
let draining = false;
process.on('SIGTERM', () => {
  draining = true;
});

const CHUNK = Buffer.alloc(64 * 1024, 0x6b);
const ECHO = Buffer.from('ECHO');

/** Writes `total` bytes, waiting for the socket to drain so memory stays bounded. */
function streamBytes(res: ServerResponse, total: number, client: string): void {
  res.writeHead(200, {
    'content-type': 'application/octet-stream',
    'content-length': String(total),
    'x-backend': name,
    'x-client': client,
    connection: 'close',
  });
  let left = total;
  const write = () => {
    while (left > 0) {
      const chunk = left >= CHUNK.length ? CHUNK : CHUNK.subarray(0, left);
      left -= chunk.length;
      if (!res.write(chunk)) {
        res.once('drain', write);
        return;
      }
    }
    res.end();
  };
  write();
}

const ports = (list: string | undefined) => (list ? list.split(',').map(Number) : []);

for (const port of ports(values.tcp)) {
  const server = createServer((req, res) => {
    const client = `${plain(req.socket.remoteAddress)}:${req.socket.remotePort}`;
    const bulk = /^\/bytes\/(\d+)$/.exec(req.url ?? '');
    if (bulk) {
      streamBytes(res, Number(bulk[1]), client);
      return;
    }
    const body = JSON.stringify({ backend: name, client });
    const keepAlive = !draining && req.headers.connection?.toLowerCase() === 'keep-alive';
    res.writeHead(200, {
      'content-type': 'application/json',
      connection: keepAlive ? 'keep-alive' : 'close',
    });
    res.end(body);
  });
  server.keepAliveTimeout = 5000;
  pending.push(new Promise((resolve) => server.listen(port, '::', resolve)));
}

for (const port of ports(values.udp)) {
  const socket = createSocket({ type: 'udp6', ipv6Only: false });
  socket.on('message', (msg, rinfo) => {
    const answer = JSON.stringify({ backend: name, client: `${plain(rinfo.address)}:${rinfo.port}` });
    const echo = msg.subarray(0, ECHO.length).equals(ECHO);
    socket.send(echo ? Buffer.concat([Buffer.from(`${answer}\n`), msg]) : answer, rinfo.port, rinfo.address);
  });
  pending.push(new Promise((resolve) => socket.bind(port, '::', resolve)));
}

for (const port of ports(values.stream)) {
  const server = createTcpServer((socket) => {
    const client = `${plain(socket.remoteAddress)}:${socket.remotePort}`;
    const answer = `${JSON.stringify({ backend: name, client })}\n`;
    let buffered = '';
    socket.setEncoding('utf8');
    socket.on('data', (text: string) => {
      buffered += text;
      for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
        buffered = buffered.slice(nl + 1);
        socket.write(answer);
      }
    });
    // A reset (the client's side broke) ends this connection only.
    socket.on('error', () => socket.destroy());
  });
  pending.push(new Promise((resolve) => server.listen(port, '::', resolve)));
}

await Promise.all(pending);
console.log('listening');
