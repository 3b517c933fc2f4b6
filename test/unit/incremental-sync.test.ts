// Incremental syncs against full recomputes: random sequences of Service and EndpointSlice adds,
// updates and deletes (seeded, so a failure replays), and after every step the state the
// incremental path keeps must equal what a computation from scratch gives.

import { describe, expect, it } from 'vitest';
import { Decider, decide, ZONE_LABEL } from '../../src/brain/decide.js';
import { IdAllocator } from '../../src/dataplanes/bpf/ids.js';
import { type BpfPlan, BpfPlanner, type PlanOptions, planBpf } from '../../src/dataplanes/bpf/plan.js';
import { MapWriter } from '../../src/dataplanes/bpf/writer.js';
import type { SourceEvent } from '../../src/model/events.js';
import { ChangeTracker } from '../../src/model/tracker.js';
import { MemoryStore } from '../support/memory-store.js';
import { brainConfig, nodeEnv } from '../support/model-fixtures.js';
import { mulberry32 } from '../support/random.js';

const NODE = 'test-node';
const SERVICES = ['a', 'b', 'c', 'd', 'e', 'f'];

/** Random Service and EndpointSlice events over a small set of names, so objects are updated and
 * deleted often, ports and addresses collide, and endpoints move between Services. */
function eventSource(seed: number) {
  const rnd = mulberry32(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const chance = (p: number) => rnd() < p;
  const serviceObject = (name: string) => {
    const type = pick(['ClusterIP', 'ClusterIP', 'NodePort', 'LoadBalancer'] as const);
    const ports = [{ name: 'http', port: pick([80, 8080]), protocol: 'TCP', targetPort: 8080 }];
    if (chance(0.4)) ports.push({ name: 'dns', port: 53, protocol: pick(['UDP', 'TCP']), targetPort: 53 });
    // Each Service has addresses and ports of its own, and now and then one another Service uses
    // too: a shared frontend, which only a plan of everything in order decides.
    const own = (base: number) => (chance(0.05) ? base : base + 1 + SERVICES.indexOf(name));
    // Now and then headless: ignored, as kube-proxy does.
    const clusterIP = chance(0.05) ? 'None' : `10.96.0.${own(10)}`;
    return {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: {
        namespace: 'ns',
        name,
        annotations: chance(0.2) ? { 'kube-bpf-proxy.io/scheduler': pick(['maglev', 'rr', 'bogus']) } : {},
      },
      spec: {
        type,
        clusterIP,
        clusterIPs: [clusterIP],
        ipFamilies: ['IPv4'],
        ports: ports.map((p, i) => (type === 'ClusterIP' ? p : { ...p, nodePort: own(30000 + 10 * i) })),
        externalIPs: chance(0.2) ? [`192.0.2.${own(0)}`] : [],
        externalTrafficPolicy: type !== 'ClusterIP' && chance(0.4) ? 'Local' : 'Cluster',
        internalTrafficPolicy: chance(0.2) ? 'Local' : 'Cluster',
        sessionAffinity: chance(0.2) ? 'ClientIP' : 'None',
        loadBalancerSourceRanges: type === 'LoadBalancer' && chance(0.3) ? ['203.0.113.0/24'] : [],
      },
      status: type === 'LoadBalancer' ? { loadBalancer: { ingress: [{ ip: `198.51.100.${own(0)}` }] } } : {},
    };
  };
  // Now and then a slice without its Service label, or of addressType FQDN: both ignored.
  const sliceObject = (service: string, index: number) => ({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      namespace: 'ns',
      name: `${service}-${index}`,
      labels: chance(0.05) ? {} : { 'kubernetes.io/service-name': service },
    },
    addressType: chance(0.05) ? 'FQDN' : 'IPv4',
    ports: [
      { name: 'http', port: 8080, protocol: 'TCP' },
      { name: 'dns', port: 53, protocol: pick(['UDP', 'TCP']) },
    ],
    endpoints: Array.from({ length: Math.floor(rnd() * 5) }, () => {
      const ready = chance(0.8);
      return {
        addresses: [`10.244.${pick([0, 1])}.${1 + Math.floor(rnd() * 8)}`],
        conditions: { ready, serving: ready || chance(0.5), terminating: !ready && chance(0.5) },
        nodeName: pick([NODE, 'other-node']),
        zone: pick(['z1', 'z2']),
        hints: chance(0.7) ? { forZones: [{ name: pick(['z1', 'z2']) }] } : undefined,
      };
    }),
  });
  return (): SourceEvent => {
    const name = pick(SERVICES);
    const isService = chance(0.4);
    const object = isService ? serviceObject(name) : sliceObject(name, pick([1, 2]));
    return {
      type: chance(0.2) ? 'delete' : 'upsert',
      kind: isService ? 'Service' : 'EndpointSlice',
      object,
      origin: `seed ${seed}`,
    };
  };
}

const STEPS = 300;

/** A ServiceCIDR upsert or delete, cycling through a few ranges. */
function serviceCIDREvent(step: number): SourceEvent {
  const name = `range-${step % 2}`;
  return {
    type: step % 75 === 50 ? 'delete' : 'upsert',
    kind: 'ServiceCIDR',
    object: {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'ServiceCIDR',
      metadata: { name },
      spec: { cidrs: [`10.${96 + (step % 4)}.0.0/16`] },
    },
    origin: `step ${step}`,
  };
}

describe('the brain, memoised per Service, against decide() from scratch', () => {
  for (const seed of [1, 2, 3]) {
    it(`${STEPS} random changes, seed ${seed}`, () => {
      const next = eventSource(seed);
      const tracker = new ChangeTracker(NODE);
      const config = brainConfig();
      const decider = new Decider();
      let ignoredSteps = 0;
      for (let step = 0; step < STEPS; step++) {
        // The node changes zone now and then: topology hints then change every Service's endpoints.
        const env = nodeEnv({ nodeName: NODE, nodeLabels: { [ZONE_LABEL]: step % 70 < 35 ? 'z1' : 'z2' } });
        tracker.apply(Array.from({ length: 1 + (step % 3) }, next));
        // Now and then the ServiceCIDRs change: node-wide, no Service is named.
        if (step % 25 === 0) tracker.apply([serviceCIDREvent(step)]);
        const changes = tracker.takePending();
        // The tracker's slice index on even seeds, the walk over every slice on odd ones.
        const { decisions: incremental } = decider.decide(tracker.state(), env, config, {
          changedServices: changes.changedServices,
          full: step === 0,
          reason: step === 0 ? 'first sync' : 'changed Services',
          slices: seed % 2 === 0 ? tracker : undefined,
        });
        expect(incremental, `step ${step}`).toEqual(decide(tracker.state(), env, config));
        if (incremental.ignored.length > 0) ignoredSteps++;
      }
      // Headless Services and unlabelled or FQDN slices come and go: the ignored list is checked too.
      expect(ignoredSteps).toBeGreaterThan(STEPS / 10);
    });
  }
});

const OPTIONS: PlanOptions = {
  defaultScheduler: 'random',
  maglevFrontends: 'external',
  families: ['IPv4'],
  capacity: { frontends: 1000, backends: 1000, slots: 10_000, sourceRanges: 1000 },
  nowMs: 0,
};

const allocators = () => ({
  serviceIds: new IdAllocator('service', 1, 100_000, 0),
  backendIds: new IdAllocator('backend', 1, 100_000, 0),
});

/** A plan with its ids replaced by the names they stand for: ids differ between an incremental
 * plan and one from scratch, what they name must not. */
function planByName(plan: BpfPlan) {
  const backendName = new Map(plan.backends.map((b) => [b.id, b.name]));
  return {
    frontends: plan.frontends.map(({ serviceId: _, backendIds, ...f }) => ({
      ...f,
      backends: backendIds.map((id) => backendName.get(id)),
    })),
    backends: plan.backends.map(({ id: _, ...b }) => b).sort((a, b) => (a.name < b.name ? -1 : 1)),
    problems: [...plan.problems].sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1)),
  };
}

/** The maps' contents by name, as the datapath resolves them: every entry must be reachable. */
function mapsByName(store: MemoryStore) {
  const backendName = (id: number) => {
    const b = store.backends.get(id);
    return b
      ? `${b.address}:${b.port}${b.isLocal ? ' local' : ''}${b.terminating ? ' terminating' : ''}`
      : `missing ${id}`;
  };
  const frontendOf = new Map([...store.frontends.values()].map((f) => [f.value.serviceId, f]));
  const name = (serviceId: number) => {
    const f = frontendOf.get(serviceId);
    return f ? `${f.key.protocol}/${f.key.address}:${f.key.port}/${f.key.scope}` : `orphan ${serviceId}`;
  };
  const sorted = (xs: string[]) => xs.sort();
  return {
    frontends: sorted(
      [...store.frontends.values()].map((f) => {
        const { serviceId, gen, ...value } = f.value;
        const slots = Array.from({ length: value.count }, (_, slot) => {
          const s = store.slots.get(`${serviceId}/${gen}/${slot}`);
          return s ? backendName(s.backendId) : 'missing slot';
        });
        return JSON.stringify([name(serviceId), value, slots]);
      }),
    ),
    slots: store.slots.size,
    backends: sorted([...store.backends.values()].map((b) => backendName(b.id))),
    // Whole tables, entry by entry (a table rewritten in place must equal one built afresh), and
    // how many there are (frontends with the same backends share one).
    maglev: sorted(
      [...store.maglevByService()].map(
        ([serviceId, table]) => `${name(serviceId)} ${[...table].map(backendName).join()}`,
      ),
    ),
    maglevTables: store.maglevTables.size,
    affinityMatches: sorted(
      [...store.matches.values()].map((m) => `${name(m.serviceId)} ${backendName(m.backendId)}`),
    ),
    sourceRanges: sorted([...store.ranges.values()].map((r) => `${name(r.serviceId)} ${r.cidr}`)),
  };
}

const writerOptions = { maglevTableSize: 251, graceMs: 0, now: () => 0 };

describe('the bpf plan and maps, changed per Service, against a plan and maps from scratch', () => {
  for (const seed of [11, 12, 13]) {
    it(`${STEPS} random changes, seed ${seed}`, async () => {
      const next = eventSource(seed);
      const tracker = new ChangeTracker(NODE);
      // NodePorts on the node's addresses, which move now and then: every NodePort frontend moves.
      const envs = [
        nodeEnv({ nodeName: NODE }),
        nodeEnv({
          nodeName: NODE,
          nodeIPs: ['192.168.0.3'],
          interfaces: [
            { ifname: 'eth0', addr_info: [{ family: 'inet', local: '192.168.0.3', prefixlen: 24 }] },
          ],
        }),
      ];
      const config = brainConfig({ nodePortAddresses: ['192.168.0.0/24'] });
      const ids = allocators();
      const planner = new BpfPlanner(ids);
      const store = new MemoryStore();
      const writer = new MapWriter(store, writerOptions);
      let scoped = 0;
      for (let step = 0; step < STEPS; step++) {
        tracker.apply(Array.from({ length: 1 + (step % 3) }, next));
        const changes = tracker.takePending();
        const decisions = decide(tracker.state(), envs[Math.floor(step / 50) % 2]!, config);
        const { plan, scope } = planner.plan(decisions, OPTIONS, step === 0 ? null : changes.changedServices);
        if (scope) scoped++;
        await writer.apply(plan, scope);
        writer.flushDeferred(true);

        const fromScratch = planBpf(decisions, OPTIONS, allocators());
        expect(planByName(plan), `plan, step ${step}`).toEqual(planByName(fromScratch));
        expect([...ids.serviceIds.entries()].map(([k]) => k).sort(), `service ids, step ${step}`).toEqual(
          plan.frontends.map((f) => f.name).sort(),
        );
        expect([...ids.backendIds.entries()].map(([k]) => k).sort(), `backend ids, step ${step}`).toEqual(
          plan.backends.map((b) => b.name).sort(),
        );
        const scratchStore = new MemoryStore();
        await new MapWriter(scratchStore, writerOptions).apply(fromScratch);
        expect(mapsByName(store), `maps, step ${step}`).toEqual(mapsByName(scratchStore));
        expect(store.readerErrors, `step ${step}`).toEqual([]);
      }
      // Most steps must have taken the incremental path, or this test proves little.
      expect(scoped).toBeGreaterThan(STEPS / 2);
    });
  }
});
