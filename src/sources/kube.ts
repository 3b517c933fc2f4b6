// The Kubernetes API source: what kube-proxy's informers watch (Services and EndpointSlices with
// its label selector, this node's Node, and every ServiceCIDR), delivered as raw objects. Each
// resource runs its own list/watch loop (reflector.ts) with the credentials of credentials.ts;
// see docs/sources.md for why not client-node's informer. client-node's KubeConfig is imported
// only for a kubeconfig that credentials.ts leaves to it (an exec plugin, an auth provider, ...),
// when the source starts, and without client-node's generated models (kube-config.ts): an agent
// in a pod, or reading manifest files, loads none of client-node.

import { readFileSync } from 'node:fs';
import type { KubeConfig } from '@kubernetes/client-node';
import type { ProxyConfig } from '../config/types.js';
import { type Logger, silentLogger } from '../logger.js';
import type { SourceEvent } from '../model/events.js';
import { KUBE_PROXY_LABEL_SELECTOR } from '../model/types.js';
import { ApiTransport } from './api-transport.js';
import {
  type ApiCredentials,
  type InClusterFiles,
  inClusterFiles,
  inClusterTlsAndAuth,
  leanCredentials,
  tlsAndAuthOf,
} from './credentials.js';
import { type BackoffPolicy, DEFAULT_BACKOFF, RequestRateLimiter } from './flow-control.js';
import { importKubeConfig } from './kube-config.js';
import { Reflector, type WatchedResource } from './reflector.js';
import type { Source } from './types.js';

export interface KubeSourceOptions {
  /** The settings this source honours (see docs/sources.md for contentType). */
  clientConnection: Pick<ProxyConfig['clientConnection'], 'kubeconfig' | 'qps' | 'burst' | 'contentType'>;
  /** --master; "" keeps the kubeconfig's (or in-cluster) server. */
  master: string;
  /** This node's name (hostnameOverride or the host name): the one Node object watched. */
  nodeName: string;
  logger?: Logger;
  backoff?: BackoffPolicy;
  /** How often a list of ServiceCIDRs refused with 404 or 403 is asked again; default 10 minutes. */
  notServedRetryMs?: number;
}

/**
 * The collections kube-proxy's informers watch, with its selectors. ServiceCIDRs
 * (MultiCIDRServiceAllocator, GA in 1.33) are watched whole; an older API server answers 404 for
 * them, which counts as none.
 */
export function watchedResources(nodeName: string): WatchedResource[] {
  return [
    { kind: 'Service', path: '/api/v1/services', labelSelector: KUBE_PROXY_LABEL_SELECTOR },
    {
      kind: 'EndpointSlice',
      path: '/apis/discovery.k8s.io/v1/endpointslices',
      labelSelector: KUBE_PROXY_LABEL_SELECTOR,
    },
    { kind: 'Node', path: '/api/v1/nodes', fieldSelector: `metadata.name=${nodeName}` },
    { kind: 'ServiceCIDR', path: '/apis/networking.k8s.io/v1/servicecidrs', mayBeUnserved: true },
  ];
}

/** A kubeconfig file's contents: JSON, or YAML (its usual form), whose parser is loaded only then. */
async function readKubeconfig(path: string): Promise<unknown> {
  const text = readFileSync(path, 'utf8');
  try {
    return JSON.parse(text);
  } catch {
    const { parse } = await import('yaml');
    return parse(text) as unknown;
  }
}

/**
 * client-go's BuildConfigFromFlags: the kubeconfig file if given, else the pod's service account
 * when running in a cluster, else --master alone (no credentials); --master overrides the server
 * in every case. Read without client-node where credentials.ts can (tlsAndAuthOf).
 */
export async function loadCredentials(
  kubeconfigPath: string,
  master: string,
  inCluster: InClusterFiles | null = inClusterFiles(),
): Promise<ApiCredentials> {
  if (kubeconfigPath !== '') {
    const settings = tlsAndAuthOf(await readKubeconfig(kubeconfigPath), kubeconfigPath);
    if (settings) return leanCredentials(settings, master);
    return kubeConfigCredentials(await loadKubeConfig(kubeconfigPath, master));
  }
  if (inCluster) return leanCredentials(inClusterTlsAndAuth(inCluster), master);
  if (master !== '') return leanCredentials({ server: master }, master);
  throw new Error(
    'no API server to talk to: set clientConnection.kubeconfig or --master, or run in a pod with a service account',
  );
}

/** client-node's KubeConfig as the transport's credentials. */
function kubeConfigCredentials(config: KubeConfig): ApiCredentials {
  return {
    server: config.getCurrentCluster()?.server ?? '',
    applyToHTTPSOptions: (options) => config.applyToHTTPSOptions(options),
  };
}

/** A kubeconfig file as client-node reads it, with --master (when set) as its current server. */
async function loadKubeConfig(kubeconfigPath: string, master: string): Promise<KubeConfig> {
  const KubeConfig = await importKubeConfig();
  const config = new KubeConfig();
  config.loadFromFile(kubeconfigPath);
  const current = config.getCurrentCluster();
  if (!current) throw new Error(`kubeconfig ${kubeconfigPath} has no current context with a cluster`);
  const server = master !== '' ? master : current.server;
  // client-node refuses http:// servers unless TLS verification is off; there is no TLS to verify
  // there, and client-go accepts plain http (e.g. an insecure --master on localhost).
  const plainHttp = server.startsWith('http:');
  config.loadFromOptions({
    clusters: config.clusters.map((cluster) =>
      cluster.name === current.name
        ? { ...cluster, server, skipTLSVerify: cluster.skipTLSVerify || plainHttp }
        : cluster,
    ),
    users: config.users,
    contexts: config.contexts,
    currentContext: config.currentContext,
  });
  return config;
}

export class KubeSource implements Source {
  private readonly log: Logger;
  private started = false;
  private readonly stopping = new AbortController();
  private loops: Promise<void>[] = [];

  constructor(private readonly options: KubeSourceOptions) {
    this.log = (options.logger ?? silentLogger).child({ source: 'kube' });
  }

  async start(onEvent: (events: SourceEvent[]) => void): Promise<void> {
    if (this.started) throw new Error('kube source already started');
    this.started = true;
    const { kubeconfig, qps, burst, contentType } = this.options.clientConnection;
    const transport = new ApiTransport(
      await loadCredentials(kubeconfig, this.options.master),
      new RequestRateLimiter(qps, burst),
      contentType,
    );
    const signal = this.stopping.signal;
    const synced: Promise<void>[] = [];
    const backoff = this.options.backoff ?? DEFAULT_BACKOFF;
    this.log.info({ server: transport.server, node: this.options.nodeName }, 'connecting to the API server');
    for (const resource of watchedResources(this.options.nodeName)) {
      let markSynced = () => {};
      synced.push(new Promise<void>((resolve) => (markSynced = resolve)));
      const reflector = new Reflector(
        resource,
        transport,
        onEvent,
        this.log,
        backoff,
        this.options.notServedRetryMs,
      );
      this.loops.push(reflector.run(signal, () => markSynced()));
    }
    const stopped = new Promise<never>((_, reject) => {
      const rejectStopped = () => reject(new Error('kube source stopped before its initial lists completed'));
      if (signal.aborted) rejectStopped();
      else signal.addEventListener('abort', rejectStopped, { once: true });
    });
    stopped.catch(() => undefined);
    await Promise.race([Promise.all(synced), stopped]);
    this.log.info('initial lists of services, endpoint slices, node and service CIDRs delivered');
  }

  /** Closes every connection and timer; resolves when all loops have ended. */
  async stop(): Promise<void> {
    this.stopping.abort();
    await Promise.all(this.loops);
  }
}
