// What decoding the initial lists costs the kube source, JSON against protobuf: N Services and
// their EndpointSlices (E endpoints each) as the two list bodies an API server sends, each decoded
// by the reflector's own path (decodeListBody) in a fresh Node process of its own, so that one
// encoding's garbage and heap growth do not count against the other. Reported per encoding: the
// bodies' size, the CPU time of decoding both lists (the first round, cold as an agent's start is,
// and the median of the rounds), the heap the first round's items hold, and the process's RSS
// growth and peak. With --as-stored, every object also has what an API server adds to it
// (managedFields, uid, creationTimestamp, defaulted fields, the EndpointSlice controller's labels,
// annotation and owner, each endpoint's targetRef), none of which the parser reads. Run as a script:
//   node dist/bench/decode-cost.js [services] [endpoints] [rounds] [--as-stored]

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { WatchedKind } from '../src/model/events.js';
import { PROTOBUF_CONTENT_TYPE } from '../src/sources/protobuf.js';
import { decodeListBody } from '../src/sources/reflector.js';
import { listBody } from './k8s-wire.js';
import { asStored, endpointSlice, type Scenario, scenarioObjects } from './scenario.js';
import { summarize } from './stats.js';

export const ENCODINGS = ['json', 'protobuf'] as const;
export type Encoding = (typeof ENCODINGS)[number];

export interface DecodeCost {
  encoding: Encoding;
  services: number;
  endpoints: number;
  bodyMiB: number;
  /** CPU time (user + system) of decoding both lists: the first round's, and the median over the rounds. */
  firstCpuMs: number;
  cpuMs: number;
  /** Heap held by the decoded items after a full GC. */
  heapMiB: number;
  /** RSS growth from before the first decode to after the last, and the process's peak. */
  rssGrowthMiB: number;
  peakMiB: number;
}

const KINDS: WatchedKind[] = ['Service', 'EndpointSlice'];
const CONTENT_TYPES: Record<Encoding, string> = { json: 'application/json', protobuf: PROTOBUF_CONTENT_TYPE };
const MiB = 2 ** 20;

function procStatusMiB(field: 'VmRSS' | 'VmHWM'): number {
  const status = readFileSync('/proc/self/status', 'utf8');
  return Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? Number.NaN) / 1024;
}

/** In the child: decodes the bodies in `dir` `rounds` times; the first round's items stay held while the heap is read. */
function decodeInThisProcess(
  dir: string,
  encoding: Encoding,
  rounds: number,
  scenario: Scenario,
): DecodeCost {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run the decode child with --expose-gc');
  const bodies = KINDS.map((kind) => ({ kind, body: readFileSync(join(dir, `${kind}.${encoding}`)) }));
  const decodeAll = () =>
    bodies.map(({ kind, body }) => decodeListBody(kind, CONTENT_TYPES[encoding], body).items);
  gc();
  const heapBefore = process.memoryUsage().heapUsed;
  const rssBefore = procStatusMiB('VmRSS');
  let held: unknown[][] = [];
  // In a function of its own, so that no round's items but the first stay reachable from this frame.
  const timedRound = (keep: boolean): number => {
    const cpu = process.cpuUsage();
    const items = decodeAll();
    const used = process.cpuUsage(cpu);
    if (keep) held = items;
    return (used.user + used.system) / 1000;
  };
  const cpuMs = Array.from({ length: rounds }, (_, round) => timedRound(round === 0));
  gc();
  const heapMiB = (process.memoryUsage().heapUsed - heapBefore) / MiB;
  const decodedItems = held.reduce((n, items) => n + items.length, 0);
  if (decodedItems !== 2 * scenario.services) throw new Error(`decoded ${decodedItems} items`);
  return {
    encoding,
    ...scenario,
    bodyMiB: bodies.reduce((n, { body }) => n + body.length, 0) / MiB,
    firstCpuMs: cpuMs[0] ?? Number.NaN,
    cpuMs: summarize(cpuMs).median,
    heapMiB,
    rssGrowthMiB: procStatusMiB('VmRSS') - rssBefore,
    peakMiB: procStatusMiB('VmHWM'),
  };
}

export function measureDecodeCost(scenario: Scenario, rounds: number, stored = false): DecodeCost[] {
  const { services, slices } = scenarioObjects(scenario);
  const lists: Record<'Service' | 'EndpointSlice', object[]> = {
    Service: services,
    EndpointSlice: [...slices, endpointSlice(scenario.services - 1, scenario)],
  };
  const decorate = (kind: 'Service' | 'EndpointSlice') =>
    stored ? lists[kind].map((object, i) => asStored(kind, object, i)) : lists[kind];
  const items: Record<WatchedKind, object[]> = {
    Service: decorate('Service'),
    EndpointSlice: decorate('EndpointSlice'),
    Node: [],
    ServiceCIDR: [],
  };
  const dir = mkdtempSync(join(tmpdir(), 'kbp-decode-'));
  try {
    for (const encoding of ENCODINGS)
      for (const kind of KINDS)
        writeFileSync(join(dir, `${kind}.${encoding}`), listBody(kind, items[kind], '1', encoding));
    const script = fileURLToPath(import.meta.url);
    return ENCODINGS.map((encoding) => {
      const out = execFileSync(
        process.execPath,
        [
          '--expose-gc',
          script,
          '--child',
          dir,
          encoding,
          String(rounds),
          String(scenario.services),
          String(scenario.endpoints),
        ],
        { encoding: 'utf8', maxBuffer: 1 << 20 },
      );
      return JSON.parse(out) as DecodeCost;
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const args = process.argv.slice(2);
  if (args[0] === '--child') {
    const [, dir = '', encoding = 'json', rounds = '5', services = '0', endpoints = '0'] = args;
    const scenario = { services: Number(services), endpoints: Number(endpoints) };
    process.stdout.write(
      JSON.stringify(decodeInThisProcess(dir, encoding as Encoding, Number(rounds), scenario)),
    );
  } else {
    const [services = '10000', endpoints = '10', rounds = '5'] = args.filter((a) => a !== '--as-stored');
    const costs = measureDecodeCost(
      { services: Number(services), endpoints: Number(endpoints) },
      Number(rounds),
      args.includes('--as-stored'),
    );
    const [json, proto] = costs as [DecodeCost, DecodeCost];
    for (const c of costs)
      console.error(
        `${c.encoding}: ${c.bodyMiB.toFixed(1)} MiB of bodies, ${c.firstCpuMs.toFixed(0)} ms CPU first, ${c.cpuMs.toFixed(0)} ms median, ${c.heapMiB.toFixed(1)} MiB heap held, RSS +${c.rssGrowthMiB.toFixed(0)} MiB (peak ${c.peakMiB.toFixed(0)} MiB)`,
      );
    console.error(
      `protobuf/JSON: bodies ${(proto.bodyMiB / json.bodyMiB).toFixed(2)}×, CPU first ${(proto.firstCpuMs / json.firstCpuMs).toFixed(2)}×, median ${(proto.cpuMs / json.cpuMs).toFixed(2)}×, heap held ${(proto.heapMiB / json.heapMiB).toFixed(2)}×, RSS growth ${(proto.rssGrowthMiB / json.rssGrowthMiB).toFixed(2)}×`,
    );
    console.log(JSON.stringify(costs, null, 1));
  }
}
