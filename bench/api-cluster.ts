// The benchmark's cluster in a real API server, for the real kube-proxy and for our agent alike:
// etcd, kube-apiserver and kube-controller-manager (src/lab/control-plane.ts) in a namespace of
// their own, linked to the node namespace by a veth, as a node reaches its API server over the wire.
//
// The bench writes the Services and the EndpointSlices itself, as a controller would (labelled
// managed-by the bench; the Services have no selector, so the EndpointSlice controller leaves them
// alone). Pods through the real EndpointSlice controller would not give the scenario: every Service
// would select the same E pods, so one added endpoint would change all N slices instead of one,
// and the change timed would include the controller's own queueing, which is the same for every
// proxy and not what is compared. Written directly, the slices are exactly the manifest modes' and
// an endpoint change is one write of one slice.
//
// The cluster is dual-stack (service ranges and the node's addresses in both families); a scenario
// is of one family, and apply() turns one family's objects into the other's.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  API_SERVER_READY_TIMEOUT_MS,
  ControlPlane,
  type ControlPlaneBinaries,
  locateControlPlane,
} from '../src/lab/control-plane.js';
import {
  collectionPath,
  create,
  createNode,
  type K8sObject,
  mergePatch,
  objectPath,
} from '../src/lab/kube-objects.js';
import type { Lab } from '../src/lab/netns.js';
import {
  endpointSlice,
  inFamily,
  NAMESPACE,
  NODE_IP,
  NODE_NAME,
  POD_CIDR,
  type Scenario,
  SERVICE_CIDRS,
  serviceObject,
} from './scenario.js';

/** Requests in flight while the objects are written. */
const CONCURRENT_WRITES = 8;
const MANAGED_BY = 'kube-bpf-proxy-bench';

/** Why the real-kube-proxy modes cannot run here, or null when the control plane is built. */
export function controlPlaneMissing(): string | null {
  return locateControlPlane()
    ? null
    : 'the control-plane binaries (kube-apiserver, kube-proxy, etcd) are not built: bash scripts/install-control-plane.sh';
}

interface ScenarioObjects {
  service: K8sObject;
  slice: K8sObject;
}

function objectsOf(scenario: Scenario | null, i: number, extraIPs: string[] = []): ScenarioObjects | null {
  if (!scenario || i >= scenario.services) return null;
  const slice = endpointSlice(i, scenario, extraIPs) as K8sObject;
  slice.metadata.labels = {
    ...(slice.metadata.labels as Record<string, string>),
    'endpointslice.kubernetes.io/managed-by': MANAGED_BY,
  };
  return { service: serviceObject(i, scenario) as K8sObject, slice };
}

async function inParallel(tasks: (() => Promise<unknown>)[], width: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) await (tasks[next++] as () => Promise<unknown>)();
  };
  await Promise.all(Array.from({ length: Math.min(width, tasks.length) }, worker));
}

export class ApiCluster {
  /** The scenario whose objects are in the API server now. */
  private current: Scenario | null = null;

  private constructor(
    private readonly cp: ControlPlane,
    /** The kubeconfig (admin token, the node's address of the API server) the node's proxies read. */
    readonly kubeconfigPath: string,
  ) {}

  get binaries(): ControlPlaneBinaries {
    return this.cp.binaries;
  }

  /**
   * Starts the control plane, links it to `nodeNs`, registers the node and the bench's namespace.
   * `timeoutScale` stretches the API server's readiness bound (the IPVS lab's emulation).
   */
  static async start(lab: Lab, nodeNs: string, workDir: string, timeoutScale = 1): Promise<ApiCluster> {
    const cp = await ControlPlane.start(lab, {
      readyTimeoutMs: API_SERVER_READY_TIMEOUT_MS * timeoutScale,
      // Dual-stack: IPv4 as the lab has it, and its IPv6 counterpart.
      serviceCIDRs: SERVICE_CIDRS,
    });
    try {
      const server = await cp.linkNamespace(nodeNs, 1);
      await createNode(cp, { name: NODE_NAME, ip: NODE_IP, podCIDR: POD_CIDR });
      // The node's IPv6 address too, as a dual-stack kubelet reports both (kube-proxy's per-family node IPs).
      await mergePatch(cp, `/api/v1/nodes/${NODE_NAME}/status`, {
        status: {
          addresses: [
            { type: 'InternalIP', address: NODE_IP },
            { type: 'InternalIP', address: inFamily('IPv6', NODE_IP) },
            { type: 'Hostname', address: NODE_NAME },
          ],
        },
      });
      await create(cp, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } });
      const kubeconfigPath = join(workDir, 'node.kubeconfig');
      writeFileSync(kubeconfigPath, cp.kubeconfig(cp.adminToken, server));
      return new ApiCluster(cp, kubeconfigPath);
    } catch (error) {
      cp.printLogs();
      await cp.stop();
      throw error;
    }
  }

  /**
   * Makes the API hold `scenario`'s Services and slices: creates what is missing, patches what
   * changed (the previous measured Service loses its UDP port), deletes what is beyond N or of
   * the other family (whose Services are other objects: a ClusterIP cannot change).
   */
  async apply(scenario: Scenario): Promise<void> {
    const byPath = (s: Scenario | null) =>
      new Map(
        Array.from({ length: s?.services ?? 0 }, (_, i) => objectsOf(s, i) as ScenarioObjects).map((o) => [
          objectPath(o.service),
          o,
        ]),
      );
    const before = byPath(this.current);
    const after = byPath(scenario);
    this.current = null;
    const writes: (() => Promise<unknown>)[] = [];
    for (const [path, was] of before) {
      if (after.has(path)) continue;
      writes.push(() => this.cp.api('DELETE', objectPath(was.slice)));
      writes.push(() => this.cp.api('DELETE', path));
    }
    for (const [path, will] of after) {
      const was = before.get(path);
      if (!was) {
        writes.push(() => this.cp.api('POST', collectionPath(will.service), will.service));
        writes.push(() => this.cp.api('POST', collectionPath(will.slice), will.slice));
      } else if (JSON.stringify(was) !== JSON.stringify(will)) {
        writes.push(() => mergePatch(this.cp, path, { spec: { ports: will.service.spec.ports } }));
        writes.push(() => this.writeSlice(will.slice));
      }
    }
    await inParallel(writes, CONCURRENT_WRITES);
    this.current = scenario;
  }

  /** Writes the measured Service's slice: its E backend pods plus `extraIPs` (an endpoint change). */
  async setMeasuredSlice(scenario: Scenario, extraIPs: string[]): Promise<void> {
    if (JSON.stringify(this.current) !== JSON.stringify(scenario))
      throw new Error('setMeasuredSlice: the API holds another scenario');
    await this.writeSlice((objectsOf(scenario, scenario.services - 1, extraIPs) as ScenarioObjects).slice);
  }

  /** A merge patch replaces the lists whole: the slice's ports and endpoints become these. */
  private async writeSlice(slice: K8sObject): Promise<void> {
    await mergePatch(this.cp, objectPath(slice), { ports: slice.ports, endpoints: slice.endpoints });
  }

  logTails(): string {
    return ['kube-apiserver', 'kube-controller-manager']
      .map((name) => `----- ${name} -----\n${this.cp.logTail(name, 20)}`)
      .join('\n');
  }

  stop(): Promise<void> {
    return this.cp.stop();
  }
}
