// Socket-level load balancing: the cgroup socket hooks of bpf/lb.o attached to a child cgroup this
// test creates, with real sockets of client processes moved into that cgroup. No tc program is
// attached anywhere: whatever reaches a backend was translated at the socket.
//
//   node (10.210.0.1, the "host" namespace) --n0/b0-- be (10.210.0.2: backends a and b)
//   pod  (10.212.0.1, another namespace)    --p0/b1-- be (10.212.0.2)
// Every link is dual-stack (families.ts: 10.210.0.1 is also fd00::ad2:1), and the cases run once
// per family, on the v4 hooks and then on the v6 ones; a last case has dual-stack IPv6 sockets
// reach IPv4 services by their IPv4-mapped addresses. Clients run in node or pod, inside the child
// cgroup; the sockets' netns cookie decides whether scope host serves them.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, rmdirSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { linkCreate } from '../../native/libbpf/attach.js';
import { BPF_F_INNER_MAP, BPF_MAP_TYPE_ARRAY } from '../../native/libbpf/constants.js';
import { createMap, mapLookup, mapUpdate, mapUpdateBatch } from '../../native/libbpf/map.js';
import { possibleCpus } from '../../native/libbpf/probe.js';
import { closeFd, netnsCookie, O_CLOEXEC, O_RDONLY, openPath } from '../../native/libc.js';
import { detachAll, SOCK_HOOKS, sockHooksFor, syncSockHooks } from '../../src/dataplanes/bpf/attach.js';
import { perCpuValueSize, sumPerCpu } from '../../src/dataplanes/bpf/codec.js';
import { maglevIndex } from '../../src/dataplanes/bpf/flow-hash.js';
import { listAttachments } from '../../src/dataplanes/bpf/inspect-list.js';
import {
  ACTION,
  ALGORITHM,
  aff4Key,
  aff6Key,
  affMatchKey,
  affVal,
  ip4Codec,
  node6Key,
  SCOPE,
  SOCK_SCOPE,
  SRC_RANGE_ID_BITS,
  SVC_F,
  sockConfig,
  srcRange4Key,
  srcRange6Key,
  trafficStats,
  u8Codec,
  u32Codec,
} from '../../src/dataplanes/bpf/layout.js';
import { buildMaglevTable } from '../../src/dataplanes/bpf/maglev.js';
import { findCgroup2Root } from '../../src/host/cgroup.js';
import { Lab } from '../../src/lab/netns.js';
import { IPPROTO_TCP, IPPROTO_UDP } from '../../src/net/packets.js';
import { makePinDir, removePinDir } from '../support/bpffs.js';
import { FAMILY_CASES } from '../support/families.js';
import { inNetns } from '../support/in-netns.js';
import { type LoadedLb, loadLb, TEST_CONFIG, writeConfig, writeFrontend } from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

const NODE_IP = '10.210.0.1';
const BACKEND_IP = '10.210.0.2';
const A = { id: 1, addr: BACKEND_IP, port: 8081 };
const B = { id: 2, addr: BACKEND_IP, port: 8082 };
const UA = { id: 3, addr: BACKEND_IP, port: 5301 };
const UB = { id: 4, addr: BACKEND_IP, port: 5302 };
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
    // An IPv6 host (an IPv4-mapped one too) gets a dual-stack IPv6 socket.
    const s = dgram.createSocket(net.isIPv6(r.host) ? 'udp6' : 'udp4');
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
    const v6 = FAMILY_CASES.find((f) => !f.v4)!;
    writeConfig(lb, { snatAddr4: NODE_IP, snatAddr6: v6.A(NODE_IP) });
    for (const ns of ['node', 'be', 'pod']) await lab.addNamespace(ns);
    await lab.link('node', 'n0', 'be', 'b0');
    await lab.link('pod', 'p0', 'be', 'b1');
    for (const { A: addr, cidr } of FAMILY_CASES) {
      await lab.addAddress('node', 'n0', cidr(`${NODE_IP}/24`));
      await lab.addAddress('be', 'b0', cidr(`${BACKEND_IP}/24`));
      await lab.addAddress('pod', 'p0', cidr('10.212.0.1/24'));
      await lab.addAddress('be', 'b1', cidr('10.212.0.2/24'));
      await lab.addRoute('pod', cidr('10.210.0.0/24'), 'via', addr('10.212.0.2'));
    }
    // The node as distributions ship it: strict rp_filter, the conntrack INVALID drop in FORWARD.
    await lab.reversePathFilter('node', 1);
    await lab.dropInvalidForwards('node');
    // Link-local addresses wait out duplicate address detection; until then the first IPv6
    // packets stall in neighbour discovery.
    for (const ns of ['node', 'be', 'pod']) await lab.waitForIPv6Addresses(ns);
    await lab.startBackend('be', { name: 'a', tcpPorts: [A.port], udpPorts: [UA.port] });
    await lab.startBackend('be', { name: 'b', tcpPorts: [B.port], udpPorts: [UB.port] });
    mapUpdate(lb.fd.nodeAddrs4, ip4Codec.encode(NODE_IP), u32Codec.encode(1));
    mapUpdate(lb.fd.nodeAddrs6, node6Key.encode({ addr: v6.A(NODE_IP) }), u32Codec.encode(1));
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

  describe.each(FAMILY_CASES)('$family', ({ A: fam, cidr, v4 }) => {
    // The family's counterparts of the addresses above; service ids 1xx for IPv6.
    const svc = (id: number) => (v4 ? id : 100 + id);
    const at = <T extends { addr: string }>(b: T): T => ({ ...b, addr: fam(b.addr) });
    const [beA, beB, beUA, beUB] = [A, B, UA, UB].map(at) as [typeof A, typeof B, typeof UA, typeof UB];
    const nodeIP = fam(NODE_IP);
    const peer = (address: string, port: number) => `${fam(address)}:${port}`;

    it('connect to a ClusterIP reaches a backend, and getpeername says the ClusterIP', async () => {
      writeFrontend(lb, {
        svcId: svc(1),
        addr: fam('10.96.0.1'),
        port: 80,
        proto: IPPROTO_TCP,
        backends: [beA],
      });
      const before = newConns(lb.fd.svcStats, svc(1));
      const answers = await request('node', { proto: 'tcp', host: fam('10.96.0.1'), port: 80, count: 3 });
      expect(answers).toEqual(
        answers.map(() => ({ backend: 'a', peer: peer('10.96.0.1', 80), error: null })),
      );
      expect(newConns(lb.fd.svcStats, svc(1)) - before).toBe(3n);
      expect(newConns(lb.fd.backendStats, beA.id)).toBeGreaterThanOrEqual(3n);
    });

    it('round robin alternates between the backends, connection by connection', async () => {
      writeFrontend(lb, {
        svcId: svc(2),
        addr: fam('10.96.0.2'),
        port: 80,
        proto: IPPROTO_TCP,
        algorithm: ALGORITHM.rr,
        backends: [beA, beB],
      });
      const got = (await request('node', { proto: 'tcp', host: fam('10.96.0.2'), port: 80, count: 6 })).map(
        (a) => a.backend,
      );
      const first = got[0] === 'a' ? ['a', 'b'] : ['b', 'a'];
      expect(got).toEqual([...first, ...first, ...first]);
    });

    it('Maglev hashes a bound socket as the tc path hashes its packets', async () => {
      const m = TEST_CONFIG.maglevSize;
      const table = buildMaglevTable(
        [beA, beB].map((b) => ({ name: `${b.addr}:${b.port}`, id: b.id })),
        m,
      );
      const inner = createMap(BPF_MAP_TYPE_ARRAY, 'kbp_mglv_sock', 4, 4, m, { mapFlags: BPF_F_INNER_MAP });
      try {
        const keys = u32Codec.encodeMany(Array.from({ length: m }, (_, i) => i));
        mapUpdateBatch(inner, keys, Buffer.from(table.buffer, table.byteOffset, table.byteLength), m);
        mapUpdate(lb.fd.maglev, u32Codec.encode(svc(3)), u32Codec.encode(inner));
      } finally {
        closeFd(inner);
      }
      writeFrontend(lb, {
        svcId: svc(3),
        addr: fam('10.96.0.3'),
        port: 80,
        proto: IPPROTO_TCP,
        algorithm: ALGORITHM.maglev,
        backends: [beA, beB],
      });
      const byId = new Map([beA, beB].map((b) => [b.id, NAME[b.port]]));
      const seen = new Set<string>();
      for (const sourcePort of [41001, 41002, 41003, 41004, 41005, 41006]) {
        const [answer] = await request('node', {
          proto: 'tcp',
          host: fam('10.96.0.3'),
          port: 80,
          count: 1,
          source: { address: nodeIP, port: sourcePort },
        });
        const index = maglevIndex(nodeIP, sourcePort, 80, IPPROTO_TCP, TEST_CONFIG.hashSeed, m);
        expect(answer!.backend).toBe(byId.get(table[index]!));
        seen.add(answer!.backend!);
      }
      expect(seen.size).toBe(2);
    });

    it('ClientIP affinity keeps the node on one backend, keyed by the node address', async () => {
      writeFrontend(lb, {
        svcId: svc(4),
        addr: fam('10.96.0.4'),
        port: 80,
        proto: IPPROTO_TCP,
        algorithm: ALGORITHM.rr,
        flags: SVC_F.AFFINITY,
        affinityTimeoutS: 60,
        backends: [beA, beB],
      });
      for (const b of [beA, beB])
        mapUpdate(
          lb.fd.affinityMatch,
          affMatchKey.encode({ backendId: b.id, svcId: svc(4) }),
          u8Codec.encode(1),
        );
      const got = (await request('node', { proto: 'tcp', host: fam('10.96.0.4'), port: 80, count: 5 })).map(
        (a) => a.backend,
      );
      expect(new Set(got).size).toBe(1);
      const value = Buffer.alloc(affVal.size);
      const key = { client: nodeIP, svcId: svc(4) };
      const found = v4
        ? mapLookup(lb.fd.affinity4, aff4Key.encode(key), value)
        : mapLookup(lb.fd.affinity6, aff6Key.encode(key), value);
      expect(found).toBe(true);
      expect(NAME[[beA, beB].find((b) => b.id === affVal.decode(value).backendId)!.port]).toBe(got[0]);
    });

    it('a Service without endpoints refuses the connection (ECONNREFUSED) and counts the drop', async () => {
      writeFrontend(lb, {
        svcId: svc(5),
        addr: fam('10.96.0.5'),
        port: 80,
        proto: IPPROTO_TCP,
        backends: [],
      });
      const before = newConns(lb.fd.svcStats, svc(5));
      const [answer] = await request('node', { proto: 'tcp', host: fam('10.96.0.5'), port: 80, count: 1 });
      expect(answer!.error).toBe(lb.constants.sockSetRetval ? 'ECONNREFUSED' : 'EPERM');
      expect(newConns(lb.fd.svcStats, svc(5))).toBe(before);
    });

    it('a NodePort answers on the node address and on loopback', async () => {
      writeFrontend(lb, {
        svcId: svc(6),
        addr: v4 ? '0.0.0.0' : '::',
        port: 30080,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
        backends: [beB],
      });
      for (const host of [nodeIP, v4 ? '127.0.0.1' : '::1']) {
        const [answer] = await request('node', { proto: 'tcp', host, port: 30080, count: 1 });
        expect(answer).toEqual({ backend: 'b', peer: `${host}:30080`, error: null });
      }
    });

    it('traffic policies: the internal scope of a two-scope address, drop with EPERM, source ranges', async () => {
      // eTP=Local LoadBalancer IP: outside traffic gets the local endpoints (A), a node's own
      // sockets the internal entry (B), as kube-proxy sends locally originated traffic.
      const lbFlags = SVC_F.EXTERNAL | SVC_F.LOADBALANCER | SVC_F.TWO_SCOPES;
      writeFrontend(lb, {
        svcId: svc(10),
        addr: fam('198.51.100.1'),
        port: 80,
        proto: IPPROTO_TCP,
        flags: lbFlags,
        backends: [beA],
      });
      writeFrontend(lb, {
        svcId: svc(11),
        addr: fam('198.51.100.1'),
        port: 80,
        proto: IPPROTO_TCP,
        scope: SCOPE.internal,
        backends: [beB],
      });
      const internal = await request('node', { proto: 'tcp', host: fam('198.51.100.1'), port: 80, count: 3 });
      expect(internal.map((a) => a.backend)).toEqual(['b', 'b', 'b']);
      // iTP=Local without local endpoints: kube-proxy drops; a socket fails at once.
      writeFrontend(lb, {
        svcId: svc(12),
        addr: fam('10.96.0.12'),
        port: 80,
        proto: IPPROTO_TCP,
        action: ACTION.drop,
        backends: [],
      });
      const [dropped] = await request('node', { proto: 'tcp', host: fam('10.96.0.12'), port: 80, count: 1 });
      expect(dropped!.error).toBe('EPERM');
      // loadBalancerSourceRanges: the node's address is the client of an unbound socket.
      writeFrontend(lb, {
        svcId: svc(13),
        addr: fam('198.51.100.2'),
        port: 80,
        proto: IPPROTO_TCP,
        flags: SVC_F.EXTERNAL | SVC_F.LOADBALANCER | SVC_F.SOURCE_RANGE,
        backends: [beA],
      });
      const [denied] = await request('node', { proto: 'tcp', host: fam('198.51.100.2'), port: 80, count: 1 });
      expect(denied!.error).toBe('EPERM');
      const [rangeAddr, rangeBits] = cidr('10.210.0.0/24').split('/');
      const range = { prefixlen: SRC_RANGE_ID_BITS + Number(rangeBits), svcId: svc(13), addr: rangeAddr! };
      if (v4) mapUpdate(lb.fd.srcRange4, srcRange4Key.encode(range), u8Codec.encode(1));
      else mapUpdate(lb.fd.srcRange6, srcRange6Key.encode(range), u8Codec.encode(1));
      const [allowed] = await request('node', {
        proto: 'tcp',
        host: fam('198.51.100.2'),
        port: 80,
        count: 1,
      });
      expect(allowed).toEqual({ backend: 'a', peer: peer('198.51.100.2', 80), error: null });
    });

    it('UDP: each datagram goes to a backend and each reply reads as from the VIP, connected or not', async () => {
      writeFrontend(lb, {
        svcId: svc(7),
        addr: fam('10.96.0.7'),
        port: 53,
        proto: IPPROTO_UDP,
        backends: [beUA, beUB],
      });
      const before = newConns(lb.fd.svcStats, svc(7));
      const unconnected = await request('node', { proto: 'udp', host: fam('10.96.0.7'), port: 53, count: 4 });
      for (const a of unconnected) expect(a).toMatchObject({ peer: peer('10.96.0.7', 53), error: null });
      expect(unconnected.every((a) => a.backend === 'a' || a.backend === 'b')).toBe(true);
      // One socket per request in the client: each is a new socket and backend pair.
      expect(newConns(lb.fd.svcStats, svc(7)) - before).toBe(4n);
      const connected = await request('node', {
        proto: 'udp-connected',
        host: fam('10.96.0.7'),
        port: 53,
        count: 2,
      });
      for (const a of connected) expect(a).toMatchObject({ peer: peer('10.96.0.7', 53), error: null });
    });

    it('scope host leaves sockets of other namespaces alone; scope all serves them too', async () => {
      writeFrontend(lb, {
        svcId: svc(8),
        addr: fam('10.96.0.8'),
        port: 80,
        proto: IPPROTO_TCP,
        backends: [beA],
      });
      const [untouched] = await request('pod', { proto: 'tcp', host: fam('10.96.0.8'), port: 80, count: 1 });
      // The pod namespace has no route to the ClusterIP: untranslated, the connect fails at once.
      expect(untouched!.error).toBe('ENETUNREACH');
      setScope(SOCK_SCOPE.all);
      const [served] = await request('pod', { proto: 'tcp', host: fam('10.96.0.8'), port: 80, count: 1 });
      expect(served).toEqual({ backend: 'a', peer: peer('10.96.0.8', 80), error: null });
    });
  });

  it('a dual-stack IPv6 socket reaches an IPv4 service by its IPv4-mapped address, through the IPv4 maps', async () => {
    const mapped = (address: string) => `::ffff:${address}`;
    writeFrontend(lb, { svcId: 20, addr: '10.96.0.20', port: 80, proto: IPPROTO_TCP, backends: [A] });
    writeFrontend(lb, { svcId: 21, addr: '10.96.0.21', port: 53, proto: IPPROTO_UDP, backends: [UA, UB] });
    const tcpBefore = newConns(lb.fd.svcStats, 20);
    const udpBefore = newConns(lb.fd.svcStats, 21);
    const tcp = await request('node', { proto: 'tcp', host: mapped('10.96.0.20'), port: 80, count: 2 });
    expect(tcp).toEqual(tcp.map(() => ({ backend: 'a', peer: `${mapped('10.96.0.20')}:80`, error: null })));
    expect(newConns(lb.fd.svcStats, 20) - tcpBefore).toBe(2n);
    // Unconnected, the kernel sends a mapped datagram on the IPv4 path (sendmsg4); the reply
    // comes through recvmsg6.
    for (const proto of ['udp', 'udp-connected'] as const) {
      const answers = await request('node', { proto, host: mapped('10.96.0.21'), port: 53, count: 2 });
      for (const a of answers) expect(a).toMatchObject({ peer: `${mapped('10.96.0.21')}:53`, error: null });
      expect(answers.every((a) => a.backend === 'a' || a.backend === 'b')).toBe(true);
    }
    expect(newConns(lb.fd.svcStats, 21) - udpBefore).toBe(4n);
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
      // On a kernel without IPv6 sockets the IPv6 hooks go; they come back with them.
      const v6 = hooks.filter((h) => h.endsWith('6'));
      expect(syncSockHooks(pinDir, lb.prog, agentCgroup, sockHooksFor(false))).toEqual({
        attached: [],
        replaced: hooks.filter((h) => !v6.includes(h)),
        detached: v6,
      });
      expect(syncSockHooks(pinDir, lb.prog, agentCgroup, sockHooksFor(true)).attached).toEqual(v6);
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
