// Incremental syncs against full recomputes: random sequences of Service and EndpointSlice adds,
// updates and deletes (seeded, so a failure replays), and after every step the state the
// incremental path keeps must equal what a computation from scratch gives.

import { describe, expect, it } from 'vitest';
import { ChangeTracker } from '../../src/model/tracker.js';
import { Decider, decide } from '../../src/proxy/decide.js';
import type { SourceEvent } from '../../src/sources/types.js';
import { brainConfig, nodeEnv } from '../support/model-fixtures.js';

/** mulberry32: a small seeded generator, so a failing sequence can be replayed from its seed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const NODE = 'test-node';
const SERVICES = ['a', 'b', 'c', 'd', 'e', 'f'];

/** Random Service and EndpointSlice events over a small set of names, so objects are updated and
 * deleted often, ports and addresses collide, and endpoints move between Services. */
function eventSource(seed: number) {
  const rnd = random(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const chance = (p: number) => rnd() < p;
  const serviceObject = (name: string) => {
    const type = pick(['ClusterIP', 'ClusterIP', 'NodePort', 'LoadBalancer'] as const);
    const ports = [{ name: 'http', port: pick([80, 8080]), protocol: 'TCP', targetPort: 8080 }];
    if (chance(0.4)) ports.push({ name: 'dns', port: 53, protocol: pick(['UDP', 'TCP']), targetPort: 53 });
    const clusterIP = `10.96.0.${pick([1, 2, 3, 10, 11, 12, 13])}`;
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
        ports: ports.map((p, i) =>
          type === 'ClusterIP' ? p : { ...p, nodePort: 30000 + i + pick([0, 10]) },
        ),
        externalIPs: chance(0.2) ? [`192.0.2.${pick([1, 2])}`] : [],
        externalTrafficPolicy: type !== 'ClusterIP' && chance(0.4) ? 'Local' : 'Cluster',
        internalTrafficPolicy: chance(0.2) ? 'Local' : 'Cluster',
        sessionAffinity: chance(0.2) ? 'ClientIP' : 'None',
        loadBalancerSourceRanges: type === 'LoadBalancer' && chance(0.3) ? ['203.0.113.0/24'] : [],
      },
      status:
        type === 'LoadBalancer' ? { loadBalancer: { ingress: [{ ip: `198.51.100.${pick([1, 2])}` }] } } : {},
    };
  };
  const sliceObject = (service: string, index: number) => ({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      namespace: 'ns',
      name: `${service}-${index}`,
      labels: { 'kubernetes.io/service-name': service },
    },
    addressType: 'IPv4',
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

describe('the brain, memoised per Service, against decide() from scratch', () => {
  for (const seed of [1, 2, 3]) {
    it(`${STEPS} random changes, seed ${seed}`, () => {
      const next = eventSource(seed);
      const tracker = new ChangeTracker(NODE);
      const env = nodeEnv({ nodeName: NODE });
      const config = brainConfig();
      const decider = new Decider();
      for (let step = 0; step < STEPS; step++) {
        tracker.apply(Array.from({ length: 1 + (step % 3) }, next));
        const changes = tracker.takePending();
        const incremental = decider.decide(tracker.state(), env, config, {
          changedServices: changes.changedServices,
          full: step === 0,
        });
        expect(incremental, `step ${step}`).toEqual(decide(tracker.state(), env, config));
      }
    });
  }
});
