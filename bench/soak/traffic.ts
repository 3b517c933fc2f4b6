// The soak's steady traffic: every kind of client (pods → ClusterIP, a node's host network →
// ClusterIP, the outside client → NodePorts and the LoadBalancer IP), TCP and UDP, both families,
// new connections and long-lived flows (kept-alive HTTP, one connected UDP socket), to the stable
// Service (backends never churned) and to the churned one. One client process per namespace
// (client.ts) runs its streams; the ledger keeps what the checks and the plots need, as it comes.

import type { ChildProcess } from 'node:child_process';
import { compiledSibling } from '../../src/lab/netns.js';
import { ipv6Of, REAL_NODES } from '../../src/lab/real-node-plan.js';
import type { IPFamily } from '../../src/model/types.js';
import type { ClientLine, StreamKind, StreamSpec } from './client.js';
import { CLIENT_PODS, LB_IP, NODE_PORTS, type SoakWorld } from './world.js';

const clientScript = compiledSibling(import.meta.url, 'client.js');
const INTERVAL_MS = 300;
const TCP_TIMEOUT_MS = 3000;
const UDP_TIMEOUT_MS = 2000;
/** The fragmented datagrams' size: two fragments at the outside link's MTU. */
const DATAGRAM_BYTES = 3000;

export interface Stream extends StreamSpec {
  /** The namespace (lab short name) the client runs in. */
  ns: string;
  /** "pod ca → ClusterIP churn/tcp keepalive [IPv6]": what the report calls it. */
  name: string;
  service: 'stable' | 'churn';
  family: IPFamily;
}

const bracket = (host: string) => (host.includes(':') ? `[${host}]` : host);

/** Every stream of the soak, for the world's Service addresses. */
export function planStreams(world: SoakWorld, deadline: number): Stream[] {
  const count = Math.ceil((deadline - Date.now()) / INTERVAL_MS) + 10;
  const streams: Stream[] = [];
  const add = (
    ns: string,
    from: string,
    service: 'stable' | 'churn',
    to: string,
    host: string,
    port: number,
    kind: StreamKind,
    family: IPFamily,
  ) => {
    const udp = isUdp(kind);
    streams.push({
      ns,
      name: `${from} → ${to} ${service}/${udp ? 'udp' : 'tcp'} ${kind}${family === 'IPv6' ? ' [IPv6]' : ''}`,
      service,
      family,
      target: `${bracket(host)}:${port}`,
      kind,
      intervalMs: INTERVAL_MS,
      timeoutMs: udp ? UDP_TIMEOUT_MS : TCP_TIMEOUT_MS,
      count,
      ...(kind === 'datagram' ? { bytes: DATAGRAM_BYTES } : {}),
    });
  };
  const clusterIP = (svc: string, family: IPFamily) => world.services.get(svc)?.clusterIPs[family] ?? '';
  const [nodeA, nodeB] = REAL_NODES as [(typeof REAL_NODES)[0], (typeof REAL_NODES)[0]];
  for (const family of ['IPv4', 'IPv6'] as const) {
    const v4 = family === 'IPv4';
    for (const pod of CLIENT_PODS) {
      const ns = world.nodes.podNs(pod.name);
      const from = `pod ${pod.name}`;
      add(ns, from, 'stable', 'ClusterIP', clusterIP('stable', family), 80, 'new', family);
      add(ns, from, 'stable', 'ClusterIP', clusterIP('stable', family), 53, 'udp', family);
      add(ns, from, 'churn', 'ClusterIP', clusterIP('churn', family), 80, 'new', family);
      add(ns, from, 'churn', 'ClusterIP', clusterIP('churn', family), 80, 'keepalive', family);
      add(ns, from, 'churn', 'ClusterIP', clusterIP('churn', family), 53, 'udp-stream', family);
    }
    const host = world.nodes.nodeNs(nodeA.name);
    add(host, `host ${nodeA.name}`, 'stable', 'ClusterIP', clusterIP('stable', family), 80, 'new', family);
    add(host, `host ${nodeA.name}`, 'churn', 'ClusterIP', clusterIP('churn', family), 53, 'udp', family);
    const out = world.nodes.clientNs;
    const ip = (node: typeof nodeA) => (v4 ? node.ip : node.ip6);
    add(out, 'outside', 'stable', `NodePort ${nodeA.name}`, ip(nodeA), NODE_PORTS.stableTcp, 'new', family);
    add(out, 'outside', 'stable', `NodePort ${nodeB.name}`, ip(nodeB), NODE_PORTS.stableUdp, 'udp', family);
    add(out, 'outside', 'stable', 'LB IP', v4 ? LB_IP : ipv6Of(LB_IP), 80, 'keepalive', family);
    add(out, 'outside', 'churn', `NodePort ${nodeB.name}`, ip(nodeB), NODE_PORTS.churnTcp, 'new', family);
  }
  // IPv4 only: an IPv6 path's first datagram larger than its MTU is lost by design (path MTU
  // discovery, test/e2e/real-node.test.ts's header).
  add(
    world.nodes.clientNs,
    'outside',
    'stable',
    `NodePort ${nodeA.name}`,
    nodeA.ip,
    NODE_PORTS.stableUdp,
    'datagram',
    'IPv4',
  );
  return streams;
}

/** What the start line asks of each namespace: one answer from every target its streams use. */
export interface StartProbe {
  ns: string;
  target: string;
  proto: 'tcp' | 'udp';
}

const isUdp = (kind: StreamKind) => kind === 'udp' || kind === 'udp-stream' || kind === 'datagram';

/** The start line's probes (pure): each stream's target from its namespace, once per protocol. */
export function startProbes(streams: readonly Stream[]): StartProbe[] {
  const probes = new Map<string, StartProbe>();
  for (const s of streams) {
    const proto = isUdp(s.kind) ? 'udp' : 'tcp';
    probes.set(`${s.ns} ${proto} ${s.target}`, { ns: s.ns, target: s.target, proto });
  }
  return [...probes.values()];
}

export interface Failure {
  stream: number;
  at: number;
  error: string;
  /** The backend the stream's previous request reached (its flow's, for long-lived flows). */
  lastBackend: string | null;
}

/** When a backend answered first and last. */
export interface BackendSeen {
  first: number;
  last: number;
  requests: number;
}

/** A stream's pace: when its last request ended, and its longest pause between two ends (from the
 * start for the first). */
export interface StreamPace {
  last: number;
  longest: number;
  /** When the longest pause began. */
  longestAt: number;
}

/** What the traffic did, kept as it arrives: counts, failures, per-second totals, backends seen,
 * each stream's pace, and the clients that exited before they were stopped. Its size grows with
 * the failures and the pods, not with the requests. */
export class TrafficLedger {
  readonly requests: number[];
  readonly pace: StreamPace[];
  readonly clientExits: string[] = [];
  readonly failures: Failure[] = [];
  readonly backends = new Map<string, BackendSeen>();
  /** Per second since the start: [answered, failed]. */
  readonly perSecond = new Map<number, [number, number]>();
  private readonly lastBackend: (string | null)[];

  constructor(
    readonly streams: readonly Stream[],
    readonly startedAt: number,
  ) {
    this.requests = streams.map(() => 0);
    this.pace = streams.map(() => ({ last: startedAt, longest: 0, longestAt: startedAt }));
    this.lastBackend = streams.map(() => null);
  }

  /** One request's line, of the soak's stream `stream`. */
  record(stream: number, line: ClientLine): void {
    this.requests[stream] = (this.requests[stream] ?? 0) + 1;
    const pace = this.pace[stream];
    if (pace) {
      if (line.t - pace.last > pace.longest)
        Object.assign(pace, { longest: line.t - pace.last, longestAt: pace.last });
      pace.last = Math.max(pace.last, line.t);
    }
    const second = Math.floor((line.t - this.startedAt) / 1000);
    const bucket = this.perSecond.get(second) ?? [0, 0];
    this.perSecond.set(second, bucket);
    if (line.b === null) {
      bucket[1] += 1;
      this.failures.push({
        stream,
        at: line.t,
        error: line.e ?? 'unknown',
        lastBackend: this.lastBackend[stream] ?? null,
      });
      return;
    }
    bucket[0] += 1;
    this.lastBackend[stream] = line.b;
    const seen = this.backends.get(line.b);
    if (seen) {
      seen.last = Math.max(seen.last, line.t);
      seen.requests += 1;
    } else this.backends.set(line.b, { first: line.t, last: line.t, requests: 1 });
  }
}

/** Starts a client process per namespace for its streams; stop() ends them all. */
export function startTraffic(
  world: SoakWorld,
  streams: readonly Stream[],
  deadline: number,
  ledger: TrafficLedger,
): { done: Promise<void>; stop: () => void } {
  const byNs = new Map<string, number[]>();
  for (const [i, s] of streams.entries()) byNs.set(s.ns, [...(byNs.get(s.ns) ?? []), i]);
  const children: ChildProcess[] = [];
  const ends: Promise<void>[] = [];
  let stopped = false;
  for (const [ns, indexes] of byNs) {
    const spec = {
      deadline,
      streams: indexes.map((i) => {
        const { target, kind, intervalMs, timeoutMs, count, bytes } = streams[i]!;
        return { target, kind, intervalMs, timeoutMs, count, ...(bytes ? { bytes } : {}) };
      }),
    };
    const child = world.lab.spawn(ns, process.execPath, [clientScript, JSON.stringify(spec)]);
    children.push(child);
    let partial = '';
    child.stdout?.on('data', (d: Buffer) => {
      const lines = (partial + d.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const text of lines) {
        if (text.trim() === '') continue;
        // A line names its stream by its index among this process's streams.
        const line = JSON.parse(text) as ClientLine;
        ledger.record(indexes[line.s] ?? -1, line);
      }
    });
    // The last of its stderr: why a client that exited early did (a stack trace).
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-2000);
    });
    ends.push(
      new Promise((resolve) =>
        child.once('close', (code, signal) => {
          // A client ends by itself at its deadline (0), or is stopped: anything else is a failure.
          if (!stopped && code !== 0)
            ledger.clientExits.push(
              `${ns}: ${code ?? signal} at ${new Date().toISOString()} ${stderr.trim()}`,
            );
          resolve();
        }),
      ),
    );
  }
  const stop = () => {
    stopped = true;
    for (const child of children) child.kill('SIGKILL');
  };
  return { done: Promise.all(ends).then(() => {}), stop };
}
