// How the source reaches the API server: its URL, and the TLS settings and credentials of each
// request. The common cases are read here without client-node: a pod's service account (the Helm
// chart's), a kubeconfig whose cluster and user hold only a server, CA, TLS server name, client
// certificate and key, and a bearer token or token file, and --master alone. client-node's
// KubeConfig, with its modules and the module hook it needs (kube-config.ts: together ~36 MiB of
// RSS and ~0.1 s of the start, measured), is loaded only for what it alone handles: exec
// credential plugins, auth providers, proxies, impersonation and every field not named here.
// The kubeconfig fields are client-go's (k8s.io/client-go/tools/clientcmd/api/v1/types.go at
// v0.37.2); relative file paths are resolved against the kubeconfig's folder, as client-go does.

import { existsSync, readFileSync } from 'node:fs';
import https from 'node:https';
import { dirname, isAbsolute, join } from 'node:path';
import { joinHostPort } from '../net/ip.js';

/** The API server as one request needs it. */
export interface ApiCredentials {
  /** The server's URL. */
  readonly server: string;
  /** TLS agent, Authorization header or basic auth of one request: asked per request, as token
   * files and exec credentials rotate. */
  applyToHTTPSOptions(options: https.RequestOptions): Promise<void>;
}

/** Where a pod finds its service account (client-go's rest.InClusterConfig). */
export interface InClusterFiles {
  host: string;
  port: string;
  tokenFile: string;
  caFile: string;
}

const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** The pod's service account, when the agent runs in a cluster; null elsewhere. */
export function inClusterFiles(env = process.env): InClusterFiles | null {
  const tokenFile = `${SERVICE_ACCOUNT_DIR}/token`;
  const { KUBERNETES_SERVICE_HOST: host, KUBERNETES_SERVICE_PORT: port } = env;
  if (!host || !port || !existsSync(tokenFile)) return null;
  return { host, port, tokenFile, caFile: `${SERVICE_ACCOUNT_DIR}/ca.crt` };
}

/** What a request needs, read from a kubeconfig, the service account or --master. */
export interface TlsAndAuth {
  server: string;
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  insecureSkipTlsVerify?: boolean;
  tlsServerName?: string;
  token?: string;
  /** Read again for each request: a projected service account token rotates. */
  tokenFile?: string;
}

const CLUSTER_FIELDS = new Set([
  'server',
  'certificate-authority',
  'certificate-authority-data',
  'insecure-skip-tls-verify',
  'tls-server-name',
  'extensions',
]);
const USER_FIELDS = new Set([
  'client-certificate',
  'client-certificate-data',
  'client-key',
  'client-key-data',
  'token',
  'tokenFile',
  'extensions',
]);

type Entry = Record<string, unknown>;

const isEntry = (value: unknown): value is Entry =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The `field` (cluster, user, context) of the entry of `list` named `name`. */
function named(list: unknown, name: unknown, field: string): Entry | null {
  if (!Array.isArray(list)) return null;
  const entry: unknown = list.find((item) => isEntry(item) && item.name === name);
  return isEntry(entry) && isEntry(entry[field]) ? entry[field] : null;
}

/** `<field>-data` (base64) or `<field>` (a file, relative to the kubeconfig's folder). */
function pem(entry: Entry, field: string, folder: string): Buffer | undefined {
  const data = entry[`${field}-data`];
  if (typeof data === 'string' && data !== '') return Buffer.from(data, 'base64');
  const file = entry[field];
  if (typeof file !== 'string' || file === '') return undefined;
  return readFileSync(isAbsolute(file) ? file : join(folder, file));
}

/**
 * The current context's cluster and user of a parsed kubeconfig, when they hold only the fields
 * read here; null when client-node must read it (an exec plugin, an auth provider, a proxy, ...),
 * or when it has no current context with a cluster (client-node says why).
 */
export function tlsAndAuthOf(config: unknown, kubeconfigPath: string): TlsAndAuth | null {
  if (!isEntry(config)) return null;
  const context = named(config.contexts, config['current-context'], 'context');
  if (!context) return null;
  const cluster = named(config.clusters, context.cluster, 'cluster');
  const user = named(config.users, context.user, 'user') ?? {};
  if (!cluster || typeof cluster.server !== 'string') return null;
  if (Object.keys(cluster).some((field) => !CLUSTER_FIELDS.has(field))) return null;
  if (Object.keys(user).some((field) => !USER_FIELDS.has(field))) return null;
  const folder = dirname(kubeconfigPath);
  const text = (value: unknown) => (typeof value === 'string' && value !== '' ? value : undefined);
  const tokenFile = text(user.tokenFile);
  return {
    server: cluster.server,
    ca: pem(cluster, 'certificate-authority', folder),
    cert: pem(user, 'client-certificate', folder),
    key: pem(user, 'client-key', folder),
    insecureSkipTlsVerify: cluster['insecure-skip-tls-verify'] === true,
    tlsServerName: text(cluster['tls-server-name']),
    token: text(user.token),
    tokenFile: tokenFile && (isAbsolute(tokenFile) ? tokenFile : join(folder, tokenFile)),
  };
}

/** The pod's service account: the Service's address, its CA and its rotating token. */
export function inClusterTlsAndAuth(files: InClusterFiles): TlsAndAuth {
  return {
    server: `https://${joinHostPort(files.host, Number(files.port))}`,
    ca: readFileSync(files.caFile),
    tokenFile: files.tokenFile,
  };
}

/** Credentials that apply `settings` to each request, with `master` (when set) as the server. */
export function leanCredentials(settings: TlsAndAuth, master: string): ApiCredentials {
  const server = master !== '' ? master : settings.server;
  const tls: https.AgentOptions = {
    ...(settings.ca && { ca: settings.ca }),
    ...(settings.cert && { cert: settings.cert }),
    ...(settings.key && { key: settings.key }),
    ...(settings.tlsServerName && { servername: settings.tlsServerName }),
    rejectUnauthorized: !settings.insecureSkipTlsVerify,
  };
  return {
    server,
    async applyToHTTPSOptions(options: https.RequestOptions) {
      const token = settings.tokenFile ? readFileSync(settings.tokenFile, 'utf8').trim() : settings.token;
      if (token) options.headers = { ...options.headers, Authorization: `Bearer ${token}` };
      // One agent per request, as client-node gives: the transport destroys it with the response.
      if (server.startsWith('https:')) options.agent = new https.Agent(tls);
    },
  };
}
