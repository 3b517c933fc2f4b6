// What one sync costs the bpf agent's control plane, without the cluster around it: N Services × E
// endpoints (the bench's own manifests) go through the change tracker, the brain and the real bpf
// data plane into a freshly loaded object pinned in a private bpffs directory; then one
// EndpointSlice changes at a time and is synced: first as the incremental syncs the runner makes
// after a change, then as full recomputes (start, hourly, after a failure). Each sync is timed in
// wall time and in CPU time. Run as a script:
//   node dist/bench/sync-cost.js [services] [endpoints] [changes] [profile] [--distinct] [--no-full]
// --no-full skips the full recomputes (for large N). With a profile path, the incremental syncs
// are CPU-profiled into it, the full ones into <profile>.full.cpuprofile and the first sync into
// <profile>.cold.cpuprofile (for Chrome's DevTools); `node --cpu-prof` cannot be used: its SIGPROF
// interrupts the verifier at load (EAGAIN).
// The bench's manifests give every Service the same E pods; --distinct gives each Service E
// addresses of its own (N × E backends), as a real cluster has.

import { rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { SyncLoop } from '../src/brain/sync-loop.js';
import { loadConfig } from '../src/config/load.js';
import { BpfDataplane } from '../src/dataplanes/bpf/dataplane.js';
import { BPFFS_ROOT, makeBpffsDir } from '../src/host/bpffs.js';
import { silentLogger } from '../src/logger.js';
import type { SourceEvent } from '../src/model/events.js';
import { ChangeTracker } from '../src/model/tracker.js';
import {
  changedEndpointIP,
  endpointSlice,
  NODE_ENV,
  NODE_NAME,
  type Scenario,
  scenarioMapSizes,
  scenarioObjects,
} from './scenario.js';
import { summarize } from './stats.js';

export interface SyncCost {
  scenario: Scenario;
  /** Loading the programs and maps (open), then the first (full) sync of every Service. */
  openMs: number;
  coldSyncMs: number;
  /** CPU time (user + system, every thread of the process) of each sync below, beside its wall
   * time: on a shared machine it is the figure that does not depend on the other loads. */
  cpuMs: { cold: number; incremental: number[]; full: number[] };
  /** One EndpointSlice changed, then an incremental sync. */
  incrementalMs: number[];
  /** The same changes from the event (parsed into the tracker) to the sync's last map write: the
   * agent's part of change → kernel, without the source's debounce or the runner's rate limit. */
  changeToKernelMs: number[];
  /** One EndpointSlice changed, then a full recompute (a full SyncScope). */
  fullMs: number[];
}

function events(scenario: Scenario, distinct: boolean): SourceEvent[] {
  const { services, slices } = scenarioObjects(scenario, { distinctEndpoints: distinct });
  return [
    ...services.map((object) => ({ kind: 'Service' as const, object })),
    ...slices.map((object) => ({ kind: 'EndpointSlice' as const, object })),
    { kind: 'EndpointSlice' as const, object: endpointSlice(scenario.services - 1, scenario) },
  ].map((e) => ({ ...e, type: 'upsert' as const, origin: 'sync-cost' }));
}

/** Runs `task`, CPU-profiled into `file` when one is given. */
async function profiled<T>(file: string | undefined, task: () => Promise<T>): Promise<T> {
  if (!file) return task();
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  try {
    return await task();
  } finally {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(file, JSON.stringify(profile));
    session.disconnect();
  }
}

export async function measureSyncCost(
  scenario: Scenario,
  changes: number,
  opts: { profileFile?: string; distinctEndpoints?: boolean; fullSyncs?: boolean } = {},
): Promise<SyncCost> {
  const { profileFile } = opts;
  const pinPath = join(BPFFS_ROOT, `kbp-sync-cost-${process.pid}`);
  const namesFile = `/tmp/kbp-sync-cost-${process.pid}.names.json`;
  rmSync(pinPath, { recursive: true, force: true });
  makeBpffsDir(pinPath, silentLogger);
  const loaded = loadConfig({ flags: {} });
  if (!loaded.ok) throw new Error('the default config does not load');
  // Room for every frontend and slot, as an operator of that many Services raises the map sizes: a
  // full map would make every sync a whole plan (the plan is then order-dependent).
  const mapSizes = { ...loaded.config.bpf.mapSizes, ...scenarioMapSizes(scenario) };
  const config = { ...loaded.config, bpf: { ...loaded.config.bpf, pinPath, mapSizes } };
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
    const cpuMs = { cold: 0, incremental: [] as number[], full: [] as number[] };
    const timed = async (full: boolean, cpu: (ms: number) => void) => {
      if (full) loop.requestFullSync();
      const t = performance.now();
      const c = process.cpuUsage();
      if (!(await loop.syncOnce())) throw new Error('sync failed');
      const used = process.cpuUsage(c);
      cpu((used.user + used.system) / 1000);
      return performance.now() - t;
    };
    tracker.apply(events(scenario, opts.distinctEndpoints ?? false));
    const coldSyncMs = await profiled(profileFile?.replace(/(\.cpuprofile)?$/, '.cold.cpuprofile'), () =>
      timed(true, (ms) => {
        cpuMs.cold = ms;
      }),
    );
    const result: SyncCost = {
      scenario,
      openMs,
      coldSyncMs,
      cpuMs,
      incrementalMs: [],
      changeToKernelMs: [],
      fullMs: [],
    };
    const measured = scenario.services - 1;
    // Incremental changes first, then full ones: each kind gets a profile of its own.
    let change = 0;
    for (const full of [false, true]) {
      if (full && !(opts.fullSyncs ?? true)) break;
      const file =
        profileFile && (full ? profileFile.replace(/(\.cpuprofile)?$/, '.full.cpuprofile') : profileFile);
      await profiled(file, async () => {
        for (let i = 0; i < changes; i++, change++) {
          const object = endpointSlice(measured, scenario, [changedEndpointIP(change)]);
          const changed = performance.now();
          tracker.apply([{ type: 'upsert', kind: 'EndpointSlice', object, origin: 'sync-cost' }]);
          const cpu = full ? cpuMs.full : cpuMs.incremental;
          (full ? result.fullMs : result.incrementalMs).push(await timed(full, (ms) => cpu.push(ms)));
          if (!full) result.changeToKernelMs.push(performance.now() - changed);
        }
      });
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
    (a) => !a.startsWith('--'),
  );
  const cost = await measureSyncCost(
    { services: Number(services), endpoints: Number(endpoints) },
    Number(changes),
    {
      profileFile,
      distinctEndpoints: args.includes('--distinct'),
      fullSyncs: !args.includes('--no-full'),
    },
  );
  const rounded = (xs: number[]) => xs.map((x) => Math.round(x * 10) / 10);
  console.log(
    JSON.stringify({
      ...cost,
      incrementalMs: rounded(cost.incrementalMs),
      changeToKernelMs: rounded(cost.changeToKernelMs),
      fullMs: rounded(cost.fullMs),
      cpuMs: {
        cold: Math.round(cost.cpuMs.cold),
        incremental: rounded(cost.cpuMs.incremental),
        full: rounded(cost.cpuMs.full),
      },
      incrementalCpu: summarize(cost.cpuMs.incremental),
      incremental: summarize(cost.incrementalMs),
      changeToKernel: summarize(cost.changeToKernelMs),
      full: cost.fullMs.length > 0 ? summarize(cost.fullMs) : null,
      rssMiB: Math.round(process.memoryUsage().rss / 2 ** 20),
    }),
  );
}
