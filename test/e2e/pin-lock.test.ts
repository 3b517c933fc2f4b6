// One agent per pin path (src/host/pin-lock.ts): a second agent on the same pin path exits at once
// naming the first, and writes no map and no sysctl; the lock dies with its holder, SIGKILL
// included, so the next agent starts. The agents share the host's bpffs (as two lab nodes on one
// machine would) and run in a network namespace of their own, so they attach to no interface of
// the host.
// Needs `npm run build`.

import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { dumpMap, mapInfo } from '../../native/libbpf/map.js';
import { getPinned } from '../../native/libbpf/object.js';
import { closeFd } from '../../native/libc.js';
import { mainScript } from '../../src/cli/demo.js';
import { namesFilePath } from '../../src/dataplanes/bpf/names-file.js';
import { type MapName, mapPinPath, PIN_LAYOUT_VERSION } from '../../src/dataplanes/bpf/object.js';
import { BPFFS_ROOT } from '../../src/host/bpffs.js';
import { sysctlPath } from '../../src/host/conntrack-sysctls.js';
import { AgentLog } from '../../src/lab/agent-log.js';
import { inNetns } from '../support/in-netns.js';
import { describeRoot } from '../support/privileges.js';

const PREFIX = `kbplock${process.pid}`;
const NETNS = `${PREFIX}-node`;
const PIN_PATH = `${BPFFS_ROOT}/${PREFIX}`;
/** Maps every sync writes: a second agent that wrote anything would change one of them. */
const WATCHED: MapName[] = ['svc4', 'slots', 'backends4', 'config', 'configGen', 'nodeAddrs4'];

interface Agent {
  child: ChildProcess;
  log: AgentLog;
}
const agents: Agent[] = [];

function startAgent(extraArgs: string[] = []): Agent {
  // No socket hooks: this test sends no traffic, and they would go on the machine's cgroup2 root.
  const args = [
    'run',
    '--manifests',
    'examples/manifests',
    '--hostname-override',
    'node-a',
    '--bpf-socket-lb',
    'off',
    ...extraArgs,
  ];
  const child = spawn(
    'nsenter',
    [`--net=/run/netns/${NETNS}`, '--', process.execPath, mainScript, ...args, '--bpf-pin-path', PIN_PATH],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const log = new AgentLog('agent');
  child.stderr?.on('data', (d: Buffer) => log.feed(d));
  child.once('close', (code) => log.end(code));
  const agent = { child, log };
  agents.push(agent);
  return agent;
}

/** Resolves with the exit code (null: killed by a signal), or fails after timeoutMs. */
function exitOf(agent: Agent, timeoutMs: number): Promise<number | null> {
  return new Promise((resolve, reject) => {
    if (agent.log.exitCode !== undefined) return resolve(agent.log.exitCode);
    const timer = setTimeout(() => reject(new Error(`still running:\n${agent.log.tail()}`)), timeoutMs);
    agent.child.once('close', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

/** Each watched map's id and every element, as hex. */
function snapshotMaps(): Record<string, { id: number; elements: string[] }> {
  const pinDir = `${PIN_PATH}/${PIN_LAYOUT_VERSION}`;
  const out: Record<string, { id: number; elements: string[] }> = {};
  for (const name of WATCHED) {
    const fd = getPinned(mapPinPath(pinDir, name));
    try {
      const info = mapInfo(fd);
      const dump = dumpMap(fd, info.keySize, info.valueSize);
      out[name] = {
        id: info.id,
        elements: dump.keys.map((k, i) => `${k.toString('hex')}=${dump.values[i]?.toString('hex')}`).sort(),
      };
    } finally {
      closeFd(fd);
    }
  }
  return out;
}

describeRoot('one agent per pin path', () => {
  beforeAll(() => {
    execFileSync('ip', ['netns', 'add', NETNS]);
    execFileSync('ip', ['-n', NETNS, 'link', 'set', 'lo', 'up']);
  });

  afterAll(async () => {
    for (const agent of agents) agent.child.kill('SIGKILL');
    await Promise.all(agents.map((agent) => exitOf(agent, 15_000).catch(() => null)));
    execFileSync('ip', ['netns', 'del', NETNS]);
    rmSync(PIN_PATH, { recursive: true, force: true });
    rmSync(namesFilePath(PIN_PATH), { force: true });
  });

  it('a second agent exits at once naming the first, and writes no map and no sysctl; after a SIGKILL the next one starts', async () => {
    const first = startAgent();
    await first.log.waitForSync(1, 60_000);
    const before = snapshotMaps();
    expect(before.svc4?.elements.length).toBeGreaterThan(0);

    const established = () =>
      inNetns(NETNS, () => readFileSync(sysctlPath('nf_conntrack_tcp_timeout_established'), 'utf8').trim());
    expect(established()).toBe('86400');
    // Another timeout: it would write it, were it to touch the node before the lock stopped it.
    const second = startAgent(['--conntrack-tcp-timeout-established=3h']);
    expect(await exitOf(second, 20_000)).not.toBe(0);
    expect(second.log.tail()).toContain(
      `bpf.pinPath ${PIN_PATH} is in use by another agent: pid ${first.child.pid} (`,
    );
    expect(second.log.syncs).toEqual([]);
    expect(snapshotMaps()).toEqual(before);
    expect(established()).toBe('86400');

    // No clean exit, no unlock: the kernel drops the lock with the process.
    first.child.kill('SIGKILL');
    expect(await exitOf(first, 15_000)).toBeNull();
    const third = startAgent();
    await third.log.waitForSync(1, 60_000);
    // It took over the maps the first one pinned.
    expect(snapshotMaps().svc4?.id).toBe(before.svc4?.id);
    third.child.kill('SIGTERM');
    expect(await exitOf(third, 15_000)).toBe(0);
  });
});
