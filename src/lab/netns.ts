// The namespace lab: small clusters of network namespaces joined by veth pairs, with backend
// servers and traffic clients inside them. The demo, the benchmark and the e2e tests all build
// their topologies with it, so every namespace it creates carries the lab's prefix and is
// deleted by destroy(), also after a failure.

import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { type ExecResult, runCommand } from '../host/command.js';
import { makeOwnCgroup, removeOwnCgroup } from './lab-cgroup.js';

export interface BackendOptions {
  /** Name the server answers with, so clients can tell backends apart. */
  name: string;
  tcpPorts?: number[];
  udpPorts?: number[];
  /** Ports answering every line of a long-lived connection (backend-server.ts). */
  streamPorts?: number[];
}

/** net.ipv4 rp_filter as distributions ship it: 1 strict (RHEL), 2 loose (systemd's 50-default.conf). */
export type ReversePathFilter = 1 | 2;

const NETNS_DIR = '/run/netns';
/** A command that first moves itself into `cgroup` (a cgroup v2 directory), then runs. */
export function inCgroup(cgroup: string, cmd: string, args: string[]): [string, string[]] {
  return ['sh', ['-c', 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', 'sh', cgroup, cmd, ...args]];
}

/**
 * The compiled JavaScript file next to a module: scripts that run as separate node processes
 * (inside namespaces) must be JavaScript, so from the sources (tests under vitest) this is the
 * build output in dist/.
 */
export function compiledSibling(moduleUrl: string, file: string): string {
  if (!moduleUrl.endsWith('.ts')) return fileURLToPath(new URL(file, moduleUrl));
  const split = moduleUrl.lastIndexOf('/src/');
  const dir = moduleUrl.slice(split + '/src/'.length, moduleUrl.lastIndexOf('/') + 1);
  return fileURLToPath(`${moduleUrl.slice(0, split)}/dist/src/${dir}${file}`);
}

const backendScript = compiledSibling(import.meta.url, 'backend-server.js');
const clientScript = compiledSibling(import.meta.url, 'traffic-client.js');
const synFloodScript = compiledSibling(import.meta.url, 'syn-flood.js');

export class Lab {
  readonly prefix: string;
  private readonly namespaces = new Set<string>();
  private readonly processes = new Set<ChildProcess>();
  /** The cgroup2 directory each namespace's commands start in, where one is set (setCgroup()). */
  private readonly cgroups = new Map<string, string>();
  /** The lab's own cgroup2 directory (ownCgroup()), where a namespace has none of its own. */
  private own: string | null = null;

  /** prefix: short and unique per run (pid included), e.g. `kbp${process.pid}`. */
  constructor(prefix: string) {
    this.prefix = prefix;
  }

  /** The full netns name of a lab namespace. */
  ns(name: string): string {
    return `${this.prefix}-${name}`;
  }

  async addNamespace(name: string): Promise<string> {
    const full = this.ns(name);
    await runCommand('ip', ['netns', 'add', full]);
    this.namespaces.add(full);
    await this.exec(name, 'ip', ['link', 'set', 'lo', 'up']);
    return full;
  }

  /** A veth pair with one end in each namespace (both ends are brought up). */
  async link(nsA: string, ifA: string, nsB: string, ifB: string): Promise<void> {
    await runCommand('ip', [
      'link',
      'add',
      ifA,
      'netns',
      this.ns(nsA),
      'type',
      'veth',
      'peer',
      'name',
      ifB,
      'netns',
      this.ns(nsB),
    ]);
    await this.exec(nsA, 'ip', ['link', 'set', ifA, 'up']);
    await this.exec(nsB, 'ip', ['link', 'set', ifB, 'up']);
  }

  /** An IPv6 address is usable at once (nodad: no duplicate address detection to wait out). */
  async addAddress(ns: string, ifname: string, cidr: string): Promise<void> {
    await this.exec(ns, 'ip', ['addr', 'add', cidr, 'dev', ifname, ...(cidr.includes(':') ? ['nodad'] : [])]);
  }

  async addRoute(ns: string, ...args: string[]): Promise<void> {
    await this.exec(ns, 'ip', ['route', 'add', ...args]);
  }

  /**
   * `-A FORWARD -m conntrack --ctstate INVALID -j DROP`, as Docker, firewalld, several CNIs and
   * kube-proxy's iptables mode install it, for IPv4 and IPv6; it also turns netfilter conntrack on
   * in the namespace.
   */
  async dropInvalidForwards(ns: string): Promise<void> {
    for (const command of ['iptables', 'ip6tables'])
      await this.exec(ns, command, [
        '-A',
        'FORWARD',
        '-m',
        'conntrack',
        '--ctstate',
        'INVALID',
        '-j',
        'DROP',
      ]);
  }

  /**
   * net.ipv4.conf.{all,default}.rp_filter: an interface's effective value is max(all, its own), and
   * interfaces created later take default.
   */
  async reversePathFilter(ns: string, mode: ReversePathFilter): Promise<void> {
    for (const scope of ['all', 'default'])
      await this.sysctl(ns, `net.ipv4.conf.${scope}.rp_filter`, String(mode));
  }

  async sysctl(ns: string, key: string, value: string): Promise<void> {
    await this.exec(ns, 'sysctl', ['-qw', `${key}=${value}`]);
  }

  /**
   * Waits until no IPv6 address of the namespace is tentative: link-local addresses go through
   * duplicate address detection (about a second), and until then neighbour discovery from them
   * stalls, so first connections time out. Bounded by timeoutMs.
   */
  async waitForIPv6Addresses(ns: string, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { stdout } = await this.exec(ns, 'ip', ['-6', 'addr', 'show', 'tentative']);
      if (stdout.trim() === '') return;
      if (Date.now() > deadline) throw new Error(`IPv6 addresses in ${ns} still tentative:\n${stdout}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  /**
   * Runs a command inside a lab namespace. nsenter keeps the host's /sys (and so bpffs), unlike
   * `ip netns exec`, which remounts it. Throws on a non-zero exit unless allowFailure.
   */
  async exec(
    ns: string,
    cmd: string,
    args: string[],
    opts: { allowFailure?: boolean; input?: string } = {},
  ): Promise<ExecResult> {
    return runCommand('nsenter', this.nsenterArgs(ns, cmd, args), opts);
  }

  /** Starts a long-running process inside a namespace; destroy() kills it. */
  spawn(ns: string, cmd: string, args: string[]): ChildProcess {
    const child = spawn('nsenter', this.nsenterArgs(ns, cmd, args), {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.processes.add(child);
    child.once('exit', () => this.processes.delete(child));
    return child;
  }

  /**
   * Every later command in the namespace (exec(), spawn() and all built on them) starts in the
   * cgroup2 directory `dir`, as a node's processes live in its cgroup: socket hooks attached there
   * see them, and none of the machine's other processes. The caller creates and removes `dir`.
   */
  setCgroup(ns: string, dir: string): void {
    this.cgroups.set(ns, dir);
  }

  /**
   * Makes the lab's own cgroup2 directory and returns it: every later command of a namespace
   * without a cgroup of its own (setCgroup()) starts in it, so an agent given it as bpf.cgroupPath
   * serves the lab's processes and attaches nothing at the machine's cgroup2 root. destroy()
   * removes it.
   */
  async ownCgroup(): Promise<string> {
    this.own ??= await makeOwnCgroup(this.prefix);
    return this.own;
  }

  /** The cgroup2 directory the namespace's commands start in, if any. */
  cgroupOf(ns: string): string | null {
    return this.cgroups.get(ns) ?? this.own;
  }

  /** nsenter's words for `cmd` in the namespace: joining its cgroup first, where one is set. */
  private nsenterArgs(ns: string, cmd: string, args: string[]): string[] {
    const cgroup = this.cgroupOf(ns) ?? undefined;
    const [command, words] = cgroup === undefined ? [cmd, args] : inCgroup(cgroup, cmd, args);
    return [`--net=${NETNS_DIR}/${this.ns(ns)}`, '--', command, ...words];
  }

  /** Starts a backend (HTTP on each TCP port, UDP echo on each UDP port) and waits until it listens. */
  async startBackend(ns: string, opts: BackendOptions): Promise<ChildProcess> {
    const args = [backendScript, '--name', opts.name];
    if (opts.tcpPorts?.length) args.push('--tcp', opts.tcpPorts.join(','));
    if (opts.udpPorts?.length) args.push('--udp', opts.udpPorts.join(','));
    if (opts.streamPorts?.length) args.push('--stream', opts.streamPorts.join(','));
    const child = this.spawn(ns, process.execPath, args);
    await waitForLine(child, 'listening', 10_000);
    return child;
  }

  /**
   * Sends `count` requests (a new TCP connection with one HTTP request each, or one UDP datagram
   * each) from a namespace and returns, per request, the answering backend's name or the error.
   * With downloadBytes, each TCP request fetches that many bytes and timeoutMs bounds the transfer;
   * with datagramBytes, each UDP datagram is that long and must come back echoed.
   */
  async requests(
    ns: string,
    target: string,
    opts: {
      proto: 'tcp' | 'udp';
      count: number;
      timeoutMs?: number;
      sourcePort?: number;
      sourceAddress?: string;
      downloadBytes?: number;
      datagramBytes?: number;
    },
  ): Promise<RequestResult[]> {
    const args = [
      clientScript,
      '--proto',
      opts.proto,
      '--target',
      target,
      '--count',
      String(opts.count),
      '--timeout',
      String(opts.timeoutMs ?? 2000),
    ];
    if (opts.sourcePort) args.push('--source-port', String(opts.sourcePort));
    if (opts.sourceAddress) args.push('--source-address', opts.sourceAddress);
    if (opts.downloadBytes !== undefined) args.push('--download', String(opts.downloadBytes));
    if (opts.datagramBytes !== undefined) args.push('--datagram', String(opts.datagramBytes));
    const { stdout } = await this.exec(ns, process.execPath, args);
    return stdout
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line) as RequestResult);
  }

  /**
   * A SYN flood from a namespace (syn-flood.js): spoofed sources from `sources` (default
   * 198.18.0.0/15), as fast as one raw socket goes, until `count` SYNs or `seconds` have passed.
   */
  async synFlood(
    ns: string,
    target: string,
    opts: { count: number; seconds: number; sources?: string },
  ): Promise<{ sent: number; seconds: number }> {
    const args = [
      synFloodScript,
      '--target',
      target,
      '--count',
      String(opts.count),
      '--seconds',
      String(opts.seconds),
    ];
    if (opts.sources) args.push('--sources', opts.sources);
    const { stdout } = await this.exec(ns, process.execPath, args);
    return JSON.parse(stdout) as { sent: number; seconds: number };
  }

  /**
   * Starts a UDP client that keeps sending from one connected socket (traffic-client --interval)
   * and collects its answers and errors as they come; stop() ends it.
   */
  udpStream(
    ns: string,
    target: string,
    opts: { intervalMs: number; count: number; sourcePort?: number },
  ): UdpStream {
    const child = this.spawn(ns, process.execPath, [
      clientScript,
      '--proto',
      'udp',
      '--target',
      target,
      '--count',
      String(opts.count),
      '--interval',
      String(opts.intervalMs),
      '--timeout',
      '500',
      ...(opts.sourcePort ? ['--source-port', String(opts.sourcePort)] : []),
    ]);
    const events: UdpStreamEvent[] = [];
    let partial = '';
    child.stdout?.on('data', (d: Buffer) => {
      const lines = (partial + d.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) if (line.trim() !== '') events.push(JSON.parse(line) as UdpStreamEvent);
    });
    return { events, stop: () => void child.kill('SIGKILL') };
  }

  async destroy(): Promise<void> {
    for (const child of this.processes) child.kill('SIGKILL');
    this.processes.clear();
    for (const full of this.namespaces) {
      await runCommand('ip', ['netns', 'del', full], { allowFailure: true });
    }
    this.namespaces.clear();
    if (this.own !== null) await removeOwnCgroup(this.prefix);
    this.own = null;
  }
}

export interface UdpStreamEvent {
  backend: string | null;
  error: string | null;
  /** Date.now() when the answer or error arrived. */
  at: number;
}

export interface UdpStream {
  /** Grows as answers and errors arrive. */
  readonly events: UdpStreamEvent[];
  stop(): void;
}

export interface RequestResult {
  /** The backend's name, or null when the request failed. */
  backend: string | null;
  /** The client address the backend saw ("ip:port"). */
  seenClient: string | null;
  error: string | null;
  ms: number;
  /** Downloads: the bytes that arrived; echoed datagrams: the bytes echoed back intact. */
  bytes?: number;
}

/** Deletes namespaces left behind by an earlier run that died before destroy() (by prefix). */
export async function deleteStaleNamespaces(prefix: string): Promise<void> {
  const { stdout } = await runCommand('ip', ['netns', 'list'], { allowFailure: true });
  for (const line of stdout.split('\n')) {
    const name = line.split(' ')[0];
    if (name?.startsWith(`${prefix}-`))
      await runCommand('ip', ['netns', 'del', name], { allowFailure: true });
  }
}

export function waitForLine(child: ChildProcess, needle: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(
      () => reject(new Error(`timed out waiting for "${needle}"; output: ${seen}`)),
      timeoutMs,
    );
    const onData = (d: Buffer) => {
      seen += d.toString();
      if (seen.includes(needle)) {
        clearTimeout(timer);
        child.stdout?.off('data', onData);
        resolve();
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (d: Buffer) => {
      seen += d.toString();
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`process exited (${code}) before "${needle}": ${seen}`));
    });
  });
}
