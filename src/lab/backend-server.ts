// A backend for the namespace lab: answers each HTTP request and each UDP datagram with
// {"backend": <name>, "client": "<ip>:<port>"}, so a client learns which backend it reached and
// a test learns which source address the backend saw (masquerade or not).
// Usage: node backend-server.js --name be1 [--tcp 8080[,9100...]] [--udp 5353[,...]]

import { createSocket } from 'node:dgram';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: { name: { type: 'string' }, tcp: { type: 'string' }, udp: { type: 'string' } },
});
const name = values.name ?? 'backend';
const pending: Promise<void>[] = [];
// Dual-stack sockets report IPv4 peers as ::ffff:a.b.c.d; clients compare plain IPv4.
const plain = (address: string | undefined) => (address ?? '').replace(/^::ffff:/, '');

const ports = (list: string | undefined) => (list ? list.split(',').map(Number) : []);

for (const port of ports(values.tcp)) {
  const server = createServer((req, res) => {
    const body = JSON.stringify({
      backend: name,
      client: `${plain(req.socket.remoteAddress)}:${req.socket.remotePort}`,
    });
    res.writeHead(200, { 'content-type': 'application/json', connection: 'close' });
    res.end(body);
  });
  server.keepAliveTimeout = 5000;
  pending.push(new Promise((resolve) => server.listen(port, '::', resolve)));
}

for (const port of ports(values.udp)) {
  const socket = createSocket({ type: 'udp6', ipv6Only: false });
  socket.on('message', (_msg, rinfo) => {
    socket.send(
      JSON.stringify({ backend: name, client: `${plain(rinfo.address)}:${rinfo.port}` }),
      rinfo.port,
      rinfo.address,
    );
  });
  pending.push(new Promise((resolve) => socket.bind(port, '::', resolve)));
}

await Promise.all(pending);
console.log('listening');
