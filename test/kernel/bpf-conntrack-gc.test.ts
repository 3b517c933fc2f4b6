// Conntrack GC stays off the sync path: a pass over a conntrack map of 1,000,000 entries runs in
// slices (the walk, the judgement, the re-reads and the deletes alike), and syncs asked for while it
// is under way run between its slices instead of after it. The same passes empty the fragment maps
// of the records of finished datagrams (src/dataplanes/bpf/fragment-gc.ts).

import { afterAll, beforeAll, expect, it } from 'vitest';
import { mapLookup, mapUpdate, mapUpdateBatch } from '../../native/libbpf/map.js';
import { loadConfig } from '../../src/config/load.js';
import {
  collectConntrack,
  DEFAULT_CONNTRACK_TIMEOUTS,
  yieldToEventLoop,
} from '../../src/dataplanes/bpf/conntrack-gc.js';
import { BpfDataplane } from '../../src/dataplanes/bpf/dataplane.js';
import { ct4Key, ct4Val, frag4Key, frag4Val, frag6Key, frag6Val } from '../../src/dataplanes/bpf/layout.js';
import { silentLogger } from '../../src/logger.js';
import { IPPROTO_TCP } from '../../src/net/packets.js';
import { decisions, ep, servicePort } from '../support/bpf-fixtures.js';
import { makePinDir, removePinDir } from '../support/bpffs.js';
import { describeRoot } from '../support/privileges.js';

const FLOWS = 1_000_000;
/** Entries a GC slice handles (conntrack-gc.ts). */
const SLICE = 8192;

describeRoot('conntrack GC beside syncs', () => {
  let pinPath = '';
  let dp: BpfDataplane | undefined;

  /** Half-open flows last seen at boot: every one has expired. */
  const fill = () => {
    const keys = Array.from({ length: FLOWS }, (_, i) => ({
      saddr: `10.${100 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}`,
      daddr: '10.96.0.10',
      sport: 40000,
      dport: 80,
      proto: IPPROTO_TCP,
    }));
    const value = {
      lastSeenNs: 1n,
      xlateSaddr: '10.0.0.1',
      xlateDaddr: '10.1.0.1',
      xlateSport: 40000,
      xlateDport: 8080,
      svcId: 1,
      backendId: 1,
      flags: 0,
      tcpFlags: 0,
    };
    mapUpdateBatch(
      dp!.lb.fd.ct4Tcp,
      ct4Key.encodeMany(keys),
      ct4Val.encodeMany(keys.map(() => value)),
      FLOWS,
    );
  };
  const web = (endpoints: string[]) =>
    decisions([
      servicePort('ns', 'web', { clusterIP: '10.96.0.10', endpoints: endpoints.map((ip) => ep(ip, 8080)) }),
    ]);

  beforeAll(async () => {
    pinPath = makePinDir('ct-gc');
    const loaded = loadConfig({ flags: {} });
    if (!loaded.ok) throw new Error('default config does not load');
    // Socket LB off: the default (host) would attach the socket hooks at the machine's cgroup2 root.
    const config = { ...loaded.config, bpf: { ...loaded.config.bpf, pinPath, socketLB: 'off' as const } };
    config.bpf.mapSizes = { ...config.bpf.mapSizes, conntrack: 1 << 20 };
    dp = await BpfDataplane.open(config, silentLogger, {
      watchInterfaces: false,
      conntrackGC: false,
      // Each change is written at once, not after the previous one's deferred deletions.
      graceMs: 0,
      namesFile: `${pinPath}.names.json`,
    });
  });
  afterAll(async () => {
    await dp?.close();
    removePinDir(pinPath);
  });

  it('syncs asked for during a GC pass over 1,000,000 entries run between its slices', async () => {
    fill();
    await dp!.sync(web(['10.1.0.1']), {
      changedServices: new Set(['ns/web']),
      full: true,
      reason: 'first sync',
    });
    let gcDone = false;
    const gcStarted = performance.now();
    const gc = dp!.collectConntrack().then((passes) => {
      gcDone = true;
      return passes;
    });
    // One EndpointSlice change after another, each as soon as the previous one is written.
    const syncMs: number[] = [];
    for (let change = 0; !gcDone; change++) {
      const started = performance.now();
      await dp!.sync(web(['10.1.0.1', `10.1.1.${change % 250}`]), {
        changedServices: new Set(['ns/web']),
        full: false,
        reason: 'changed Services',
      });
      syncMs.push(performance.now() - started);
      await yieldToEventLoop();
    }
    const [tcp] = await gc;
    const gcMs = performance.now() - gcStarted;
    const sorted = [...syncMs].sort((a, b) => a - b);
    console.log(
      `GC pass over ${FLOWS} entries: ${gcMs.toFixed(0)} ms; ${syncMs.length} syncs during it, ` +
        `median ${sorted[Math.floor(sorted.length / 2)]!.toFixed(1)} ms, longest ${sorted.at(-1)!.toFixed(1)} ms`,
    );
    expect(tcp).toMatchObject({ scanned: FLOWS, deletedEntries: FLOWS });
    // Queued behind the pass, one sync would have run; between its slices, about one per slice.
    expect(syncMs.length).toBeGreaterThanOrEqual(Math.floor(FLOWS / SLICE));
  });

  it('a pass yields to the event loop after every slice of every step', async () => {
    fill();
    let pauses = 0;
    let longest = 0;
    let last = performance.now();
    const stats = await collectConntrack(
      dp!.lb.fd.ct4Tcp,
      DEFAULT_CONNTRACK_TIMEOUTS,
      undefined,
      undefined,
      () => {
        const now = performance.now();
        longest = Math.max(longest, now - last);
        pauses++;
        return yieldToEventLoop().then(() => {
          last = performance.now();
        });
      },
    );
    console.log(`GC pass over ${FLOWS} entries: ${pauses} slices, the longest ${longest.toFixed(1)} ms`);
    expect(stats).toMatchObject({ scanned: FLOWS, deletedEntries: FLOWS });
    // The walk, the judgement, the re-reads and the deletes: each in slices of SLICE entries.
    expect(pauses).toBeGreaterThanOrEqual(4 * Math.floor(FLOWS / SLICE));
  });

  it('GC passes delete the fragment records a pass before them saw unchanged, and keep a rewritten one', async () => {
    const { fragments4, fragments6 } = dp!.lb.fd;
    const key4 = (id: number) => frag4Key.encode({ saddr: '192.0.2.100', daddr: '10.10.0.1', id, proto: 17 });
    const key6 = frag6Key.encode({ saddr: 'fd00:192::2:100', daddr: 'fd00:10:10::0:1', id: 7 });
    const ports = (sport: number) => frag4Val.encode({ sport, dport: 30053 });
    for (const id of [1, 2, 3]) mapUpdate(fragments4, key4(id), ports(40000));
    mapUpdate(fragments6, key6, frag6Val.encode({ sport: 40000, dport: 30053, proto: 17 }));
    const present = (fd: number, key: Buffer, size: number) => mapLookup(fd, key, Buffer.alloc(size));
    // The first pass only notes them: a datagram may be between its fragments.
    await dp!.collectConntrack();
    expect([1, 2, 3].map((id) => present(fragments4, key4(id), frag4Val.size))).toEqual([true, true, true]);
    // A new datagram reuses IP id 2 before the next pass: its record stays for the pass after.
    mapUpdate(fragments4, key4(2), ports(40001));
    mapUpdate(fragments4, key4(4), ports(40000));
    await dp!.collectConntrack();
    expect([1, 2, 3, 4].map((id) => present(fragments4, key4(id), frag4Val.size))).toEqual([
      false,
      true,
      false,
      true,
    ]);
    expect(present(fragments6, key6, frag6Val.size)).toBe(false);
    await dp!.collectConntrack();
    expect([2, 4].map((id) => present(fragments4, key4(id), frag4Val.size))).toEqual([false, false]);
  });
});
