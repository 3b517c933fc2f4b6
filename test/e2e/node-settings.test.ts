// What the agent sets on the node at start-up, on a real kernel: the netfilter conntrack sysctls
// of `conntrack.*` and its own oom_score_adj (src/host/conntrack-sysctls.ts, src/host/oom-score.ts).
//
// Nothing outside the test's namespaces changes. The timeouts and tcp_be_liberal are per network
// namespace and are written inside namespaces the test creates. nf_conntrack_max and the conntrack
// hashsize are one for the whole host (on 6.18 nf_conntrack_max reads, read-only, the host's value
// in every other namespace, and the hashsize is a module parameter): the settings are chosen from
// what the host holds so that kube-proxy's rule writes neither, or so that the write is refused,
// and the test checks both unchanged. The agents run in a namespace of their own, in iptables mode
// (no BPF programs to load). Needs `npm run build`.

import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { type Logger, pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { mainScript } from '../../src/cli/demo.js';
import { loadConfig } from '../../src/config/load.js';
import {
  applyConntrackSysctls,
  CONNTRACK_SYSCTLS,
  type ConntrackSysctl,
  HASHSIZE_PATH,
  sysctlPath,
} from '../../src/host/conntrack-sysctls.js';
import { AgentLog } from '../../src/lab/agent-log.js';
import { Lab } from '../../src/lab/netns.js';
import { conntrackCase } from '../support/conntrack-sysctls-vs-kube-proxy.js';
import { inNetns } from '../support/in-netns.js';
import { describeRoot } from '../support/privileges.js';

const lab = new Lab(`kbpnode${process.pid}`);
const oomLab = new Lab(`kbpoom${process.pid}`);
const readInt = (path: string) => Number(readFileSync(path, 'utf8').trim());
/** The five per-namespace sysctls, read on this thread (in whichever namespace it is). */
const perNamespace = () =>
  Object.fromEntries(
    CONNTRACK_SYSCTLS.filter((n) => n !== 'nf_conntrack_max').map((n) => [n, readInt(sysctlPath(n))]),
  ) as Record<Exclude<ConntrackSysctl, 'nf_conntrack_max'>, number>;
const hostWide = () => ({ max: readInt(sysctlPath('nf_conntrack_max')), hashsize: readInt(HASHSIZE_PATH) });

/** The conntrack settings of a KubeProxyConfiguration, through the real config pipeline. */
function conntrackOf(lines: string[]) {
  const loaded = loadConfig({
    fileText: [
      'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
      'kind: KubeProxyConfiguration',
      'conntrack:',
      ...lines.map((l) => `  ${l}`),
    ].join('\n'),
    flags: {},
  });
  if (!loaded.ok) throw new Error(JSON.stringify(loaded.problems));
  return loaded.config.conntrack;
}

/** A logger whose lines the test reads. */
function capturingLogger(): { log: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  return { log: pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) }), lines };
}

describeRoot('conntrack.* sysctls', () => {
  beforeAll(async () => {
    await lab.addNamespace('a');
    await lab.addNamespace('b');
  });
  afterAll(() => lab.destroy());

  it('writes, in its own namespace only, the sysctls that differ, and logs them as kube-proxy does', () => {
    const host = hostWide();
    const init = perNamespace();
    // A floor the host already allows and its hashsize already covers: kube-proxy writes neither.
    const settings = conntrackOf(conntrackCase());
    const { log, lines } = capturingLogger();
    const writes = inNetns(lab.ns('a'), () => applyConntrackSysctls(settings, log));
    expect(inNetns(lab.ns('a'), perNamespace)).toEqual({
      nf_conntrack_tcp_timeout_established: 25200,
      nf_conntrack_tcp_timeout_close_wait: 90,
      nf_conntrack_tcp_be_liberal: 1,
      nf_conntrack_udp_timeout: 45,
      nf_conntrack_udp_timeout_stream: 100,
    });
    expect(writes.map((w) => (w.kind === 'sysctl' ? w.name : w.kind))).not.toContain('nf_conntrack_max');
    expect(writes.map((w) => w.kind)).not.toContain('hashsize');
    expect(lines.filter((l) => l.msg === 'Set sysctl').map((l) => l.entry)).toContain(
      'net/netfilter/nf_conntrack_udp_timeout',
    );
    // Only values that differ are written: a second start writes nothing.
    expect(inNetns(lab.ns('a'), () => applyConntrackSysctls(settings, log))).toEqual([]);
    expect(hostWide()).toEqual(host);
    expect(perNamespace()).toEqual(init);
  });

  it('stops with kube-proxy’s error when nf_conntrack_max must rise where it is read-only', () => {
    const host = hostWide();
    const settings = conntrackOf(['maxPerCore: 1', `min: ${host.max + 1024}`]);
    expect(() => inNetns(lab.ns('b'), () => applyConntrackSysctls(settings, capturingLogger().log))).toThrow(
      /^could not set conntrack parameters from kube-proxy configuration: EACCES: permission denied, open '\/proc\/sys\/net\/netfilter\/nf_conntrack_max'/,
    );
    expect(hostWide()).toEqual(host);
  });
});

/** `kube-bpf-proxy run` in iptables mode in its own namespace, `wrapper` before node (e.g. setpriv). */
function startAgent(args: string[], wrapper: string[] = []): { child: ChildProcess; log: AgentLog } {
  const argv = [...wrapper, process.execPath, mainScript, 'run', '--proxy-mode=iptables'];
  const child = spawn('nsenter', [`--net=/run/netns/${oomLab.ns('node')}`, '--', ...argv, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const log = new AgentLog('agent');
  child.stderr?.on('data', (d: Buffer) => log.feed(d));
  child.once('close', (code) => log.end(code));
  return { child, log };
}

/** CAP_SYS_RESOURCE (24) in this process's effective set, which the agents it starts inherit. */
function hasCapSysResource(): boolean {
  const effective = /^CapEff:\s+([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0';
  return ((BigInt(`0x${effective}`) >> 24n) & 1n) === 1n;
}

// -v=2: kube-proxy logs a refused oom_score_adj at that level, and so do we.
const RUN_ARGS = ['--manifests', 'examples/manifests', '--hostname-override', 'node-a', '--v=2'];

describeRoot('oomScoreAdj', () => {
  const agents: ChildProcess[] = [];
  beforeAll(() => oomLab.addNamespace('node'));
  afterAll(async () => {
    for (const child of agents) child.kill('SIGKILL');
    await oomLab.destroy();
  });

  async function syncedAgent(args: string[], wrapper: string[] = []) {
    const agent = startAgent([...RUN_ARGS, ...args], wrapper);
    agents.push(agent.child);
    await agent.log.waitForSync(1, 60_000);
    const score = readInt(`/proc/${agent.child.pid}/oom_score_adj`);
    agent.child.kill('SIGTERM');
    return { ...agent, score };
  }

  it('the agent sets its own oom_score_adj at start-up: kube-proxy’s -999 by default', async () => {
    const { score, log } = await syncedAgent([]);
    const refused = log.lines.filter((l) => /^Failed to apply OOMScore/.test(String(l.msg)));
    // Lowering the score needs CAP_SYS_RESOURCE, which some sandboxes take even from root.
    if (hasCapSysResource()) {
      expect(score).toBe(-999);
      expect(refused).toEqual([]);
    } else {
      expect(score).toBe(0);
      expect(refused).toHaveLength(1);
    }
  });

  it('and the value of --oom-score-adj', async () => {
    expect((await syncedAgent(['--oom-score-adj=250'])).score).toBe(250);
  });

  it('when the kernel refuses (no CAP_SYS_RESOURCE to lower it), says so once, as kube-proxy at -v=2, and runs on', async () => {
    const { score, log } = await syncedAgent([], ['setpriv', '--bounding-set', '-sys_resource']);
    expect(score).toBe(0);
    const warned = log.lines.filter((l) => /^Failed to apply OOMScore/.test(String(l.msg)));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ level: 20, value: -999, current: 0, path: '/proc/self/oom_score_adj' });
    expect(String(warned[0]?.err)).toMatch(/EACCES/);
  });
});
