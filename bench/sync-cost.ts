// What one sync costs the bpf agent's control plane, without the cluster around it: N Services × E
// endpoints (the bench's own manifests) go through the change tracker, the brain and the real bpf
// data plane into a freshly loaded object pinned in a private bpffs directory; then one
// EndpointSlice changes at a time and each sync is timed twice: as the incremental sync the runner
// makes after a change, and as the full recompute (start, hourly, after a failure) of the same
// change. Run as a script:
//   node dist/bench/sync-cost.js [services] [endpoints] [changes] [profile] [--distinct]
// With a profile path, the change syncs are CPU-profiled into it (a .cpuprofile for Chrome's
// DevTools); `node --cpu-prof` cannot be used: its SIGPROF interrupts the verifier at load (EAGAIN).
// The bench's manifests give every Service the same E pods; --distinct gives each Service E
// addresses of its own (N × E backends), as a real cluster has.

import { rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { SyncLoop } from '../src/brain/sync-loop.js';
import type { NodeEnv } from '../src/brain/types.js';
import { loadConfig } from '../src/config/load.js';
import { BpfDataplane } from '../src/dataplanes/bpf/dataplane.js';
import { BPFFS_ROOT, makeBpffsDir } from '../src/host/bpffs.js';
import { silentLogger } from '../src/logger.js';
import type { SourceEvent } from '../src/model/events.js';
import { ChangeTracker } from '../src/model/tracker.js';
import {
  changedEndpointIP,
  endpointSlice,
  NODE_IP,
  NODE_NAME,
  type Scenario,
  scenarioObjects,
} from './scenario.js';

export interface SyncCost {
  scenario: Scenario;
  /** Loading the programs and maps (open), then the first (full) sync of every Service. */
  openMs: number;
  coldSyncMs: number;
  /** One EndpointSlice changed, then an incremental sync. */
  incrementalMs: number[];
  /** One EndpointSlice changed, then a full recompute (fullSyncRequired). */
  fullMs: number[];
}

const NODE_ENV: NodeEnv = {
  nodeName: NODE_NAME,
  nodeIPs: [NODE_IP],
  interfaces: [],
  nodeLabels: {},
  iptables: { randomFully: true, nfacct: true },
};

function events(scenario: Scenario, distinct: boolean): SourceEvent[] {
  const { services, slices } = scenarioObjects(scenario, { distinctEndpoints: distinct });
  return [
    ...services.map((object) => ({ kind: 'Service' as const, object })),
    ...slices.map((object) => ({ kind: 'EndpointSlice' as const, object })),
    { kind: 'EndpointSlice' as const, object: endpointSlice(scenario.services - 1, scenario) },
  ].map((e) => ({ ...e, type: 'upsert' as const, origin: 'sync-cost' }));
}

export async function measureSyncCost(
  scenario: Scenario,
  changes: number,
  opts: { profileFile?: string; distinctEndpoints?: boolean } = {},
): Promise<SyncCost> {
  const { profileFile } = opts;
  const pinPath = join(BPFFS_ROOT, `kbp-sync-cost-${process.pid}`);
  const namesFile = `/tmp/kbp-sync-cost-${process.pid}.names.json`;
  rmSync(pinPath, { recursive: true, force: true });
  makeBpffsDir(pinPath, silentLogger);
  const loaded = loadConfig({ flags: {} });
  if (!loaded.ok) throw new Error('the default config does not load');
  const config = { ...loaded.config, bpf: { ...loaded.config.bpf, pinPath } };
  const started = performance.now();
  const dataplane = await BpfDataplane.open(config, silentLogger, {
    watchInterfaces: false,
    conntrackGC: false,
    graceMs: 0,
    namesFile,
  }).catch((err: unknown) => {
    rmSync(pinPath, { recursive: true, force: true });
    throw err;
  });
  const openMs = performance.now() - started;
  try {
    const tracker = new ChangeTracker(NODE_NAME);
    const loop = new SyncLoop({ tracker, nodeEnv: () => NODE_ENV, config, dataplane, observers: [] });
    const timed = async (full: boolean) => {
      if (full) loop.requestFullSync();
      const t = performance.now();
      if (!(await loop.syncOnce())) throw new Error('sync failed');
      return performance.now() - t;
    };
    tracker.apply(events(scenario, opts.distinctEndpoints ?? false));
    const coldSyncMs = await timed(true);
    const result: SyncCost = { scenario, openMs, coldSyncMs, incrementalMs: [], fullMs: [] };
    const measured = scenario.services - 1;
    const session = profileFile ? new Session() : null;
    if (session) {
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.start');
    }
    for (let change = 0; change < changes; change++) {
      for (const full of [false, true]) {
        const object = endpointSlice(measured, scenario, [changedEndpointIP(2 * change + (full ? 1 : 0))]);
        tracker.apply([{ type: 'upsert', kind: 'EndpointSlice', object, origin: 'sync-cost' }]);
        (full ? result.fullMs : result.incrementalMs).push(await timed(full));
      }
    }
    if (session && profileFile) {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync(profileFile, JSON.stringify(profile));
      session.disconnect();
    }
    return result;
  } finally {
    await dataplane.close();
    rmSync(pinPath, { recursive: true, force: true });
    rmSync(namesFile, { force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const args = process.argv.slice(2);
  const [services = '10000', endpoints = '10', changes = '5', profileFile] = args.filter(
    (a) => a !== '--distinct',
  );
  const cost = await measureSyncCost(
    { services: Number(services), endpoints: Number(endpoints) },
    Number(changes),
    {
      profileFile,
      distinctEndpoints: args.includes('--distinct'),
    },
  );
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
  console.log(
    JSON.stringify(
      {
        ...cost,
        medianIncrementalMs: median(cost.incrementalMs),
        medianFullMs: median(cost.fullMs),
      },
      null,
      1,
    ),
  );
}
