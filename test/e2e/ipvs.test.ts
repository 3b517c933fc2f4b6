// ipvs mode for real: this machine's kernel has no IPVS, so the test boots Debian's kernel in the
// IPVS lab (QEMU, test/support/ipvs-lab.ts) and the applier, running here, drives the guest's
// kernel through commands run inside it. Inside the guest, its root namespace is the node:
//
//   client 10.0.0.2 ── vc 10.0.0.1 ┐          ┌ vb1 10.244.1.1 ── be1 10.244.1.10 (node-a, local)
//                                  │  node-a  ├ vb2 10.244.2.1 ── be2 10.244.2.10 (node-a, local)
//                                  └          └ vb3 10.244.3.1 ── be3 10.244.3.10 ("node-b")
//
// The backends and the traffic client are the namespace lab's own (dist/src/lab/*.js), run by the
// host's node inside the guest.

import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { decide } from '../../src/brain/decide.js';
import type { ProxyDecisions } from '../../src/brain/types.js';
import { cleanupNode } from '../../src/dataplanes/cleanup.js';
import { ConntrackReconciler, withConntrackCleanup } from '../../src/dataplanes/conntrack.js';
import { type IpvsDataplane, openIpvsDataplane } from '../../src/dataplanes/ipvs/dataplane.js';
import { silentLogger } from '../../src/logger.js';
import type { EndpointSlice, Service, SliceEndpoint } from '../../src/model/types.js';
import { buildIpvsLab, IpvsLabGuest, PROJECT_ROOT } from '../support/ipvs-lab.js';
import { brainConfig, endpoint, node, nodeEnv, service, slice } from '../support/model-fixtures.js';
import { describeRoot } from '../support/privileges.js';

const NODE = 'node-a';
const NODE_IP = '10.0.0.1';
const BACKENDS = ['be1', 'be2', 'be3'] as const;
const backendIP = (i: number) => `10.244.${i + 1}.10`;
const LAB_JS = join(PROJECT_ROOT, 'dist/src/lab');

const brain = brainConfig();

const HTTP: Service['ports'] = [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 0 }];
const SLICE_PORTS: EndpointSlice['ports'] = [
  { name: 'http', port: 8080, protocol: 'TCP' },
  { name: 'dns', port: 5353, protocol: 'UDP' },
];
const ep = (i: number): SliceEndpoint => endpoint(backendIP(i), { nodeName: i < 2 ? NODE : 'node-b' });

function decisions(drainEndpoints: number[]): ProxyDecisions {
  const services = [
    service('e2e', 'web', { clusterIP: '10.96.0.10', ports: HTTP }),
    service('e2e', 'np', {
      type: 'NodePort',
      clusterIP: '10.96.0.20',
      ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30080 }],
    }),
    service('e2e', 'sticky', {
      clusterIP: '10.96.0.30',
      sessionAffinity: 'ClientIP',
      sessionAffinityTimeoutSeconds: 10800,
      ports: HTTP,
    }),
    service('e2e', 'local', {
      type: 'NodePort',
      clusterIP: '10.96.0.40',
      externalTrafficPolicy: 'Local',
      ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30081 }],
    }),
    service('e2e', 'drain', {
      clusterIP: '10.96.0.50',
      ports: [
        { name: 'http', protocol: 'TCP', port: 80, nodePort: 0 },
        { name: 'dns', protocol: 'UDP', port: 53, nodePort: 0 },
      ],
    }),
  ];
  const all = [ep(0), ep(1), ep(2)];
  const slices = [
    ...['web', 'np', 'sticky', 'local'].map((name) => slice('e2e', name, `${name}-1`, all, SLICE_PORTS)),
    slice('e2e', 'drain', 'drain-1', drainEndpoints.map(ep), SLICE_PORTS),
  ];
  return decide(
    {
      services: new Map(services.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      endpointSlices: new Map(slices.map((s) => [`${s.meta.namespace}/${s.meta.name}`, s])),
      node: node(NODE),
      serviceCIDRs: new Map(),
    },
    nodeEnv({ nodeName: NODE, nodeIPs: [NODE_IP] }),
    brain,
    { families: ['IPv4'] },
  );
}

const FULL = { changedServices: new Set<string>(), full: true, reason: 'first sync' };
const PARTIAL = { changedServices: new Set(['e2e/drain']), full: false, reason: 'changed Services' };

interface Answer {
  backend: string | null;
  seenClient: string | null;
  error: string | null;
}

describeRoot('ipvs mode in the IPVS lab (Debian kernel under QEMU)', () => {
  let guest: IpvsLabGuest;
  let dataplane: IpvsDataplane;

  const sh = async (script: string) => {
    const result = await guest.sh(script);
    if (result.code !== 0) throw new Error(`guest: ${script}\n${result.stderr}`);
    return result.stdout;
  };
  const requests = async (target: string, count: number, proto: 'tcp' | 'udp' = 'tcp'): Promise<Answer[]> => {
    const out = await sh(
      `ip netns exec client node ${LAB_JS}/traffic-client.js --proto ${proto} --target ${target} --count ${count}`,
    );
    return out
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Answer);
  };
  /** Real servers of one virtual server in the kernel's list order, with weight and connections. */
  const realServers = async (service: string) => {
    const out = await sh(`ipvsadm -Ln ${service}`);
    return out
      .split('\n')
      .filter((line) => line.trim().startsWith('->') && !line.includes('RemoteAddress'))
      .map((line) => {
        const [, address, , weight, active, inactive] = line.trim().split(/\s+/);
        return { address, weight: Number(weight), connections: Number(active) + Number(inactive) };
      });
  };
  beforeAll(async () => {
    await buildIpvsLab();
    guest = await IpvsLabGuest.boot();
    console.log(`ipvs lab guest (${guest.timings.accel}) ready in ${guest.timings.bootMs} ms`);
    const topology = [
      'set -e',
      'ip netns add client',
      'ip link add vc type veth peer name eth0 netns client',
      `ip addr add ${NODE_IP}/24 dev vc && ip link set vc up`,
      'ip -n client addr add 10.0.0.2/24 dev eth0 && ip -n client link set eth0 up && ip -n client link set lo up',
      `ip -n client route add default via ${NODE_IP}`,
      ...BACKENDS.flatMap((be, i) => [
        `ip netns add ${be}`,
        `ip link add vb${i + 1} type veth peer name eth0 netns ${be}`,
        `ip addr add 10.244.${i + 1}.1/24 dev vb${i + 1} && ip link set vb${i + 1} up`,
        `ip -n ${be} addr add ${backendIP(i)}/24 dev eth0 && ip -n ${be} link set eth0 up && ip -n ${be} link set lo up`,
        `ip -n ${be} route add default via 10.244.${i + 1}.1`,
        `ip netns exec ${be} setsid node ${LAB_JS}/backend-server.js --name ${be} --tcp 8080 --udp 5353 > /tmp/${be}.log 2>&1 < /dev/null &`,
      ]),
      // Node starts slowly in an emulated guest on a busy host: up to 90 s for the three backends.
      `for i in $(seq 900); do n=$(cat /tmp/be*.log | grep -c listening || true); [ "$n" = 3 ] && exit 0; sleep 0.1; done; cat /tmp/be*.log; exit 1`,
    ];
    await sh(topology.join('\n'));
    dataplane = await openIpvsDataplane({
      config: {
        ipvs: {
          scheduler: '',
          excludeCIDRs: [],
          strictARP: false,
          tcpTimeoutSeconds: 0,
          tcpFinTimeoutSeconds: 0,
          udpTimeoutSeconds: 0,
        },
      },
      exec: guest.exec,
      drainCheckIntervalMs: 500,
    });
    await dataplane.sync(decisions([2]), FULL);
    // The first run on a machine also installs QEMU and downloads the kernel (about a minute).
  }, 600_000);

  afterAll(async () => {
    await dataplane?.close();
    await guest?.shutdown();
  });

  it('programs the rendered virtual servers, ipsets, kube-ipvs0 addresses and companion rules', async () => {
    expect(dataplane.backend).toBe('nft');
    const save = (await sh('ipvsadm -Sn')).trim().split('\n').sort();
    expect(save).toContain('-A -t 10.96.0.10:80 -s rr');
    expect(save).toContain('-A -t 10.96.0.30:80 -s rr -p 10800');
    expect(save).toContain(`-A -t ${NODE_IP}:30080 -s rr`);
    expect(save).toContain('-a -t 10.96.0.10:80 -r 10.244.3.10:8080 -m -w 1');
    expect(save).toContain('-A -u 10.96.0.50:53 -s rr');
    expect(await sh(`ip -br addr show dev kube-ipvs0`)).toMatch(
      /10\.96\.0\.10\/32 10\.96\.0\.20\/32 10\.96\.0\.30\/32 10\.96\.0\.40\/32 10\.96\.0\.50\/32/,
    );
    expect(await sh('ipset list KUBE-NODE-PORT-LOCAL-TCP')).toMatch(/Members:\n30081\n/);
    expect(await sh('ipset list KUBE-NODE-PORT-TCP')).toMatch(/Members:\n30080\n30081\n/);
    const nat = await sh('iptables-nft-save -t nat');
    expect(nat).toContain('-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES');
    expect(nat).toContain('--match-set KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN');
    // A second sync with nothing changed writes no ipvs or ipset change.
    await dataplane.sync(decisions([2]), PARTIAL);
    expect((await sh('ipvsadm -Sn')).trim().split('\n').sort()).toEqual(save);
  });

  // The kernel puts a new real server at the head of its list and rr walks the list from the head;
  // the applier adds real servers in endpoint order, so rr serves them last-added first.
  // (ipvsadm -Ln sorts its listing, so it does not show the kernel's order.)
  const RR_ORDER = ['be3', 'be2', 'be1'];

  it('balances a ClusterIP round robin: every backend once per round, in the kernel list order', async () => {
    const answers = await requests('10.96.0.10:80', 6);
    expect(answers.map((a) => a.backend)).toEqual([...RR_ORDER, ...RR_ORDER]);
  });

  it('balances a NodePort on the node address round robin, masqueraded to the node', async () => {
    const answers = await requests(`${NODE_IP}:30080`, 6);
    expect(answers.map((a) => a.backend)).toEqual([...RR_ORDER, ...RR_ORDER]);
    // KUBE-NODE-PORT-TCP → KUBE-MARK-MASQ → MASQUERADE: the backend sees the node's address.
    for (const answer of answers) {
      const i = BACKENDS.indexOf(answer.backend as (typeof BACKENDS)[number]);
      expect(answer.seenClient?.split(':')[0]).toBe(`10.244.${i + 1}.1`);
    }
  });

  it('keeps a client on one backend with ClientIP affinity (persistence)', async () => {
    const answers = await requests('10.96.0.30:80', 5);
    expect(answers.every((a) => a.error === null)).toBe(true);
    expect(new Set(answers.map((a) => a.backend)).size).toBe(1);
  });

  it('eTP=Local: the NodePort reaches local endpoints only, with the client address kept', async () => {
    const answers = await requests(`${NODE_IP}:30081`, 4);
    expect(answers.map((a) => a.backend).sort()).toEqual(['be1', 'be1', 'be2', 'be2']);
    expect(answers.every((a) => a.seenClient?.startsWith('10.0.0.2:'))).toBe(true);
    // The ClusterIP of the same service still uses every endpoint.
    const cluster = await requests('10.96.0.40:80', 3);
    expect(cluster.map((a) => a.backend).sort()).toEqual(['be1', 'be2', 'be3']);
  });

  it('drains a removed TCP real server (weight 0 while a connection is open), deletes UDP at once', async () => {
    // A UDP exchange leaves an IPVS connection entry on be3; a TCP connection stays open on be3.
    expect((await requests('10.96.0.50:53', 1, 'udp'))[0]?.backend).toBe('be3');
    await sh(
      `ip netns exec client setsid node -e "const s=require('net').connect(80,'10.96.0.50',()=>console.log('connected'));` +
        `const t=setInterval(()=>{if(require('fs').existsSync('/tmp/release')){clearInterval(t);s.resetAndDestroy();setTimeout(()=>process.exit(0),200)}},100);` +
        `setTimeout(()=>process.exit(1),120000)" > /tmp/hold.log 2>&1 < /dev/null &\n` +
        `for i in $(seq 100); do grep -q connected /tmp/hold.log && exit 0; sleep 0.1; done; exit 1`,
    );
    expect(await realServers('-u 10.96.0.50:53')).toEqual([
      { address: '10.244.3.10:5353', weight: 1, connections: 1 },
    ]);

    await dataplane.sync(decisions([0]), PARTIAL);
    expect(await realServers('-t 10.96.0.50:80')).toEqual([
      { address: '10.244.1.10:8080', weight: 1, connections: 0 },
      { address: '10.244.3.10:8080', weight: 0, connections: 1 },
    ]);
    expect(await realServers('-u 10.96.0.50:53')).toEqual([
      { address: '10.244.1.10:5353', weight: 1, connections: 0 },
    ]);
    expect(dataplane.drainingRealServers()).toEqual(['-t 10.96.0.50:80/10.244.3.10:8080']);
    // New connections skip the weight-0 real server.
    expect((await requests('10.96.0.50:80', 3)).map((a) => a.backend)).toEqual(['be1', 'be1', 'be1']);

    // The client resets its connection; IPVS forgets it after its CLOSE timeout (10 s), then the
    // drain check deletes the real server.
    await sh('touch /tmp/release');
    const deadline = Date.now() + 60_000;
    while (dataplane.drainingRealServers().length > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    expect(dataplane.drainingRealServers()).toEqual([]);
    expect((await realServers('-t 10.96.0.50:80')).map((rs) => rs.address)).toEqual(['10.244.1.10:8080']);
  });

  it('conntrack: a UDP flow whose real server goes away reaches the remaining one after the sync', async () => {
    const reconciled = withConntrackCleanup(
      dataplane,
      new ConntrackReconciler({ exec: guest.exec, log: silentLogger }),
    );
    await reconciled.sync(decisions([0, 1]), PARTIAL);
    // One connected socket sending every 100 ms; its answers carry the guest's Date.now().
    await sh(
      `ip netns exec client setsid node ${LAB_JS}/traffic-client.js --proto udp --target 10.96.0.50:53 ` +
        '--count 1200 --interval 100 --timeout 500 > /tmp/stream.log 2>&1 < /dev/null & echo $! > /tmp/stream.pid',
    );
    const answers = async () =>
      (await sh('cat /tmp/stream.log'))
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { backend: string | null; at: number })
        .filter((a) => a.backend !== null);
    try {
      const deadline = Date.now() + 90_000;
      while ((await answers()).length < 3 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 500));
      const first = await answers();
      const used = first[0]?.backend;
      expect(new Set(first.map((a) => a.backend))).toEqual(new Set([used]));
      const remaining = used === 'be1' ? 1 : 0;

      // IPVS deletes a UDP real server at once, and expire_nodest_conn moves the streaming flow
      // itself, often before the reconcile lists it. A flow left on be3 by an earlier exchange
      // (written with conntrack -I) is what only the reconciler removes.
      await sh(
        'conntrack -I -p udp -s 10.0.0.2 -d 10.96.0.50 --sport 40999 --dport 53 -r 10.244.3.10 -q 10.0.0.2 ' +
          '--reply-port-src 5353 --reply-port-dst 40999 -t 120',
      );
      const result = await reconciled.sync(decisions([remaining]), PARTIAL);
      const synced = Number(await sh('date +%s%3N'));
      expect(result.conntrack?.[0]).toMatchObject({ family: 'IPv4', listed: true, error: null });
      expect(result.conntrack?.[0]?.deleted).toBeGreaterThanOrEqual(1);
      expect(await sh('conntrack -L -p udp --orig-dst 10.96.0.50 --reply-src 10.244.3.10')).toBe('');
      const moveDeadline = Date.now() + 30_000;
      const moved = async () =>
        (await answers()).find((a) => a.at >= synced && a.backend === BACKENDS[remaining]);
      while (!(await moved()) && Date.now() < moveDeadline) await new Promise((r) => setTimeout(r, 500));
      // Bounded in the guest's own clock, which the slow emulation does not stretch.
      expect(((await moved())?.at ?? Number.POSITIVE_INFINITY) - synced).toBeLessThan(2000);
    } finally {
      await sh('kill $(cat /tmp/stream.pid)');
    }
  });

  it('a failed companion iptables-restore is counted per family and leaves the rules as they were', async () => {
    expect(dataplane.stats('IPv4')).toEqual({ restoreFailures: 0 });
    // Sorted: a chain made again may be listed in another place.
    const rules = async () => sh('iptables-nft-save | grep -v "^#" | sort');
    const before = await rules();
    // Another tool's nft base chain under the name of one of the restore's chains (unreferenced
    // here: no LoadBalancer source ranges), as a node running other nft software may have.
    const chain = 'KUBE-SOURCE-RANGES-FIREWALL';
    await sh(
      `iptables-nft -t filter -F ${chain} && iptables-nft -t filter -X ${chain} && ` +
        `nft add chain ip filter ${chain} '{ type filter hook input priority 10; policy accept; }'`,
    );
    const withForeignChain = await rules();
    await expect(dataplane.sync(decisions([0, 1]), FULL)).rejects.toThrow(/IPv4 iptables-restore failed/);
    expect(dataplane.stats('IPv4')).toEqual({ restoreFailures: 1 });
    // iptables-restore is one transaction: nothing of it was applied.
    expect(await rules()).toBe(withForeignChain);
    // Once the name is free again, the next sync restores the chain; the counter stays.
    await sh(`nft delete chain ip filter ${chain}`);
    await dataplane.sync(decisions([0, 1]), FULL);
    expect(await rules()).toBe(before);
    expect(dataplane.stats('IPv4')).toEqual({ restoreFailures: 1 });
  });

  it('cleanup removes the virtual servers, kube-ipvs0, the ipsets and the rules', async () => {
    const report = await cleanupNode({ pinPath: `/nonexistent/kbp-ipvs-${process.pid}`, exec: guest.exec });
    expect(report.errors).toEqual([]);
    expect(report.removed).toContain('ipvs virtual servers');
    expect(report.removed).toContain('link kube-ipvs0');
    expect(report.removed).toContain('ipset KUBE-CLUSTER-IP');
    expect((await sh('ipvsadm -Sn')).trim()).toBe('');
    expect((await guest.sh('ip link show kube-ipvs0')).code).not.toBe(0);
    expect((await sh('ipset list -n')).trim()).toBe('');
    expect(await sh('iptables-nft-save; iptables-legacy-save')).not.toMatch(/KUBE-/);
  });
});
