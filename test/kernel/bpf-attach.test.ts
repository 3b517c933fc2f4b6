import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { dumpMap, getPinned, linkInfo } from '../../native/libbpf.js';
import { CLONE_NEWNET, closeFd, openPath, setns } from '../../native/libc.js';
import { loadConfig } from '../../src/config/load.js';
import { Attacher, detachAll, detachBpf, type NetInterface } from '../../src/dataplanes/bpf/attach.js';
import { BpfDataplane } from '../../src/dataplanes/bpf/index.js';
import { ip4Codec } from '../../src/dataplanes/bpf/layout.js';
import { type LoadedObject, loadPinnedObject } from '../../src/dataplanes/bpf/object.js';
import { silentLogger } from '../../src/logger.js';
import { bpfConfig } from '../support/bpf-fixtures.js';
import { keepIproute2LayoutAsFound } from '../support/bpffs.js';
import { describeRoot } from '../support/privileges.js';

const ns = `kbpt-attach-${process.pid}`;
const pinPath = `/sys/fs/bpf/kbp-test-attach-${process.pid}`;
const mapSizes = { ...bpfConfig().mapSizes, conntrack: 1024, affinity: 1024 };
const config = { podInterfaces: ['kbpp*'], externalInterfaces: ['kbpe0'], xdpMode: 'generic' as const };

const namesDir = mkdtempSync(join(tmpdir(), 'kbp-attach-'));
const ip = (...args: string[]) => execFileSync('ip', ['-n', ns, ...args], { encoding: 'utf8' });
const interfaces = (): NetInterface[] =>
  (JSON.parse(ip('-j', 'link', 'show')) as NetInterface[]).map(({ ifname, ifindex }) => ({
    ifname,
    ifindex,
  }));

/** Runs `fn` with this thread in the test's namespace (ifindexes are per namespace). */
function inNamespace<T>(fn: () => T): T {
  const home = openPath('/proc/thread-self/ns/net');
  const target = openPath(`/run/netns/${ns}`);
  try {
    setns(target, CLONE_NEWNET);
    try {
      return fn();
    } finally {
      setns(home, CLONE_NEWNET);
    }
  } finally {
    closeFd(target);
    closeFd(home);
  }
}

const pinnedLink = (lb: LoadedObject, name: string) => {
  const fd = getPinned(`${lb.pinDir}/links/${name}`);
  try {
    return linkInfo(fd);
  } finally {
    closeFd(fd);
  }
};

describeRoot('attaching the programs', () => {
  let lb: LoadedObject | undefined;
  let restoreIproute2Layout = () => {};
  beforeAll(() => {
    restoreIproute2Layout = keepIproute2LayoutAsFound();
    execFileSync('ip', ['netns', 'add', ns]);
    // Deleting one end of a veth deletes both: every interface under test has its own peer.
    ip('link', 'add', 'kbpe0', 'type', 'veth', 'peer', 'name', 'other0');
    ip('link', 'add', 'kbpp0', 'type', 'veth', 'peer', 'name', 'other1');
    for (const dev of ['kbpp0', 'kbpe0', 'other0', 'other1']) ip('link', 'set', dev, 'up');
  });
  afterAll(() => {
    try {
      if (lb) detachAll(lb.pinDir, []);
    } finally {
      lb?.close();
      rmSync(pinPath, { recursive: true, force: true });
      rmSync(namesDir, { recursive: true, force: true });
      execFileSync('ip', ['netns', 'del', ns]);
      restoreIproute2Layout();
    }
  });

  it('attaches tc and XDP to the matching interfaces and pins the links', () => {
    lb = loadPinnedObject({ pinPath, mapSizes, log: silentLogger });
    const report = inNamespace(() =>
      new Attacher(lb!.pinDir, lb!.prog, config, silentLogger).sync(interfaces()),
    );
    expect(report.errors).toEqual([]);
    expect(report.attached.map((a) => `${a.hook}@${a.ifname}`)).toEqual([
      'tc-ext@kbpe0',
      'xdp-ext@kbpe0',
      'tc-pod@kbpp0',
    ]);
    expect(readdirSync(`${lb.pinDir}/links`).sort()).toEqual([
      'tc-ext@kbpe0',
      'tc-pod@kbpp0',
      'xdp-ext@kbpe0',
    ]);
    const kbpe0 = interfaces().find((i) => i.ifname === 'kbpe0')!;
    expect(pinnedLink(lb, 'tc-ext@kbpe0').ifindex).toBe(kbpe0.ifindex);
    expect(ip('-d', 'link', 'show', 'kbpe0')).toMatch(/xdpgeneric/);
  });

  it('swaps the new program into the pinned links after a restart', () => {
    const before = pinnedLink(lb!, 'tc-pod@kbpp0');
    lb!.close();
    lb = loadPinnedObject({ pinPath, mapSizes, log: silentLogger });
    const report = inNamespace(() =>
      new Attacher(lb!.pinDir, lb!.prog, config, silentLogger).sync(interfaces()),
    );
    expect(report.errors).toEqual([]);
    expect(report.attached).toEqual([]);
    expect(report.replaced.map((a) => `${a.hook}@${a.ifname}`)).toEqual([
      'tc-ext@kbpe0',
      'xdp-ext@kbpe0',
      'tc-pod@kbpp0',
    ]);
    const after = pinnedLink(lb!, 'tc-pod@kbpp0');
    expect(after.id).toBe(before.id);
    expect(after.progId).not.toBe(before.progId);
  });

  it('picks up new interfaces and forgets removed ones', () => {
    const attacher = new Attacher(lb!.pinDir, lb!.prog, config, silentLogger);
    inNamespace(() => attacher.sync(interfaces()));
    ip('link', 'add', 'kbpp1', 'type', 'veth', 'peer', 'name', 'other2');
    ip('link', 'del', 'kbpp0');
    const report = inNamespace(() => attacher.sync(interfaces()));
    expect(report.attached.map((a) => `${a.hook}@${a.ifname}`)).toEqual(['tc-pod@kbpp1']);
    expect(report.detached).toEqual(['tc-pod@kbpp0']);
    expect(existsSync(`${lb!.pinDir}/links/tc-pod@kbpp0`)).toBe(false);
  });

  it('reports an attachment that keeps failing once, and retries it at every sync', () => {
    let fail = true;
    const prog = (name: string) => {
      if (fail && name === 'kbp_xdp_ext') throw new Error('no XDP today');
      return lb!.prog(name);
    };
    ip('link', 'add', 'kbpe3', 'type', 'veth', 'peer', 'name', 'other4');
    const attacher = new Attacher(
      `${pinPath}-retry`,
      prog,
      { ...config, podInterfaces: [], externalInterfaces: ['kbpe3'] },
      silentLogger,
    );
    try {
      const first = inNamespace(() => attacher.sync(interfaces()));
      expect(first.errors.map((e) => `${e.attachment.hook}@${e.attachment.ifname}: ${e.error}`)).toEqual([
        'xdp-ext@kbpe3: no XDP today',
      ]);
      expect(first.attached.map((a) => `${a.hook}@${a.ifname}`)).toEqual(['tc-ext@kbpe3']);
      expect(inNamespace(() => attacher.sync(interfaces())).errors).toEqual([]);
      fail = false;
      expect(inNamespace(() => attacher.sync(interfaces())).attached.map((a) => a.hook)).toEqual(['xdp-ext']);
    } finally {
      detachAll(`${pinPath}-retry`, []);
      rmSync(`${pinPath}-retry`, { recursive: true, force: true });
    }
  });

  it('is done by the data plane on open, with the node addresses for NodePorts', async () => {
    ip('addr', 'add', '192.168.77.1/24', 'dev', 'kbpe0');
    const loaded = loadConfig({ flags: {} });
    if (!loaded.ok) throw new Error('default config does not load');
    const config = loaded.config;
    config.bpf = {
      ...config.bpf,
      pinPath: `${pinPath}-dp`,
      mapSizes,
      podInterfaces: ['kbpp*'],
      externalInterfaces: ['kbpe0'],
    };
    const home = openPath('/proc/thread-self/ns/net');
    const target = openPath(`/run/netns/${ns}`);
    let dp: BpfDataplane | undefined;
    try {
      // The agent runs inside the namespace: `ip` and the attach calls see its interfaces.
      setns(target, CLONE_NEWNET);
      dp = await BpfDataplane.open(config, silentLogger, {
        conntrackGC: false,
        namesFile: `${namesDir}/names.json`,
      });
      expect(readdirSync(`${pinPath}-dp/v1/links`).sort()).toEqual(['tc-ext@kbpe0', 'tc-pod@kbpp1']);
      expect(dumpMap(dp.lb.fd.nodeAddrs4, 4, 4).keys.map((k) => ip4Codec.decode(k))).toEqual([
        '192.168.77.1',
      ]);
    } finally {
      try {
        if (dp) detachAll(dp.lb.pinDir, []);
        await dp?.close();
      } finally {
        setns(home, CLONE_NEWNET);
        closeFd(target);
        closeFd(home);
        rmSync(`${pinPath}-dp`, { recursive: true, force: true });
      }
    }
  });

  it('falls back to clsact with a cls_bpf filter, and cleanup removes everything', async () => {
    ip('link', 'add', 'kbpp2', 'type', 'veth', 'peer', 'name', 'other3');
    const attacher = new Attacher(
      lb!.pinDir,
      lb!.prog,
      { ...config, xdpMode: 'off' },
      silentLogger,
      'clsact',
    );
    const report = inNamespace(() => attacher.sync(interfaces().filter((i) => i.ifname === 'kbpp2')));
    expect(report.errors).toEqual([]);
    const filters = execFileSync('tc', ['-n', ns, 'filter', 'show', 'dev', 'kbpp2', 'ingress'], {
      encoding: 'utf8',
    });
    expect(filters).toMatch(/kbp_tc_pod/);
    const home = openPath('/proc/thread-self/ns/net');
    const target = openPath(`/run/netns/${ns}`);
    let removed: string[];
    try {
      setns(target, CLONE_NEWNET);
      removed = await detachBpf(pinPath);
    } finally {
      setns(home, CLONE_NEWNET);
      closeFd(target);
      closeFd(home);
    }
    expect(removed).toContain('tc-filter@kbpp2');
    expect(readdirSync(`${lb!.pinDir}/links`)).toEqual([]);
    expect(
      execFileSync('tc', ['-n', ns, 'filter', 'show', 'dev', 'kbpp2', 'ingress'], { encoding: 'utf8' }),
    ).toBe('');
    expect(ip('-d', 'link', 'show', 'kbpe0')).not.toMatch(/xdpgeneric/);
  });
});
