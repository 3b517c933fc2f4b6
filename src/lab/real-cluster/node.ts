// One node of the real cluster: a kubelet v1.37.2 and containerd in the node's own network, mount
// and pid namespaces (scripts/lib/cluster-node.sh is its init), its state under one directory,
// its pods under its own cgroup. stop() kills the node's pid namespace (and with it every process
// of the node, the pods' included), which drops its mounts; then its cgroups go.

import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Lab } from '../netns.js';
import { until } from '../until.js';
import { makeNodeCgroups, nodeDaemonsCgroup, removeNodeCgroups } from './cgroups.js';
import {
  cniConfDir,
  cniConfig,
  containerdConfig,
  containerdSocket,
  kubeletConfig,
  type NodeSpec,
} from './node-config.js';
import { type ClusterParts, ROOT } from './parts.js';

const execFileAsync = promisify(execFile);
const NODE_INIT = join(ROOT, 'scripts/lib/cluster-node.sh');
/** Debian's containerd 1.6 (apt) and its shim and ctr. */
const DEBIAN_CONTAINERD_BIN = '/usr/bin';

export class ClusterNode {
  private child: ChildProcess | null = null;
  private exited: Promise<number | null> = Promise.resolve(null);

  constructor(
    readonly spec: NodeSpec,
    private readonly lab: Lab,
    private readonly parts: ClusterParts,
  ) {}

  /** Whether the node's init is still running. */
  get running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The lab namespace (short name) of the node's network namespace. */
  get ns(): string {
    return this.spec.name;
  }

  private get runtimeBin(): string {
    return this.spec.runtime === 'containerd-1.6' ? DEBIAN_CONTAINERD_BIN : this.parts.dirs.containerd;
  }

  private path(...parts: string[]): string {
    return join(this.spec.stateDir, ...parts);
  }

  /** The state directories, containerd's and the kubelet's files, the node's cgroups. */
  prepare(kubeconfig: string, clusterDNS: string): void {
    for (const dir of ['var-lib', 'var-log', 'sys', 'logs', 'containerd', 'kubelet'])
      mkdirSync(this.path(dir), { recursive: true });
    mkdirSync(cniConfDir(this.spec), { recursive: true });
    writeFileSync(this.path('containerd/config.toml'), containerdConfig(this.spec, this.parts.dirs.cni));
    writeFileSync(this.path('kubelet/config.json'), kubeletConfig(this.spec, clusterDNS));
    writeFileSync(this.path('kubelet/kubeconfig'), kubeconfig);
    makeNodeCgroups(this.spec.cgroupRoot);
  }

  /** Starts the node's init, which starts containerd and the kubelet. */
  start(): void {
    const kubelet = [
      join(this.parts.dirs.node, 'kubelet'),
      `--config=${this.path('kubelet/config.json')}`,
      `--kubeconfig=${this.path('kubelet/kubeconfig')}`,
      `--hostname-override=${this.spec.name}`,
      `--node-ip=${this.spec.ips.join(',')}`,
    ];
    const child = spawn(
      'nsenter',
      [
        `--net=/run/netns/${this.lab.ns(this.ns)}`,
        '--',
        'unshare',
        '--kill-child',
        '--mount',
        '--pid',
        '--fork',
        '--mount-proc',
        '--propagation',
        'private',
        'bash',
        NODE_INIT,
        this.spec.stateDir,
        nodeDaemonsCgroup(this.spec.cgroupRoot),
        this.runtimeBin,
        ...kubelet,
      ],
      { stdio: ['ignore', 'inherit', 'inherit'] },
    );
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
  }

  /** The pid (in this pid namespace) of the node's init: unshare's only child. */
  private initPid(): number {
    const pid = this.child?.pid;
    if (pid === undefined) throw new Error(`${this.spec.name} is not running`);
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ');
    const init = Number(children[0]);
    if (!(init > 0)) throw new Error(`${this.spec.name}: its init has not started`);
    return init;
  }

  /** A process inside the node (its network, mount and pid namespaces), e.g. kube-proxy. */
  spawn(command: string, args: string[]): ChildProcess {
    return spawn(
      'nsenter',
      ['-t', String(this.initPid()), '--net', '--mount', '--pid', '--', command, ...args],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
  }

  /** Waits for containerd's socket. */
  async waitForRuntime(timeoutMs = 30_000): Promise<void> {
    await until(
      `${this.spec.name}: containerd answers`,
      async () => {
        if (!this.running) throw new Error(`${this.spec.name} exited:\n${this.logTail('containerd')}`);
        return this.ctr(['version']).then(
          () => true,
          () => false,
        );
      },
      timeoutMs,
    );
  }

  private ctr(args: string[]): Promise<{ stdout: string }> {
    return execFileAsync(
      join(this.runtimeBin, 'ctr'),
      ['--address', containerdSocket(this.spec), '--namespace', 'k8s.io', ...args],
      { maxBuffer: 16 * 1024 * 1024 },
    );
  }

  /** Imports an image archive (docker-save or OCI) into the node's containerd, for the kubelet. */
  async importImage(archive: string): Promise<void> {
    await this.ctr(['images', 'import', archive]).catch((error: { stderr?: string }) => {
      throw new Error(`${this.spec.name}: ctr images import ${archive}: ${error.stderr ?? error}`);
    });
  }

  /** The CNI network of the node's pod CIDRs: containerd picks it up, and the node turns Ready. */
  writeCniConfig(podCIDRs: readonly string[]): void {
    writeFileSync(join(cniConfDir(this.spec), '10-kbpc.conflist'), cniConfig(podCIDRs));
  }

  /** The node's log files (containerd's, the kubelet's, kube-proxy's), for the report. */
  get logDir(): string {
    return this.path('logs');
  }

  /** The node's pods' container logs (the kubelet's /var/log/pods). */
  get podLogDir(): string {
    return this.path('var-log', 'pods');
  }

  logTail(name: 'kubelet' | 'containerd', lines = 40): string {
    try {
      return readFileSync(this.path('logs', `${name}.log`), 'utf8')
        .split('\n')
        .slice(-lines)
        .join('\n');
    } catch {
      return '(no log)';
    }
  }

  /** Kills the node (its pid namespace goes with unshare's child) and removes its cgroups. */
  async stop(): Promise<void> {
    if (this.running) {
      // unshare ignores SIGTERM while it waits for its child; killed, it takes the node's init
      // with it (--kill-child), and the kernel the rest of the node's pid namespace.
      this.child?.kill('SIGKILL');
      await this.exited;
    }
    this.child = null;
    await removeNodeCgroups(this.spec.cgroupRoot);
  }
}
