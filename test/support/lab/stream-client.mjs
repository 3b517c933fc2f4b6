// The lab's long-lived flows (issue 30's migration test): one process holds several TCP connections
// (to src/lab/backend-server.ts's stream ports) and connected UDP sockets, each asking "which backend?" every
// --interval ms for as long as it runs, so a test can follow each flow through a change of proxy.
// It prints "ready" once every flow has had its first answer (or --ready-timeout passed), and on
// SIGUSR1 one JSON line {"report": [...]}: per flow its first backend, every backend that answered,
// answers and questions counted, the errors its socket met, the longest silence between two
// answers and the time since the last. SIGTERM, or --seconds, ends it.
// Plain JavaScript, run by node as it is (streams.ts starts it; nothing compiles test code).
// Usage: node stream-client.mjs --streams '[{"id","proto":"tcp"|"udp","target":"ip:port"}]'
//   [--interval MS] [--seconds S] [--ready-timeout MS]

import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    streams: { type: 'string' },
    interval: { type: 'string', default: '100' },
    seconds: { type: 'string', default: '600' },
    'ready-timeout': { type: 'string', default: '5000' },
  },
});

const intervalMs = Number(values.interval);
/** @type {{id: string, proto: 'tcp' | 'udp', target: string}[]} (streams.ts's FlowSpec) */
const specs = JSON.parse(values.streams ?? '[]');
const flows = specs.map((spec) => ({
  spec,
  /** @type {string[]} */
  backends: [],
  asked: 0,
  answers: 0,
  /** @type {string[]} */
  errors: [],
  lastAnswerAt: 0,
  maxGapMs: 0,
  ask: () => {},
}));
function answered(flow, text) {
  let backend;
  try {
    backend = String(JSON.parse(text).backend);
  } catch {
    flow.errors.push(`unreadable answer ${text.slice(0, 80)}`);
    return;
  }
  const now = Date.now();
  if (flow.lastAnswerAt > 0) flow.maxGapMs = Math.max(flow.maxGapMs, now - flow.lastAnswerAt);
  flow.lastAnswerAt = now;
  flow.answers++;
  if (!flow.backends.includes(backend)) flow.backends.push(backend);
}

function target(spec) {
  const split = spec.target.lastIndexOf(':');
  return {
    host: spec.target.slice(0, split).replace(/^\[|\]$/g, ''),
    port: Number(spec.target.slice(split + 1)),
  };
}

let stopping = false;

function openTcp(flow) {
  const socket = connect(target(flow.spec));
  socket.setNoDelay(true);
  socket.setEncoding('utf8');
  let buffered = '';
  socket.on('data', (text) => {
    buffered += text;
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      answered(flow, buffered.slice(0, nl));
      buffered = buffered.slice(nl + 1);
    }
  });
  socket.on('error', (err) => flow.errors.push(err.code ?? err.message));
  socket.on('close', () => {
    if (!stopping) flow.errors.push('closed');
  });
  flow.ask = () => {
    if (!socket.destroyed && socket.readyState === 'open') socket.write('which\n');
  };
}

function openUdp(flow) {
  const { host, port } = target(flow.spec);
  const socket = createSocket(host.includes(':') ? 'udp6' : 'udp4');
  let connected = false;
  socket.on('message', (msg) => answered(flow, msg.toString()));
  // A connected socket reports an ICMP error for an earlier datagram here, and stays usable.
  socket.on('error', (err) => flow.errors.push(err.code ?? err.message));
  socket.connect(port, host, () => {
    connected = true;
  });
  flow.ask = () => {
    if (connected) socket.send('which');
  };
}

for (const flow of flows) (flow.spec.proto === 'tcp' ? openTcp : openUdp)(flow);

const ticker = setInterval(() => {
  for (const flow of flows) {
    flow.asked++;
    flow.ask();
  }
}, intervalMs);

/** Each flow's state now: streams.ts's FlowReport. */
function report() {
  const now = Date.now();
  return flows.map((f) => ({
    id: f.spec.id,
    proto: f.spec.proto,
    backend: f.backends[0] ?? null,
    backends: f.backends,
    asked: f.asked,
    answers: f.answers,
    errors: f.errors,
    maxGapMs: f.maxGapMs,
    sinceAnswerMs: f.lastAnswerAt > 0 ? now - f.lastAnswerAt : -1,
  }));
}

process.on('SIGUSR1', () => process.stdout.write(`${JSON.stringify({ report: report() })}\n`));
const end = () => {
  stopping = true;
  clearInterval(ticker);
  process.exit(0);
};
process.on('SIGTERM', end);
setTimeout(end, Number(values.seconds) * 1000).unref();

const readyBy = Date.now() + Number(values['ready-timeout']);
const readyCheck = setInterval(() => {
  if (flows.every((f) => f.answers > 0) || Date.now() > readyBy) {
    clearInterval(readyCheck);
    process.stdout.write('ready\n');
  }
}, 20);
