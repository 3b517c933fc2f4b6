// The soak's churn, every source at once and each at random moments:
//   - endpoints: the churned Service's pods scaled up and down every few seconds, and moved from
//     one node to the other; a pod is deleted as the kubelet does it (the API marks it
//     terminating, the container gets SIGTERM and drains, SIGKILL after the grace period, then the
//     Pod is removed), and a new one is Ready only once its container listens;
//   - Services: created, changed (the HTTP port moved) and deleted, each followed from a pod until
//     the data plane shows it;
//   - disruptions, one at a time: the agent SIGKILLed and started again, the agent stopped
//     gracefully and started again, the API server restarted, and a relist forced by a 410 (the
//     agent frozen while the API server restarts and etcd is compacted past what it saw). The
//     agent disruptions hit one node (`disrupted`); the other's agent lives through the soak, so
//     its memory and event loop show a trend that restarts would hide.
// Conntrack GC runs throughout inside the agents (every 10 s, world.ts). Every action lands in the
// event log; an action the API server refused while it restarts is logged as failed and not retried.

import type { ChildProcess } from 'node:child_process';
import { createPod, deletePod, mergePatch } from '../../src/lab/kube-objects.js';
import { REAL_NODES } from '../../src/lab/real-node-plan.js';
import { GRACE_SECONDS, HTTP_PORT, NAMESPACE, POOL, type SoakWorld, UDP_PORT } from './world.js';

export type ChurnKind =
  | 'scale-up'
  | 'scale-down'
  | 'move'
  | 'service-create'
  | 'service-change'
  | 'service-delete'
  | 'agent-sigkill'
  | 'agent-stop'
  | 'apiserver-restart'
  | 'relist-410';

export const DISRUPTIONS = ['agent-sigkill', 'agent-stop', 'apiserver-restart', 'relist-410'] as const;
type Disruption = (typeof DISRUPTIONS)[number];

export interface ChurnEvent {
  at: number;
  kind: ChurnKind;
  detail: string;
  ok: boolean;
  /** Service changes: until the data plane showed it; disruptions: until the agent synced again. */
  ms?: number;
  error?: string;
}

/** A churned pod's life: one backend process under a name of its own. */
export interface Incarnation {
  name: string;
  slot: string;
  node: string;
  readyAt: number;
  /** When its deletion began (the endpoint turns terminating); null while it serves. */
  removedAt: number | null;
}

/** How long a Service change may take to show in the data plane before the soak gives up on it. */
const PROBE_LIMIT_MS = 30_000;
const PROBE_INTERVAL_MS = 250;
/** The churned Service keeps at least this many Ready endpoints (kube-proxy's fallback to
 * terminating ones is not what the soak measures). */
const MIN_READY = 2;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const pick = <T>(items: readonly T[]): T | undefined => items[Math.floor(Math.random() * items.length)];

export class Churn {
  readonly events: ChurnEvent[] = [];
  readonly incarnations: Incarnation[] = [];
  private readonly slots = new Map<string, Incarnation | null>();
  private generation = 0;
  private serviceSerial = 0;
  private readonly liveServices = new Map<string, number>();
  /** Terminations under way (grace periods): the end of the soak waits for them. */
  private readonly terminations = new Set<Promise<void>>();
  private stopping = false;

  constructor(
    private readonly world: SoakWorld,
    /** The node whose agent the disruptions kill, stop and freeze. */
    private readonly disrupted: string,
    /** Called before an agent is killed or stopped, to read its metrics one last time. */
    private readonly beforeAgentStops: (node: string) => Promise<void>,
  ) {}

  /** Half the pool scheduled, the rest idle; the backends the lab started give way to incarnations. */
  async init(): Promise<void> {
    for (const [index, { slot }] of POOL.entries()) {
      this.backend(slot).kill('SIGKILL');
      this.slots.set(slot, null);
      if (index % 4 < 2) await this.scaleUp(slot);
    }
  }

  private backend(slot: string): ChildProcess {
    const child = this.world.nodes.backends.get(slot);
    if (!child) throw new Error(`no backend in ${slot}`);
    return child;
  }

  private log(kind: ChurnKind, detail: string, started: number, result: { ms?: number; error?: unknown }) {
    this.events.push({
      at: started,
      kind,
      detail,
      ok: result.error === undefined,
      ...(result.ms !== undefined ? { ms: result.ms } : {}),
      ...(result.error !== undefined
        ? { error: String((result.error as Error).message ?? result.error) }
        : {}),
    });
  }

  /** Runs and logs an action; true when it succeeded. */
  private async logged(
    kind: ChurnKind,
    detail: string,
    action: () => Promise<number | undefined>,
  ): Promise<boolean> {
    const started = Date.now();
    try {
      const ms = await action();
      this.log(kind, detail, started, ms === undefined ? {} : { ms });
      return true;
    } catch (error) {
      this.log(kind, detail, started, { error });
      return false;
    }
  }

  /** A new pod in a free slot (on `node` when given): its container listens, then it turns Ready. */
  private async scaleUp(slot?: string, node?: string): Promise<boolean> {
    const free = [...this.slots].filter(
      ([s, inc]) => inc === null && (!node || POOL.find((p) => p.slot === s)?.node === node),
    );
    const chosen = slot ?? pick(free)?.[0];
    if (!chosen) return false;
    const name = `${chosen}-${++this.generation}`;
    const pool = POOL.find((p) => p.slot === chosen)!;
    const incarnation: Incarnation = { name, slot: chosen, node: pool.node, readyAt: 0, removedAt: null };
    this.slots.set(chosen, incarnation);
    return this.logged('scale-up', `${name} on ${pool.node}`, async () => {
      try {
        const child = await this.world.lab.startBackend(this.world.nodes.podNs(chosen), {
          name,
          tcpPorts: [HTTP_PORT],
          udpPorts: [UDP_PORT],
        });
        this.world.nodes.backends.set(chosen, child);
        await createPod(this.world.controlPlane, this.world.podFacts(chosen, { app: 'churn' }, name));
      } catch (error) {
        this.world.nodes.backends.get(chosen)?.kill('SIGKILL');
        this.slots.set(chosen, null);
        throw error;
      }
      incarnation.readyAt = Date.now();
      this.incarnations.push(incarnation);
      return undefined;
    });
  }

  /** Deletes a Ready pod (on `node` when given) as the kubelet does, in the background. */
  private async scaleDown(node?: string): Promise<boolean> {
    const ready = [...this.slots.values()].filter(
      (i): i is Incarnation => i !== null && i.removedAt === null,
    );
    if (ready.length <= MIN_READY) return false;
    const victim = pick(ready.filter((i) => !node || i.node === node));
    if (!victim) return false;
    return this.logged('scale-down', `${victim.name} on ${victim.node}`, async () => {
      await deletePod(this.world.controlPlane, NAMESPACE, victim.name, GRACE_SECONDS);
      victim.removedAt = Date.now();
      const child = this.backend(victim.slot);
      child.kill('SIGTERM');
      const ended = this.terminate(victim, child);
      this.terminations.add(ended);
      void ended.finally(() => this.terminations.delete(ended));
      return undefined;
    });
  }

  /** The kubelet's end of a pod: SIGKILL at the end of the grace period, then the Pod removed. */
  private async terminate(victim: Incarnation, child: ChildProcess): Promise<void> {
    await sleep(GRACE_SECONDS * 1000);
    child.kill('SIGKILL');
    // The API server may be restarting: the kubelet retries until the Pod is gone.
    for (let attempt = 0; attempt < 60; attempt++) {
      try {
        await deletePod(this.world.controlPlane, NAMESPACE, victim.name, 0);
        break;
      } catch (error) {
        if (/404/.test(String(error))) break;
        await sleep(1000);
      }
    }
    this.slots.set(victim.slot, null);
  }

  /** Scales up, down, or moves a pod to the other node (down on one, up on the other); only up
   * when `deletions` is false. */
  private async endpointStep(deletions: boolean): Promise<void> {
    const roll = Math.random();
    if (roll < 0.4 || !deletions) await this.scaleUp();
    else if (roll < 0.75) await this.scaleDown();
    else {
      const [from, to] = Math.random() < 0.5 ? REAL_NODES : [...REAL_NODES].reverse();
      const started = Date.now();
      const moved = await Promise.all([this.scaleDown(from?.name), this.scaleUp(undefined, to?.name)]);
      if (moved.every(Boolean)) this.log('move', `${from?.name} → ${to?.name}`, started, {});
    }
  }

  /** Requests from a client pod to a ClusterIP port until `answered` is what the probe wants. */
  private async probe(port: number, clusterIP: string, answered: boolean): Promise<number> {
    const started = Date.now();
    while (Date.now() - started < PROBE_LIMIT_MS) {
      const [result] = await this.world.lab.requests(this.world.nodes.podNs('ca'), `${clusterIP}:${port}`, {
        proto: 'tcp',
        count: 1,
        timeoutMs: 500,
      });
      if ((result?.error === null) === answered) return Date.now() - started;
      await sleep(PROBE_INTERVAL_MS);
    }
    throw new Error(`the data plane did not show it within ${PROBE_LIMIT_MS} ms`);
  }

  private async serviceStep(): Promise<void> {
    const live = [...this.liveServices.keys()];
    const roll = Math.random();
    if (live.length === 0 || (live.length < 3 && roll < 0.4)) {
      const name = `eph-${++this.serviceSerial}`;
      const selector = { app: Math.random() < 0.5 ? 'stable' : 'churn' };
      const type = Math.random() < 0.5 ? 'ClusterIP' : 'NodePort';
      await this.logged('service-create', `${name} (${type}, app=${selector.app})`, async () => {
        await this.world.createService(name, type, selector);
        this.liveServices.set(name, 80);
        return this.probe(80, this.clusterIP(name), true);
      });
    } else if (roll < 0.7) {
      const name = pick(live)!;
      const port = this.liveServices.get(name) === 80 ? 81 : 80;
      await this.logged('service-change', `${name}: http port to ${port}`, async () => {
        const path = `/api/v1/namespaces/${NAMESPACE}/services/${name}`;
        const svc = await this.world.controlPlane.api<{ spec: { ports: { name: string; port: number }[] } }>(
          'GET',
          path,
        );
        const ports = svc.spec.ports.map((p) => (p.name === 'http' ? { ...p, port } : p));
        await mergePatch(this.world.controlPlane, path, { spec: { ports } });
        this.liveServices.set(name, port);
        return this.probe(port, this.clusterIP(name), true);
      });
    } else {
      const name = pick(live)!;
      await this.logged('service-delete', name, () => this.deleteService(name));
    }
  }

  private clusterIP(name: string): string {
    return this.world.services.get(name)?.clusterIPs.IPv4 ?? '';
  }

  private async deleteService(name: string): Promise<number> {
    const port = this.liveServices.get(name) ?? 80;
    await this.world.controlPlane.api('DELETE', `/api/v1/namespaces/${NAMESPACE}/services/${name}`);
    this.liveServices.delete(name);
    return this.probe(port, this.clusterIP(name), false);
  }

  /** One disruption of `kind`, logged with how long until the agent (or the API server) served again. */
  private async disrupt(kind: Disruption): Promise<boolean> {
    const node = this.disrupted;
    const { nodes } = this.world;
    const cp = this.world.controlPlane;
    const restart = async (stop: () => Promise<void>) => {
      await this.beforeAgentStops(node);
      const started = Date.now();
      await stop();
      await nodes.restartAgent(node);
      return Date.now() - started;
    };
    switch (kind) {
      case 'agent-sigkill':
        return this.logged(kind, node, () => restart(() => nodes.labAgent(node).kill()));
      case 'agent-stop':
        return this.logged(kind, node, () => restart(() => nodes.labAgent(node).stop()));
      case 'apiserver-restart':
        return this.logged(kind, '', async () => {
          const { stopMs, startMs } = await cp.restartApiServer();
          return stopMs + startMs;
        });
      case 'relist-410':
        return this.logged(kind, node, () => this.forceRelist(node));
    }
  }

  /**
   * The agent frozen (SIGSTOP) while the API server restarts, a Service is created and etcd is
   * compacted past everything it saw; thawed, its watches resume from a compacted revision, get
   * 410 Gone and relist. Returns the time until its log says so.
   */
  private async forceRelist(node: string): Promise<number> {
    const agent = this.world.nodes.labAgent(node);
    const pid = agent.pid;
    if (pid === undefined) throw new Error(`no agent process on ${node}`);
    const linesBefore = agent.lines.length;
    const gone = `gone-${++this.serviceSerial}`;
    process.kill(pid, 'SIGSTOP');
    try {
      await this.world.controlPlane.restartApiServer();
      await this.world.createService(gone, 'ClusterIP', { app: 'stable' });
      await this.world.controlPlane.compactEtcd();
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    const thawed = Date.now();
    await agent.log.waitForLine(
      (line) => agent.lines.indexOf(line) >= linesBefore && /410|expired/i.test(String(line.msg)),
      30_000,
    );
    const ms = Date.now() - thawed;
    // Gone again, so that an hour's relists leave the cluster's state as it was (finish() deletes
    // any left by a relist that failed).
    await this.world.controlPlane.api('DELETE', `/api/v1/namespaces/${NAMESPACE}/services/${gone}`);
    this.world.services.delete(gone);
    return ms;
  }

  /**
   * Runs every source until `deadline`: endpoints every 2-5 s, Services every 4-10 s, and one
   * disruption at a random moment of each slot of `disruptionSlotMs`, cycling through the kinds in
   * a shuffled order so that each comes up.
   */
  async run(deadline: number, disruptionSlotMs: number): Promise<void> {
    const loop = async (step: () => Promise<void>, minMs: number, maxMs: number) => {
      while (!this.stopping && Date.now() < deadline) {
        await sleep(minMs + Math.random() * (maxMs - minMs));
        if (Date.now() < deadline) await step();
      }
    };
    const disruptions = async () => {
      const kinds = [...DISRUPTIONS].sort(() => Math.random() - 0.5);
      for (let slot = 0; Date.now() + disruptionSlotMs <= deadline; slot++) {
        const slotEnd = Date.now() + disruptionSlotMs;
        await sleep(Math.random() * disruptionSlotMs * 0.6);
        await this.disrupt(kinds[slot % kinds.length]!);
        await sleep(Math.max(0, slotEnd - Date.now()));
      }
    };
    // No deletion starts within a grace period of the end: each one's SIGKILL comes under traffic,
    // and the end waits for none.
    const deletionsUntil = deadline - GRACE_SECONDS * 1000;
    await Promise.all([
      loop(() => this.endpointStep(Date.now() < deletionsUntil), 2000, 5000),
      loop(() => this.serviceStep(), 4000, 10_000),
      disruptions(),
    ]);
  }

  /** The end: the Services the churn created deleted, every termination through its grace period
   * (none is left unless a deletion's API call outlived the run). */
  async finish(): Promise<void> {
    this.stopping = true;
    for (const name of [...this.liveServices.keys()])
      await this.logged('service-delete', name, () => this.deleteService(name));
    for (const name of [...this.world.services.keys()].filter((n) => n.startsWith('gone-'))) {
      await this.world.controlPlane.api('DELETE', `/api/v1/namespaces/${NAMESPACE}/services/${name}`);
      this.world.services.delete(name);
    }
    await Promise.all([...this.terminations]);
  }
}
