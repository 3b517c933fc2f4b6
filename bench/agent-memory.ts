// The agent's memory as a node runs it, without the backends: `kube-bpf-proxy run` in bpf mode, in
// a network namespace and a mount namespace of its own without bpffs (the agent mounts its own, as
// on a node whose init system does not), reading N Services × E endpoints either from
// manifest files (--manifests) or from the benchmark's API server (bench/list-server.ts) in JSON or
// protobuf. VmRSS is read after the first sync and again once settled: after a few EndpointSlice
// changes and the agent's quiet-time heap collection (src/host/heap.ts), with the peak (VmHWM) of
// the whole run. The endpoints are addresses only: nothing is sent to them, so
// 100,000 Services cost no processes. Run as root:
//   node dist/bench/agent-memory.js [services,...] [--endpoints E] [--changes K]
//       [--sources manifests,api-json,api-protobuf] [--distinct] [--as-stored] [--cli dist/src/cli/main.js]
// --as-stored: the API server's objects carry what a real one adds (bench/scenario.ts asStored).
// --cli measures another build of the agent (e.g. an older commit's) in the same run.
// The agent starts as the image starts it: through its entry point (scripts/image-entrypoint.sh,
// which sets V8's heap flags). --memory-limit MiB runs it as the chart's pod with
// resources.limits.memory set: in a memory cgroup of its own with that limit (which the entry
// point sizes the heap to), and reports the OOM kills the cgroup saw.

import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { findCgroup2Root } from '../src/host/cgroup.js';
import { LabAgent } from '../src/lab/agent.js';
import { deleteStaleNamespaces, Lab } from '../src/lab/netns.js';
import { PROTOBUF_CONTENT_TYPE } from '../src/sources/protobuf.js';
import { SETTLED_AFTER_FIRST_SYNC_MS } from './measures.js';
import {
  CLUSTER_CIDR,
  changedEndpointIP,
  endpointSlice,
  MEASURED_SLICE_FILE,
  manifestFiles,
  NODE_NAME,
  type Scenario,
  scenarioMapSizes,
} from './scenario.js';
import { cliEntryPoint, imageEntrypoint } from './tools.js';

export const MEMORY_SOURCES = ['manifests', 'api-json', 'api-protobuf'] as const;
export type MemorySource = (typeof MEMORY_SOURCES)[number];

export interface AgentMemory {
  source: MemorySource;
  services: number;
  endpoints: number;
  /** Every Service has E addresses of its own (N × E endpoints), not the same E. */
  distinctEndpoints: boolean;
  /** Agent start to its first "synced" line, and that sync's own duration. */
  coldStartMs: number;
  firstSyncMs: number;
  syncedMiB: number;
  /** After the changes, once the agent's collection after a quiet while has run. */
  settledMiB: number;
  peakMiB: number;
  /** Each EndpointSlice change: the agent's sync of it, and the change (the list server's watch
   * event, or the file written) to the agent's "synced" line, which it prints once the maps hold
   * the change. Through files this includes the manifest watch's 200 ms quiet time. */
  changeSyncMs: number[];
  changeToKernelMs: number[];
  /**
   * With --memory-limit: the limit, the cgroup's peak charge (the process's memory plus what the
   * kernel charges it: the BPF maps it creates, page cache) and the OOM kills it counted (0 is the
   * goal).
   */
  memoryLimitMiB?: number;
  cgroupPeakMiB?: number;
  oomKills?: number;
}

/** A memory cgroup limited to `limitMiB`: cgroup v2's where it has the memory controller, else v1's. */
function memoryCgroup(
  name: string,
  limitMiB: number,
): { dir: string; oomKills(): number; peakMiB(): number; remove(): void } {
  const v2 = findCgroup2Root();
  const onV2 = readFileSync(join(v2, 'cgroup.controllers'), 'utf8').split(/\s+/).includes('memory');
  const dir = join(onV2 ? v2 : '/sys/fs/cgroup/memory', name);
  mkdirSync(dir);
  const bytes = String(limitMiB * 1024 * 1024);
  writeFileSync(join(dir, onV2 ? 'memory.max' : 'memory.limit_in_bytes'), bytes);
  const events = join(dir, onV2 ? 'memory.events' : 'memory.oom_control');
  return {
    dir,
    oomKills: () => Number(/oom_kill (\d+)/.exec(readFileSync(events, 'utf8'))?.[1] ?? 0),
    peakMiB: () =>
      Number(readFileSync(join(dir, onV2 ? 'memory.peak' : 'memory.max_usage_in_bytes'), 'utf8')) / 2 ** 20,
    remove: () => {
      if (existsSync(dir)) rmdirSync(dir);
    },
  };
}

const LIST_SERVER = fileURLToPath(new URL('list-server.js', import.meta.url));
const LIST_SERVER_PORT = 6443;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function agentConfig(source: MemorySource, scenario: Scenario): string {
  const sizes = scenarioMapSizes(scenario);
  return [
    'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
    'kind: KubeProxyConfiguration',
    'mode: bpf',
    `clusterCIDR: ${CLUSTER_CIDR}`,
    'clientConnection:',
    `  contentType: ${source === 'api-protobuf' ? PROTOBUF_CONTENT_TYPE : 'application/json'}`,
    // Past the default sizes (65,536 frontends, 2^20 slots), the maps are raised as an operator
    // would: with a full map every sync is a whole plan (2-4 s a change at 100,000).
    'bpf:',
    '  mapSizes:',
    `    services: ${sizes.services}`,
    `    backendSlots: ${sizes.backendSlots}`,
    // The lab's cgroup, bound here by the private mounts as the chart binds the host's hierarchy:
    // the socket hooks (and the memory they cost) as on a node, off the machine's cgroup2 root.
    '  cgroupPath: /run/kube-bpf-proxy/cgroupv2',
    '',
  ].join('\n');
}

/** Resolves when the child prints `word` on stdout; rejects if it exits first. */
function printed(child: ReturnType<Lab['spawn']>, word: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes(word)) resolve();
    });
    child.once('exit', (code) => reject(new Error(`list server exited (${code}) before "${word}"`)));
  });
}

/** One cell: a namespace of its own (named `name` in the lab), removed by the lab's destroy(). */
export async function measureAgentMemory(
  lab: Lab,
  name: string,
  source: MemorySource,
  scenario: Scenario,
  opts: {
    distinctEndpoints: boolean;
    changes: number;
    timeoutMs: number;
    cli?: string;
    stored?: boolean;
    memoryLimitMiB?: number;
  },
): Promise<AgentMemory> {
  await lab.ownCgroup();
  await lab.addNamespace(name);
  const workDir = mkdtempSync(join(tmpdir(), 'kbp-mem-'));
  const configPath = join(workDir, 'config.yaml');
  writeFileSync(configPath, agentConfig(source, scenario));
  const args = ['--config', configPath, '--hostname-override', NODE_NAME];
  const manifestDir = join(workDir, 'manifests');
  let server: ReturnType<Lab['spawn']> | null = null;
  let agent: LabAgent | null = null;
  const cgroup = opts.memoryLimitMiB
    ? memoryCgroup(`kbp-mem-${process.pid}-${name}`, opts.memoryLimitMiB)
    : null;
  try {
    if (source === 'manifests') {
      const files = manifestFiles(scenario, { distinctEndpoints: opts.distinctEndpoints });
      mkdirSync(manifestDir);
      for (const [file, text] of Object.entries(files)) writeFileSync(join(manifestDir, file), text);
      args.push('--manifests', manifestDir);
    } else {
      server = lab.spawn(name, process.execPath, [
        LIST_SERVER,
        String(LIST_SERVER_PORT),
        String(scenario.services),
        String(scenario.endpoints),
        ...(opts.distinctEndpoints ? ['--distinct'] : []),
        ...(opts.stored ? ['--as-stored'] : []),
        '--encoding',
        source === 'api-protobuf' ? 'protobuf' : 'json',
      ]);
      await printed(server, 'listening');
      args.push('--master', `http://127.0.0.1:${LIST_SERVER_PORT}`);
    }
    const cli = opts.cli ?? cliEntryPoint();
    const launcher = imageEntrypoint(cli, cgroup?.dir);
    agent = LabAgent.start(lab, name, cli, args, { bpffs: 'own', launcher });
    const first = await agent.waitForSync(1, opts.timeoutMs);
    const synced = agent.memory();
    const changeSyncMs: number[] = [];
    const changeToKernelMs: number[] = [];
    for (let change = 0; change < opts.changes; change++) {
      // Past minSyncPeriod since the last sync, so each change gets a sync of its own.
      await sleep(1100);
      const before = agent.syncs.length;
      const changedAt = performance.now();
      if (server) server.kill('SIGUSR2');
      else
        writeFileSync(
          join(manifestDir, MEASURED_SLICE_FILE),
          JSON.stringify(endpointSlice(scenario.services - 1, scenario, [changedEndpointIP(change)])),
        );
      const sync = await agent.waitForSync(before + 1, 30_000);
      changeSyncMs.push(sync.durationMs);
      changeToKernelMs.push(sync.at - changedAt);
    }
    await sleep(first.at + SETTLED_AFTER_FIRST_SYNC_MS - performance.now());
    const settled = agent.memory();
    return {
      source,
      ...scenario,
      distinctEndpoints: opts.distinctEndpoints,
      coldStartMs: first.at - agent.startedAt,
      firstSyncMs: first.durationMs,
      syncedMiB: synced.rssMiB,
      settledMiB: settled.rssMiB,
      peakMiB: settled.peakMiB,
      changeSyncMs,
      changeToKernelMs,
      ...(cgroup && {
        memoryLimitMiB: opts.memoryLimitMiB,
        cgroupPeakMiB: cgroup.peakMiB(),
        oomKills: cgroup.oomKills(),
      }),
    };
  } catch (err) {
    const ooms = cgroup ? ` (OOM kills in its cgroup: ${cgroup.oomKills()})` : '';
    throw new Error(`${(err as Error).message}${ooms}\nagent log tail:\n${agent?.tail().slice(-3000) ?? ''}`);
  } finally {
    await agent?.stop();
    cgroup?.remove();
    server?.kill('SIGTERM');
    rmSync(workDir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const args = process.argv.slice(2);
  const option = (flag: string, fallback: string) => {
    const at = args.indexOf(flag);
    return at >= 0 ? (args.splice(at, 2)[1] ?? fallback) : fallback;
  };
  const endpoints = Number(option('--endpoints', '10'));
  const changes = Number(option('--changes', '3'));
  const sources = option('--sources', MEMORY_SOURCES.join(',')).split(',') as MemorySource[];
  const cli = option('--cli', cliEntryPoint());
  const memoryLimitMiB = Number(option('--memory-limit', '0')) || undefined;
  const distinctEndpoints = args.includes('--distinct');
  const stored = args.includes('--as-stored');
  const counts = (args.find((a) => !a.startsWith('--')) ?? '1,10000').split(',').map(Number);
  const prefix = `kbpm${process.pid}`;
  await deleteStaleNamespaces(prefix);
  const lab = new Lab(prefix);
  const stop = () => void lab.destroy().finally(() => process.exit(130));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const results: AgentMemory[] = [];
  try {
    let cell = 0;
    for (const services of counts) {
      for (const source of sources) {
        const result = await measureAgentMemory(
          lab,
          `m${cell++}`,
          source,
          { services, endpoints },
          {
            distinctEndpoints,
            changes,
            timeoutMs: 1_200_000,
            cli,
            stored,
            ...(memoryLimitMiB && { memoryLimitMiB }),
          },
        );
        results.push(result);
        console.error(
          `${source} ${services}×${endpoints}${distinctEndpoints ? ' distinct' : ''}${stored ? ' as stored' : ''}: ${result.syncedMiB.toFixed(0)} MiB after the first sync, ${result.settledMiB.toFixed(0)} MiB settled (after ${changes} changes), peak ${result.peakMiB.toFixed(0)} MiB (cold start ${(result.coldStartMs / 1000).toFixed(1)} s, first sync ${result.firstSyncMs.toFixed(0)} ms); change syncs ${result.changeSyncMs.map((ms) => ms.toFixed(1)).join(', ')} ms, change to kernel ${result.changeToKernelMs.map((ms) => ms.toFixed(0)).join(', ')} ms${memoryLimitMiB ? `; limit ${memoryLimitMiB} MiB, cgroup peak ${result.cgroupPeakMiB?.toFixed(0)} MiB, OOM kills ${result.oomKills}` : ''}`,
        );
      }
    }
  } finally {
    await lab.destroy();
  }
  console.log(JSON.stringify(results, null, 1));
}
