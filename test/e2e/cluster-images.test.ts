// The images scripts/install-cluster.sh builds for the real cluster (issue 27), as a node's
// containerd sees them: a containerd of the cluster's parts (KBP_CONTAINERD_BIN) runs in a private
// mount and PID namespace with a tmpfs over /run (its state, socket, shim sockets and FIFOs) and a
// root in a temporary directory, imports every archive with `ctr -n k8s.io images import` as the
// cluster harness does, and runs each image:
//   - the names are the ones the kubelet and the e2e framework of v1.37.2 ask for
//     (test/utils/image/manifest.go: Pause, Agnhost) and kubeadm gives CoreDNS
//     (cmd/kubeadm/app/constants/constants.go: CoreDNSVersion);
//   - pause reaps an orphan handed to it as its PID namespace's init, and exits 0 on SIGTERM;
//   - agnhost reports its version, and its shell is bash with OpenBSD nc and GNU wget, the tools
//     the Services specs run: `nc -v -z -w` and `wget -T` against agnhost netexec in the container;
//   - coredns reports the version built.
// Killing containerd, the namespace's init, ends every shim and container; the cgroups runc made
// and the directory are removed after, even on failure.

import { type ChildProcess, execFile, spawn } from 'node:child_process';
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ClusterParts, locateClusterParts } from '../../src/lab/cluster-parts.js';
import { until } from '../../src/lab/until.js';
import { describeRoot } from '../support/privileges.js';

const execFileAsync = promisify(execFile);

const IMAGES = {
  pause: 'registry.k8s.io/pause:3.10.2',
  agnhost: 'registry.k8s.io/e2e-test-images/agnhost:2.66.1',
  coredns: 'registry.k8s.io/coredns/coredns:v1.14.6',
};
const CGROUP_PARENT = `kbp-cluster-images-${process.pid}`;

const parts = locateClusterParts();
// In CI the parts are built before the e2e tier (scripts/test.sh): never skip there.
const describeParts: typeof describe =
  process.env.CI === 'true' || parts !== null
    ? describeRoot
    : (((...args: Parameters<typeof describe>) => {
        console.warn(
          `skipping ${String(args[0])}: the cluster's parts are not built (bash scripts/install-cluster.sh)`,
        );
        return describe.skip(...args);
      }) as typeof describe);

/** containerd in its own mount and PID namespace; `ctr` and `inside` run in them. */
class PrivateContainerd {
  private process: ChildProcess | null = null;
  private pid = 0;

  constructor(
    private readonly bins: ClusterParts,
    private readonly dir: string,
  ) {}

  async start(): Promise<void> {
    const config = join(this.dir, 'config.toml');
    // The CRI and NRI plugins are the kubelet's business; "opt" would install into /opt/containerd.
    writeFileSync(
      config,
      [
        'version = 3',
        `root = "${join(this.dir, 'root')}"`,
        'state = "/run/containerd"',
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", "io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt"]',
        '',
      ].join('\n'),
    );
    const log = join(this.dir, 'containerd.log');
    this.process = spawn(
      'unshare',
      [
        '--mount',
        '--pid',
        '--fork',
        '--mount-proc',
        '--propagation',
        'private',
        '--',
        'sh',
        '-c',
        `mount -t tmpfs -o mode=0755 tmpfs /run && exec "$0" --config "$1" >"$2" 2>&1`,
        join(this.bins.containerd, 'containerd'),
        config,
        log,
      ],
      { stdio: 'ignore', env: this.env() },
    );
    const unsharePid = this.process.pid;
    try {
      await until('containerd answers', () => this.answers(unsharePid), 30_000);
    } catch (error) {
      const tail = existsSync(log) ? readFileSync(log, 'utf8').slice(-2000) : 'no log';
      throw new Error(`${(error as Error).message}; containerd's log ends:\n${tail}`);
    }
  }

  /** Whether unshare's child (the namespace's init: containerd) is there and serves ctr. */
  private async answers(unsharePid: number | undefined): Promise<boolean> {
    try {
      const children = readFileSync(`/proc/${unsharePid}/task/${unsharePid}/children`, 'utf8').trim();
      this.pid = Number(children.split(' ')[0] || 0);
      if (this.pid === 0) return false;
      await this.ctr(['version'], 5_000);
      return true;
    } catch {
      return false;
    }
  }

  /** PATH with the containerd build first: containerd finds containerd-shim-runc-v2 there. */
  private env(): NodeJS.ProcessEnv {
    return { ...process.env, PATH: `${this.bins.containerd}:${process.env.PATH ?? ''}` };
  }

  /** A command in containerd's mount and PID namespace. */
  async inside(command: string[], timeoutMs = 60_000): Promise<string> {
    const { stdout } = await execFileAsync(
      'nsenter',
      ['--target', String(this.pid), '--mount', '--pid', '--', ...command],
      { env: this.env(), timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 1 << 24 },
    );
    return stdout;
  }

  ctr(args: string[], timeoutMs?: number): Promise<string> {
    return this.inside([join(this.bins.containerd, 'ctr'), '-n', 'k8s.io', ...args], timeoutMs);
  }

  /** `ctr run --rm IMAGE ID ARGS...` to its end, in a cgroup of this test's own. */
  run(image: string, id: string, args: string[]): Promise<string> {
    return this.ctr(['run', '--rm', '--cgroup', `/${CGROUP_PARENT}/${id}`, image, id, ...args]);
  }

  /** Kills the namespace's init, and with it every shim and container. */
  async stop(): Promise<void> {
    const exited =
      this.process?.exitCode === null ? new Promise((done) => this.process?.once('exit', done)) : null;
    if (this.pid > 0) process.kill(this.pid, 'SIGKILL');
    else this.process?.kill('SIGKILL');
    await exited;
  }
}

/** Removes the cgroups runc made under CGROUP_PARENT in every hierarchy (empty: their tasks ended). */
function removeCgroups(): void {
  for (const hierarchy of readdirSync('/sys/fs/cgroup')) {
    const parent = join('/sys/fs/cgroup', hierarchy, CGROUP_PARENT);
    if (!existsSync(parent)) continue;
    for (const entry of readdirSync(parent, { withFileTypes: true })) {
      if (entry.isDirectory()) rmdirSync(join(parent, entry.name));
    }
    rmdirSync(parent);
  }
}

describeParts('the real cluster images (scripts/install-cluster.sh)', () => {
  let dir = '';
  let containerd: PrivateContainerd;

  beforeAll(async () => {
    if (!parts) throw new Error("the cluster's parts are not built: bash scripts/install-cluster.sh");
    dir = mkdtempSync(join(tmpdir(), 'kbp-cluster-images-'));
    containerd = new PrivateContainerd(parts, dir);
    await containerd.start();
  });

  afterAll(async () => {
    await containerd?.stop();
    removeCgroups();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('imports every archive under the names the kubelet, kubeadm and the e2e framework ask for', async () => {
    for (const archive of ['pause.tar', 'agnhost.tar', 'coredns.tar']) {
      await containerd.ctr(['images', 'import', join(parts!.images, archive)], 120_000);
    }
    const names = (await containerd.ctr(['images', 'ls', '-q'])).trim().split('\n').sort();
    expect(names).toEqual(Object.values(IMAGES).sort());
  });

  it('pause reaps the orphans of its PID namespace and exits 0 on SIGTERM', async () => {
    const exited = containerd.run(IMAGES.pause, 'pause', []).then(
      (stdout) => ({ stdout }),
      (error: Error) => ({ error: error.message }),
    );
    let taskPid = '';
    await until(
      'the pause task runs',
      async () => {
        const line = (await containerd.ctr(['tasks', 'ls'])).split('\n').find((l) => l.startsWith('pause '));
        taskPid = line?.includes('RUNNING') ? (line.split(/\s+/)[1] ?? '') : '';
        return taskPid !== '';
      },
      30_000,
    );
    // The host's sh in the container's PID namespace leaves a sleep behind: the orphan goes to
    // pause, which must reap it once it exits (a zombie would stay its child).
    const out = await containerd.inside([
      'sh',
      '-c',
      `nsenter --target ${taskPid} --pid -- sh -c 'sleep 0.2 & echo "orphan $!"' && sleep 1 && echo "children [$(cat /proc/${taskPid}/task/${taskPid}/children)]"`,
    ]);
    expect(out).toMatch(/^orphan \d+\nchildren \[\]\n$/);
    await containerd.ctr(['tasks', 'kill', '--signal', 'SIGTERM', 'pause']);
    expect(await exited).toEqual({ stdout: '' });
  });

  it('agnhost is 2.66.1, with bash as /bin/sh, OpenBSD nc and GNU wget', async () => {
    expect(await containerd.run(IMAGES.agnhost, 'agnhost-version', ['/agnhost', '--version'])).toContain(
      '2.66.1',
    );
    const script = [
      'readlink -f /bin/sh',
      'for tool in curl ip ss socat dig timeout; do command -v $tool >/dev/null || echo "missing $tool"; done',
      '/agnhost netexec --http-port=8080 --udp-port=-1 >/dev/null 2>&1 &',
      'for i in $(seq 50); do nc -v -z -w 1 127.0.0.1 8080 2>/dev/null && break; sleep 0.1; done',
      'nc -v -z -w 1 127.0.0.1 8080 2>&1',
      'wget --version | head -1',
      'wget -q -T 5 -O - http://127.0.0.1:8080/echo?msg=via-wget; echo',
      'curl -s --max-time 5 http://127.0.0.1:8080/echo?msg=via-curl; echo',
      'kill %1',
    ].join('\n');
    const out = await containerd.run(IMAGES.agnhost, 'agnhost-tools', ['/bin/sh', '-c', script]);
    const lines = out.trim().split('\n');
    expect(lines[0]).toBe('/usr/bin/bash');
    expect(out).not.toContain('missing');
    expect(out).toMatch(/Connection to 127\.0\.0\.1 8080 port \[tcp\/\*\] succeeded!/);
    expect(out).toContain('GNU Wget');
    expect(lines).toContain('via-wget');
    expect(lines).toContain('via-curl');
  });

  it('coredns reports the version built', async () => {
    expect(await containerd.run(IMAGES.coredns, 'coredns-version', ['/coredns', '-version'])).toContain(
      'CoreDNS-1.15.0',
    );
  });
});
