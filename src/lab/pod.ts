// The Helm chart's agent pod run for real in a lab node (issue 17): the DaemonSet's pod template
// that `helm template` renders, turned into a Pod the way the kubelet would run it on that node,
// and started by `podman kube play` inside the node's network namespace (hostNetwork: the node's
// network is the pod's). Each node gets a directory standing for its root filesystem, where the
// pod's hostPath volumes live (bpffs is mounted there by the chart's init container, not by us);
// the API server is a control-plane host on the nodes' underlay that forwards, over TLS, to an
// API server the caller runs (the fake one of the tests); the ServiceAccount's token, CA and
// namespace are files mounted where the kubelet mounts them.
//
// What podman 4.3 cannot take as Kubernetes does is translated, as the kubelet and the API
// server's admission would have done it, and nothing else changes:
// - env from fieldRef spec.nodeName: the node's name (podman knows no nodes), and $(VAR) in
//   command and args expanded from the env (the kubelet does it; podman 4.3 does not);
// - containerPorts: dropped (informational under hostNetwork; podman refuses port mappings there);
// - securityContext.seccompProfile: the equivalent seccomp annotation, the only form podman reads;
// - probes: podman would run httpGet probes as `curl` inside the image (which has none) from
//   systemd timers (this host has no systemd), so the lab runs them itself as the kubelet does:
//   an HTTP GET from the node to the pod's (the node's) address (probe());
// - the init container stays after it ran (podman removes "once" init containers racily);
// - annotations longer than podman 4.3 accepts (the config checksum) are left out.

import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, openSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { AgentLog, type SyncLine } from './agent-log.js';
import type { Lab } from './netns.js';

const execFileAsync = promisify(execFile);

/** The control-plane host on the underlay, where the chart's k8sServiceHost points. */
export const API_SERVER_IP = '10.10.0.3';
export const API_SERVER_PORT = 6443;
const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * podman's settings for the lab (CONTAINERS_CONF): runc (crun refuses this host's hybrid cgroup
 * layout), cgroupfs and file events (no systemd), ulimits the host allows, and no tmpfs over /run
 * and /var/tmp for readOnlyRootFilesystem (the kubelet mounts none).
 */
const CONTAINERS_CONF = `[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
read_only_tmpfs = false
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
`;

// biome-ignore lint/suspicious/noExplicitAny: rendered manifests are untyped YAML
type Manifest = any;

export interface PodProbe {
  kind: 'startup' | 'liveness' | 'readiness';
  path: string;
  port: number;
}

export interface ChartPodOptions {
  /** Capabilities taken out of the agent container's `add` list (least-privilege runs). */
  dropCapabilities?: string[];
}

/** A podman-run chart pod in a lab node, followed through `podman logs -f` (each "synced" line). */
export class ChartPod {
  readonly log: AgentLog;
  private follower: ReturnType<Podman['spawn']> | null = null;

  constructor(
    readonly podman: Podman,
    readonly name: string,
    readonly ns: string,
    readonly nodeIP: string,
    readonly probes: PodProbe[],
    /** The agent container's capabilities, as podman applied them. */
    readonly capabilities: string[],
  ) {
    this.log = new AgentLog(`pod ${name}`);
  }

  get syncs(): SyncLine[] {
    return this.log.syncs;
  }

  get lines(): Record<string, unknown>[] {
    return this.log.lines;
  }

  get agentContainer(): string {
    return `${this.name}-kube-bpf-proxy`;
  }

  /** Follows the agent container's log (pino's JSON lines on stderr). */
  follow(): void {
    const child = this.podman.spawn(['logs', '-f', this.agentContainer]);
    this.follower = child;
    const onData = (d: Buffer) => this.log.feed(d);
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('close', (code) => this.log.end(code));
  }

  waitForSync(count: number, timeoutMs: number): Promise<SyncLine> {
    return this.log.waitForSync(count, timeoutMs);
  }

  tail(): string {
    return this.log.tail();
  }

  /**
   * The pod's probes as the kubelet runs them: an HTTP GET from the node to the pod's address
   * (the node's, under hostNetwork); the status code, or 0 when nothing answered.
   */
  async probe(lab: Lab): Promise<(PodProbe & { status: number })[]> {
    const out: (PodProbe & { status: number })[] = [];
    for (const probe of this.probes) {
      const script = `require('http').get({host:${JSON.stringify(this.nodeIP)},port:${probe.port},path:${JSON.stringify(probe.path)},timeout:5000},r=>{console.log(r.statusCode);r.resume()}).on('error',()=>console.log(0)).on('timeout',function(){this.destroy()})`;
      const { stdout } = await lab.exec(this.ns, process.execPath, ['-e', script]);
      out.push({ ...probe, status: Number(stdout.trim()) });
    }
    return out;
  }

  /** Deletes the pod as the kubelet does on a rolling update: SIGTERM, the grace period, SIGKILL. */
  async stop(graceSeconds = 10): Promise<void> {
    await this.podman.run(['pod', 'rm', '--force', '--time', String(graceSeconds), this.name], {
      allowFailure: true,
    });
    this.follower?.kill('SIGKILL');
  }
}

/** podman with the lab's containers.conf, run in a lab node's network namespace when asked. */
export class Podman {
  readonly env: NodeJS.ProcessEnv;

  constructor(workDir: string) {
    const conf = join(workDir, 'containers.conf');
    writeFileSync(conf, CONTAINERS_CONF);
    this.env = { ...process.env, CONTAINERS_CONF: conf };
  }

  async run(
    args: string[],
    opts: { netns?: string; allowFailure?: boolean } = {},
  ): Promise<{ stdout: string; stderr: string; code: number }> {
    const [cmd, full] = opts.netns
      ? ['nsenter', [`--net=/run/netns/${opts.netns}`, '--', 'podman', ...args]]
      : ['podman', args];
    try {
      const { stdout, stderr } = await execFileAsync(cmd, full, {
        env: this.env,
        maxBuffer: 64 * 1024 * 1024,
      });
      return { stdout, stderr, code: 0 };
    } catch (err) {
      const e = err as { stdout?: string; stderr?: string; code?: number };
      const result = { stdout: e.stdout ?? '', stderr: e.stderr ?? String(err), code: e.code ?? 1 };
      if (opts.allowFailure) return result;
      throw new Error(`podman ${args.join(' ')} failed (${result.code}): ${result.stderr.trim()}`);
    }
  }

  spawn(args: string[]) {
    return spawn('podman', args, { env: this.env, stdio: ['ignore', 'pipe', 'pipe'] });
  }

  /** Removes every pod whose name starts with prefix (left by a run that died before cleanup). */
  async removePods(prefix: string): Promise<void> {
    const { stdout } = await this.run(['pod', 'ps', '--format', '{{.Name}}'], { allowFailure: true });
    for (const name of stdout.split('\n')) {
      if (name.startsWith(prefix))
        await this.run(['pod', 'rm', '--force', '--time', '0', name], { allowFailure: true });
    }
  }
}

/**
 * The API server as the nodes see it: a control-plane host on the underlay (netns `ctl`,
 * API_SERVER_IP) terminating TLS with a certificate of the lab's CA and forwarding to `target`
 * (host:port in the caller's network namespace) through a Unix socket; plus the ServiceAccount
 * directory (token, ca.crt, namespace) the pods mount.
 */
export class LabControlPlane {
  readonly token = randomBytes(24).toString('hex');
  readonly serviceAccountDir: string;
  private server: net.Server | null = null;

  private constructor(
    readonly dir: string,
    private readonly target: { host: string; port: number },
  ) {
    this.serviceAccountDir = join(dir, 'serviceaccount');
  }

  static async start(
    lab: Lab,
    dir: string,
    target: { host: string; port: number },
    underlay: { bridgeNs: string; bridge: string; gateway: string },
  ): Promise<LabControlPlane> {
    mkdirSync(join(dir, 'serviceaccount'), { recursive: true });
    const plane = new LabControlPlane(dir, target);
    await plane.writeCredentials();
    const socket = join(dir, 'api.sock');
    plane.server = net.createServer((client) => {
      const upstream = net.connect(target.port, target.host);
      client.pipe(upstream).pipe(client);
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close);
      upstream.on('error', close);
    });
    await new Promise<void>((resolve, reject) => {
      plane.server?.once('error', reject);
      plane.server?.listen(socket, () => resolve());
    });
    await lab.addNamespace('ctl');
    await lab.link('ctl', 'eth0', underlay.bridgeNs, 'wctl');
    await lab.exec(underlay.bridgeNs, 'ip', ['link', 'set', 'wctl', 'master', underlay.bridge]);
    await lab.addAddress('ctl', 'eth0', `${API_SERVER_IP}/24`);
    await lab.addRoute('ctl', 'default', 'via', underlay.gateway);
    lab.spawn('ctl', 'socat', [
      `OPENSSL-LISTEN:${API_SERVER_PORT},bind=${API_SERVER_IP},reuseaddr,fork,cert=${join(dir, 'server.crt')},key=${join(dir, 'server.key')},verify=0`,
      `UNIX-CONNECT:${socket}`,
    ]);
    // Bounded wait until socat listens.
    for (let i = 0; ; i++) {
      const { stdout } = await lab.exec('ctl', 'ss', ['-Htln', `sport = :${API_SERVER_PORT}`]);
      if (stdout.trim() !== '') break;
      if (i >= 50) throw new Error('the control plane did not listen on :6443 within 5 s');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return plane;
  }

  /** A CA, the API server's certificate for API_SERVER_IP, and the ServiceAccount's files. */
  private async writeCredentials(): Promise<void> {
    const d = this.dir;
    const openssl = (args: string[]) => execFileAsync('openssl', args);
    const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
    await openssl([
      'req',
      '-x509',
      ...key,
      '-keyout',
      join(d, 'ca.key'),
      '-out',
      join(d, 'ca.crt'),
      '-days',
      '2',
      '-subj',
      '/CN=lab-kubernetes-ca',
    ]);
    await openssl([
      'req',
      ...key,
      '-keyout',
      join(d, 'server.key'),
      '-out',
      join(d, 'server.csr'),
      '-subj',
      '/CN=kube-apiserver',
    ]);
    writeFileSync(join(d, 'san.ext'), `subjectAltName=IP:${API_SERVER_IP}\n`);
    await openssl([
      'x509',
      '-req',
      '-in',
      join(d, 'server.csr'),
      '-CA',
      join(d, 'ca.crt'),
      '-CAkey',
      join(d, 'ca.key'),
      '-CAcreateserial',
      '-out',
      join(d, 'server.crt'),
      '-days',
      '2',
      '-extfile',
      join(d, 'san.ext'),
    ]);
    const sa = this.serviceAccountDir;
    writeFileSync(join(sa, 'token'), this.token);
    writeFileSync(join(sa, 'namespace'), 'kube-system');
    await execFileAsync('cp', [join(d, 'ca.crt'), join(sa, 'ca.crt')]);
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = null;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  toString(): string {
    return `${this.target.host}:${this.target.port}`;
  }
}

/**
 * The node's root filesystem for hostPath volumes: a directory bind-mounted onto itself and made
 * shared, so that what a Bidirectional mount does inside the pod (the init container's bpffs)
 * reaches the node, as on a real node's /.
 */
export async function makeNodeRoots(dir: string): Promise<void> {
  mkdirSync(dir, { recursive: true });
  await execFileAsync('mount', ['--bind', dir, dir]);
  await execFileAsync('mount', ['--make-rshared', dir]);
}

/** Unmounts the node roots and everything mounted below them (the init containers' bpffs). */
export async function removeNodeRoots(dir: string): Promise<void> {
  await execFileAsync('umount', ['--recursive', '--lazy', dir]).catch(() => {});
}

/** chartPodManifest's options: the lab node, its root, the ServiceAccount, capabilities taken out. */
export interface ChartPodOptions {
  name: string;
  node: string;
  nodeRoot: string;
  serviceAccountDir: string;
  dropCapabilities?: string[];
}

/**
 * The DaemonSet's pod template as a Pod for `podman kube play` on one lab node (see the header
 * for every translation), its hostPath volumes under `nodeRoot` (the host's cgroup2 hierarchy
 * stays the host's: every lab node shares the kernel's), the ServiceAccount mounted from
 * `serviceAccountDir`.
 */
export function chartPodManifest(
  daemonSet: Manifest,
  opts: ChartPodOptions,
): { pod: Manifest; probes: PodProbe[]; capabilities: string[] } {
  const template = structuredClone(daemonSet.spec.template);
  const spec = template.spec;
  spec.nodeName = opts.node;
  const annotations = podmanAnnotations(template.metadata.annotations ?? {});
  const probes: PodProbe[] = [];
  let capabilities: string[] = [];
  for (const container of [...(spec.initContainers ?? []), ...spec.containers]) {
    const isAgent = (spec.containers as Manifest[]).includes(container);
    const ports = new Map<string, number>(
      (container.ports ?? []).map((p: Manifest) => [p.name, p.containerPort] as [string, number]),
    );
    delete container.ports;
    expandContainerEnv(container, opts.node);
    probes.push(...takeProbes(container, ports, isAgent));
    const security = container.securityContext ?? {};
    seccompToAnnotation(container.name, security, annotations);
    if (isAgent && security.capabilities?.add) {
      security.capabilities.add = security.capabilities.add.filter(
        (cap: string) => !(opts.dropCapabilities ?? []).includes(cap),
      );
      capabilities = security.capabilities.add;
    }
    // The ServiceAccount admission plugin's volume, in every container.
    if (spec.automountServiceAccountToken !== false) {
      container.volumeMounts = [
        ...(container.volumeMounts ?? []),
        { name: 'kube-api-access', mountPath: SERVICE_ACCOUNT_DIR, readOnly: true },
      ];
    }
  }
  placeHostPaths(spec.volumes ?? [], opts.nodeRoot);
  if (spec.automountServiceAccountToken !== false) {
    spec.volumes = [
      ...(spec.volumes ?? []),
      { name: 'kube-api-access', hostPath: { path: opts.serviceAccountDir, type: 'Directory' } },
    ];
  }
  const pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: opts.name,
      namespace: daemonSet.metadata.namespace,
      labels: template.metadata.labels,
      annotations,
    },
    spec,
  };
  return { pod, probes, capabilities };
}

/** The template's annotations podman takes, and the one that runs init containers at every start. */
function podmanAnnotations(template: Record<string, string>): Record<string, string> {
  // podman 4.3 holds annotation values to the 63 characters of a label value: the config
  // checksum (which only tells the DaemonSet controller to roll the pods) cannot go through.
  const annotations: Record<string, string> = Object.fromEntries(
    Object.entries(template).filter(([, v]) => v.length <= 63),
  );
  annotations['io.podman.annotations.init.container.type'] = 'always';
  return annotations;
}

/** The downward API's spec.nodeName as a plain value, and $(VAR) expanded in command and args. */
function expandContainerEnv(container: Manifest, node: string): void {
  for (const env of container.env ?? []) {
    if (env.valueFrom?.fieldRef?.fieldPath === 'spec.nodeName') {
      delete env.valueFrom;
      env.value = node;
    }
  }
  // The kubelet expands $(VAR) in command and args from the container's env; podman does not.
  const values = new Map<string, string>(
    (container.env ?? []).flatMap((e: Manifest) => (typeof e.value === 'string' ? [[e.name, e.value]] : [])),
  );
  for (const field of ['command', 'args'] as const) {
    if (!container[field]) continue;
    container[field] = container[field].map((arg: string) => expandVars(arg, values));
  }
}

/** Takes the probes out of the container (see the header); the agent's are returned for the lab to run. */
function takeProbes(container: Manifest, ports: Map<string, number>, isAgent: boolean): PodProbe[] {
  const probes: PodProbe[] = [];
  for (const kind of ['startup', 'liveness', 'readiness'] as const) {
    const probe = container[`${kind}Probe`];
    delete container[`${kind}Probe`];
    if (!isAgent || !probe?.httpGet) continue;
    const port = typeof probe.httpGet.port === 'number' ? probe.httpGet.port : ports.get(probe.httpGet.port);
    if (!port)
      throw new Error(`the ${kind} probe names port ${probe.httpGet.port}, which the container lacks`);
    probes.push({ kind, path: probe.httpGet.path, port });
  }
  return probes;
}

/** securityContext.seccompProfile as the annotation podman 4.3 reads instead. */
function seccompToAnnotation(
  container: string,
  security: Manifest,
  annotations: Record<string, string>,
): void {
  if (!security.seccompProfile) return;
  const type = security.seccompProfile.type;
  annotations[`container.seccomp.security.alpha.kubernetes.io/${container}`] =
    type === 'Unconfined'
      ? 'unconfined'
      : type === 'RuntimeDefault'
        ? 'runtime/default'
        : `localhost/${security.seccompProfile.localhostProfile}`;
  delete security.seccompProfile;
}

/** Moves the hostPath volumes under the node's root, creating them as the kubelet would. */
function placeHostPaths(volumes: Manifest[], nodeRoot: string): void {
  for (const volume of volumes) {
    if (!volume.hostPath) continue;
    const path: string = volume.hostPath.path;
    if (path === '/sys/fs/cgroup') continue;
    const onNode = join(nodeRoot, path);
    if (volume.hostPath.type === 'FileOrCreate') {
      mkdirSync(join(onNode, '..'), { recursive: true });
      closeSync(openSync(onNode, 'a'));
    } else {
      mkdirSync(onNode, { recursive: true });
    }
    volume.hostPath.path = onNode;
  }
}

/** Kubernetes' $(VAR) expansion: known names are replaced, $$ escapes a $, the rest stays. */
export function expandVars(text: string, values: Map<string, string>): string {
  return text.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (match, name?: string) => {
    if (match === '$$') return '$';
    return name !== undefined && values.has(name) ? (values.get(name) ?? '') : match;
  });
}

/** Writes a manifest as YAML for podman. */
export function writeManifest(file: string, manifest: Manifest): void {
  writeFileSync(file, stringify(manifest));
}
