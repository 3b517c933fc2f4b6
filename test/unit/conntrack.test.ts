import { describe, expect, it } from 'vitest';
import {
  type ConntrackEntry,
  type ConntrackFilter,
  staleConntrackFilters,
} from '../../src/brain/conntrack.js';
import { decide } from '../../src/brain/decide.js';
import type { FamilyDecisions } from '../../src/brain/types.js';
import {
  ConntrackReconciler,
  conntrackCleanupRequired,
  conntrackDeleteArgs,
  deletedCount,
  parseConntrackList,
  udpServices,
} from '../../src/dataplanes/conntrack.js';
import type { CommandRunner } from '../../src/host/command.js';
import { silentLogger } from '../../src/logger.js';
import type { EndpointSlice, IPFamily, Service, SliceEndpoint } from '../../src/model/types.js';
import { brainConfig, endpoint, node, nodeEnv, service, slice } from '../support/model-fixtures.js';

// kube-proxy 1.33's pkg/proxy/conntrack/cleanup_test.go, in our terms.
const CLUSTER_IP = '172.30.1.1';
const EXTERNAL_IP = '192.168.99.100';
const LB_IP = '1.2.3.4';
const SERVING = '10.240.0.4';
const NOT_SERVING = '10.240.1.5';
const DELETED = '10.240.2.6';
const PORT = 8000;
const NODE_PORT = 32000;
const NON_SERVICE_PORT = 3000;
const NODE_IP = '192.168.0.2';

const serving = (ip: string, extra: Partial<SliceEndpoint['conditions']> = {}, nodeName = 'test-node') =>
  endpoint(ip, { nodeName, conditions: { ready: null, serving: true, terminating: null, ...extra } });
const notServing = (ip: string) =>
  endpoint(ip, { nodeName: 'test-node', conditions: { ready: false, serving: false, terminating: null } });

const PROTOCOLS = ['TCP', 'UDP', 'SCTP'] as const;
const testService = (extra: Partial<Service> = {}) =>
  service('test', 'cleanup-test', {
    type: 'LoadBalancer',
    clusterIP: CLUSTER_IP,
    externalIPs: [EXTERNAL_IP],
    loadBalancerIngress: [{ ip: LB_IP, hostname: '', ipMode: 'VIP' }],
    ports: PROTOCOLS.map((protocol) => ({
      name: `test-${protocol.toLowerCase()}`,
      protocol,
      port: PORT,
      nodePort: protocol === 'TCP' ? 0 : NODE_PORT,
    })),
    ...extra,
  });
const slicePorts: EndpointSlice['ports'] = PROTOCOLS.map((protocol) => ({
  name: `test-${protocol.toLowerCase()}`,
  port: PORT,
  protocol,
}));

function familyDecisions(
  services: Service[],
  slices: EndpointSlice[],
  family: IPFamily = 'IPv4',
): FamilyDecisions {
  const d = decide(
    {
      services: new Map(services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      endpointSlices: new Map(slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      node: node('test-node'),
      serviceCIDRs: new Map(),
    },
    nodeEnv(),
    brainConfig(),
    { families: [family] },
  );
  return d.families[0] as FamilyDecisions;
}

/** What `conntrack -D -p udp` with these filters leaves in the table. */
function survivors(entries: ConntrackEntry[], filters: ConntrackFilter[]): ConntrackEntry[] {
  const matches = (f: ConntrackFilter, e: ConntrackEntry) =>
    e.protocol === 'udp' &&
    (f.origDst === null || f.origDst === e.origDst) &&
    f.origDstPort === e.origDstPort &&
    f.replySrc === e.replySrc;
  return entries.filter((e) => !filters.some((f) => matches(f, e)));
}

const entry = (protocol: string, origDst: string, origDstPort: number, replySrc: string): ConntrackEntry => ({
  protocol,
  origDst,
  origDstPort,
  replySrc,
});

describe('staleConntrackFilters: kube-proxy 1.33 CleanStaleEntries', () => {
  const decisions = familyDecisions(
    [testService()],
    [
      slice(
        'test',
        'cleanup-test',
        'cleanup-test-0',
        [serving(SERVING), notServing(NOT_SERVING)],
        slicePorts,
      ),
    ],
  );

  it('deletes UDP entries to a service IP:port or a NodePort not DNATed to a serving endpoint, and un-NATed ones', () => {
    const entries: ConntrackEntry[] = [];
    const expected: ConntrackEntry[] = [];
    for (const dnatDest of [SERVING, NOT_SERVING, DELETED]) {
      for (const protocol of ['tcp', 'udp', 'sctp']) {
        for (const origDst of [CLUSTER_IP, LB_IP, EXTERNAL_IP]) {
          for (const port of [PORT, NON_SERVICE_PORT]) {
            const e = entry(protocol, origDst, port, dnatDest);
            entries.push(e);
            if (!(protocol === 'udp' && port === PORT && dnatDest !== SERVING)) expected.push(e);
          }
        }
        const e = entry(protocol, NODE_IP, NODE_PORT, dnatDest);
        entries.push(e);
        if (!(protocol === 'udp' && dnatDest !== SERVING)) expected.push(e);
      }
    }
    // Flows whose first packet met no DNAT rule: the reply comes from the service IP itself.
    for (const ip of [CLUSTER_IP, LB_IP, EXTERNAL_IP]) {
      for (const port of [PORT, NON_SERVICE_PORT]) {
        const e = entry('udp', ip, port, ip);
        entries.push(e);
        if (port !== PORT) expected.push(e);
      }
    }
    expect(entries).toHaveLength(69);
    const filters = staleConntrackFilters(decisions, entries);
    expect(survivors(entries, filters)).toEqual(expected);
    expect(entries.length - expected.length).toBe(11);
  });

  it('states each filter as `conntrack -D` takes it: service IP + port + reply source, or NodePort + reply source', () => {
    const filters = staleConntrackFilters(decisions, [
      entry('udp', CLUSTER_IP, PORT, DELETED),
      entry('udp', NODE_IP, NODE_PORT, DELETED),
    ]);
    expect(filters).toEqual([
      { origDst: null, origDstPort: NODE_PORT, replySrc: DELETED },
      { origDst: CLUSTER_IP, origDstPort: PORT, replySrc: DELETED },
    ]);
  });

  it('matches a NodePort on any destination address, as kube-proxy does', () => {
    const filters = staleConntrackFilters(decisions, [entry('udp', '203.0.113.9', NODE_PORT, '203.0.113.9')]);
    expect(filters).toEqual([{ origDst: null, origDstPort: NODE_PORT, replySrc: '203.0.113.9' }]);
  });

  it('one filter per stale destination, however many client flows use it', () => {
    const entries = [40000, 40001, 40002].map(() => entry('udp', CLUSTER_IP, PORT, DELETED));
    expect(staleConntrackFilters(decisions, entries)).toHaveLength(1);
  });

  it('leaves a service without endpoints alone (its slice names another service)', () => {
    const d = familyDecisions(
      [testService({ ports: [{ name: 'test-udp', protocol: 'UDP', port: PORT, nodePort: 0 }] })],
      [slice('test', 'non-existing-service', 'cleanup-test-0', [serving(SERVING)], slicePorts)],
    );
    const entries = [entry('udp', EXTERNAL_IP, PORT, SERVING), entry('udp', EXTERNAL_IP, PORT, DELETED)];
    expect(staleConntrackFilters(d, entries)).toEqual([]);
  });

  it('leaves a port whose endpoints are all not serving alone (kube-proxy 1.33 skips it)', () => {
    const d = familyDecisions(
      [testService()],
      [slice('test', 'cleanup-test', 'cleanup-test-0', [notServing(NOT_SERVING)], slicePorts)],
    );
    expect(staleConntrackFilters(d, [entry('udp', CLUSTER_IP, PORT, DELETED)])).toEqual([]);
  });

  it('keeps flows to serving endpoints whatever the traffic policy, topology or termination says', () => {
    const d = familyDecisions(
      [testService({ externalTrafficPolicy: 'Local', internalTrafficPolicy: 'Local' })],
      [
        slice(
          'test',
          'cleanup-test',
          'cleanup-test-0',
          [
            serving('10.240.3.7', { ready: false, terminating: true }),
            serving('10.240.4.8', {}, 'other-node'),
          ],
          slicePorts,
        ),
      ],
    );
    const entries = [
      entry('udp', CLUSTER_IP, PORT, '10.240.3.7'),
      entry('udp', LB_IP, PORT, '10.240.4.8'),
      entry('udp', NODE_IP, NODE_PORT, '10.240.4.8'),
    ];
    expect(staleConntrackFilters(d, entries)).toEqual([]);
  });

  it('works on IPv6 addresses in their canonical form', () => {
    const v6 = familyDecisions(
      [
        service('test', 'dns6', {
          clusterIP: 'fd00:96::a',
          ports: [{ name: 'dns', protocol: 'UDP', port: 53, nodePort: 0 }],
        }),
      ],
      [
        slice(
          'test',
          'dns6',
          'dns6-0',
          [serving('fd00:244::5')],
          [{ name: 'dns', port: 5353, protocol: 'UDP' }],
          'IPv6',
        ),
      ],
      'IPv6',
    );
    const entries = [
      entry('udp', 'fd00:96::a', 53, 'fd00:244::5'),
      entry('udp', 'fd00:96::a', 53, 'fd00:244::6'),
    ];
    expect(staleConntrackFilters(v6, entries)).toEqual([
      { origDst: 'fd00:96::a', origDstPort: 53, replySrc: 'fd00:244::6' },
    ]);
  });
});

describe('the conntrack CLI', () => {
  it('parses `conntrack -L` lines: original destination, reply source, canonical IPs', () => {
    const stdout = [
      'udp      17 29 src=10.244.1.2 dst=10.96.0.10 sport=40000 dport=53 [UNREPLIED] src=10.244.2.2 dst=10.244.1.2 sport=8081 dport=40000 mark=0 use=1',
      'udp      17 99 src=fd00::1 dst=fd00:96:0::a sport=1234 dport=53 src=fd00:96::a dst=fd00::1 sport=53 dport=1234 [ASSURED] mark=0 zone=3 use=1',
      'conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown.',
      '',
    ].join('\n');
    expect(parseConntrackList(stdout)).toEqual([
      { protocol: 'udp', origDst: '10.96.0.10', origDstPort: 53, replySrc: '10.244.2.2' },
      { protocol: 'udp', origDst: 'fd00:96::a', origDstPort: 53, replySrc: 'fd00:96::a' },
    ]);
  });

  it('deletes with the exact tuple filters and reads the count conntrack prints', () => {
    expect(
      conntrackDeleteArgs('IPv4', { origDst: '10.96.0.10', origDstPort: 53, replySrc: '10.244.2.2' }),
    ).toEqual([
      '-D',
      '-f',
      'ipv4',
      '-p',
      'udp',
      '--orig-dst',
      '10.96.0.10',
      '--orig-port-dst',
      '53',
      '--reply-src',
      '10.244.2.2',
    ]);
    expect(conntrackDeleteArgs('IPv6', { origDst: null, origDstPort: 30053, replySrc: 'fd00::5' })).toEqual([
      '-D',
      '-f',
      'ipv6',
      '-p',
      'udp',
      '--orig-port-dst',
      '30053',
      '--reply-src',
      'fd00::5',
    ]);
    expect(deletedCount('conntrack v1.4.7 (conntrack-tools): 3 flow entries have been deleted.\n')).toBe(3);
    expect(deletedCount('conntrack v1.4.7 (conntrack-tools): Operation not permitted\n')).toBeNull();
  });
});

describe('ConntrackReconciler', () => {
  const web = service('demo', 'web', {
    clusterIP: '10.96.0.10',
    ports: [{ name: 'dns', protocol: 'UDP', port: 53, nodePort: 0 }],
  });
  const webSlice = slice(
    'demo',
    'web',
    'web-0',
    [serving('10.244.2.2')],
    [{ name: 'dns', port: 8081, protocol: 'UDP' }],
  );
  const api = service('demo', 'api', { clusterIP: '10.96.0.20' });
  const decisions = familyDecisions([web, api], [webSlice]);
  const LIST =
    'udp      17 29 src=10.244.1.2 dst=10.96.0.10 sport=40000 dport=53 src=10.244.3.2 dst=10.244.1.2 sport=8081 dport=40000 mark=0 use=1\n';

  function fakeConntrack(outcomes: { list?: number; deleteStderr?: string; deleteCode?: number } = {}) {
    const calls: string[][] = [];
    const exec: CommandRunner = async (cmd, args) => {
      calls.push([cmd, ...args]);
      if (args[0] === '-L')
        return outcomes.list
          ? {
              stdout: '',
              stderr: 'conntrack v1.4.7 (conntrack-tools): Operation failed',
              code: outcomes.list,
            }
          : {
              stdout: LIST,
              stderr: 'conntrack v1.4.7 (conntrack-tools): 1 flow entries have been shown.\n',
              code: 0,
            };
      return {
        stdout: '',
        stderr:
          outcomes.deleteStderr ?? 'conntrack v1.4.7 (conntrack-tools): 1 flow entries have been deleted.\n',
        code: outcomes.deleteCode ?? 0,
      };
    };
    return { exec, calls };
  }

  it('runs after a change of a Service with a UDP port, now or before, and not otherwise', () => {
    expect(udpServices(decisions)).toEqual(new Set(['demo/web']));
    expect(conntrackCleanupRequired(new Set(['demo/api']), new Set(), new Set(['demo/web']))).toBe(false);
    expect(conntrackCleanupRequired(new Set(['demo/web']), new Set(), new Set(['demo/web']))).toBe(true);
    // A UDP Service that is gone still asks for a run (its flows must go).
    expect(conntrackCleanupRequired(new Set(['demo/old']), new Set(['demo/old']), new Set())).toBe(true);
  });

  it('lists the family, deletes the stale entries and reports what it did', async () => {
    const { exec, calls } = fakeConntrack();
    let now = 1000;
    const reconciler = new ConntrackReconciler({ exec, log: silentLogger, now: () => (now += 5) });
    const report = await reconciler.afterSync(decisions, {
      changedServices: new Set(['demo/web']),
      full: false,
      reason: 'changed Services',
    });
    expect(report).toEqual({ family: 'IPv4', listed: true, durationSeconds: 0.005, deleted: 1, error: null });
    expect(calls).toEqual([
      ['conntrack', '-L', '-f', 'ipv4', '-p', 'udp'],
      [
        'conntrack',
        ...conntrackDeleteArgs('IPv4', { origDst: '10.96.0.10', origDstPort: 53, replySrc: '10.244.3.2' }),
      ],
    ]);
    const quiet = await reconciler.afterSync(decisions, {
      changedServices: new Set(['demo/api']),
      full: true,
      reason: 'first sync',
    });
    expect(quiet).toBeNull();
  });

  it('counts "0 entries deleted" (exit status 1) as success: another filter took the entry', async () => {
    const { exec } = fakeConntrack({
      deleteCode: 1,
      deleteStderr: 'conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.\n',
    });
    const report = await new ConntrackReconciler({ exec, log: silentLogger }).reconcile(decisions);
    expect(report).toMatchObject({ listed: true, deleted: 0, error: null });
  });

  it('reports a failure without throwing and tries again after the next sync', async () => {
    const failing = fakeConntrack({ list: 1 });
    const reconciler = new ConntrackReconciler({ exec: failing.exec, log: silentLogger });
    const report = await reconciler.afterSync(decisions, {
      changedServices: new Set(['demo/web']),
      full: false,
      reason: 'changed Services',
    });
    expect(report).toMatchObject({ listed: false, deleted: 0 });
    expect(report?.error).toContain('conntrack -L failed (1)');
    const again = await reconciler.afterSync(decisions, {
      changedServices: new Set(),
      full: false,
      reason: 'changed Services',
    });
    expect(again).not.toBeNull();
  });

  it('reports a failed deletion with the entries deleted before it', async () => {
    const { exec } = fakeConntrack({
      deleteCode: 1,
      deleteStderr: 'conntrack v1.4.7 (conntrack-tools): Operation not permitted\n',
    });
    const report = await new ConntrackReconciler({ exec, log: silentLogger }).reconcile(decisions);
    expect(report.listed).toBe(true);
    expect(report.error).toContain('Operation not permitted');
  });
});
