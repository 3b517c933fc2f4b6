import { describe, expect, it } from 'vitest';
import type { ProxyDecisions } from '../../src/brain/types.js';
import { resolveScheduler } from '../../src/dataplanes/bpf/frontend-drafts.js';
import { IdAllocator } from '../../src/dataplanes/bpf/ids.js';
import { BpfPlanner, type PlanOptions, planBpf } from '../../src/dataplanes/bpf/plan.js';
import { DATAPATH_FAMILIES } from '../../src/dataplanes/bpf/types.js';
import { decisions, ep, servicePort } from '../support/bpf-fixtures.js';

const options: PlanOptions = {
  defaultScheduler: 'random',
  maglevFrontends: 'external',
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

const byName = (p: ReturnType<typeof plan>) => new Map(p.frontends.map((f) => [f.name, f]));

describe('planBpf frontends', () => {
  it('plans a ClusterIP with its backends, local ones first', () => {
    const p = plan(
      decisions([
        servicePort('ns', 'web', {
          endpoints: [ep('10.1.0.1', 8080), ep('10.1.0.2', 8080, { isLocal: true }), ep('10.1.0.3', 8080)],
        }),
      ]),
    );
    expect(p.frontends).toHaveLength(1);
    const f = p.frontends[0]!;
    expect(f).toMatchObject({
      name: 'TCP/10.96.0.10:80',
      kind: 'ClusterIP',
      action: 'forward',
      localCount: 1,
    });
    const names = f.backendIds.map((id) => p.backends.find((b) => b.id === id)!.name);
    expect(names).toEqual(['10.1.0.2:8080', '10.1.0.1:8080', '10.1.0.3:8080']);
    expect(p.backends.find((b) => b.name === '10.1.0.2:8080')!.isLocal).toBe(true);
    expect(p.problems).toEqual([]);
  });

  it('rejects without endpoints and drops when a Local policy finds no local endpoint', () => {
    const p = plan(
      decisions([
        servicePort('ns', 'empty', { clusterIP: '10.96.0.1' }),
        servicePort('ns', 'itp', {
          clusterIP: '10.96.0.2',
          internalPolicyLocal: true,
          usesLocalEndpoints: true,
          endpoints: [ep('10.1.0.1', 80)],
        }),
      ]),
    );
    const f = byName(p);
    expect(f.get('TCP/10.96.0.1:80')).toMatchObject({ action: 'reject', backendIds: [] });
    expect(f.get('TCP/10.96.0.2:80')).toMatchObject({ action: 'drop', backendIds: [], localOnly: true });
    expect(p.backends).toEqual([]);
  });

  it('plans NodePort on every local address or on the listed ones, and external IPs', () => {
    const sp = servicePort('ns', 'np', {
      type: 'NodePort',
      nodePort: 30080,
      externallyAccessible: true,
      externalIPs: ['203.0.113.7'],
      endpoints: [ep('10.1.0.1', 80)],
    });
    expect([...byName(plan(decisions([sp]))).keys()]).toEqual([
      'TCP/0.0.0.0:30080',
      'TCP/10.96.0.10:80',
      'TCP/203.0.113.7:80',
    ]);
    const listed = plan(
      decisions([sp], { nodePortAddresses: { matchAll: false, ips: ['192.168.1.10', '10.0.0.5'] } }),
    );
    const kinds = listed.frontends.map((f) => `${f.kind} ${f.name}`);
    expect(kinds).toEqual([
      'NodePort TCP/10.0.0.5:30080',
      'ClusterIP TCP/10.96.0.10:80',
      'NodePort TCP/192.168.1.10:30080',
      'ExternalIP TCP/203.0.113.7:80',
    ]);
    const none = plan(decisions([sp], { nodePortAddresses: { matchAll: false, ips: [] } }));
    expect(none.frontends.some((f) => f.kind === 'NodePort')).toBe(false);
  });

  it('gives eTP=Local external frontends local endpoints and a pod-traffic scope with cluster endpoints', () => {
    const lb = {
      type: 'LoadBalancer' as const,
      nodePort: 30081,
      externallyAccessible: true,
      externalPolicyLocal: true,
      usesLocalEndpoints: true,
      loadBalancerIPs: ['198.51.100.5'],
    };
    const sp = servicePort('ns', 'lb', {
      ...lb,
      endpoints: [ep('10.1.0.1', 80, { isLocal: true }), ep('10.2.0.1', 80)],
    });
    const f = byName(plan(decisions([sp])));
    expect(f.get('TCP/10.96.0.10:80')).toMatchObject({ localOnly: false, hasInternalScope: false });
    expect(f.get('TCP/10.96.0.10:80')!.backendIds).toHaveLength(2);
    for (const name of ['TCP/198.51.100.5:80', 'TCP/0.0.0.0:30081']) {
      expect(f.get(name)).toMatchObject({
        action: 'forward',
        localOnly: true,
        hasInternalScope: true,
        localCount: 1,
      });
      expect(f.get(name)!.backendIds).toHaveLength(1);
      expect(f.get(`${name}/internal`)).toMatchObject({ key: { scope: 'internal' }, localOnly: false });
      expect(f.get(`${name}/internal`)!.backendIds).toHaveLength(2);
    }
    const remoteOnly = plan(decisions([servicePort('ns', 'lb', { ...lb, endpoints: [ep('10.2.0.1', 80)] })]));
    const r = byName(remoteOnly);
    expect(r.get('TCP/198.51.100.5:80')).toMatchObject({ action: 'drop', hasInternalScope: true });
    expect(r.get('TCP/198.51.100.5:80/internal')).toMatchObject({ action: 'forward' });
  });

  it('applies source ranges to LB IPs only, adding the LB IPs when a range holds the node IP', () => {
    const sp = servicePort('ns', 'fw', {
      type: 'LoadBalancer',
      nodePort: 30082,
      externallyAccessible: true,
      loadBalancerIPs: ['198.51.100.5'],
      externalIPs: ['203.0.113.9'],
      loadBalancerSourceRanges: ['203.0.113.0/25'],
      endpoints: [ep('10.1.0.1', 80)],
    });
    const f = byName(plan(decisions([sp])));
    expect(f.get('TCP/198.51.100.5:80')!.sourceRanges).toEqual(['203.0.113.0/25']);
    expect(f.get('TCP/203.0.113.9:80')!.sourceRanges).toEqual([]);
    expect(f.get('TCP/0.0.0.0:30082')!.sourceRanges).toEqual([]);
    const fromNode = byName(plan(decisions([{ ...sp, loadBalancerSourceRanges: ['192.168.0.0/16'] }])));
    expect(fromNode.get('TCP/198.51.100.5:80')!.sourceRanges).toEqual(['192.168.0.0/16', '198.51.100.5/32']);
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
        servicePort('ns', 'dup', { endpoints: [ep('10.1.0.3', 80)] }),
      ]),
    );
    expect(p.frontends.map((f) => [f.servicePortName, f.affinityTimeoutSeconds])).toEqual([
      ['ns/aff', 10800],
    ]);
    // In planning order: the service ports sorted by name, as the brain gives them.
    expect(p.problems.map((x) => x.servicePortName)).toEqual(['ns/dup', 'ns/sctp']);
    expect(p.problems[0]!.reason).toMatch(/ns\/aff already uses it/);
    expect(p.problems[1]!.reason).toMatch(/SCTP/);
    const v6Decisions = decisions([servicePort('ns', 'v6', { family: 'IPv6', clusterIP: 'fd00::10' })], {
      family: 'IPv6',
    });
    const v6 = plan(v6Decisions);
    expect(v6.frontends).toEqual([]);
    expect(v6.problems[0]!.reason).toMatch(/handles IPv4, not IPv6/);
    // An object with both families' programs (DATAPATH_FAMILIES) programs it.
    const both = plan(v6Decisions, { families: DATAPATH_FAMILIES });
    expect(both.problems).toEqual([]);
    expect(both.frontends.map((f) => [f.name, f.key.family])).toEqual([['TCP/[fd00::10]:80', 'IPv6']]);
  });
});

describe('scheduler choice', () => {
  it('uses the annotation, or the default with a problem when the annotation is invalid', () => {
    const annotated = resolveScheduler(
      { schedulerAnnotation: 'maglev', servicePortName: 'a/b' },
      'random',
      'external',
    );
    expect([annotated.scheduler('ClusterIP'), annotated.problem]).toEqual(['maglev', null]);
    expect(
      resolveScheduler({ schedulerAnnotation: null, servicePortName: 'a/b' }, 'rr', 'external').scheduler(
        'ClusterIP',
      ),
    ).toBe('rr');
    const bad = resolveScheduler(
      { schedulerAnnotation: 'wlc', servicePortName: 'a/b' },
      'random',
      'external',
    );
    expect(bad.scheduler('NodePort')).toBe('random');
    expect(bad.problem!.reason).toMatch(/"wlc" is not one of random, rr, maglev/);
    const p = plan(
      decisions([
        servicePort('ns', 'a', { clusterIP: '10.96.0.1', schedulerAnnotation: 'maglev' }),
        servicePort('ns', 'b', { clusterIP: '10.96.0.2', schedulerAnnotation: 'bogus' }),
      ]),
      { defaultScheduler: 'rr' },
    );
    expect(p.frontends.map((f) => f.scheduler)).toEqual(['maglev', 'rr']);
    expect(p.problems).toHaveLength(1);
  });

  it('gives the default maglev to external frontends only, unless bpf.maglevFrontends is all or the Service asks', () => {
    const sps = decisions([
      servicePort('ns', 'web', {
        clusterIP: '10.96.0.1',
        type: 'LoadBalancer',
        nodePort: 30080,
        loadBalancerIPs: ['198.51.100.1'],
        externalIPs: ['192.0.2.1'],
        externallyAccessible: true,
        endpoints: [ep('10.1.0.1', 80)],
      }),
      servicePort('ns', 'asks', {
        clusterIP: '10.96.0.2',
        schedulerAnnotation: 'maglev',
        endpoints: [ep('10.1.0.2', 80)],
      }),
    ]);
    const schedulers = (maglevFrontends: PlanOptions['maglevFrontends']) =>
      plan(sps, { defaultScheduler: 'maglev', maglevFrontends }).frontends.map(
        (f) => `${f.servicePortName} ${f.kind} ${f.scheduler}`,
      );
    expect(schedulers('external')).toEqual([
      'ns/web NodePort maglev',
      'ns/web ClusterIP random',
      'ns/asks ClusterIP maglev',
      'ns/web ExternalIP maglev',
      'ns/web LoadBalancer maglev',
    ]);
    expect(schedulers('all').every((s) => s.endsWith('maglev'))).toBe(true);
    // rr is cheap: it applies everywhere.
    expect(
      plan(sps, { defaultScheduler: 'rr' })
        .frontends.filter((f) => f.serviceName === 'web')
        .every((f) => f.scheduler === 'rr'),
    ).toBe(true);
  });
});

describe('stable ids', () => {
  const two = (eps: string[]) =>
    decisions([
      servicePort('ns', 'a', { clusterIP: '10.96.0.1', endpoints: eps.map((ip) => ep(ip, 80)) }),
      servicePort('ns', 'b', { clusterIP: '10.96.0.2', endpoints: [ep('10.1.9.9', 80)] }),
    ]);

  it('keeps ids across syncs and does not hand a released id out again during quarantine', () => {
    const first = plan(two(['10.1.0.1', '10.1.0.2']));
    const second = plan(two(['10.1.0.2', '10.1.0.3']), { nowMs: 2_000 }, first);
    const id = (p: typeof first, name: string) => p.backends.find((b) => b.name === name)?.id;
    expect(id(second, '10.1.0.2:80')).toBe(id(first, '10.1.0.2:80'));
    expect(id(second, '10.1.9.9:80')).toBe(id(first, '10.1.9.9:80'));
    expect(second.frontends.map((f) => f.serviceId)).toEqual(first.frontends.map((f) => f.serviceId));
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
    expect(p3.backends).toEqual([]);
    expect(p3.problems[0]!.reason).toMatch(/no free backend id .* raise bpf.mapSizes.backends/);
    const p4 = plan(one('10.1.0.3'), { nowMs: 2_000 }, p2);
    expect(p4.backends[0]!.id).toBe(1);
  });

  it('leaves the allocators it was given untouched and gives the same plan for the same input', () => {
    const ids = allocators();
    const a = plan(two(['10.1.0.1']), {}, ids);
    const b = plan(two(['10.1.0.1']), {}, ids);
    expect(ids.serviceIds.size).toBe(0);
    expect(b.frontends).toEqual(a.frontends);
    expect(b.backends).toEqual(a.backends);
  });

  it('restores ids found in the kernel', () => {
    const ids = allocators();
    ids.serviceIds.restore('TCP/10.96.0.1:80', 42);
    ids.backendIds.restore('10.1.0.1:80', 7);
    const p = plan(two(['10.1.0.1']), {}, ids);
    expect(p.frontends[0]!.serviceId).toBe(42);
    expect(p.backends.find((b) => b.name === '10.1.0.1:80')!.id).toBe(7);
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
    expect(p.frontends.map((f) => f.servicePortName)).toEqual(['ns/a', 'ns/c']);
    expect(p.backends.map((b) => b.name)).toEqual(['10.1.0.1:80', '10.1.0.2:80']);
    expect(p.problems).toEqual([
      {
        servicePortName: 'ns/b',
        reason: 'not programmed: the backends map is full (capacity 3); raise bpf.mapSizes.backends',
      },
    ]);
    const slots = plan(d, { capacity: { frontends: 10, backends: 10, slots: 2, sourceRanges: 0 } });
    expect(slots.frontends.map((f) => f.servicePortName)).toEqual(['ns/a']);
    expect(slots.problems.map((x) => x.reason)).toEqual([
      'not programmed: the backend slots map is full (capacity 2); raise bpf.mapSizes.backendSlots',
      'not programmed: the backend slots map is full (capacity 2); raise bpf.mapSizes.backendSlots',
    ]);
  });
});

describe('BpfPlanner scope', () => {
  it('plans only the changed Services, and widens to every one, saying why, when the options change', () => {
    const planner = new BpfPlanner(allocators());
    const d = decisions([
      servicePort('ns', 'web', { endpoints: [ep('10.1.0.1', 8080)] }),
      servicePort('ns', 'api', { clusterIP: '10.96.0.11', endpoints: [ep('10.1.0.2', 8080)] }),
    ]);
    expect(planner.plan(d, options, null)).toMatchObject({ scope: null, widened: null });
    const partial = planner.plan(d, options, new Set(['ns/web']));
    expect(partial.widened).toBeNull();
    expect([...(partial.scope ?? [])]).toEqual(['TCP/10.96.0.10:80']);
    const widened = planner.plan(d, { ...options, defaultScheduler: 'rr' }, new Set(['ns/web']));
    expect(widened.scope).toBeNull();
    expect(widened.widened).toMatch(/^bpf plan: .*options changed/);
    expect(widened.plan.frontends.map((f) => f.scheduler)).toEqual(['rr', 'rr']);
  });
});
