// Socket-level load balancing: the cgroup socket hooks of bpf/lb.o attached to a child cgroup this
// test creates, with real sockets of client processes moved into that cgroup. No tc program is
// attached anywhere: whatever reaches a backend was translated at the socket.
//
//   node (10.210.0.1, the "host" namespace) --n0/b0-- be (10.210.0.2: backends a and b)
//   pod  (10.212.0.1, another namespace)    --p0/b1-- be (10.212.0.2)
// Clients run in node or pod, inside the child cgroup; the sockets' netns cookie decides whether
// scope host serves them.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, rmdirSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import {
  BPF_F_INNER_MAP,
  BPF_MAP_TYPE_ARRAY,
  createMap,
  linkCreate,
  mapLookup,
  mapUpdate,
  mapUpdateBatch,
  possibleCpus,
} from '../../native/libbpf.js';
import { closeFd, netnsCookie, O_CLOEXEC, O_RDONLY, openPath } from '../../native/libc.js';
import { detachAll, SOCK_HOOKS, syncSockHooks } from '../../src/dataplanes/bpf/attach.js';
import { maglevIndex } from '../../src/dataplanes/bpf/flow-hash.js';
import { listAttachments } from '../../src/dataplanes/bpf/inspect.js';
import {
  ACTION,
  ALGORITHM,
  aff4Key,
  affMatchKey,
  affVal,
  ip4Codec,
  perCpuValueSize,
  SCOPE,
  SOCK_SCOPE,
  SRC_RANGE_ID_BITS,
  SVC_F,
  sockConfig,
  srcRange4Key,
  sumPerCpu,
  trafficStats,
  u8Codec,
  u32Codec,
} from '../../src/dataplanes/bpf/layout.js';
import { buildMaglevTable } from '../../src/dataplanes/bpf/maglev.js';
import { findCgroup2Root } from '../../src/host/cgroup.js';
import { Lab } from '../../src/lab/netns.js';
import { IPPROTO_TCP, IPPROTO_UDP } from '../../src/net/packets.js';
import { makePinDir, removePinDir } from '../support/bpffs.js';
import { inNetns } from '../support/in-netns.js';
import { type LoadedLb, loadLb, TEST_CONFIG, writeConfig, writeFrontend } from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

const NODE_IP = '10.210.0.1';
const A = { id: 1, addr: '10.210.0.2', port: 8081 };
const B = { id: 2, addr: '10.210.0.2', port: 8082 };
const UA = { id: 3, addr: '10.210.0.2', port: 5301 };
const UB = { id: 4, addr: '10.210.0.2', port: 5302 };
const NAME: Record<number, string> = { 8081: 'a', 8082: 'b', 5301: 'a', 5302: 'b' };

interface Answer {
  /** The answering backend's name, or null. */
  backend: string | null;
  /** The peer as the socket reports it: getpeername (TCP, connected UDP) or recvmsg (UDP). */
  peer: string | null;
  error: string | null;
}

interface ClientRequest {
  proto: 'tcp' | 'udp' | 'udp-connected';
  host: string;
  port: number;
  count: number;
  /** Bind the source before connecting (Maglev hashes it). */
  source?: { address: string; port: number };
}

// Runs as a separate node process inside the cgroup: one JSON line per request.
const CLIENT = `
import net from 'node:net';
import dgram from 'node:dgram';
const r = JSON.parse(process.env.KBP_REQUEST);
const parse = (text) => { try { return JSON.parse(text).backend; } catch { return null; } };
function tcp() {
  return new Promise((resolve) => {
    let peer = null, body = '';
    const s = net.connect({ host: r.host, port: r.port, localAddress: r.source?.address, localPort: r.source?.port });
    s.setTimeout(2000, () => s.destroy(Object.assign(new Error('timeout'), { code: 'TIMEOUT' })));
    s.on('connect', () => { peer = s.remoteAddress + ':' + s.remotePort; s.write('GET / HTTP/1.0\\r\\n\\r\\n'); });
    s.on('data', (d) => { body += d; });
    s.on('end', () => resolve({ backend: parse(body.slice(body.indexOf('\\r\\n\\r\\n') + 4)), peer, error: null }));
    s.on('error', (e) => resolve({ backend: null, peer, error: e.code ?? e.message }));
  });
}
function udp(connected) {
  return new Promise((resolve) => {
    const s = dgram.createSocket('udp4');
    const done = (v) => { clearTimeout(t); s.close(); resolve(v); };
    const t = setTimeout(() => done({ backend: null, peer: null, error: 'TIMEOUT' }), 2000);
    s.on('error', (e) => done({ backend: null, peer: null, error: e.code ?? e.message }));
    s.on('message', (m, rinfo) => {
      const peer = connected ? s.remoteAddress().address + ':' + s.remoteAddress().port : rinfo.address + ':' + rinfo.port;
      done({ backend: parse(m.toString()), peer, error: null });
    });
    if (connected) s.connect(r.port, r.host, () => s.send('ping'));
    else s.send('ping', r.port, r.host);
  });
}
for (let i = 0; i < r.count; i++) {
  const a = r.proto === 'tcp' ? await tcp() : await udp(r.proto === 'udp-connected');
  console.log(JSON.stringify(a));
}
`;

describeRoot('socket-level load balancing on the cgroup hooks', () => {
  const lab = new Lab(`kbpso${process.pid}`);
  const cgroup = `${findCgroup2Root()}/kbp-sock-test-${process.pid}`;
  let lb: LoadedLb;
  let hostCookie = 0n;
  const links: number[] = [];
  const clients = new Set<ChildProcess>();

  /** Runs the client script in namespace `ns`, moved into the cgroup before it starts. */
  function request(ns: string, req: ClientRequest, inCgroup = cgroup): Promise<Answer[]> {
    return new Promise((resolve, reject) => {
      // The shell joins the cgroup, then becomes the client: every socket is made inside it.
      const child = spawn(
        'sh',
        [
          '-c',
          'echo $$ > "$1/cgroup.procs" && exec nsenter --net="/run/netns/$2" -- "$3" --input-type=module -e "$4"',
          'sh',
          inCgroup,
          lab.ns(ns),
          process.execPath,
          CLIENT,
        ],
        { env: { ...process.env, KBP_REQUEST: JSON.stringify(req) }, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      clients.add(child);
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => {
        out += d;
      });
      child.stderr.on('data', (d) => {
        err += d;
      });
      child.on('error', reject);
      child.on('exit', (code) => {
        clients.delete(child);
        if (code !== 0) reject(new Error(`client exited ${code}: ${err}`));
        else
          resolve(
            out
              .trim()
              .split('\n')
              .filter((l) => l !== '')
              .map((l) => JSON.parse(l) as Answer),
          );
      });
    });
  }

  function setScope(scope: number): void {
    mapUpdate(
      lb.fd.sockConfig,
      u32Codec.encode(0),
      sockConfig.encode({ hostNetnsCookie: hostCookie, scope }),
    );
  }

  function newConns(map: number, id: number): bigint {
    const buf = Buffer.alloc(perCpuValueSize(trafficStats.size, possibleCpus()));
    mapLookup(map, u32Codec.encode(id), buf);
    return sumPerCpu(trafficStats, buf, possibleCpus()).newConns;
  }

  beforeAll(async () => {
    lb = loadLb();
    writeConfig(lb, { snatAddr4: NODE_IP });
    for (const ns of ['node', 'be', 'pod']) await lab.addNamespace(ns);
    await lab.link('node', 'n0', 'be', 'b0');
    await lab.link('pod', 'p0', 'be', 'b1');
    await lab.addAddress('node', 'n0', `${NODE_IP}/24`);
    await lab.addAddress('be', 'b0', '10.210.0.2/24');
    await lab.addAddress('pod', 'p0', '10.212.0.1/24');
    await lab.addAddress('be', 'b1', '10.212.0.2/24');
    await lab.addRoute('pod', '10.210.0.0/24', 'via', '10.212.0.2');
    // The node as distributions ship it: strict rp_filter, the conntrack INVALID drop in FORWARD.
    await lab.reversePathFilter('node', 1);
    await lab.dropInvalidForwards('node');
    await lab.startBackend('be', { name: 'a', tcpPorts: [A.port], udpPorts: [UA.port] });
    await lab.startBackend('be', { name: 'b', tcpPorts: [B.port], udpPorts: [UB.port] });
    mapUpdate(lb.fd.nodeAddrs4, ip4Codec.encode(NODE_IP), u32Codec.encode(1));
    hostCookie = inNetns(lab.ns('node'), netnsCookie);
    setScope(SOCK_SCOPE.host);
    mkdirSync(cgroup);
    const cgroupFd = openPath(cgroup, O_RDONLY | O_CLOEXEC);
    try {
      for (const h of SOCK_HOOKS) links.push(linkCreate(lb.prog(h.program), cgroupFd, h.attachType));
    } finally {
      closeFd(cgroupFd);
    }
  });

  afterEach(() => setScope(SOCK_SCOPE.host));

  afterAll(async () => {
    for (const child of clients) child.kill('SIGKILL');
    for (const fd of links) closeFd(fd);
    await lab.destroy();
    // The clients have exited (or were killed) by now: an empty cgroup can go.
    for (let i = 0; i < 50; i++) {
      try {
        rmdirSync(cgroup);
        break;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    lb?.close();
  });

  it('connect to a ClusterIP reaches a backend, and getpeername says the ClusterIP', async () => {
    writeFrontend(lb, { svcId: 1, addr: '10.96.0.1', port: 80, proto: IPPROTO_TCP, backends: [A] });
    const before = newConns(lb.fd.svcStats, 1);
    const answers = await request('node', { proto: 'tcp', host: '10.96.0.1', port: 80, count: 3 });
    expect(answers).toEqual(answers.map(() => ({ backend: 'a', peer: '10.96.0.1:80', error: null })));
    expect(newConns(lb.fd.svcStats, 1) - before).toBe(3n);
    expect(newConns(lb.fd.backendStats, A.id)).toBeGreaterThanOrEqual(3n);
  });

  it('round robin alternates between the backends, connection by connection', async () => {
    writeFrontend(lb, {
      svcId: 2,
      addr: '10.96.0.2',
      port: 80,
      proto: IPPROTO_TCP,
      algorithm: ALGORITHM.rr,
      backends: [A, B],
    });
    const got = (await request('node', { proto: 'tcp', host: '10.96.0.2', port: 80, count: 6 })).map(
      (a) => a.backend,
    );
    const first = got[0] === 'a' ? ['a', 'b'] : ['b', 'a'];
    expect(got).toEqual([...first, ...first, ...first]);
  });

  it('Maglev hashes a bound socket as the tc path hashes its packets', async () => {
    const m = TEST_CONFIG.maglevSize;
    const table = buildMaglevTable(
      [A, B].map((b) => ({ name: `${b.addr}:${b.port}`, id: b.id })),
      m,
    );
    const inner = createMap(BPF_MAP_TYPE_ARRAY, 'kbp_mglv_sock', 4, 4, m, { mapFlags: BPF_F_INNER_MAP });
    try {
      const keys = u32Codec.encodeMany(Array.from({ length: m }, (_, i) => i));
      mapUpdateBatch(inner, keys, Buffer.from(table.buffer, table.byteOffset, table.byteLength), m);
      mapUpdate(lb.fd.maglev, u32Codec.encode(3), u32Codec.encode(inner));
    } finally {
      closeFd(inner);
    }
    writeFrontend(lb, {
      svcId: 3,
      addr: '10.96.0.3',
      port: 80,
      proto: IPPROTO_TCP,
      algorithm: ALGORITHM.maglev,
      backends: [A, B],
    });
    const byId = new Map([A, B].map((b) => [b.id, NAME[b.port]]));
    const seen = new Set<string>();
    for (const sourcePort of [41001, 41002, 41003, 41004, 41005, 41006]) {
      const [answer] = await request('node', {
        proto: 'tcp',
        host: '10.96.0.3',
        port: 80,
        count: 1,
        source: { address: NODE_IP, port: sourcePort },
      });
      const index = maglevIndex(NODE_IP, sourcePort, 80, IPPROTO_TCP, TEST_CONFIG.hashSeed, m);
      expect(answer!.backend).toBe(byId.get(table[index]!));
      seen.add(answer!.backend!);
    }
    expect(seen.size).toBe(2);
  });

  it('ClientIP affinity keeps the node on one backend, keyed by the node address', async () => {
    writeFrontend(lb, {
      svcId: 4,
      addr: '10.96.0.4',
      port: 80,
      proto: IPPROTO_TCP,
      algorithm: ALGORITHM.rr,
      flags: SVC_F.AFFINITY,
      affinityTimeoutS: 60,
      backends: [A, B],
    });
    for (const b of [A, B])
      mapUpdate(lb.fd.affinityMatch, affMatchKey.encode({ backendId: b.id, svcId: 4 }), u8Codec.encode(1));
    const got = (await request('node', { proto: 'tcp', host: '10.96.0.4', port: 80, count: 5 })).map(
      (a) => a.backend,
    );
    expect(new Set(got).size).toBe(1);
    const value = Buffer.alloc(affVal.size);
    expect(mapLookup(lb.fd.affinity4, aff4Key.encode({ client: NODE_IP, svcId: 4 }), value)).toBe(true);
    expect(NAME[[A, B].find((b) => b.id === affVal.decode(value).backendId)!.port]).toBe(got[0]);
  });

  it('a Service without endpoints refuses the connection (ECONNREFUSED) and counts the drop', async () => {
    writeFrontend(lb, { svcId: 5, addr: '10.96.0.5', port: 80, proto: IPPROTO_TCP, backends: [] });
    const before = newConns(lb.fd.svcStats, 5);
    const [answer] = await request('node', { proto: 'tcp', host: '10.96.0.5', port: 80, count: 1 });
    expect(answer!.error).toBe(lb.constants.sockSetRetval ? 'ECONNREFUSED' : 'EPERM');
    expect(newConns(lb.fd.svcStats, 5)).toBe(before);
  });

  it('a NodePort answers on the node address and on 127.0.0.1', async () => {
    writeFrontend(lb, {
      svcId: 6,
      addr: '0.0.0.0',
      port: 30080,
      proto: IPPROTO_TCP,
      flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
      backends: [B],
    });
    for (const host of [NODE_IP, '127.0.0.1']) {
      const [answer] = await request('node', { proto: 'tcp', host, port: 30080, count: 1 });
      expect(answer).toEqual({ backend: 'b', peer: `${host}:30080`, error: null });
    }
  });

  it('traffic policies: the internal scope of a two-scope address, drop with EPERM, source ranges', async () => {
    // eTP=Local LoadBalancer IP: outside traffic gets the local endpoints (A), a node's own
    // sockets the internal entry (B), as kube-proxy sends locally originated traffic.
    const lbFlags = SVC_F.EXTERNAL | SVC_F.LOADBALANCER | SVC_F.TWO_SCOPES;
    writeFrontend(lb, {
      svcId: 10,
      addr: '198.51.100.1',
      port: 80,
      proto: IPPROTO_TCP,
      flags: lbFlags,
      backends: [A],
    });
    writeFrontend(lb, {
      svcId: 11,
      addr: '198.51.100.1',
      port: 80,
      proto: IPPROTO_TCP,
      scope: SCOPE.internal,
      backends: [B],
    });
    const internal = await request('node', { proto: 'tcp', host: '198.51.100.1', port: 80, count: 3 });
    expect(internal.map((a) => a.backend)).toEqual(['b', 'b', 'b']);
    // iTP=Local without local endpoints: kube-proxy drops; a socket fails at once.
    writeFrontend(lb, {
      svcId: 12,
      addr: '10.96.0.12',
      port: 80,
      proto: IPPROTO_TCP,
      action: ACTION.drop,
      backends: [],
    });
    const [dropped] = await request('node', { proto: 'tcp', host: '10.96.0.12', port: 80, count: 1 });
    expect(dropped!.error).toBe('EPERM');
    // loadBalancerSourceRanges: the node's address is the client of an unbound socket.
    writeFrontend(lb, {
      svcId: 13,
      addr: '198.51.100.2',
      port: 80,
      proto: IPPROTO_TCP,
      flags: SVC_F.EXTERNAL | SVC_F.LOADBALANCER | SVC_F.SOURCE_RANGE,
      backends: [A],
    });
    const [denied] = await request('node', { proto: 'tcp', host: '198.51.100.2', port: 80, count: 1 });
    expect(denied!.error).toBe('EPERM');
    mapUpdate(
      lb.fd.srcRange4,
      srcRange4Key.encode({ prefixlen: SRC_RANGE_ID_BITS + 24, svcId: 13, addr: '10.210.0.0' }),
      u8Codec.encode(1),
    );
    const [allowed] = await request('node', { proto: 'tcp', host: '198.51.100.2', port: 80, count: 1 });
    expect(allowed).toEqual({ backend: 'a', peer: '198.51.100.2:80', error: null });
  });

  it('UDP: each datagram goes to a backend and each reply reads as from the VIP, connected or not', async () => {
    writeFrontend(lb, { svcId: 7, addr: '10.96.0.7', port: 53, proto: IPPROTO_UDP, backends: [UA, UB] });
    const before = newConns(lb.fd.svcStats, 7);
    const unconnected = await request('node', { proto: 'udp', host: '10.96.0.7', port: 53, count: 4 });
    for (const a of unconnected) expect(a).toMatchObject({ peer: '10.96.0.7:53', error: null });
    expect(unconnected.every((a) => a.backend === 'a' || a.backend === 'b')).toBe(true);
    // One socket per request in the client: each is a new socket and backend pair.
    expect(newConns(lb.fd.svcStats, 7) - before).toBe(4n);
    const connected = await request('node', {
      proto: 'udp-connected',
      host: '10.96.0.7',
      port: 53,
      count: 2,
    });
    for (const a of connected) expect(a).toMatchObject({ peer: '10.96.0.7:53', error: null });
  });

  it('scope host leaves sockets of other namespaces alone; scope all serves them too', async () => {
    writeFrontend(lb, { svcId: 8, addr: '10.96.0.8', port: 80, proto: IPPROTO_TCP, backends: [A] });
    const [untouched] = await request('pod', { proto: 'tcp', host: '10.96.0.8', port: 80, count: 1 });
    // The pod namespace has no route to the ClusterIP: untranslated, the connect fails at once.
    expect(untouched!.error).toBe('ENETUNREACH');
    setScope(SOCK_SCOPE.all);
    const [served] = await request('pod', { proto: 'tcp', host: '10.96.0.8', port: 80, count: 1 });
    expect(served).toEqual({ backend: 'a', peer: '10.96.0.8:80', error: null });
  });

  it("the agent's pinned links: attached, swapped on a restart, listed, and removed by cleanup", async () => {
    const pinPath = makePinDir('sock');
    const pinDir = `${pinPath}/v1`;
    const agentCgroup = `${cgroup}-agent`;
    mkdirSync(agentCgroup);
    try {
      writeFrontend(lb, { svcId: 9, addr: '10.96.0.9', port: 80, proto: IPPROTO_TCP, backends: [B] });
      const hooks = SOCK_HOOKS.map((h) => h.hook);
      expect(syncSockHooks(pinDir, lb.prog, agentCgroup)).toEqual({
        attached: hooks,
        replaced: [],
        detached: [],
      });
      // A restarted agent swaps its programs into the pinned links.
      expect(syncSockHooks(pinDir, lb.prog, agentCgroup)).toEqual({
        attached: [],
        replaced: hooks,
        detached: [],
      });
      const [answer] = await request(
        'node',
        { proto: 'tcp', host: '10.96.0.9', port: 80, count: 1 },
        agentCgroup,
      );
      expect(answer).toEqual({ backend: 'b', peer: '10.96.0.9:80', error: null });
      const listed = (await listAttachments(pinPath)).filter((a) => a.interface === 'cgroup');
      expect(listed).toEqual(
        SOCK_HOOKS.map((h) => ({
          interface: 'cgroup',
          hook: h.hook,
          program: h.program,
          mechanism: 'cgroup',
        })),
      );
      expect(detachAll(pinDir, []).sort()).toEqual(hooks.map((h) => `${h}@cgroup`).sort());
      const [after] = await request(
        'node',
        { proto: 'tcp', host: '10.96.0.9', port: 80, count: 1 },
        agentCgroup,
      );
      expect(after!.error).toBe('ENETUNREACH');
    } finally {
      detachAll(pinDir, []);
      removePinDir(pinPath);
      rmdirSync(agentCgroup);
    }
  });
});
