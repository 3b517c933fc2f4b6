// ICMP errors about SNATed NodePort flows, with real TCP between namespaces this test creates, and
// the reject's checksum state on a path that computes offloaded checksums.
//
//   cl (10.221.0.1) --c0/q0-- rc (router) --q1/l0-- lb (10.222.0.1 | 10.223.0.1) --l1/r0-- rt (router) --r1/b0-- be (10.224.0.2)
//
// lb is the node: kbp_tc_ext and the egress program on l0 and l1, a NodePort whose backend is on
// "another node" (be), so the flow is SNATed to 10.223.0.1 and forwarded by tc both ways; strict
// rp_filter and an INVALID drop rule, as distributions ship a node. The narrow (1,400-byte) hop is
// a router's link, never an endpoint's own (whose MSS would avoid the problem): rt's towards the
// backend (rt answers the client's bulk upload with frag needed to the SNAT address), or rc's
// towards the client (rc answers the backend's bulk download with frag needed to the node
// address). Only when lb translates these errors does the sender learn the MTU; otherwise the
// transfer stalls (the PMTU black hole). The lab is dual-stack (test/support/families.ts gives each
// address its IPv6 counterpart): over IPv6 the errors are ICMPv6 packet too big, the only way an
// IPv6 sender learns a path's MTU, since routers never fragment.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { linkCreate } from '../../native/libbpf/attach.js';
import { BPF_TCX_EGRESS, BPF_TCX_INGRESS } from '../../native/libbpf/constants.js';
import { mapUpdate } from '../../native/libbpf/map.js';
import { closeFd, ifNameToIndex } from '../../native/libc.js';
import { ACTION, ip4Codec, ip6Codec, PROGRAMS, SVC_F, u32Codec } from '../../src/dataplanes/bpf/layout.js';
import { Lab } from '../../src/lab/netns.js';
import { IPPROTO_TCP } from '../../src/net/packets.js';
import { FAMILY_CASES } from '../support/families.js';
import { inNetns } from '../support/in-netns.js';
import { type LoadedLb, loadLb, writeConfig, writeFrontend } from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

const NODE_IP = '10.222.0.1';
const SNAT_IP = '10.223.0.1';
const BACKEND = { id: 1, addr: '10.224.0.2', port: 9000 };
const V6 = FAMILY_CASES.find((f) => !f.v4)!;
const BULK = 4 << 20;

describeRoot('bpf/lb.o: PMTU discovery across a 1,400-MTU link on a NodePort flow (namespaces)', () => {
  const lab = new Lab(`kbpmtu${process.pid}`);
  let lb: LoadedLb;
  const links: number[] = [];

  /** Runs `fn` with `dev` in `ns` at MTU 1400, back to 1500 afterwards. */
  async function narrow<T>(ns: string, dev: string, fn: () => Promise<T>): Promise<T> {
    await lab.exec(ns, 'ip', ['link', 'set', dev, 'mtu', '1400']);
    try {
      return await fn();
    } finally {
      await lab.exec(ns, 'ip', ['link', 'set', dev, 'mtu', '1500']);
    }
  }

  beforeAll(async () => {
    lb = loadLb();
    writeConfig(lb, { snatAddr4: SNAT_IP, snatAddr6: V6.A(SNAT_IP) });
    for (const ns of ['cl', 'rc', 'lb', 'rt', 'be']) await lab.addNamespace(ns);
    await lab.link('cl', 'c0', 'rc', 'q0');
    await lab.link('rc', 'q1', 'lb', 'l0');
    await lab.link('lb', 'l1', 'rt', 'r0');
    await lab.link('rt', 'r1', 'be', 'b0');
    for (const [ns, dev, cidr4] of [
      ['cl', 'c0', '10.221.0.1/24'],
      ['rc', 'q0', '10.221.0.2/24'],
      ['rc', 'q1', '10.222.0.2/24'],
      ['lb', 'l0', `${NODE_IP}/24`],
      ['lb', 'l1', `${SNAT_IP}/24`],
      ['rt', 'r0', '10.223.0.2/24'],
      ['rt', 'r1', '10.224.0.1/24'],
      ['be', 'b0', '10.224.0.2/24'],
    ] as const)
      for (const { cidr } of FAMILY_CASES) await lab.addAddress(ns, dev, cidr(cidr4));
    for (const { v4, A, cidr } of FAMILY_CASES) {
      const route = (ns: string, to: string, via: string) =>
        lab.exec(ns, 'ip', [
          ...(v4 ? [] : ['-6']),
          'route',
          'add',
          to === 'default' ? to : cidr(to),
          'via',
          A(via),
        ]);
      await route('cl', 'default', '10.221.0.2');
      await route('rc', 'default', NODE_IP);
      await route('lb', '10.221.0.0/24', '10.222.0.2');
      await route('lb', '10.224.0.0/24', '10.223.0.2');
      await route('rt', 'default', SNAT_IP);
      await route('be', 'default', '10.224.0.1');
    }
    for (const ns of ['rc', 'lb', 'rt']) {
      await lab.sysctl(ns, 'net.ipv4.ip_forward', '1');
      await lab.sysctl(ns, 'net.ipv6.conf.all.forwarding', '1');
    }
    // Link-local addresses wait out duplicate address detection (neighbour discovery stalls until).
    for (const ns of ['cl', 'rc', 'lb', 'rt', 'be']) await lab.waitForIPv6Addresses(ns);
    await lab.sysctl('lb', 'net.ipv4.conf.all.rp_filter', '1');
    await lab.dropInvalidForwards('lb');
    mapUpdate(lb.fd.nodeAddrs4, ip4Codec.encode(NODE_IP), u32Codec.encode(1));
    mapUpdate(lb.fd.nodeAddrs6, ip6Codec.encode(V6.A(NODE_IP)), u32Codec.encode(1));
    inNetns(lab.ns('lb'), () => {
      for (const dev of ['l0', 'l1']) {
        links.push(linkCreate(lb.prog(PROGRAMS.tcFromExternal), ifNameToIndex(dev), BPF_TCX_INGRESS));
        links.push(linkCreate(lb.prog(PROGRAMS.tcEgress), ifNameToIndex(dev), BPF_TCX_EGRESS));
      }
    });
    // The backend: an upload is counted and answered with its length; 'S' asks for BULK bytes.
    const server = `require('net').createServer((s)=>{let n=0;s.once('data',(d)=>{if(d[0]===0x53){s.end(Buffer.alloc(${BULK},7));return;}n+=d.length;s.on('data',(x)=>n+=x.length);s.on('end',()=>s.end(String(n)));});}).listen(${BACKEND.port},'::',()=>console.log('listening'));`;
    const child = lab.spawn('be', process.execPath, ['-e', server]);
    await new Promise<void>((resolve) => child.stdout?.once('data', () => resolve()));
    writeFrontend(lb, {
      svcId: 1,
      addr: '0.0.0.0',
      port: 30100,
      proto: IPPROTO_TCP,
      flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
      backends: [BACKEND],
    });
    writeFrontend(lb, {
      svcId: 3,
      addr: '::',
      port: 30100,
      proto: IPPROTO_TCP,
      flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
      backends: [{ ...BACKEND, id: 3, addr: V6.A(BACKEND.addr) }],
    });
  });

  afterAll(async () => {
    for (const fd of links) closeFd(fd);
    await lab.destroy();
    lb?.close();
  });

  /** The client's run, bounded: what it printed, or 'timeout' when the transfer stalled. */
  async function client(script: string): Promise<string> {
    const bounded = `${script}setTimeout(()=>{console.log('timeout');process.exit(0);},15000).unref();`;
    return (await lab.exec('cl', process.execPath, ['-e', bounded])).stdout.trim();
  }

  describe.each(FAMILY_CASES)('$family', ({ A }) => {
    it('an upload with DF learns the MTU of a router`s link on the backend`s side (frag needed / packet too big to the SNAT address)', async () => {
      const upload = `const s=require('net').connect(30100,'${A(NODE_IP)}',()=>s.end(Buffer.alloc(${BULK},1)));let r='';s.on('data',(d)=>r+=d);s.on('close',()=>console.log(r));`;
      expect(await narrow('rt', 'r1', () => client(upload))).toBe(String(BULK));
    });

    it('a download with DF learns the MTU of a router`s link on the client`s side (frag needed / packet too big to the node address)', async () => {
      const download = `const s=require('net').connect(30100,'${A(NODE_IP)}',()=>s.write('S'));let n=0;s.on('data',(d)=>n+=d.length);s.on('close',()=>console.log(n));`;
      expect(await narrow('rc', 'q0', () => client(download))).toBe(String(BULK));
    });
  });

  it('the reject of a CHECKSUM_PARTIAL SYN survives a router without TX checksum offload', async () => {
    // cl's veth offloads its checksums (the default), so the SYN reaches lb CHECKSUM_PARTIAL;
    // rc's link to cl does not, so rc computes any checksum still pending on the way back.
    writeFrontend(lb, {
      svcId: 2,
      addr: '0.0.0.0',
      port: 30101,
      proto: IPPROTO_TCP,
      flags: SVC_F.EXTERNAL | SVC_F.NODEPORT,
      backends: [],
      action: ACTION.reject,
    });
    await lab.exec('rc', 'ethtool', ['-K', 'q0', 'tx', 'off']);
    try {
      const [r] = await lab.requests('cl', `${NODE_IP}:30101`, { proto: 'tcp', count: 1, timeoutMs: 3000 });
      expect(r!.error).toMatch(/ECONNREFUSED/);
      expect(r!.ms).toBeLessThan(1000);
    } finally {
      await lab.exec('rc', 'ethtool', ['-K', 'q0', 'tx', 'on']);
    }
  });
});
