// A real Kubernetes control plane for the e2e tier and the benchmark's real-kube-proxy modes: etcd, kube-apiserver and kube-controller-manager
// (only the EndpointSlice controllers) built by scripts/install-control-plane.sh, run in a lab
// network namespace of their own ("cp"). Two links leave it:
//
//   - to the host (this test process) on a /30 of 100.64.0.0/10 picked from the pid, so the test
//     talks to the API server as a client would;
//   - optionally to a lab bridge (the nodes' wire) at an address of the node subnet, so agents in
//     node namespaces reach the API server over their external interface, as on a real node. The
//     API server advertises that address: the `kubernetes` Service gets it as its endpoint.
//
// Authentication is a static token (user admin, group system:masters) for the harness and the
// controller manager, and ServiceAccount tokens (TokenRequest) for agents; authorization is RBAC.
// The serving certificate is signed by a CA made here with openssl, so clients verify it.
// stop() ends the controller manager, then the API server (waiting for it), then etcd: stopped
// together, the API server sits in its graceful shutdown for minutes. Each component logs to a file;
// printLogs() shows their tails (the tests call it when a test failed).

import { type ChildProcess, execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Lab } from './netns.js';
import { until } from './until.js';

const execFileAsync = promisify(execFile);

/** `ip` in this process's (the host's) network namespace; allowFailure ignores a failure. */
async function ipOnHost(args: string[], allowFailure = false): Promise<void> {
  try {
    await execFileAsync('ip', args);
  } catch (error) {
    if (!allowFailure)
      throw new Error(`ip ${args.join(' ')}: ${(error as { stderr?: string }).stderr ?? error}`);
  }
}

// The checkout's root, from src/lab (vitest) or dist/src/lab (the build).
const ROOT = fileURLToPath(
  new URL(import.meta.url.includes('/dist/src/') ? '../../../' : '../../', import.meta.url),
);
const API_PORT = 6443;
/** The API server's readiness bound: natively it is ready in 2-3 s. */
export const API_SERVER_READY_TIMEOUT_MS = 90_000;
const ETCD = 'http://127.0.0.1:2379';
/** The components start() runs, in the order stop() ends them. */
const CORE_COMPONENTS = ['kube-controller-manager', 'kube-apiserver', 'etcd'];

export interface ControlPlaneBinaries {
  k8s: string;
  etcd: string;
}

/** Where scripts/install-control-plane.sh keeps the binaries; null when one is missing. */
export function locateControlPlane(): ControlPlaneBinaries | null {
  let out: string;
  try {
    out = execFileSync('bash', [join(ROOT, 'scripts/install-control-plane.sh'), '--locate'], {
      encoding: 'utf8',
    });
  } catch {
    return null;
  }
  const k8s = /^KBP_K8S_BIN=(.*)$/m.exec(out)?.[1];
  const etcd = /^KBP_ETCD_BIN=(.*)$/m.exec(out)?.[1];
  return k8s && etcd ? { k8s, etcd } : null;
}

/** Dual-stack, as examples/manifests/service-cidr.yaml: the examples' dual-stack Service is accepted. */
const EXAMPLE_SERVICE_CIDRS = ['10.96.0.0/16', 'fd00:96::/112'];

export interface ControlPlaneOptions {
  /** The lab namespace (short name) the components run in. Default "cp". */
  ns?: string;
  /** Also attach to this lab namespace's bridge, at this address (CIDR), and advertise it. */
  wire?: { ns: string; bridge: string; address: string };
  /** Extra kube-apiserver flags. */
  apiServerArgs?: string[];
  /** --service-cluster-ip-range, one CIDR per family. Default: the example manifests' ServiceCIDR. */
  serviceCIDRs?: readonly string[];
  /**
   * How long the API server may take to report /readyz (default API_SERVER_READY_TIMEOUT_MS).
   * Under the IPVS lab's emulation it takes about 80 s: the lab's bench raises it.
   */
  readyTimeoutMs?: number;
  /** --authorization-mode. Default RBAC; a cluster with kubelets adds Node (Node,RBAC, as kubeadm). */
  authorizationModes?: string;
  /** More static tokens (users such as system:node:<name> in group system:nodes). */
  tokens?: readonly StaticToken[];
  /**
   * kube-controller-manager's --controllers and its extra flags. Default: only the EndpointSlice
   * controllers, which is all a harness playing the kubelet needs; a cluster with real nodes runs
   * them all ("*") and allocates pod CIDRs.
   */
  controllers?: string;
  controllerManagerArgs?: readonly string[];
}

/** One line of the API server's --token-auth-file. */
export interface StaticToken {
  token: string;
  user: string;
  groups: readonly string[];
}

export interface ApiAnswer<T = unknown> {
  status: number;
  body: T;
}

interface Component {
  name: string;
  child: ChildProcess;
  exited: Promise<number | null>;
}

/** The /30 on the host link, from the pid, so concurrent runs do not collide. */
function hostLinkAddresses(): { host: string; cp: string } {
  const base = (100 << 24) + (64 << 16) + (process.pid % (1 << 18)) * 4;
  const ip = (n: number) => [24, 16, 8, 0].map((shift) => (n >>> shift) & 255).join('.');
  return { host: ip(base + 1), cp: ip(base + 2) };
}

/** The /30 of linkNamespace(ns, index). */
function apiLinkAddresses(index: number): { cp: string; node: string } {
  return { cp: `100.65.${index}.1`, node: `100.65.${index}.2` };
}

export class ControlPlane {
  readonly adminToken = randomBytes(16).toString('hex');
  readonly workDir = mkdtempSync(join(tmpdir(), 'hcp-cp-'));
  readonly ns: string;
  /** The API server as the test process reaches it. */
  readonly url: string;
  /** The API server as nodes reach it over the wire (the url when there is no wire). */
  readonly nodeUrl: string;
  /** The advertised address (the kubernetes Service's endpoint). */
  readonly advertiseAddress: string;
  readonly caPem: string;
  private readonly components = new Map<string, Component>();
  private readonly hostIf = `hcp${process.pid}`;
  private readonly link = hostLinkAddresses();

  private constructor(
    private readonly lab: Lab,
    readonly binaries: ControlPlaneBinaries,
    private readonly opts: ControlPlaneOptions,
  ) {
    this.ns = opts.ns ?? 'cp';
    this.url = `https://${this.link.cp}:${API_PORT}`;
    this.advertiseAddress = opts.wire ? (opts.wire.address.split('/')[0] as string) : this.link.cp;
    this.nodeUrl = `https://${this.advertiseAddress}:${API_PORT}`;
    this.caPem = this.makeCertificates();
  }

  /** Builds the namespace and its links, starts etcd, the API server and the controller manager, waits for /readyz. */
  static async start(lab: Lab, opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
    const bins = locateControlPlane();
    if (!bins) {
      throw new Error(
        'the control-plane binaries are missing: run `bash scripts/install-control-plane.sh` (install-deps.sh does)',
      );
    }
    const cp = new ControlPlane(lab, bins, opts);
    try {
      await cp.network();
      cp.startEtcd();
      await cp.startApiServer();
      await cp.startControllerManager();
    } catch (error) {
      cp.printLogs();
      await cp.stop();
      throw error;
    }
    return cp;
  }

  private file(name: string, content?: string): string {
    const path = join(this.workDir, name);
    if (content !== undefined) writeFileSync(path, content);
    return path;
  }

  /** The CA, the API server's serving certificate, the ServiceAccount key pair and the token file. */
  private makeCertificates(): string {
    const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: this.workDir, stdio: 'pipe' });
    ssl(
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '2',
      '-subj',
      '/CN=hcp-ca',
      '-keyout',
      'ca.key',
      '-out',
      'ca.crt',
    );
    const names = [
      'DNS:localhost',
      'DNS:kubernetes',
      'DNS:kubernetes.default',
      'DNS:kubernetes.default.svc',
      'IP:127.0.0.1',
      'IP:10.96.0.1',
      `IP:${this.link.cp}`,
      `IP:${this.advertiseAddress}`,
      ...Array.from({ length: 8 }, (_, i) => `IP:${apiLinkAddresses(i + 1).cp}`),
    ];
    this.file('san.ext', `subjectAltName=${[...new Set(names)].join(',')}\n`);
    ssl(
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-subj',
      '/CN=kube-apiserver',
      '-keyout',
      'apiserver.key',
      '-out',
      'apiserver.csr',
    );
    ssl(
      'x509',
      '-req',
      '-in',
      'apiserver.csr',
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-days',
      '2',
      '-extfile',
      'san.ext',
      '-out',
      'apiserver.crt',
    );
    ssl('genrsa', '-out', 'sa.key', '2048');
    ssl('rsa', '-in', 'sa.key', '-pubout', '-out', 'sa.pub');
    const tokens = [
      { token: this.adminToken, user: 'admin', groups: ['system:masters'] },
      ...(this.opts.tokens ?? []),
    ];
    this.file(
      'tokens.csv',
      tokens.map((t) => `${t.token},${t.user},${t.user}-uid,"${t.groups.join(',')}"\n`).join(''),
    );
    return readFileSync(this.file('ca.crt'), 'utf8');
  }

  private async network(): Promise<void> {
    await this.lab.addNamespace(this.ns);
    const full = this.lab.ns(this.ns);
    await ipOnHost(['link', 'del', this.hostIf], true);
    await ipOnHost(['link', 'add', this.hostIf, 'type', 'veth', 'peer', 'name', 'host0', 'netns', full]);
    await ipOnHost(['addr', 'add', `${this.link.host}/30`, 'dev', this.hostIf]);
    await ipOnHost(['link', 'set', this.hostIf, 'up']);
    await this.lab.addAddress(this.ns, 'host0', `${this.link.cp}/30`);
    await this.lab.exec(this.ns, 'ip', ['link', 'set', 'host0', 'up']);
    const wire = this.opts.wire;
    if (wire) {
      await this.lab.link(this.ns, 'eth0', wire.ns, 'wcp');
      await this.lab.exec(wire.ns, 'ip', ['link', 'set', 'wcp', 'master', wire.bridge]);
      await this.lab.addAddress(this.ns, 'eth0', wire.address);
    }
  }

  private spawn(name: string, binary: string, args: string[]): Component {
    const child = this.lab.spawn(this.ns, binary, args);
    const log = createWriteStream(join(this.workDir, `${name}.log`), { flags: 'a' });
    child.stdout?.pipe(log);
    child.stderr?.pipe(log);
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const component = { name, child, exited };
    this.components.set(name, component);
    return component;
  }

  private startEtcd(): void {
    this.spawn('etcd', join(this.binaries.etcd, 'etcd'), [
      '--name=hcp',
      `--data-dir=${join(this.workDir, 'etcd')}`,
      `--listen-client-urls=${ETCD}`,
      `--advertise-client-urls=${ETCD}`,
      '--listen-peer-urls=http://127.0.0.1:2380',
      '--initial-advertise-peer-urls=http://127.0.0.1:2380',
      '--initial-cluster=hcp=http://127.0.0.1:2380',
      // A test cluster: losing it on a power cut is fine, waiting for fsync on a shared disk is not.
      '--unsafe-no-fsync',
      '--log-level=warn',
    ]);
  }

  /** kube-apiserver's flags: the minimal set of the reference, with RBAC, tokens and ServiceAccounts. */
  private apiServerArgs(): string[] {
    return [
      `--etcd-servers=${ETCD}`,
      '--bind-address=0.0.0.0',
      `--secure-port=${API_PORT}`,
      `--advertise-address=${this.advertiseAddress}`,
      `--tls-cert-file=${this.file('apiserver.crt')}`,
      `--tls-private-key-file=${this.file('apiserver.key')}`,
      `--client-ca-file=${this.file('ca.crt')}`,
      `--service-cluster-ip-range=${(this.opts.serviceCIDRs ?? EXAMPLE_SERVICE_CIDRS).join(',')}`,
      '--service-node-port-range=30000-32767',
      `--authorization-mode=${this.opts.authorizationModes ?? 'RBAC'}`,
      `--token-auth-file=${this.file('tokens.csv')}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-key-file=${this.file('sa.pub')}`,
      `--service-account-signing-key-file=${this.file('sa.key')}`,
      '--allow-privileged=true',
      '--profiling=false',
      ...(this.opts.apiServerArgs ?? []),
    ];
  }

  private async startApiServer(): Promise<void> {
    const apiserver = this.spawn(
      'kube-apiserver',
      join(this.binaries.k8s, 'kube-apiserver'),
      this.apiServerArgs(),
    );
    let exited = false;
    void apiserver.exited.then(() => {
      exited = true;
    });
    await until(
      'kube-apiserver /readyz',
      async () => {
        if (exited) throw new Error(`kube-apiserver exited:\n${this.logTail('kube-apiserver')}`);
        const answer = await this.request('GET', '/readyz', undefined, { timeoutMs: 2000 }).catch(() => null);
        return answer?.status === 200;
      },
      this.opts.readyTimeoutMs ?? API_SERVER_READY_TIMEOUT_MS,
    );
  }

  private async startControllerManager(): Promise<void> {
    const kubeconfig = this.file(
      'kcm.kubeconfig',
      this.kubeconfig(this.adminToken, `https://127.0.0.1:${API_PORT}`),
    );
    const kcm = this.spawn('kube-controller-manager', join(this.binaries.k8s, 'kube-controller-manager'), [
      `--kubeconfig=${kubeconfig}`,
      `--authentication-kubeconfig=${kubeconfig}`,
      `--authorization-kubeconfig=${kubeconfig}`,
      `--controllers=${this.opts.controllers ?? 'endpointslice,endpointslicemirroring'}`,
      '--use-service-account-credentials=false',
      '--leader-elect=false',
      '--bind-address=127.0.0.1',
      '--secure-port=10257',
      `--cert-dir=${join(this.workDir, 'kcm-certs')}`,
      '--concurrent-service-endpoint-syncs=5',
      ...(this.opts.controllerManagerArgs ?? []),
    ]);
    // Nothing to wait for but that it stays up through its start.
    const early = await Promise.race([
      kcm.exited.then((code) => `exited (${code})`),
      new Promise<null>((resolve) => setTimeout(() => resolve(null), 1500)),
    ]);
    if (early)
      throw new Error(`kube-controller-manager ${early}:\n${this.logTail('kube-controller-manager')}`);
  }

  /** A kubeconfig (JSON) for a bearer token, verifying the serving certificate with the CA. */
  kubeconfig(token: string, server = this.nodeUrl): string {
    return JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: 'hcp',
          cluster: { server, 'certificate-authority-data': Buffer.from(this.caPem).toString('base64') },
        },
      ],
      users: [{ name: 'hcp', user: { token } }],
      contexts: [{ name: 'hcp', context: { cluster: 'hcp', user: 'hcp' } }],
      'current-context': 'hcp',
    });
  }

  /** One API request as admin (or with `token`); JSON in and out. */
  request<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    opts: { token?: string; contentType?: string; timeoutMs?: number } = {},
  ): Promise<ApiAnswer<T>> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = request(
        `${this.url}${path}`,
        {
          method,
          ca: this.caPem,
          headers: {
            authorization: `Bearer ${opts.token ?? this.adminToken}`,
            accept: 'application/json',
            ...(payload === undefined
              ? {}
              : {
                  'content-type': opts.contentType ?? 'application/json',
                  'content-length': Buffer.byteLength(payload),
                }),
          },
          timeout: opts.timeoutMs ?? 15_000,
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => {
            text += d;
          });
          res.on('end', () => {
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {}
            resolve({ status: res.statusCode ?? 0, body: parsed as T });
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  /** As request(), but any answer other than 2xx throws with the server's message. */
  async api<T = Record<string, unknown>>(
    method: string,
    path: string,
    body?: unknown,
    opts: { token?: string; contentType?: string } = {},
  ): Promise<T> {
    const answer = await this.request<T>(method, path, body, opts);
    if (answer.status < 200 || answer.status > 299) {
      throw new Error(`${method} ${path}: ${answer.status} ${JSON.stringify(answer.body).slice(0, 600)}`);
    }
    return answer.body;
  }

  /** A token for a ServiceAccount from the TokenRequest API, as the kubelet mounts it in pods. */
  async serviceAccountToken(namespace: string, name: string): Promise<string> {
    const answer = await this.api<{ status: { token: string } }>(
      'POST',
      `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`,
      { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 7200 } },
    );
    return answer.status.token;
  }

  /**
   * Links another lab namespace to the control plane's by a veth pair of its own (named api0 on its
   * side, on 100.65.<index>.0/30), for namespaces that share an address with another (the
   * differential test gives several namespaces the same node IP). Returns the API server URL from there.
   */
  async linkNamespace(ns: string, index: number): Promise<string> {
    if (index < 1 || index > 8) throw new Error('linkNamespace: index 1..8');
    const addresses = apiLinkAddresses(index);
    await this.lab.link(this.ns, `api${index}`, ns, 'api0');
    await this.lab.addAddress(this.ns, `api${index}`, `${addresses.cp}/30`);
    await this.lab.addAddress(ns, 'api0', `${addresses.node}/30`);
    return `https://${addresses.cp}:${API_PORT}`;
  }

  /** Restarts the API server (etcd stays): stop, wait for it to exit, start, wait for /readyz. */
  async restartApiServer(): Promise<{ stopMs: number; startMs: number }> {
    const started = Date.now();
    await this.stopComponent('kube-apiserver');
    const stopped = Date.now();
    await this.startApiServer();
    const timing = { stopMs: stopped - started, startMs: Date.now() - stopped };
    console.log(
      `kube-apiserver restarted: stopped in ${timing.stopMs} ms, ready again in ${timing.startMs} ms`,
    );
    return timing;
  }

  /**
   * Compacts etcd at its current revision (the etcd v3 HTTP gateway, from inside the namespace), so
   * every older resourceVersion is gone. Returns that revision.
   */
  async compactEtcd(): Promise<number> {
    const script = `
      const post = (path, body) => fetch('${ETCD}' + path, { method: 'POST', body: JSON.stringify(body) })
        .then(async (r) => { if (!r.ok) throw new Error(path + ': ' + r.status + ' ' + await r.text()); return r.json(); });
      const range = await post('/v3/kv/range', { key: Buffer.from('/').toString('base64'), limit: 1 });
      const revision = Number(range.header.revision);
      await post('/v3/kv/compaction', { revision, physical: true });
      process.stdout.write(String(revision));`;
    const { stdout } = await this.lab.exec(this.ns, process.execPath, ['--input-type=module', '-e', script]);
    return Number(stdout);
  }

  private async stopComponent(name: string): Promise<void> {
    const component = this.components.get(name);
    if (!component) return;
    this.components.delete(name);
    if (component.child.exitCode !== null || component.child.signalCode !== null) return;
    component.child.kill('SIGTERM');
    // kube-apiserver v1.37.2 stops listening within 0.1 s of SIGTERM but then sits for 30 s before
    // it exits (with etcd up and no client left): it is killed once it no longer listens (5 s at most).
    const apiServer = name === 'kube-apiserver';
    const timer = setTimeout(() => component.child.kill('SIGKILL'), apiServer ? 5_000 : 30_000);
    if (apiServer) void this.untilNotListening(component.exited).then(() => component.child.kill('SIGKILL'));
    await component.exited;
    clearTimeout(timer);
  }

  /** Until the API server refuses connections, or `exited` settles first. */
  private async untilNotListening(exited: Promise<unknown>): Promise<void> {
    let gone = false;
    void exited.then(() => {
      gone = true;
    });
    while (!gone) {
      const refused = await this.request('GET', '/readyz', undefined, { timeoutMs: 500 }).then(
        () => false,
        (err: NodeJS.ErrnoException) => err.code === 'ECONNREFUSED',
      );
      if (refused) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /**
   * Starts one more component in the control plane's namespace (e.g. kube-scheduler), logging to
   * its own file; stop() ends it before the core components.
   */
  startComponent(name: string, binary: string, args: string[]): void {
    if (CORE_COMPONENTS.includes(name) || this.components.has(name))
      throw new Error(`startComponent: ${name} is already a component`);
    this.spawn(name, binary, args);
  }

  /** Stops the added components, the controller manager, the API server, then etcd; removes the files. */
  async stop(): Promise<void> {
    const added = [...this.components.keys()].filter((name) => !CORE_COMPONENTS.includes(name));
    for (const name of [...added, ...CORE_COMPONENTS]) await this.stopComponent(name);
    await ipOnHost(['link', 'del', this.hostIf], true);
    rmSync(this.workDir, { recursive: true, force: true });
  }

  logTail(name: string, lines = 60): string {
    try {
      return readFileSync(join(this.workDir, `${name}.log`), 'utf8')
        .split('\n')
        .slice(-lines)
        .join('\n');
    } catch {
      return '(no log)';
    }
  }

  printLogs(): void {
    const added = [...this.components.keys()].filter((name) => !CORE_COMPONENTS.includes(name));
    for (const name of [...CORE_COMPONENTS].reverse().concat(added)) {
      console.log(`----- ${name} (last lines) -----\n${this.logTail(name)}`);
    }
  }
}
