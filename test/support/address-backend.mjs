// A backend that answers each HTTP request with {"backend": <the address it was reached at>,
// "client": "<ip>:<port>"} (the lab traffic client's format), so one process in one network
// namespace holding many pod addresses tells which of them a request reached. The real control
// plane tier uses it for Services with more than 100 endpoints.
// Usage: node address-backend.mjs PORT
import { createServer } from 'node:http';

const plain = (address) => (address ?? '').replace(/^::ffff:/, '');
const port = Number(process.argv[2] ?? 8080);
const server = createServer((req, res) => {
  const body = JSON.stringify({
    backend: plain(req.socket.localAddress),
    client: `${plain(req.socket.remoteAddress)}:${req.socket.remotePort}`,
  });
  res.writeHead(200, { 'content-type': 'application/json', connection: 'close' });
  res.end(body);
});
server.listen(port, '::', () => console.log('listening'));
