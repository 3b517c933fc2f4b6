// Conntrack GC stays off the sync path: a pass over a large conntrack map runs in slices, and a
// sync asked for while it is under way completes before the pass does.

import { afterAll, beforeAll, expect, it } from 'vitest';
import { mapUpdateBatch } from '../../native/libbpf.js';
import { loadConfig } from '../../src/config/load.js';
import { BpfDataplane } from '../../src/dataplanes/bpf/dataplane.js';
import { ct4Key, ct4Val } from '../../src/dataplanes/bpf/layout.js';
import { silentLogger } from '../../src/logger.js';
import { IPPROTO_TCP } from '../../src/net/packets.js';
import { decisions, ep, servicePort } from '../support/bpf-fixtures.js';
import { makePinDir, removePinDir } from '../support/bpffs.js';
import { describeRoot } from '../support/privileges.js';

const FLOWS = 200_000;

describeRoot('conntrack GC beside syncs', () => {
  let pinPath = '';
  let dp: BpfDataplane | undefined;

  beforeAll(async () => {
    pinPath = makePinDir('ct-gc');
    const loaded = loadConfig({ flags: {} });
    if (!loaded.ok) throw new Error('default config does not load');
    const config = { ...loaded.config, bpf: { ...loaded.config.bpf, pinPath } };
    config.bpf.mapSizes = { ...config.bpf.mapSizes, conntrack: 262_144 };
    dp = await BpfDataplane.open(config, silentLogger, {
      watchInterfaces: false,
      conntrackGC: false,
      namesFile: `${pinPath}.names.json`,
    });
    // Half-open flows last seen at boot: every one has expired.
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
    mapUpdateBatch(dp.lb.fd.ct4Tcp, ct4Key.encodeMany(keys), ct4Val.encodeMany(keys.map(() => value)), FLOWS);
  });
  afterAll(async () => {
    await dp?.close();
    removePinDir(pinPath);
  });

  it('a sync asked for during a GC pass over 200,000 entries completes before the pass', async () => {
    const order: string[] = [];
    const gc = dp!.collectConntrack().then((passes) => {
      order.push('gc');
      return passes;
    });
    // The pass has started: its first slice ran, and it now yields between slices.
    await new Promise((resolve) => setImmediate(resolve));
    await dp!.sync(
      decisions([servicePort('ns', 'web', { clusterIP: '10.96.0.10', endpoints: [ep('10.1.0.1', 8080)] })]),
      { changedServices: new Set(['ns/web']), fullSyncRequired: true },
    );
    order.push('sync');
    const [tcp] = await gc;
    expect(order).toEqual(['sync', 'gc']);
    expect(tcp).toMatchObject({ scanned: FLOWS, deletedEntries: FLOWS });
  });
});
