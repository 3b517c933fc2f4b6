// What Maglev costs the bpf agent: N LoadBalancer Services × E endpoints of their own (a ClusterIP,
// a NodePort and an LB IP frontend each) with `bpf.scheduler: maglev`, through the tracker, the
// brain and the real data plane into a freshly loaded object in a private bpffs directory. Reports
// the inner tables the maps hold and their kernel memory (memlock of each inner map), the Maglev
// entries one endpoint change writes, and how long two back-to-back changes take to publish (with
// the agent's own 1 s grace period for what each replaces). Run as a script, as root:
//   node dist/bench/maglev-cost.js [services] [endpoints] [external|all]

import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { dumpMap, mapFdById } from '../native/libbpf/map.js';
import { closeFd } from '../native/libc.js';
import { SyncLoop } from '../src/brain/sync-loop.js';
import { loadConfig } from '../src/config/load.js';
import type { MaglevFrontends } from '../src/config/types.js';
import { BpfDataplane } from '../src/dataplanes/bpf/dataplane.js';
import { BPFFS_ROOT, makeBpffsDir } from '../src/host/bpffs.js';
import { silentLogger } from '../src/logger.js';
import type { SourceEvent } from '../src/model/events.js';
import { ChangeTracker } from '../src/model/tracker.js';
import { clusterIP, NAMESPACE, NODE_ENV, NODE_NAME } from './scenario.js';

export interface MaglevCost {
  services: number;
  endpoints: number;
  maglevFrontends: MaglevFrontends;
  /** Frontends reading a table (outer map entries), distinct inner maps, their memlock in bytes. */
  maglevFrontendCount: number;
  tables: number;
  tableBytes: number;
  /** One endpoint of one Service replaced: the sync's Maglev writes (table entries and outer
   * entries) and its time. */
  changeMaglevEntries: number;
  changeMs: number;
  /** A second change of the same Service right after the first. */
  backToBackMs: number;
}

function service(i: number): object {
  const ip = clusterIP(i);
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { namespace: NAMESPACE, name: `svc-${i}` },
    spec: {
      type: 'LoadBalancer',
      clusterIP: ip,
      clusterIPs: [ip],
      ipFamilies: ['IPv4'],
      ports: [{ name: 'http', protocol: 'TCP', port: 80, targetPort: 8080, nodePort: 30000 + i }],
    },
    status: { loadBalancer: { ingress: [{ ip: `198.18.${(i >> 8) & 0xff}.${i & 0xff}` }] } },
  };
}

/** Service i's slice: E addresses of its own (10.100.0.0 on); `replaced` endpoints get others. */
function slice(i: number, endpoints: number, replaced = 0): object {
  const address = (k: number) => {
    const n = i * endpoints + k;
    return `10.${k < replaced ? 200 : 100 + (n >> 16)}.${(n >> 8) & 0xff}.${n & 0xff}`;
  };
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      namespace: NAMESPACE,
      name: `svc-${i}-1`,
      labels: { 'kubernetes.io/service-name': `svc-${i}` },
    },
    addressType: 'IPv4',
    ports: [{ name: 'http', protocol: 'TCP', port: 8080 }],
    endpoints: Array.from({ length: endpoints }, (_, k) => ({
      addresses: [address(k)],
      conditions: { ready: true },
      nodeName: 'other-node',
    })),
  };
}

const upsert = (kind: 'Service' | 'EndpointSlice', object: object): SourceEvent => ({
  type: 'upsert',
  kind,
  object,
  origin: 'maglev-cost',
});

/** memlock of a map (its kernel memory as the kernel accounts it), from /proc/self/fdinfo. */
function memlock(mapId: number): number {
  const fd = mapFdById(mapId);
  try {
    const line = readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8').match(/^memlock:\s+(\d+)/m);
    return Number(line?.[1] ?? 0);
  } finally {
    closeFd(fd);
  }
}

export async function measureMaglevCost(
  services: number,
  endpoints: number,
  maglevFrontends: MaglevFrontends,
): Promise<MaglevCost> {
  const pinPath = join(BPFFS_ROOT, `kbp-maglev-cost-${process.pid}`);
  const namesFile = `/tmp/kbp-maglev-cost-${process.pid}.names.json`;
  rmSync(pinPath, { recursive: true, force: true });
  makeBpffsDir(pinPath, silentLogger);
  const loaded = loadConfig({ flags: {} });
  if (!loaded.ok) throw new Error('the default config does not load');
  const config = {
    ...loaded.config,
    bpf: { ...loaded.config.bpf, pinPath, scheduler: 'maglev' as const, maglevFrontends },
  };
  const synced: { maglevEntries?: number }[] = [];
  const log = pino(
    { level: 'debug' },
    {
      write(line: string) {
        const entry = JSON.parse(line) as { msg: string; maglevEntries?: number };
        if (entry.msg === 'bpf maps synced') synced.push(entry);
      },
    },
  );
  const dataplane = await BpfDataplane.open(config, log, {
    watchInterfaces: false,
    conntrackGC: false,
    namesFile,
  }).catch((err: unknown) => {
    rmSync(pinPath, { recursive: true, force: true });
    throw err;
  });
  try {
    const tracker = new ChangeTracker(NODE_NAME);
    const loop = new SyncLoop({ tracker, nodeEnv: () => NODE_ENV, config, dataplane, observers: [] });
    const sync = async () => {
      const t = performance.now();
      if (!(await loop.syncOnce())) throw new Error('sync failed');
      return performance.now() - t;
    };
    tracker.apply([
      ...Array.from({ length: services }, (_, i) => upsert('Service', service(i))),
      ...Array.from({ length: services }, (_, i) => upsert('EndpointSlice', slice(i, endpoints))),
    ]);
    loop.requestFullSync();
    await sync();
    const outer = dumpMap(dataplane.lb.fd.maglev, 4, 4).values.map((v) => v.readUInt32LE(0));
    const tables = [...new Set(outer)];
    const tableBytes = tables.reduce((n, id) => n + memlock(id), 0);
    tracker.apply([upsert('EndpointSlice', slice(0, endpoints, 1))]);
    const changeMs = await sync();
    const changeMaglevEntries = synced.at(-1)?.maglevEntries ?? Number.NaN;
    tracker.apply([upsert('EndpointSlice', slice(0, endpoints, 2))]);
    const backToBackMs = await sync();
    return {
      services,
      endpoints,
      maglevFrontends,
      maglevFrontendCount: outer.length,
      tables: tables.length,
      tableBytes,
      changeMaglevEntries,
      changeMs,
      backToBackMs,
    };
  } finally {
    await dataplane.close();
    rmSync(pinPath, { recursive: true, force: true });
    rmSync(namesFile, { force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [services = '1000', endpoints = '10', frontends = 'external'] = process.argv.slice(2);
  const cost = await measureMaglevCost(Number(services), Number(endpoints), frontends as MaglevFrontends);
  console.log(JSON.stringify(cost));
}
