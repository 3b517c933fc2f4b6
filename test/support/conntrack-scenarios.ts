// The stale UDP conntrack scenarios every rule mode runs in its namespace lab (iptables, nftables):
// a client keeps sending from one connected UDP socket while the Service changes under it. Each
// first shows the failure kube-proxy's reconciler exists for (the plain data plane leaves the flow
// where it was), then that a sync with the reconciler moves the very next datagrams.

import { expect } from 'vitest';
import type { ConntrackEntry } from '../../src/brain/conntrack.js';
import type { ConntrackReconcileReport, Dataplane, SyncScope } from '../../src/brain/dataplane.js';
import type { ProxyDecisions } from '../../src/brain/types.js';
import {
  ConntrackReconciler,
  parseConntrackList,
  withConntrackCleanup,
} from '../../src/dataplanes/conntrack.js';
import type { CommandRunner } from '../../src/host/command.js';
import type { Lab, UdpStream, UdpStreamEvent } from '../../src/lab/netns.js';
import { until } from '../../src/lab/until.js';
import { silentLogger } from '../../src/logger.js';

export interface ConntrackLab {
  lab: Lab;
  /** Runs a command in the node's namespace. */
  onNode: CommandRunner;
  /** The mode's data plane, already synced once. */
  dataplane: Dataplane;
  /** The lab's decisions: web (10.96.0.10:53/UDP) with these endpoints, empty (10.96.0.80:53/UDP) with these, or left out when null. */
  decisions(web: string[], empty: string[] | null): ProxyDecisions;
  /** The namespace the client runs in, and its IPv4 address. */
  client: string;
  clientIP: string;
  /** Backend name → pod IP; each answers on the Services' UDP target port. */
  backends: Record<string, string>;
  namespace: string;
}

/** A reply must come within this long of the sync that cleaned the flow. */
const MOVE_WITHIN_MS = 2000;
const STREAM = { intervalMs: 100, count: 600 };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const answersSince = (stream: UdpStream, since: number): UdpStreamEvent[] =>
  stream.events.filter((e) => e.at >= since && e.backend !== null);

async function udpEntries(onNode: CommandRunner, vip: string): Promise<ConntrackEntry[]> {
  const list = await onNode('conntrack', ['-L', '-f', 'ipv4', '-p', 'udp', '--orig-dst', vip]);
  return parseConntrackList(list.stdout);
}

const ipv4Report = (reports: ConntrackReconcileReport[] | undefined) =>
  reports?.find((r) => r.family === 'IPv4');

function harness(l: ConntrackLab) {
  const reconciled = withConntrackCleanup(
    l.dataplane,
    new ConntrackReconciler({ exec: l.onNode, log: silentLogger }),
  );
  const changed = (name: string): SyncScope => ({
    changedServices: new Set([`${l.namespace}/${name}`]),
    full: false,
    reason: 'changed Services',
  });
  return { reconciled, changed };
}

/** Removing the endpoint a flow uses: the next datagram reaches the remaining one. */
export async function staleEndpointScenario(l: ConntrackLab): Promise<void> {
  const { reconciled, changed } = harness(l);
  const both = Object.values(l.backends);
  await reconciled.sync(l.decisions(both, []), changed('web'));
  const stream = l.lab.udpStream(l.client, '10.96.0.10:53', STREAM);
  try {
    await until('three answers', () => answersSince(stream, 0).length >= 3, 5000);
    const used = answersSince(stream, 0)[0]?.backend as string;
    // One flow, one endpoint: conntrack keeps every datagram on the first choice.
    expect(new Set(answersSince(stream, 0).map((e) => e.backend))).toEqual(new Set([used]));
    const [remaining, remainingIP] = Object.entries(l.backends).find(([name]) => name !== used) as [
      string,
      string,
    ];
    const usedIP = l.backends[used] as string;

    // The rules alone do not move the flow: it keeps reaching the endpoint that is gone.
    await l.dataplane.sync(l.decisions([remainingIP], []), changed('web'));
    const ruleOnly = Date.now();
    await sleep(1000);
    expect(answersSince(stream, ruleOnly).length).toBeGreaterThanOrEqual(5);
    expect(new Set(answersSince(stream, ruleOnly).map((e) => e.backend))).toEqual(new Set([used]));
    expect((await udpEntries(l.onNode, '10.96.0.10')).map((e) => e.replySrc)).toContain(usedIP);

    // The same decisions through the reconciler: the entry goes, the next datagram is DNATed anew.
    const result = await reconciled.sync(l.decisions([remainingIP], []), changed('web'));
    const synced = Date.now();
    expect(ipv4Report(result.conntrack)).toMatchObject({ listed: true, error: null });
    expect(ipv4Report(result.conntrack)?.deleted).toBeGreaterThanOrEqual(1);
    expect((await udpEntries(l.onNode, '10.96.0.10')).map((e) => e.replySrc)).not.toContain(usedIP);
    await until(
      `an answer from ${remaining}`,
      () => answersSince(stream, synced).some((e) => e.backend === remaining),
      MOVE_WITHIN_MS,
    );
    const moved = answersSince(stream, synced).find((e) => e.backend === remaining) as UdpStreamEvent;
    await sleep(500);
    expect(new Set(answersSince(stream, moved.at).map((e) => e.backend))).toEqual(new Set([remaining]));
  } finally {
    stream.stop();
  }
  await reconciled.sync(l.decisions(both, []), changed('web'));
}

/**
 * A flow whose first packet met no rule for its VIP (the agent had not synced the Service yet) is
 * not NATed: its replies would come from the VIP. The test writes that entry with `conntrack -I`,
 * as the kernel would have, since the lab's rules refuse to create it. kube-proxy 1.33 leaves it
 * while the Service has no endpoints and deletes it once the Service has some.
 */
export async function noEndpointsThenEndpointsScenario(l: ConntrackLab): Promise<void> {
  const { reconciled, changed } = harness(l);
  const both = Object.values(l.backends);
  const [first, firstIP] = Object.entries(l.backends)[0] as [string, string];
  const sourcePort = 40053;
  await l.onNode('conntrack', [
    '-I',
    '-p',
    'udp',
    '-s',
    l.clientIP,
    '-d',
    '10.96.0.80',
    '--sport',
    String(sourcePort),
    '--dport',
    '53',
    '-r',
    '10.96.0.80',
    '-q',
    l.clientIP,
    '--reply-port-src',
    '53',
    '--reply-port-dst',
    String(sourcePort),
    '-t',
    '120',
  ]);
  const stream = l.lab.udpStream(l.client, '10.96.0.80:53', { ...STREAM, sourcePort });
  try {
    const unNATed = async () =>
      (await udpEntries(l.onNode, '10.96.0.80')).some(
        (e) => e.origDstPort === 53 && e.replySrc === '10.96.0.80',
      );
    expect(await unNATed()).toBe(true);

    // No endpoints: the reconciler leaves the Service's flows alone.
    const empty = await reconciled.sync(l.decisions(both, []), changed('empty'));
    expect(ipv4Report(empty.conntrack)).toMatchObject({ listed: true, error: null });
    expect(await unNATed()).toBe(true);

    // Endpoints appear. The rules alone never reach the flow: it stays un-NATed, unanswered.
    await l.dataplane.sync(l.decisions(both, [firstIP]), changed('empty'));
    const ruleOnly = Date.now();
    await sleep(1000);
    expect(answersSince(stream, ruleOnly)).toEqual([]);
    expect(await unNATed()).toBe(true);

    // Through the reconciler: the un-NATed entry goes and the next datagram reaches the endpoint.
    const result = await reconciled.sync(l.decisions(both, [firstIP]), changed('empty'));
    const synced = Date.now();
    expect(ipv4Report(result.conntrack)?.deleted).toBeGreaterThanOrEqual(1);
    await until(
      `an answer from ${first}`,
      () => answersSince(stream, synced).some((e) => e.backend === first),
      MOVE_WITHIN_MS,
    );
    expect(await unNATed()).toBe(false);
  } finally {
    stream.stop();
  }
  await reconciled.sync(l.decisions(both, []), changed('empty'));
}
