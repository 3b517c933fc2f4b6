import { describe, expect, it } from 'vitest';
import { IdAllocator } from '../../src/dataplanes/bpf/ids.js';
import { type PlanOptions, planBpf, resolveScheduler } from '../../src/dataplanes/bpf/plan.js';
import type { ProxyDecisions } from '../../src/proxy/types.js';
import { decisions, ep, servicePort } from '../support/bpf-fixtures.js';

const options: PlanOptions = {
  defaultScheduler: 'random',
  families: ['IPv4'],
  capacity: { frontends: 100, backends: 100, slots: 1000, sourceRanges: 100 },
  nowMs: 1_000,
};

const allocators = () => ({
  serviceIds: new IdAllocator('service', 1, 1000, 60_000),
  backendIds: new IdAllocator('backend', 1, 1000, 60_000),
});

function plan(d: ProxyDecisions, opts: Partial<PlanOptions> = {}, ids = allocators()) {
  return planBpf(d, { ...options, ...opts }, ids);
}

const names = (p: ReturnType<typeof plan>, ids: number[]) =>
  ids.map((id) => p.backends.find((b) => b.id === id)!.name);
const frontends = (p: ReturnType<typeof plan>) =>
  p.services.flatMap((s) => s.frontends.map((f) => `${f.kind} ${f.name}`));

describe('planBpf', () => {
  it('plans a ClusterIP service port with its cluster and local backend sets', () => {
    const p = plan(
      decisions([
        servicePort('ns', 'web', {
          endpoints: [ep('10.1.0.1', 8080), ep('10.1.0.2', 8080, { isLocal: true }), ep('10.1.0.3', 8080)],
        }),
      ]),
    );
    expect(p.services).toHaveLength(1);
    const s = p.services[0]!;
    expect(s).toMatchObject({
      servicePortName: 'ns/web',
      serviceId: 1,
      noEndpoints: false,
      scheduler: 'random',
    });
    expect(frontends(p)).toEqual(['ClusterIP TCP/10.96.0.10:80']);
    expect(names(p, s.clusterBackendIds)).toEqual(['10.1.0.1:8080', '10.1.0.2:8080', '10.1.0.3:8080']);
    expect(names(p, s.localBackendIds)).toEqual(['10.1.0.2:8080']);
    expect(p.backends.filter((b) => b.isLocal).map((b) => b.name)).toEqual(['10.1.0.2:8080']);
    expect(p.problems).toEqual([]);
  });

  it('marks a service port without endpoints, and one whose Local policy finds none, apart', () => {
    const p = plan(
      decisions([
        servicePort('ns', 'empty', { clusterIP: '10.96.0.1' }),
        servicePort('ns', 'itp', {
          clusterIP: '10.96.0.2',
          internalPolicyLocal: true,
          usesClusterEndpoints: false,
          usesLocalEndpoints: true,
          endpoints: [ep('10.1.0.1', 80)],
          clusterEndpoints: [],
        }),
      ]),
    );
    expect(p.services[0]).toMatchObject({ noEndpoints: true, clusterBackendIds: [], localBackendIds: [] });
    expect(p.services[1]).toMatchObject({
      noEndpoints: false,
      internalPolicyLocal: true,
      localBackendIds: [],
    });
    expect(p.backends).toEqual([]);
  });

  it('plans NodePort on every node address or on the listed ones, LB IPs and external IPs', () => {
    const sp = servicePort('ns', 'np', {
      type: 'LoadBalancer',
      nodePort: 30080,
      externallyAccessible: true,
      externalPolicyLocal: true,
      externalIPs: ['203.0.113.7'],
      loadBalancerIPs: ['198.51.100.5'],
      endpoints: [ep('10.1.0.1', 80)],
    });
    expect(frontends(plan(decisions([sp])))).toEqual([
      'ClusterIP TCP/10.96.0.10:80',
      'LoadBalancer TCP/198.51.100.5:80',
      'ExternalIP TCP/203.0.113.7:80',
      'NodePort TCP/*:30080',
    ]);
    const any = plan(decisions([sp])).services[0]!.frontends.find((f) => f.kind === 'NodePort')!;
    expect(any.key).toEqual({
      family: 'IPv4',
      address: '',
      port: 30080,
      protocol: 'TCP',
      scope: 'anyNodeAddress',
    });
    const listed = plan(
      decisions([sp], { nodePortAddresses: { matchAll: false, ips: ['192.168.1.10', '10.0.0.5'] } }),
    );
    expect(frontends(listed).filter((f) => f.startsWith('NodePort'))).toEqual([
      'NodePort TCP/192.168.1.10:30080',
      'NodePort TCP/10.0.0.5:30080',
    ]);
    expect(listed.services[0]!.externalPolicyLocal).toBe(true);
    const none = plan(decisions([sp], { nodePortAddresses: { matchAll: false, ips: [] } }));
    expect(frontends(none).some((f) => f.startsWith('NodePort'))).toBe(false);
  });

  it('applies source ranges to LB frontends only, adding the LB IPs when a range holds the node IP', () => {
    const sp = servicePort('ns', 'fw', {
      type: 'LoadBalancer',
      nodePort: 30082,
      externallyAccessible: true,
      loadBalancerIPs: ['198.51.100.5'],
      externalIPs: ['203.0.113.9'],
      loadBalancerSourceRanges: ['203.0.113.0/25'],
      endpoints: [ep('10.1.0.1', 80)],
    });
    const s = plan(decisions([sp])).services[0]!;
    expect(s.sourceRanges).toEqual(['203.0.113.0/25']);
    expect(s.frontends.filter((f) => f.checksSourceRanges).map((f) => f.kind)).toEqual(['LoadBalancer']);
    const fromNode = plan(decisions([{ ...sp, loadBalancerSourceRanges: ['192.168.0.0/16'] }])).services[0]!;
    expect(fromNode.sourceRanges).toEqual(['192.168.0.0/16', '198.51.100.5/32']);
    const noLb = plan(decisions([{ ...sp, loadBalancerIPs: [] }])).services[0]!;
    expect(noLb.sourceRanges).toEqual([]);
  });

  it('carries affinity, and reports what it cannot program', () => {
    const p = plan(
      decisions([
        servicePort('ns', 'aff', { sessionAffinityTimeoutSeconds: 10800, endpoints: [ep('10.1.0.1', 80)] }),
        servicePort('ns', 'sctp', {
          clusterIP: '10.96.0.11',
          protocol: 'SCTP',
          endpoints: [ep('10.1.0.2', 80)],
        }),
        servicePort('ns', 'dup', { externalIPs: ['10.96.0.20'], endpoints: [ep('10.1.0.3', 80)] }),
        servicePort('ns', 'dup2', { clusterIP: '10.96.0.20' }),
        servicePort('ns', 'dup3', { clusterIP: '10.96.0.20' }),
      ]),
    );
    expect(p.services.map((s) => [s.servicePortName, s.affinityTimeoutSeconds])).toEqual([
      ['ns/aff', 10800],
      ['ns/dup2', 0],
    ]);
    expect(p.problems.map((x) => `${x.servicePortName}: ${x.reason}`)).toEqual([
      'ns/sctp: not programmed: the bpf data plane handles TCP and UDP, not SCTP',
      'ns/dup: not programmed: ns/aff already uses TCP/10.96.0.10:80',
      'ns/dup3: not programmed: ns/dup2 already uses TCP/10.96.0.20:80',
    ]);
    const v6 = plan(
      decisions([servicePort('ns', 'v6', { family: 'IPv6', clusterIP: 'fd00::10' })], { family: 'IPv6' }),
    );
    expect(v6.services).toEqual([]);
    expect(v6.problems[0]!.reason).toMatch(/handles IPv4, not IPv6/);
  });

  it('reports a frontend another service port already uses and programs the rest', () => {
    const p = plan(
      decisions([
        servicePort('ns', 'a', { clusterIP: '10.96.0.1', externalIPs: ['203.0.113.1'] }),
        servicePort('ns', 'b', { clusterIP: '10.96.0.2', externalIPs: ['203.0.113.1', '203.0.113.2'] }),
      ]),
    );
    expect(frontends(p)).toEqual([
      'ClusterIP TCP/10.96.0.1:80',
      'ExternalIP TCP/203.0.113.1:80',
      'ClusterIP TCP/10.96.0.2:80',
      'ExternalIP TCP/203.0.113.2:80',
    ]);
    expect(p.problems).toEqual([
      {
        servicePortName: 'ns/b',
        reason: 'ExternalIP frontend TCP/203.0.113.1:80 not programmed: ns/a already uses it',
      },
    ]);
  });
});

describe('scheduler choice', () => {
  it('uses the annotation, or the default with a problem when the annotation is invalid', () => {
    expect(resolveScheduler({ schedulerAnnotation: 'maglev', servicePortName: 'a/b' }, 'random')).toEqual({
      scheduler: 'maglev',
      problem: null,
    });
    expect(resolveScheduler({ schedulerAnnotation: null, servicePortName: 'a/b' }, 'rr').scheduler).toBe(
      'rr',
    );
    const bad = resolveScheduler({ schedulerAnnotation: 'wlc', servicePortName: 'a/b' }, 'random');
    expect(bad.scheduler).toBe('random');
    expect(bad.problem!.reason).toMatch(
      /"wlc" is not one of random, rr, maglev; using the default scheduler random/,
    );
    const p = plan(
      decisions([
        servicePort('ns', 'a', { clusterIP: '10.96.0.1', schedulerAnnotation: 'maglev' }),
        servicePort('ns', 'b', { clusterIP: '10.96.0.2', schedulerAnnotation: 'bogus' }),
      ]),
      { defaultScheduler: 'rr' },
    );
    expect(p.services.map((s) => s.scheduler)).toEqual(['maglev', 'rr']);
    expect(p.problems.map((x) => x.servicePortName)).toEqual(['ns/b']);
  });
});

describe('stable ids', () => {
  const two = (eps: string[]) =>
    decisions([
      servicePort('ns', 'a', { clusterIP: '10.96.0.1', endpoints: eps.map((ip) => ep(ip, 80)) }),
      servicePort('ns', 'b', { clusterIP: '10.96.0.2', endpoints: [ep('10.1.9.9', 80)] }),
    ]);
  const id = (p: ReturnType<typeof plan>, name: string) => p.backends.find((b) => b.name === name)?.id;

  it('keeps ids across syncs and does not hand a released id out again during quarantine', () => {
    const first = plan(two(['10.1.0.1', '10.1.0.2']));
    const second = plan(two(['10.1.0.2', '10.1.0.3']), { nowMs: 2_000 }, first);
    expect(id(second, '10.1.0.2:80')).toBe(id(first, '10.1.0.2:80'));
    expect(id(second, '10.1.9.9:80')).toBe(id(first, '10.1.9.9:80'));
    expect(second.services.map((s) => s.serviceId)).toEqual(first.services.map((s) => s.serviceId));
    const released = id(first, '10.1.0.1:80')!;
    expect(second.backends.map((b) => b.id)).not.toContain(released);
    expect(second.backendIds.state().quarantined.get(released)).toBe(2_000 + 60_000);
  });

  it('reuses a quarantined id only after the quarantine and when nothing else is free', () => {
    const ids = {
      serviceIds: new IdAllocator('service', 1, 2, 1_000),
      backendIds: new IdAllocator('backend', 1, 2, 1_000),
    };
    const one = (ip: string) => decisions([servicePort('ns', 'a', { endpoints: [ep(ip, 80)] })]);
    const p1 = plan(one('10.1.0.1'), { nowMs: 0 }, ids);
    const p2 = plan(one('10.1.0.2'), { nowMs: 10 }, p1);
    expect(p2.backends[0]!.id).toBe(2);
    const p3 = plan(one('10.1.0.3'), { nowMs: 20 }, p2);
    expect(p3.services).toEqual([]);
    expect(p3.problems[0]!.reason).toBe(
      'not programmed: no free backend id (ids 1-2 in use or in quarantine); raise bpf.mapSizes.backends',
    );
    const p4 = plan(one('10.1.0.3'), { nowMs: 2_000 }, p2);
    expect(p4.backends[0]!.id).toBe(1);
  });

  it('leaves the allocators it was given untouched and gives the same plan for the same input', () => {
    const ids = allocators();
    const a = plan(two(['10.1.0.1']), {}, ids);
    const b = plan(two(['10.1.0.1']), {}, ids);
    expect(ids.serviceIds.size).toBe(0);
    expect(b.services).toEqual(a.services);
    expect(b.backends).toEqual(a.backends);
  });

  it('restores ids found in the kernel (service ids by ClusterIP frontend, backend ids by address)', () => {
    const ids = allocators();
    expect(ids.serviceIds.restore('TCP/10.96.0.1:80', 42)).toBe(true);
    expect(ids.backendIds.restore('10.1.0.1:80', 7)).toBe(true);
    const p = plan(two(['10.1.0.1']), {}, ids);
    expect(p.services[0]!.serviceId).toBe(42);
    expect(p.services[1]!.serviceId).toBe(43);
    expect(id(p, '10.1.0.1:80')).toBe(7);
    expect(ids.serviceIds.restore('TCP/10.96.0.9:80', 42)).toBe(false);
  });
});

describe('capacity', () => {
  it('skips the service port that does not fit, naming the setting, and keeps the others', () => {
    const d = decisions([
      servicePort('ns', 'a', { clusterIP: '10.96.0.1', endpoints: [ep('10.1.0.1', 80), ep('10.1.0.2', 80)] }),
      servicePort('ns', 'b', { clusterIP: '10.96.0.2', endpoints: [ep('10.1.0.3', 80), ep('10.1.0.4', 80)] }),
      servicePort('ns', 'c', { clusterIP: '10.96.0.3', endpoints: [ep('10.1.0.1', 80)] }),
    ]);
    const p = plan(d, { capacity: { frontends: 10, backends: 3, slots: 10, sourceRanges: 0 } });
    expect(p.services.map((s) => s.servicePortName)).toEqual(['ns/a', 'ns/c']);
    expect(p.backends.map((b) => b.name)).toEqual(['10.1.0.1:80', '10.1.0.2:80']);
    expect(p.problems).toEqual([
      {
        servicePortName: 'ns/b',
        reason: 'not programmed: the backends map is full (capacity 3); raise bpf.mapSizes.backends',
      },
    ]);
    const slots = plan(d, { capacity: { frontends: 10, backends: 10, slots: 2, sourceRanges: 0 } });
    expect(slots.services.map((s) => s.servicePortName)).toEqual(['ns/a']);
    expect(slots.problems.map((x) => x.reason)).toEqual([
      'not programmed: the backend slots map is full (capacity 2); raise bpf.mapSizes.backendSlots',
      'not programmed: the backend slots map is full (capacity 2); raise bpf.mapSizes.backendSlots',
    ]);
    const fe = plan(d, { capacity: { frontends: 1, backends: 10, slots: 10, sourceRanges: 0 } });
    expect(fe.problems[0]!.reason).toMatch(
      /services map is full \(capacity 1\); raise bpf.mapSizes.services/,
    );
  });
});
