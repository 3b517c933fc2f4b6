import { describe, expect, it } from 'vitest';
import type { Dataplane, SyncScope } from '../../src/brain/dataplane.js';
import { FULL_SYNC_PERIOD_MS, SyncLoop, type SyncReport } from '../../src/brain/sync-loop.js';
import type { ProxyDecisions } from '../../src/brain/types.js';
import type { SourceEvent } from '../../src/model/events.js';
import { ChangeTracker } from '../../src/model/tracker.js';
import { brainConfig, nodeEnv } from '../support/model-fixtures.js';

const rawService = (name: string, port = 80) => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { namespace: 'ns', name, resourceVersion: '1', uid: `u-${name}` },
  spec: {
    clusterIP: '10.96.0.10',
    clusterIPs: ['10.96.0.10'],
    ports: [{ name: 'http', port, protocol: 'TCP' }],
  },
});
const rawSlice = (name: string, service: string, ips: string[], triggerTime?: string) => ({
  apiVersion: 'discovery.k8s.io/v1',
  kind: 'EndpointSlice',
  metadata: {
    namespace: 'ns',
    name,
    labels: { 'kubernetes.io/service-name': service },
    annotations: triggerTime ? { 'endpoints.kubernetes.io/last-change-trigger-time': triggerTime } : {},
  },
  addressType: 'IPv4',
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
  endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
});
const rawServiceCIDR = (name: string, cidrs: string[], labels: Record<string, string> = {}) => ({
  apiVersion: 'networking.k8s.io/v1',
  kind: 'ServiceCIDR',
  metadata: { name, labels },
  spec: { cidrs },
});
const upsert = (kind: SourceEvent['kind'], object: unknown, origin = 'test#0'): SourceEvent => ({
  type: 'upsert',
  kind,
  object,
  origin,
});
const remove = (kind: SourceEvent['kind'], object: unknown): SourceEvent => ({
  type: 'delete',
  kind,
  object,
  origin: 'test#0',
});

describe('ChangeTracker', () => {
  it('tracks which services changed, through the service or its slices, and counts changes', () => {
    const tracker = new ChangeTracker('test-node');
    tracker.apply([
      upsert('Service', rawService('a')),
      upsert('Service', rawService('b')),
      upsert('EndpointSlice', rawSlice('a-1', 'a', ['10.0.0.1'])),
    ]);
    let pending = tracker.takePending();
    expect([...pending.changedServices].sort()).toEqual(['ns/a', 'ns/b']);
    expect(pending.serviceChanges).toBe(2);
    expect(pending.endpointChanges).toBe(1);
    tracker.apply([upsert('EndpointSlice', rawSlice('a-1', 'a', ['10.0.0.2']))]);
    pending = tracker.takePending();
    expect([...pending.changedServices]).toEqual(['ns/a']);
    tracker.apply([remove('EndpointSlice', rawSlice('a-1', 'a', []))]);
    expect([...tracker.takePending().changedServices]).toEqual(['ns/a']);
    expect(tracker.state().endpointSlices.size).toBe(0);
    expect(tracker.totals).toEqual({ serviceChanges: 2, endpointChanges: 3 });
  });

  it('keeps the slices indexed by their Service as slices come, move to another Service, lose their label and go', () => {
    const tracker = new ChangeTracker('test-node');
    const names = (slices: { meta: { name: string } }[]) => slices.map((s) => s.meta.name).sort();
    tracker.apply([
      upsert('EndpointSlice', rawSlice('x', 'a', ['10.0.0.1'])),
      upsert('EndpointSlice', rawSlice('y', 'a', ['10.0.0.2'])),
    ]);
    expect(names(tracker.slicesOf('ns/a'))).toEqual(['x', 'y']);
    tracker.apply([upsert('EndpointSlice', rawSlice('x', 'b', ['10.0.0.1']))]);
    expect(names(tracker.slicesOf('ns/a'))).toEqual(['y']);
    expect(names(tracker.slicesOf('ns/b'))).toEqual(['x']);
    const unlabelled = { ...rawSlice('y', 'a', ['10.0.0.2']), metadata: { namespace: 'ns', name: 'y' } };
    tracker.apply([upsert('EndpointSlice', unlabelled)]);
    expect(tracker.slicesOf('ns/a')).toEqual([]);
    expect(names(tracker.unlabelledSlices())).toEqual(['y']);
    tracker.apply([remove('EndpointSlice', unlabelled), remove('EndpointSlice', rawSlice('x', 'b', []))]);
    expect([...tracker.slicesOf('ns/b'), ...tracker.unlabelledSlices()]).toEqual([]);
  });

  it('skips a malformed object, reports it, and keeps its last good version', () => {
    const tracker = new ChangeTracker('test-node');
    tracker.apply([upsert('Service', rawService('a'))]);
    tracker.apply([
      upsert(
        'Service',
        { ...rawService('a'), spec: { ...rawService('a').spec, ports: [{ port: 70000 }] } },
        'f.yaml#3',
      ),
    ]);
    expect(tracker.state().services.get('ns/a')?.ports[0]?.port).toBe(80);
    expect(tracker.skipped()).toHaveLength(1);
    expect(tracker.skipped()[0]).toMatchObject({
      origin: 'f.yaml#3',
      kind: 'Service',
      namespace: 'ns',
      name: 'a',
    });
    tracker.apply([upsert('Service', rawService('a', 81))]);
    expect(tracker.skipped()).toHaveLength(0);
  });

  it('uses a slice without its unusable endpoints and reports them until a clean version arrives', () => {
    const tracker = new ChangeTracker('test-node');
    tracker.apply([upsert('EndpointSlice', rawSlice('a-1', 'a', ['10.0.0.1', '10.0.0.300']), 'f.yaml#0')]);
    expect(
      tracker
        .state()
        .endpointSlices.get('ns/a-1')
        ?.endpoints.map((e) => e.addresses),
    ).toEqual([['10.0.0.1']]);
    expect(tracker.skipped()).toEqual([
      {
        origin: 'f.yaml#0',
        kind: 'EndpointSlice',
        namespace: 'ns',
        name: 'a-1',
        reason:
          'endpoints[1].addresses[0]: must be an IPv4 address (addressType IPv4), got "10.0.0.300" (left out; the rest of the EndpointSlice is used)',
        entriesLeftOut: true,
      },
    ]);
    tracker.apply([upsert('EndpointSlice', rawSlice('a-1', 'a', ['10.0.0.1']), 'f.yaml#0')]);
    expect(tracker.skipped()).toEqual([]);
  });

  it('returns each problem from the batch that raised it, once, and again when its reason changes', () => {
    const tracker = new ChangeTracker('test-node');
    const bad = (ip: string) => upsert('EndpointSlice', rawSlice('a-1', 'a', ['10.0.0.1', ip]), 'f.yaml#0');
    expect(tracker.apply([bad('10.0.0.300')]).map((p) => p.name)).toEqual(['a-1']);
    expect(tracker.apply([bad('10.0.0.300')])).toEqual([]);
    expect(tracker.apply([bad('10.0.0.301')]).map((p) => p.reason)).toEqual([
      'endpoints[1].addresses[0]: must be an IPv4 address (addressType IPv4), got "10.0.0.301" (left out; the rest of the EndpointSlice is used)',
    ]);
    expect(tracker.apply([upsert('Service', rawService('b', 0))]).map((p) => p.name)).toEqual(['b']);
  });

  it('keeps the earliest trigger time per service', () => {
    const tracker = new ChangeTracker('test-node', Date.parse('2026-01-01T00:00:00Z'));
    tracker.apply([
      upsert('EndpointSlice', rawSlice('a-1', 'a', ['10.0.0.1'], '2026-01-01T00:00:10Z')),
      upsert('EndpointSlice', rawSlice('a-2', 'a', ['10.0.0.2'], '2026-01-01T00:00:05Z')),
    ]);
    expect(tracker.takePending().triggerTimes.get('ns/a')).toBe(Date.parse('2026-01-01T00:00:05Z'));
  });

  it('ignores trigger times from before it started, as the slices of its first list carry (the soak saw a restarted agent report them as latency)', () => {
    const tracker = new ChangeTracker('test-node', Date.parse('2026-01-01T00:00:07Z'));
    tracker.apply([
      upsert('EndpointSlice', rawSlice('a-1', 'a', ['10.0.0.1'], '2026-01-01T00:00:05Z')),
      upsert('EndpointSlice', rawSlice('b-1', 'b', ['10.0.0.2'], '2026-01-01T00:00:09Z')),
    ]);
    const pending = tracker.takePending();
    expect([...pending.changedServices].sort()).toEqual(['ns/a', 'ns/b']);
    expect([...pending.triggerTimes]).toEqual([['ns/b', Date.parse('2026-01-01T00:00:09Z')]]);
  });

  it("names the IP families a change touches, as kube-proxy's per-family proxiers each receive it", () => {
    const tracker = new ChangeTracker('test-node');
    const families = () => [...tracker.takePending().families].sort();
    tracker.apply([upsert('Service', rawService('a'))]);
    expect(families()).toEqual(['IPv4']);
    const dual = rawService('a');
    dual.spec.clusterIPs = ['10.96.0.10', 'fd00:96::10'];
    tracker.apply([upsert('Service', dual)]);
    expect(families()).toEqual(['IPv4', 'IPv6']);
    // Back to single-stack: the IPv6 proxier sees the family go (before and after count).
    tracker.apply([upsert('Service', rawService('a'))]);
    expect(families()).toEqual(['IPv4', 'IPv6']);
    const v6slice = { ...rawSlice('a-6', 'a', ['fd00:244::1']), addressType: 'IPv6' };
    tracker.apply([upsert('EndpointSlice', v6slice)]);
    expect(families()).toEqual(['IPv6']);
    tracker.apply([remove('EndpointSlice', v6slice)]);
    expect(families()).toEqual(['IPv6']);
    const headless = rawService('h');
    headless.spec.clusterIP = 'None';
    headless.spec.clusterIPs = ['None'];
    tracker.apply([upsert('Service', headless)]);
    expect(families()).toEqual([]);
    // Node-wide context: both families resync.
    tracker.apply([upsert('ServiceCIDR', rawServiceCIDR('kubernetes', ['10.96.0.0/16']))]);
    expect(families()).toEqual(['IPv4', 'IPv6']);
    // A failed sync's families come back with its changes.
    tracker.apply([upsert('EndpointSlice', v6slice)]);
    const taken = tracker.takePending();
    tracker.restorePending(taken);
    expect(families()).toEqual(['IPv6']);
  });

  it('flags node label changes of this node only', () => {
    const tracker = new ChangeTracker('test-node');
    const rawNode = (name: string, zone: string) => ({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name, labels: { 'topology.kubernetes.io/zone': zone } },
    });
    tracker.apply([upsert('Node', rawNode('other', 'a'))]);
    expect(tracker.takePending().nodeChanged).toBe(false);
    tracker.apply([upsert('Node', rawNode('test-node', 'a'))]);
    expect(tracker.takePending().nodeChanged).toBe(true);
    tracker.apply([upsert('Node', rawNode('test-node', 'a'))]);
    expect(tracker.takePending().nodeChanged).toBe(false);
    tracker.apply([upsert('Node', rawNode('test-node', 'b'))]);
    expect(tracker.takePending().nodeChanged).toBe(true);
  });

  it('keeps every ServiceCIDR and flags a change of their CIDRs, not of their labels', () => {
    const tracker = new ChangeTracker('test-node');
    expect(tracker.takePending().serviceCIDRsChanged).toBe(false);
    tracker.apply([upsert('ServiceCIDR', rawServiceCIDR('kubernetes', ['10.96.0.0/16']))]);
    const pending = tracker.takePending();
    expect(pending.serviceCIDRsChanged).toBe(true);
    // Node-wide, not a Service's: no Service is named, no service or endpoint change counted.
    expect(pending.changedServices.size).toBe(0);
    expect(pending.serviceChanges + pending.endpointChanges).toBe(0);
    tracker.apply([upsert('ServiceCIDR', rawServiceCIDR('kubernetes', ['10.96.0.0/16'], { team: 'x' }))]);
    expect(tracker.takePending().serviceCIDRsChanged).toBe(false);
    tracker.apply([upsert('ServiceCIDR', rawServiceCIDR('extra', ['10.97.0.0/16', 'fd00:97::/112']))]);
    expect(tracker.takePending().serviceCIDRsChanged).toBe(true);
    expect([...tracker.state().serviceCIDRs.values()].map((o) => [o.meta.name, o.cidrs])).toEqual([
      ['kubernetes', ['10.96.0.0/16']],
      ['extra', ['10.97.0.0/16', 'fd00:97::/112']],
    ]);
    tracker.apply([remove('ServiceCIDR', rawServiceCIDR('extra', []))]);
    expect(tracker.takePending().serviceCIDRsChanged).toBe(true);
    expect([...tracker.state().serviceCIDRs.keys()]).toEqual(['kubernetes']);
    // Deleting what is not known changes nothing.
    tracker.apply([remove('ServiceCIDR', rawServiceCIDR('never', []))]);
    expect(tracker.takePending().serviceCIDRsChanged).toBe(false);
  });

  it('skips a malformed ServiceCIDR, reports it, keeps its last good version, and uses a partly bad one', () => {
    const tracker = new ChangeTracker('test-node');
    tracker.apply([upsert('ServiceCIDR', rawServiceCIDR('kubernetes', ['10.96.0.0/16']))]);
    tracker.takePending();
    const raised = tracker.apply([
      upsert('ServiceCIDR', rawServiceCIDR('kubernetes', ['10.96.0.0/16', '10.97.0.0/16']), 'api'),
    ]);
    expect(raised.map((p) => `${p.kind} ${p.name}: ${p.reason}`)).toEqual([
      'ServiceCIDR kubernetes: spec.cidrs[1]: must be of the other IP family than spec.cidrs[0] (at most one CIDR per family), got "10.97.0.0/16"',
    ]);
    expect(tracker.takePending().serviceCIDRsChanged).toBe(false);
    expect(tracker.state().serviceCIDRs.get('kubernetes')?.cidrs).toEqual(['10.96.0.0/16']);
    expect(tracker.skipped()).toHaveLength(1);
    tracker.apply([upsert('ServiceCIDR', rawServiceCIDR('kubernetes', ['10.96.0.0/16', 'fd00:96::/200']))]);
    expect(tracker.takePending().serviceCIDRsChanged).toBe(false);
    expect(tracker.skipped().map((p) => p.entriesLeftOut)).toEqual([true]);
    tracker.apply([remove('ServiceCIDR', rawServiceCIDR('kubernetes', []))]);
    expect(tracker.skipped()).toEqual([]);
    expect(tracker.state().serviceCIDRs.size).toBe(0);
  });
});

const brain = brainConfig();

class RecordingDataplane implements Dataplane {
  readonly mode = 'iptables' as const;
  calls: { decisions: ProxyDecisions; changes: SyncScope }[] = [];
  failNext = false;
  async sync(decisions: ProxyDecisions, changes: SyncScope) {
    this.calls.push({ decisions, changes });
    if (this.failNext) {
      this.failNext = false;
      throw new Error('restore failed');
    }
    return { scope: changes };
  }
  async close() {}
}

describe('SyncLoop', () => {
  function setup() {
    let now = 1_000_000;
    // Started before the fake clock's first reading, so the trigger times of its changes count.
    const tracker = new ChangeTracker('test-node', 0);
    const dataplane = new RecordingDataplane();
    const reports: SyncReport[] = [];
    const failures: unknown[] = [];
    const loop = new SyncLoop({
      tracker,
      nodeEnv: () => nodeEnv(),
      config: brain,
      dataplane,
      observers: [{ synced: (r) => reports.push(r), failed: (f) => failures.push(f.error) }],
      now: () => now,
    });
    return { tracker, dataplane, reports, failures, loop, advance: (ms: number) => (now += ms) };
  }

  it('syncs fully first, then partially with the changed services, and fully again after an hour', async () => {
    const { tracker, dataplane, loop, advance } = setup();
    tracker.apply([
      upsert('Service', rawService('a')),
      upsert('EndpointSlice', rawSlice('a-1', 'a', ['10.0.0.1'])),
    ]);
    expect(await loop.syncOnce()).toBe(true);
    expect(dataplane.calls[0]?.changes).toMatchObject({ full: true, reason: 'first sync' });
    expect(
      dataplane.calls[0]?.decisions.families[0]?.servicePorts[0]?.clusterEndpoints.map((e) => e.endpoint),
    ).toEqual(['10.0.0.1:8080']);
    tracker.apply([upsert('EndpointSlice', rawSlice('a-1', 'a', ['10.0.0.2']))]);
    advance(1000);
    await loop.syncOnce();
    expect(dataplane.calls[1]?.changes).toEqual({
      changedServices: new Set(['ns/a']),
      full: false,
      reason: 'changed Services',
    });
    advance(FULL_SYNC_PERIOD_MS);
    await loop.syncOnce();
    expect(dataplane.calls[2]?.changes).toMatchObject({ full: true, reason: 'full-sync period' });
  });

  it('after a failure, puts the changes back and syncs fully next time', async () => {
    const { tracker, dataplane, loop, failures } = setup();
    await loop.syncOnce();
    tracker.apply([upsert('Service', rawService('b'))]);
    dataplane.failNext = true;
    expect(await loop.syncOnce()).toBe(false);
    expect(failures).toHaveLength(1);
    expect(await loop.syncOnce()).toBe(true);
    expect(dataplane.calls[2]?.changes).toMatchObject({
      full: true,
      reason: 'after a failure or on request',
    });
    expect([...(dataplane.calls[2]?.changes.changedServices ?? [])]).toEqual(['ns/b']);
  });

  it('syncs fully when the ServiceCIDRs change, and the decisions carry them per family', async () => {
    const { tracker, dataplane, loop, advance } = setup();
    tracker.apply([upsert('Service', rawService('a'))]);
    await loop.syncOnce();
    expect(dataplane.calls[0]?.decisions.families[0]?.serviceCIDRs).toEqual([]);
    tracker.apply([upsert('ServiceCIDR', rawServiceCIDR('kubernetes', ['10.96.0.0/16', 'fd00:96::/112']))]);
    advance(1000);
    await loop.syncOnce();
    expect(dataplane.calls[1]?.changes).toMatchObject({ full: true, reason: 'ServiceCIDRs changed' });
    expect(dataplane.calls[1]?.decisions.families.map((f) => [f.family, f.serviceCIDRs])).toEqual([
      ['IPv4', ['10.96.0.0/16']],
    ]);
    tracker.apply([upsert('Service', rawService('a', 8080))]);
    advance(1000);
    await loop.syncOnce();
    expect(dataplane.calls[2]?.changes.full).toBe(false);
    expect(dataplane.calls[2]?.decisions.families[0]?.serviceCIDRs).toEqual(['10.96.0.0/16']);
  });

  it('reports network programming latency from the trigger time', async () => {
    const { tracker, loop, reports, advance } = setup();
    tracker.apply([
      upsert('EndpointSlice', rawSlice('a-1', 'a', ['10.0.0.1'], new Date(1_000_000 - 2000).toISOString())),
    ]);
    advance(500);
    await loop.syncOnce();
    expect(reports[0]?.programmingLatenciesSeconds).toEqual([2.5]);
  });
});
