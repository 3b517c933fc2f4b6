import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { linkInfo, programNameById } from '../../native/libbpf/attach.js';
import { dumpMap } from '../../native/libbpf/map.js';
import { getPinned } from '../../native/libbpf/object.js';
import { closeFd } from '../../native/libc.js';
import { listCommand } from '../../src/cli/list.js';
import { loadConfig } from '../../src/config/load.js';
import type { ProxyConfig } from '../../src/config/types.js';
import { Attacher, detachAll, detachBpf, linkNameOfPin } from '../../src/dataplanes/bpf/attach.js';
import { BpfDataplane } from '../../src/dataplanes/bpf/dataplane.js';
import { discoverInterfaces, type HostNetwork } from '../../src/dataplanes/bpf/discover.js';
import type { AttachmentView } from '../../src/dataplanes/bpf/inspect-list.js';
import { ip4Codec } from '../../src/dataplanes/bpf/layout.js';
import { type LoadedObject, loadPinnedObject } from '../../src/dataplanes/bpf/object.js';
import { findCgroup2Root } from '../../src/host/cgroup.js';
import { until } from '../../src/lab/until.js';
import { bpfConfig, decisions } from '../support/bpf-fixtures.js';
import { keepIproute2LayoutAsFound } from '../support/bpffs.js';
import { enterNetns, inNetns } from '../support/in-netns.js';
import { describeRoot } from '../support/privileges.js';

const silentLogger = pino({ level: 'silent' });

// The node under test: a namespace shaped like a flannel node. Peers live in namespaces of their
// own (the LAN and a pod), as on a real node, so the host side sees one end of each veth.
const ns = `kbpt-attach-${process.pid}`;
const lan = `${ns}-lan`;
const pod = `${ns}-pod`;
const NODE_IP = '192.168.77.1';
const pinPath = `/sys/fs/bpf/kbp-test-attach-${process.pid}`;
const mapSizes = { ...bpfConfig().mapSizes, conntrack: 1024, affinity: 1024 };
const auto = { podInterfaces: [], externalInterfaces: [] };

const namesDir = mkdtempSync(join(tmpdir(), 'kbp-attach-'));
// The socket hooks go on a cgroup of this test's own, never the machine's root.
const cgroup = `${findCgroup2Root()}/kbp-test-attach-${process.pid}`;
const ip = (...args: string[]) => execFileSync('ip', ['-n', ns, ...args], { encoding: 'utf8' });
const tc = (...args: string[]) => execFileSync('tc', ['-n', ns, ...args], { encoding: 'utf8' });

/** A pod veth: the host end `name` here, the other end in the pod namespace. */
function addPodVeth(name: string): void {
  ip('link', 'add', name, 'type', 'veth', 'peer', 'name', `p-${name}`, 'netns', pod);
  ip('link', 'set', name, 'up');
}

/** What probeHostNetwork() reads, read from outside the namespace. */
function host(): HostNetwork {
  const json = (...args: string[]) => JSON.parse(ip('-j', ...args));
  return {
    links: json('-d', 'addr', 'show'),
    defaultRoutes: [...json('-4', 'route', 'show', 'default'), ...json('-6', 'route', 'show', 'default')],
  };
}

/** `hook@interface program` of every pinned link. */
function pinned(pinDir: string): string[] {
  return readdirSync(`${pinDir}/links`)
    .map((file) => {
      const fd = getPinned(`${pinDir}/links/${file}`);
      try {
        return `${linkNameOfPin(file)} ${programNameById(linkInfo(fd).progId)}`;
      } finally {
        closeFd(fd);
      }
    })
    .sort();
}

const pinnedLink = (lb: LoadedObject, name: string) => {
  const fd = getPinned(`${lb.pinDir}/links/${name}`);
  try {
    return linkInfo(fd);
  } finally {
    closeFd(fd);
  }
};

function agentConfig(pin: string): ProxyConfig {
  const loaded = loadConfig({ flags: {} });
  if (!loaded.ok) throw new Error('default config does not load');
  // The defaults as shipped: no interface names.
  expect(loaded.config.bpf.podInterfaces).toEqual([]);
  expect(loaded.config.bpf.externalInterfaces).toEqual([]);
  // The default socketLB (host) attaches the socket hooks too.
  expect(loaded.config.bpf.socketLB).toBe('host');
  return { ...loaded.config, bpf: { ...loaded.config.bpf, pinPath: pin, mapSizes, cgroupPath: cgroup } };
}

describeRoot('attaching the programs to the interfaces found', () => {
  let lb: LoadedObject | undefined;
  let restoreIproute2Layout = () => {};
  beforeAll(() => {
    restoreIproute2Layout = keepIproute2LayoutAsFound();
    for (const n of [ns, lan, pod]) execFileSync('ip', ['netns', 'add', n]);
    mkdirSync(cgroup);
    // The uplink is a veth, as in labs and some VMs: the node IP and the default route make it external.
    ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'up0', 'netns', lan);
    ip('link', 'set', 'eth0', 'up');
    ip('addr', 'add', `${NODE_IP}/24`, 'dev', 'eth0');
    ip('route', 'add', 'default', 'via', '192.168.77.254');
    // A ptp-CNI pod: its host end holds the pod gateway, which is not a node IP.
    addPodVeth('vethptp');
    ip('addr', 'add', '10.244.1.1/32', 'dev', 'vethptp');
    // A bridge-CNI pod: cni0 holds the gateway and takes nothing; its port is pod-facing.
    ip('link', 'add', 'cni0', 'type', 'bridge');
    ip('addr', 'add', '10.244.2.1/24', 'dev', 'cni0');
    ip('link', 'set', 'cni0', 'up');
    addPodVeth('vethbr');
    ip('link', 'set', 'vethbr', 'master', 'cni0');
    // An overlay, and an L3 device carrying the IPv6 default route.
    ip('link', 'add', 'flannel.1', 'type', 'vxlan', 'id', '1', 'dev', 'eth0', 'dstport', '8472');
    ip('link', 'set', 'flannel.1', 'up');
    ip('tuntap', 'add', 'dev', 'tun0', 'mode', 'tun');
    ip('link', 'set', 'tun0', 'up');
    ip('-6', 'route', 'add', 'default', 'dev', 'tun0');
  });
  afterAll(() => {
    try {
      if (lb) detachAll(lb.pinDir, []);
    } finally {
      lb?.close();
      rmSync(pinPath, { recursive: true, force: true });
      rmSync(namesDir, { recursive: true, force: true });
      for (const n of [ns, lan, pod]) execFileSync('ip', ['netns', 'del', n]);
      rmdirSync(cgroup);
      restoreIproute2Layout();
    }
  });

  it('puts ingress and egress programs on the devices found, the L3 variants on tun0, XDP on the L2 uplink only', async () => {
    lb = await loadPinnedObject({ pinPath, mapSizes, log: silentLogger });
    const found = discoverInterfaces(host(), [NODE_IP], auto);
    const report = inNetns(ns, () =>
      new Attacher(lb!.pinDir, lb!.prog, { xdpMode: 'generic' }, silentLogger).sync(found),
    );
    expect(report.errors).toEqual([]);
    expect(new Set(report.attached.map((a) => a.mechanism))).toEqual(new Set(['tcx', 'xdp-generic']));
    expect(pinned(lb.pinDir)).toEqual([
      'tc-egress@eth0 kbp_tc_egress',
      'tc-egress@flannel.1 kbp_tc_egress',
      // The kernel keeps 15 characters of a program's name.
      'tc-egress@tun0 kbp_tc_egress_l',
      'tc-egress@vethbr kbp_tc_egress',
      'tc-egress@vethptp kbp_tc_egress',
      'tc-ingress@eth0 kbp_tc_ext',
      'tc-ingress@flannel.1 kbp_tc_ext',
      'tc-ingress@tun0 kbp_tc_ext_l3',
      'tc-ingress@vethbr kbp_tc_pod',
      'tc-ingress@vethptp kbp_tc_pod',
      'xdp@eth0 kbp_xdp_ext',
    ]);
    const eth0 = found.find((i) => i.ifname === 'eth0')!;
    expect(pinnedLink(lb, 'tc-egress@eth0').ifindex).toBe(eth0.ifindex);
    expect(ip('-d', 'link', 'show', 'eth0')).toMatch(/xdpgeneric/);
  });

  it('swaps the new programs into the pinned links after a restart', async () => {
    const before = pinnedLink(lb!, 'tc-egress@vethptp');
    lb!.close();
    lb = await loadPinnedObject({ pinPath, mapSizes, log: silentLogger });
    const found = discoverInterfaces(host(), [NODE_IP], auto);
    const report = inNetns(ns, () =>
      new Attacher(lb!.pinDir, lb!.prog, { xdpMode: 'generic' }, silentLogger).sync(found),
    );
    expect(report.errors).toEqual([]);
    expect(report.attached).toEqual([]);
    expect(report.replaced).toHaveLength(11);
    const after = pinnedLink(lb!, 'tc-egress@vethptp');
    expect(after.id).toBe(before.id);
    expect(after.progId).not.toBe(before.progId);
  });

  it('reports an attachment that keeps failing once, and retries it at every sync', () => {
    let fail = true;
    const prog = (name: string) => {
      if (fail && name === 'kbp_xdp_ext') throw new Error('no XDP today');
      return lb!.prog(name);
    };
    const attacher = new Attacher(`${pinPath}-retry`, prog, { xdpMode: 'generic' }, silentLogger);
    // An interface of its own: tcx refuses the same program twice on one hook.
    ip('link', 'add', 'eth9', 'type', 'veth', 'peer', 'name', 'up9', 'netns', lan);
    const eth9 = discoverInterfaces(host(), [NODE_IP], { ...auto, externalInterfaces: ['eth9'] }).filter(
      (i) => i.ifname === 'eth9',
    );
    try {
      const first = inNetns(ns, () => attacher.sync(eth9));
      expect(first.errors.map((e) => `${e.attachment.hook}@${e.attachment.ifname}: ${e.error}`)).toEqual([
        'xdp@eth9: no XDP today',
      ]);
      expect(first.attached.map((a) => `${a.hook}@${a.ifname}`)).toEqual([
        'tc-ingress@eth9',
        'tc-egress@eth9',
      ]);
      expect(inNetns(ns, () => attacher.sync(eth9)).errors).toEqual([]);
      fail = false;
      expect(inNetns(ns, () => attacher.sync(eth9)).attached.map((a) => a.hook)).toEqual(['xdp']);
    } finally {
      inNetns(ns, () => detachAll(`${pinPath}-retry`, []));
      rmSync(`${pinPath}-retry`, { recursive: true, force: true });
      ip('link', 'del', 'eth9');
    }
  });

  it('the data plane follows interfaces as they come and go, with no Service change, and list shows them', async () => {
    // The earlier tests' links: the data plane below starts from a clean node.
    if (lb) detachAll(lb.pinDir, []);
    const config = agentConfig(`${pinPath}-dp`);
    const pinDir = `${pinPath}-dp/v1`;
    const has = (name: string) => existsSync(`${pinDir}/links/${name}`);
    const logged: { msg: string; interface?: string; link?: string; hook?: string; program?: string }[] = [];
    const log = pino({ level: 'info' }, { write: (line: string) => logged.push(JSON.parse(line)) });
    // The agent runs inside the namespace: `ip`, `ip monitor` and the attach calls see its interfaces.
    const leave = enterNetns(ns);
    let dp: BpfDataplane | undefined;
    try {
      dp = await BpfDataplane.open(config, log, {
        conntrackGC: false,
        namesFile: `${namesDir}/names.json`,
      });
      // Before the first sync the node IP is unknown: eth0 is external by its default route.
      expect(pinned(pinDir)).toEqual([
        'cgroup-connect4@cgroup kbp_sock4_conne',
        'cgroup-connect6@cgroup kbp_sock6_conne',
        'cgroup-getpeername4@cgroup kbp_sock4_getpe',
        'cgroup-getpeername6@cgroup kbp_sock6_getpe',
        'cgroup-recvmsg4@cgroup kbp_sock4_recvm',
        'cgroup-recvmsg6@cgroup kbp_sock6_recvm',
        'cgroup-sendmsg4@cgroup kbp_sock4_sendm',
        'cgroup-sendmsg6@cgroup kbp_sock6_sendm',
        'tc-egress@eth0 kbp_tc_egress',
        'tc-egress@flannel.1 kbp_tc_egress',
        'tc-egress@tun0 kbp_tc_egress_l',
        'tc-egress@vethbr kbp_tc_egress',
        'tc-egress@vethptp kbp_tc_egress',
        'tc-ingress@eth0 kbp_tc_ext',
        'tc-ingress@flannel.1 kbp_tc_ext',
        'tc-ingress@tun0 kbp_tc_ext_l3',
        'tc-ingress@vethbr kbp_tc_pod',
        'tc-ingress@vethptp kbp_tc_pod',
      ]);
      // The start verified the programs every node uses; tun0 had its L3 variants loaded for it.
      expect(logged.filter((l) => l.msg === 'bpf programs loaded for new interfaces')).toEqual([
        expect.objectContaining({ programs: ['kbp_tc_ext_l3', 'kbp_tc_egress_l3'] }),
      ]);
      expect(
        dumpMap(dp.lb.fd.nodeAddrs4, 4, 4)
          .keys.map((k) => ip4Codec.decode(k))
          .sort(),
      ).toEqual(['10.244.1.1', '10.244.2.1', NODE_IP]);
      // Each interface's SNAT source, by ifindex (eth0 has only a link-local IPv6 address).
      const ifindex = (name: string) => JSON.parse(ip('-j', 'link', 'show', name))[0].ifindex as number;
      const sources = (family: 'IPv4' | 'IPv6') =>
        Object.fromEntries(
          [...dp!.store.interfaceAddresses()[family]].map(([i, a]) => [
            JSON.parse(ip('-j', 'link')).find((l: { ifindex: number }) => l.ifindex === i)?.ifname ??
              String(i),
            a,
          ]),
        );
      expect(sources('IPv4')).toEqual({ eth0: NODE_IP, vethptp: '10.244.1.1', cni0: '10.244.2.1' });
      expect(sources('IPv6')).toEqual({});

      // A new pod: hooked within a second, without any sync.
      addPodVeth('vethnew');
      const hookedMs = await until(
        'vethnew hooked',
        () => has('tc-ingress@vethnew') && has('tc-egress@vethnew'),
        1000,
      );
      expect(hookedMs).toBeLessThan(1000);
      // Its addresses: the SNAT sources through it follow, both families, without any sync.
      ip('addr', 'add', '10.244.3.1/32', 'dev', 'vethnew');
      ip('addr', 'add', 'fd00:3::1/64', 'dev', 'vethnew', 'nodad');
      await until('vethnew sources', () => sources('IPv6').vethnew === 'fd00:3::1', 1000);
      expect(sources('IPv4').vethnew).toBe('10.244.3.1');
      ip('addr', 'del', 'fd00:3::1/64', 'dev', 'vethnew');
      ip('addr', 'add', 'fd00:3::2/64', 'dev', 'vethnew', 'nodad');
      await until('vethnew source changed', () => sources('IPv6').vethnew === 'fd00:3::2', 1000);
      const vethnew = ifindex('vethnew');
      const attachments = JSON.parse(await listCommand({ pinPath: `${pinPath}-dp`, output: 'json' }))
        .attachments as AttachmentView[];
      expect(attachments.filter((a) => a.interface === 'vethnew')).toEqual([
        { interface: 'vethnew', hook: 'tc-ingress', program: 'kbp_tc_pod', mechanism: 'tcx' },
        { interface: 'vethnew', hook: 'tc-egress', program: 'kbp_tc_egress', mechanism: 'tcx' },
      ]);
      expect(
        attachments.filter((a) => a.interface === 'cgroup').map((a) => `${a.hook} ${a.program}`),
      ).toEqual([
        'cgroup-connect4 kbp_sock4_connect',
        'cgroup-sendmsg4 kbp_sock4_sendmsg',
        'cgroup-recvmsg4 kbp_sock4_recvmsg',
        'cgroup-getpeername4 kbp_sock4_getpeername',
        'cgroup-connect6 kbp_sock6_connect',
        'cgroup-sendmsg6 kbp_sock6_sendmsg',
        'cgroup-recvmsg6 kbp_sock6_recvmsg',
        'cgroup-getpeername6 kbp_sock6_getpeername',
      ]);
      expect(attachments.find((a) => a.interface === 'tun0' && a.hook === 'tc-egress')?.program).toBe(
        'kbp_tc_egress_l3',
      );
      const text = await listCommand({ pinPath: `${pinPath}-dp`, output: 'table' });
      expect(text).toMatch(/INTERFACE\s+HOOK\s+PROGRAM\s+MECHANISM/);
      expect(text).toMatch(/vethnew\s+tc-ingress\s+kbp_tc_pod\s+tcx/);

      // One log line per attach.
      expect(
        logged
          .filter((l) => l.msg === 'bpf program attached' && l.interface === 'vethnew')
          .map((l) => `${l.hook} ${l.program}`),
      ).toEqual(['tc-ingress kbp_tc_pod', 'tc-egress kbp_tc_egress']);

      // The pod goes away: its pins are released, its SNAT sources deleted.
      ip('link', 'del', 'vethnew');
      await until('vethnew released', () => !has('tc-ingress@vethnew') && !has('tc-egress@vethnew'), 1000);
      await until(
        'vethnew sources deleted',
        () =>
          !dp!.store.interfaceAddresses().IPv4.has(vethnew) &&
          !dp!.store.interfaceAddresses().IPv6.has(vethnew),
        1000,
      );

      // A renamed interface: its pins follow the name (tcx refuses the same program twice on a
      // hook, so the old attachment has to go first).
      addPodVeth('vethold');
      await until('vethold hooked', () => has('tc-ingress@vethold'), 1000);
      ip('link', 'set', 'vethold', 'down');
      ip('link', 'set', 'vethold', 'name', 'vethren');
      ip('link', 'set', 'vethren', 'up');
      await until(
        'vethren hooked, vethold released',
        () => has('tc-ingress@vethren') && has('tc-egress@vethren') && !has('tc-ingress@vethold'),
        1000,
      );
      expect(
        logged
          .filter((l) => l.msg === 'bpf program detached')
          .map((l) => l.link)
          .sort(),
      ).toEqual(['tc-egress@vethnew', 'tc-egress@vethold', 'tc-ingress@vethnew', 'tc-ingress@vethold']);
      expect(logged.filter((l) => l.msg === 'attach failed')).toEqual([]);

      // A veth that holds the node IP is the node's uplink, not a pod: once the sync names the
      // node IP it changes role, and its program is swapped in the same link.
      addPodVeth('vethup');
      ip('addr', 'add', '10.0.9.1/24', 'dev', 'vethup');
      await until('vethup hooked', () => has('tc-ingress@vethup'), 1000);
      const link = pinnedLink(dp.lb, 'tc-ingress@vethup');
      await dp.sync(decisions([], { nodeIP: '10.0.9.1' }), {
        changedServices: new Set(),
        full: true,
        reason: 'first sync',
      });
      await until(
        'vethup external',
        () => programNameById(pinnedLink(dp!.lb, 'tc-ingress@vethup').progId) === 'kbp_tc_ext',
        1000,
      );
      expect(pinnedLink(dp.lb, 'tc-ingress@vethup').id).toBe(link.id);
    } finally {
      try {
        if (dp) detachAll(dp.lb.pinDir, []);
        await dp?.close();
      } finally {
        leave();
        rmSync(`${pinPath}-dp`, { recursive: true, force: true });
      }
    }
  });

  it('falls back to clsact filters at ingress and egress, and cleanup removes them all', async () => {
    const found = discoverInterfaces(host(), [NODE_IP], auto).filter((i) => i.ifname === 'vethptp');
    const attacher = new Attacher(lb!.pinDir, lb!.prog, { xdpMode: 'off' }, silentLogger, 'clsact');
    const report = inNetns(ns, () => attacher.sync(found));
    expect(report.errors).toEqual([]);
    expect(report.attached.map((a) => `${a.hook} ${a.mechanism}`)).toEqual([
      'tc-ingress clsact',
      'tc-egress clsact',
    ]);
    expect(tc('filter', 'show', 'dev', 'vethptp', 'ingress')).toMatch(/kbp_tc_pod/);
    expect(tc('filter', 'show', 'dev', 'vethptp', 'egress')).toMatch(/kbp_tc_egress/);
    const leave = enterNetns(ns);
    let removed: string[];
    let listed: AttachmentView[];
    try {
      listed = JSON.parse(await listCommand({ pinPath, output: 'json' })).attachments;
      removed = await detachBpf(pinPath);
    } finally {
      leave();
    }
    expect(listed).toEqual([
      { interface: 'vethptp', hook: 'tc-ingress', program: 'kbp_tc_pod', mechanism: 'clsact' },
      { interface: 'vethptp', hook: 'tc-egress', program: 'kbp_tc_egress', mechanism: 'clsact' },
    ]);
    expect(removed).toEqual(['tc-ingress@vethptp (clsact)', 'tc-egress@vethptp (clsact)']);
    expect(tc('filter', 'show', 'dev', 'vethptp', 'ingress')).toBe('');
    expect(tc('filter', 'show', 'dev', 'vethptp', 'egress')).toBe('');
  });

  it('releases a clsact filter when its interface stops taking a program', () => {
    const attacher = new Attacher(lb!.pinDir, lb!.prog, { xdpMode: 'off' }, silentLogger, 'clsact');
    const found = discoverInterfaces(host(), [NODE_IP], auto).filter((i) => i.ifname === 'vethbr');
    inNetns(ns, () => attacher.sync(found));
    expect(tc('filter', 'show', 'dev', 'vethbr', 'egress')).toMatch(/kbp_tc_egress/);
    const report = inNetns(ns, () => attacher.sync([]));
    expect(report.detached).toEqual(['tc-ingress@vethbr', 'tc-egress@vethbr']);
    expect(tc('filter', 'show', 'dev', 'vethbr', 'ingress')).toBe('');
    expect(tc('filter', 'show', 'dev', 'vethbr', 'egress')).toBe('');
  });
});
