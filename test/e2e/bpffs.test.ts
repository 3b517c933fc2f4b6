import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { LAB_PREFIX as DEMO_PREFIX, mainScript } from '../../src/cli/demo.js';
import { namesFilePath } from '../../src/dataplanes/bpf/names-file.js';
import { BPFFS_ROOT } from '../../src/host/bpffs.js';
import { deleteStaleNamespaces } from '../../src/lab/netns.js';
import { describeRoot } from '../support/privileges.js';

// A node without bpffs, as a fresh machine is: each command runs in a private mount namespace
// with every bpffs at /sys/fs/bpf unmounted first, so the host's mounts are neither used nor
// changed. The demo, the agent and a pin path off bpffs must each end, within a bound, the way a
// Cilium user expects: mount bpffs and work, or fail at once naming the fix. Needs `npm run build`.

const PREFIX = `kbpfs${process.pid}`;
/** The agent's own network namespace: it attaches to no interface of the host. */
const NETNS = `${PREFIX}-node`;
const PIN_PATH = `${BPFFS_ROOT}/${PREFIX}`;

interface Proc {
  child: ChildProcess;
  stdout: string;
  stderr: string;
  /** Resolves with the exit code (null when killed by a signal). */
  exited: Promise<number | null>;
}

const running = new Set<Proc>();

/** Runs `argv` in a new private mount namespace without bpffs (`exec`: signals reach it directly). */
function withoutBpffs(argv: string[]): Proc {
  const script = `while mountpoint -q ${BPFFS_ROOT}; do umount ${BPFFS_ROOT}; done; exec "$@"`;
  const child = spawn(
    'unshare',
    ['--mount', '--propagation', 'private', 'bash', '-c', script, 'bash', ...argv],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const proc: Proc = {
    child,
    stdout: '',
    stderr: '',
    exited: new Promise((resolve) => child.once('close', (code) => resolve(code))),
  };
  child.stdout?.on('data', (d: Buffer) => {
    proc.stdout += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    proc.stderr += d.toString();
  });
  running.add(proc);
  void proc.exited.then(() => running.delete(proc));
  return proc;
}

/** `run` in the agent's namespace; `wrapper` goes before node (e.g. to drop a capability). */
const agentArgs = (pinPath: string, wrapper: string[] = []) => [
  'nsenter',
  `--net=/run/netns/${NETNS}`,
  '--',
  ...wrapper,
  process.execPath,
  mainScript,
  'run',
  '--manifests',
  'examples/manifests',
  '--hostname-override',
  'node-a',
  '--bpf-pin-path',
  pinPath,
  // No socket hooks: nothing here sends traffic, and they would go on the machine's cgroup2 root.
  '--bpf-socket-lb',
  'off',
];

/** The exit code, or a failure with the output once timeoutMs has passed (the process is killed). */
async function exitWithin(proc: Proc, timeoutMs: number): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // SIGTERM first: the demo and the agent clean up on it.
      proc.child.kill('SIGTERM');
      setTimeout(() => proc.child.kill('SIGKILL'), 10_000).unref();
      reject(
        new Error(`still running after ${timeoutMs} ms\nstdout:\n${proc.stdout}\nstderr:\n${proc.stderr}`),
      );
    }, timeoutMs);
  });
  try {
    return await Promise.race([proc.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves once the agent has logged a line with this message; fails on exit or after timeoutMs. */
async function logged(proc: Proc, msg: RegExp, timeoutMs: number): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const line = proc.stderr
      .split('\n')
      .flatMap((text) => {
        try {
          return [JSON.parse(text) as Record<string, unknown>];
        } catch {
          return [];
        }
      })
      .find((l) => msg.test(String(l.msg)));
    if (line) return line;
    if (proc.child.exitCode !== null || proc.child.signalCode !== null)
      throw new Error(`agent exited (${proc.child.exitCode}) before logging ${msg}:\n${proc.stderr}`);
    if (Date.now() > deadline) throw new Error(`no ${msg} line within ${timeoutMs} ms:\n${proc.stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describeRoot('a node without bpffs', () => {
  let demoEndedCleanly = false;

  beforeAll(() => {
    execFileSync('ip', ['netns', 'add', NETNS]);
    execFileSync('ip', ['-n', NETNS, 'link', 'set', 'lo', 'up']);
  });

  afterAll(async () => {
    for (const proc of running) proc.child.kill('SIGKILL');
    await Promise.all([...running].map((proc) => proc.exited));
    execFileSync('ip', ['netns', 'del', NETNS]);
    // A demo killed before its own cleanup leaves its namespaces behind.
    if (!demoEndedCleanly) await deleteStaleNamespaces(DEMO_PREFIX);
    // The pins went with their mount namespaces; the frontend names live on the host's /run.
    rmSync(namesFilePath(PIN_PATH), { force: true });
  });

  it('the demo mounts bpffs and runs to completion', async () => {
    const demo = withoutBpffs([process.execPath, mainScript, 'demo']);
    const code = await exitWithin(demo, 150_000);
    demoEndedCleanly = true;
    expect(code, demo.stderr).toBe(0);
    expect(demo.stderr).toContain('mounted bpffs at /sys/fs/bpf');
    expect(demo.stdout).toMatch(/TCP\/10\.96\.0\.10:80\s+ClusterIP\s+demo\/web:http/);
    expect(demo.stdout).toContain('demo finished');
  });

  it('run in bpf mode mounts bpffs, says so, and syncs', async () => {
    const agent = withoutBpffs(agentArgs(PIN_PATH));
    try {
      const mounted = await logged(agent, /^mounted bpffs at \/sys\/fs\/bpf/, 30_000);
      expect(mounted.level).toBe(40);
      await logged(agent, /^synced$/, 30_000);
    } finally {
      agent.child.kill('SIGTERM');
    }
    expect(await exitWithin(agent, 15_000)).toBe(0);
  });

  it('run with a pin path off bpffs exits at once with an error that names the fix', async () => {
    const pinPath = `/tmp/${PREFIX}-pins`;
    const agent = withoutBpffs(agentArgs(pinPath));
    expect(await exitWithin(agent, 15_000)).not.toBe(0);
    expect(agent.stderr).toMatch(
      new RegExp(`bpf\\.pinPath ${pinPath} is not on a bpffs mount \\(/tmp is on .+, not bpffs\\)`),
    );
    expect(agent.stderr).toContain('"mount -t bpf bpffs /sys/fs/bpf" or set bpf.pinPath/--bpf-pin-path');
  });

  it('run without CAP_SYS_ADMIN cannot mount bpffs: it exits at once saying why and how to fix it', async () => {
    const agent = withoutBpffs(agentArgs(PIN_PATH, ['setpriv', '--bounding-set', '-sys_admin']));
    expect(await exitWithin(agent, 15_000)).not.toBe(0);
    expect(agent.stderr).toContain(
      `bpf.pinPath ${PIN_PATH} is not on a bpffs mount (/sys/fs/bpf is on sysfs, not bpffs); mount one with "mount -t bpf bpffs /sys/fs/bpf"`,
    );
    expect(agent.stderr).toContain(
      'mounting it here failed: mount (bpf on /sys/fs/bpf): Operation not permitted',
    );
  });

  it('list says nothing is pinned, without mounting anything', async () => {
    const list = withoutBpffs([
      'bash',
      '-c',
      `${process.execPath} ${mainScript} list --bpf-pin-path ${PIN_PATH}; code=$?; mountpoint -q ${BPFFS_ROOT} && echo mounted; exit $code`,
    ]);
    expect(await exitWithin(list, 15_000)).toBe(1);
    expect(list.stderr).toContain(`nothing is pinned under ${PIN_PATH}: /sys/fs/bpf is on sysfs, not bpffs`);
    expect(list.stdout).not.toContain('mounted');
  });
});
