// Objects written through a real API server (control-plane.ts), and the kubelet's part
// for pods whose "containers" are lab network namespaces: the harness sets podIP and the Ready
// condition through the status subresource, as the kubelet does once a pod's sandbox is up.

import type { ControlPlane } from './control-plane.js';

/** A Kubernetes object as read from a manifest or the API: typed where the code reads it. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; [key: string]: unknown };
  // biome-ignore lint/suspicious/noExplicitAny: manifests and API answers are untyped JSON
  [key: string]: any;
}

const CLUSTER_SCOPED = new Set(['Namespace', 'Node', 'ClusterRole', 'ClusterRoleBinding', 'PriorityClass']);

/** The collection path of an object's kind (plural = lower-case kind + "s", true of every kind used here). */
export function collectionPath(object: Pick<K8sObject, 'apiVersion' | 'kind' | 'metadata'>): string {
  const base = object.apiVersion.includes('/') ? `/apis/${object.apiVersion}` : `/api/${object.apiVersion}`;
  const plural = `${object.kind.toLowerCase()}s`;
  if (CLUSTER_SCOPED.has(object.kind)) return `${base}/${plural}`;
  return `${base}/namespaces/${object.metadata.namespace ?? 'default'}/${plural}`;
}

export function objectPath(object: Pick<K8sObject, 'apiVersion' | 'kind' | 'metadata'>): string {
  return `${collectionPath(object)}/${object.metadata.name}`;
}

export async function create(cp: ControlPlane, object: K8sObject): Promise<K8sObject> {
  return cp.api<K8sObject>('POST', collectionPath(object), object);
}

export async function mergePatch(cp: ControlPlane, path: string, patch: unknown): Promise<K8sObject> {
  return cp.api<K8sObject>('PATCH', path, patch, { contentType: 'application/merge-patch+json' });
}

/** A namespace, and the default ServiceAccount its pods need (the serviceaccount controller's job, not running here). */
export async function createNamespace(cp: ControlPlane, name: string): Promise<void> {
  await create(cp, { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
  await create(cp, {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: { name: 'default', namespace: name },
  });
}

export interface NodeFacts {
  name: string;
  ip: string;
  podCIDR: string;
  zone?: string;
  /** A dual-stack node's IPv6 address and IPv6 pod CIDR. */
  ip6?: string;
  podCIDR6?: string;
}

/** A Node as the kubelet registers it, Ready, with an InternalIP and 4 CPUs allocatable. */
export async function createNode(cp: ControlPlane, node: NodeFacts): Promise<void> {
  await create(cp, {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: node.name,
      labels: {
        'kubernetes.io/hostname': node.name,
        'kubernetes.io/os': 'linux',
        ...(node.zone ? { 'topology.kubernetes.io/zone': node.zone } : {}),
      },
    },
    spec: { podCIDR: node.podCIDR, podCIDRs: [node.podCIDR, ...(node.podCIDR6 ? [node.podCIDR6] : [])] },
  });
  const resources = { cpu: '4', memory: '8Gi', pods: '250' };
  const now = new Date().toISOString();
  await mergePatch(cp, `/api/v1/nodes/${node.name}/status`, {
    status: {
      addresses: [
        { type: 'InternalIP', address: node.ip },
        ...(node.ip6 ? [{ type: 'InternalIP', address: node.ip6 }] : []),
        { type: 'Hostname', address: node.name },
      ],
      capacity: resources,
      allocatable: resources,
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'KubeletReady',
          message: 'the harness plays the kubelet',
          lastHeartbeatTime: now,
          lastTransitionTime: now,
        },
      ],
    },
  });
}

export interface PodFacts {
  name: string;
  namespace: string;
  node: string;
  nodeIP: string;
  ip: string;
  /** A dual-stack pod's IPv6 address (and its node's). */
  ip6?: string;
  nodeIP6?: string;
  labels: Record<string, string>;
  /** spec.terminationGracePeriodSeconds (default 600). */
  graceSeconds?: number;
}

/** Creates a pod bound to its node, then reports it Running with its IP, ready or not. */
export async function createPod(cp: ControlPlane, pod: PodFacts, ready = true): Promise<void> {
  await create(cp, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: pod.name, namespace: pod.namespace, labels: pod.labels },
    spec: {
      nodeName: pod.node,
      terminationGracePeriodSeconds: pod.graceSeconds ?? 600,
      automountServiceAccountToken: false,
      containers: [
        { name: 'app', image: 'registry.invalid/lab-backend:1', ports: [{ containerPort: 8080 }] },
      ],
    },
  });
  await setPodStatus(cp, pod, ready);
}

/** The kubelet's status update: Running, the pod and host IPs, and the Ready condition. */
export async function setPodStatus(cp: ControlPlane, pod: PodFacts, ready: boolean): Promise<void> {
  const now = new Date().toISOString();
  const condition = (type: string, status: boolean) => ({
    type,
    status: status ? 'True' : 'False',
    lastTransitionTime: now,
  });
  await mergePatch(cp, `/api/v1/namespaces/${pod.namespace}/pods/${pod.name}/status`, {
    status: {
      phase: 'Running',
      hostIP: pod.nodeIP,
      hostIPs: [pod.nodeIP, ...(pod.nodeIP6 ? [pod.nodeIP6] : [])].map((ip) => ({ ip })),
      podIP: pod.ip,
      podIPs: [pod.ip, ...(pod.ip6 ? [pod.ip6] : [])].map((ip) => ({ ip })),
      startTime: now,
      conditions: [
        condition('PodScheduled', true),
        condition('Initialized', true),
        condition('ContainersReady', ready),
        condition('Ready', ready),
      ],
    },
  });
}

/** Deletes a pod: with a grace period it stays, terminating, until deleted again with 0. */
export async function deletePod(
  cp: ControlPlane,
  namespace: string,
  name: string,
  gracePeriodSeconds: number,
): Promise<void> {
  await cp.api('DELETE', `/api/v1/namespaces/${namespace}/pods/${name}`, {
    apiVersion: 'v1',
    kind: 'DeleteOptions',
    gracePeriodSeconds,
  });
}

export interface SliceEndpoint {
  addresses: string[];
  conditions: { ready?: boolean; serving?: boolean; terminating?: boolean };
  nodeName?: string;
  zone?: string;
  hints?: { forZones?: { name: string }[] };
}

export interface Slice {
  metadata: { name: string; labels?: Record<string, string> };
  endpoints?: SliceEndpoint[];
}

/** The EndpointSlices of a Service, as the controller wrote them. */
export async function slicesOf(cp: ControlPlane, namespace: string, service: string): Promise<Slice[]> {
  const selector = encodeURIComponent(`kubernetes.io/service-name=${service}`);
  const list = await cp.api<{ items: Slice[] }>(
    'GET',
    `/apis/discovery.k8s.io/v1/namespaces/${namespace}/endpointslices?labelSelector=${selector}`,
  );
  return list.items;
}
