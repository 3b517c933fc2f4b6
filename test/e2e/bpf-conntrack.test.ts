import type { ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { mainScript } from '../../src/cli/demo.js';
import { DEFAULT_CONNTRACK_TIMEOUTS, readConntrack } from '../../src/dataplanes/bpf/conntrack-gc.js';
import { openPinnedMaps } from '../../src/dataplanes/bpf/inspect.js';
import { ct4Key, TCP_FLAG } from '../../src/dataplanes/bpf/layout.js';
import { LabAgent } from '../../src/lab/agent.js';
import { type BuiltCluster, buildCluster, clusterSpecFromState } from '../../src/lab/cluster.js';
import { deleteStaleNamespaces, Lab } from '../../src/lab/netns.js';
import { until } from '../../src/lab/until.js';
import { ChangeTracker } from '../../src/model/tracker.js';
import { readManifests } from '../../src/sources/manifests.js';
import { describeRoot } from '../support/privileges.js';
import { type Exposition, parseExposition, samplesOf, sampleValue } from '../support/prom-text.js';

// The bpf data plane's connection tracking under a real agent (`run --proxy-mode bpf`, its
// conntrack GC running every second, a 1,024-entry conntrack table) on a one-node cluster of
// network namespaces shaped as a real node (strict rp_filter, the INVALID drop rule), with real
// sockets (issue 13):
// - a SYN flood from outside against one Service (spoofed sources, a raw socket) while a pod holds
//   established connections to another Service, with the new-flow rate limit and, as the control,
//   without it;
// - a half-closed stream idle for 30 real seconds, past the 10 s closing timeout, that completes,
//   and a reset one whose entries GC removes meanwhile.
// Needs `npm run build` (the agent, the servers and the flood run from dist/).

const PREFIX = `kbpct${process.pid}`;
const NODE = { name: 'node-a', ip: '10.10.0.1', podCIDR: '10.244.1.0/24' };
const ATTACKER = { name: 'attacker', ip: '192.0.2.100' };
const CLIENT_POD = { name: 'client', ip: '10.244.1.100', node: NODE.name, tcpPorts: [], udpPorts: [] };
const FLOOD_VIP = '10.96.0.80';
const FLOOD_EXTERNAL_IP = '192.0.2.80';
const STEADY_VIP = '10.96.0.90';
const STEADY_PORT = 7000;
const STEADY_BACKENDS = ['10.244.1.21', '10.244.1.22', '10.244.1.23'];
const HALF_VIP = '10.96.0.70';
const HALF_PORT = 9100;
const HALF_BACKEND = '10.244.1.31';
/** New flows per CPU per second: far above this test's own connections, far below the flood. */
const FLOW_LIMIT = 20;
/** Small, so that the flood cycles it many times a second without the limit. */
const CONNTRACK_ENTRIES = 1024;
const FLOOD_SECONDS = 3;
/** Floods the control may need before one evicts an established flow (see that test). */
const CONTROL_ROUNDS = 3;

function service(name: string, vip: string, port: number, targetPort: number, externalIPs: string[] = []) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: 'ct' },
    spec: {
      clusterIP: vip,
      clusterIPs: [vip],
      ...(externalIPs.length ? { externalIPs } : {}),
      ports: [{ name: 'tcp', protocol: 'TCP', port, targetPort }],
    },
  };
}

function slice(name: string, port: number, addresses: string[]) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: `${name}-x1`, namespace: 'ct', labels: { 'kubernetes.io/service-name': name } },
    addressType: 'IPv4',
    ports: [{ name: 'tcp', protocol: 'TCP', port }],
    endpoints: addresses.map((ip) => ({
      addresses: [ip],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: NODE.name,
    })),
  };
}

const MANIFESTS = [
  {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: NODE.name, labels: { 'kubernetes.io/hostname': NODE.name } },
    spec: { podCIDR: NODE.podCIDR, podCIDRs: [NODE.podCIDR] },
    status: { addresses: [{ type: 'InternalIP', address: NODE.ip }] },
  },
  // The flood's target: the lab's HTTP backend, reachable from outside on an externalIP.
  service('flood-target', FLOOD_VIP, 80, 8080, [FLOOD_EXTERNAL_IP]),
  slice('flood-target', 8080, ['10.244.1.10']),
  // The established connections' service: three backends, so a flow that loses its entry and is
  // balanced again lands elsewhere two times in three.
  service('steady', STEADY_VIP, STEADY_PORT, STEADY_PORT),
  slice('steady', STEADY_PORT, STEADY_BACKENDS),
  service('half-close', HALF_VIP, HALF_PORT, HALF_PORT),
  slice('half-close', HALF_PORT, [HALF_BACKEND]),
];

// Answers every line with the backend's name, on one long-lived connection.
const LINE_SERVER = `const name=process.argv[1];require('net').createServer((s)=>{s.setNoDelay(true);s.on('error',()=>{});let b='';s.on('data',(d)=>{b+=d;let i;while((i=b.indexOf('\\n'))>=0){b=b.slice(i+1);s.write(name+'\\n');}});}).listen(${STEADY_PORT},'0.0.0.0',()=>console.log('listening'));`;

// Holds FLOWS connections, each sending a line every INTERVAL ms (the flows staggered over it)
// until DURATION ms have passed; prints {flow, backend, at} per answer, {flow, error, at} when a
// flow breaks (reset, closed, or no answer within 5 s), and ends it.
const LINE_CLIENT = `const [host,port,flows,duration,interval]=process.argv.slice(1).map((v,i)=>i?Number(v):v);
const out=(o)=>console.log(JSON.stringify({...o,at:Date.now()}));const end=Date.now()+duration;
for(let f=0;f<flows;f++){const s=require('net').connect(port,host);s.setNoDelay(true);let done=false,timer,b='';
const fail=(error)=>{if(done)return;done=true;clearTimeout(timer);out({flow:f,error});s.destroy();};
const send=()=>{if(done)return;if(Date.now()>=end){done=true;s.end();return;}s.write('q\\n');timer=setTimeout(()=>fail('timeout'),5000);};
s.on('connect',()=>setTimeout(send,(f*interval)/flows));
s.on('data',(d)=>{b+=d;let i;while((i=b.indexOf('\\n'))>=0){out({flow:f,backend:b.slice(0,i)});b=b.slice(i+1);clearTimeout(timer);setTimeout(send,interval);}});
s.on('error',(e)=>fail(e.code||e.message));s.on('close',()=>fail('closed'));}`;

// Reads until the client's FIN, then answers DELAY ms later and closes: a half-closed stream.
const HALF_CLOSE_SERVER = `require('net').createServer({allowHalfOpen:true},(s)=>{s.on('error',()=>{});s.resume();s.on('end',()=>setTimeout(()=>s.end('late'),Number(process.argv[1])));}).listen(${HALF_PORT},'0.0.0.0',()=>console.log('listening'));`;

// MODE half: sends a byte and its FIN, then reads what comes. MODE reset: sends a byte, then an
// RST. Prints {event: connected, port}, then {event: closed, data} (or error), each with at.
const HALF_CLOSE_CLIENT = `const [host,port,mode]=process.argv.slice(1);const out=(o)=>console.log(JSON.stringify({...o,at:Date.now()}));
const s=require('net').connect({host,port:Number(port),allowHalfOpen:true},()=>{out({event:'connected',port:s.localPort});
if(mode==='reset'){s.write('x');setTimeout(()=>s.resetAndDestroy(),300);}else s.end('x');});
let r='';s.on('data',(d)=>{r+=d;});s.on('error',(e)=>out({event:'error',error:e.code}));s.on('close',()=>out({event:'closed',data:r}));
setTimeout(()=>process.exit(2),90000).unref();`;

// One GET from inside the namespace, the body on stdout.
const FETCH = `fetch(process.argv[1]).then(async(r)=>process.stdout.write(await r.text()),(e)=>{console.error(String(e));process.exit(1);})`;

interface Event {
  flow?: number;
  backend?: string;
  error?: string;
  event?: string;
  port?: number;
  data?: string;
  at: number;
}

/** The JSON lines a child prints, as they come. */
function events(child: ChildProcess): Event[] {
  const seen: Event[] = [];
  let partial = '';
  child.stdout?.on('data', (d: Buffer) => {
    const lines = (partial + d.toString()).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) if (line.trim() !== '') seen.push(JSON.parse(line) as Event);
  });
  return seen;
}

function waitForListening(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    child.stdout?.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`server exited (${code}) before listening`)));
  });
}

const sum = (e: Exposition, name: string, labels: Record<string, string>) =>
  samplesOf(e, name, labels).reduce((total, s) => total + s.value, 0);

describeRoot('bpf conntrack under a real agent: a SYN flood, a half-closed stream', () => {
  const lab = new Lab(PREFIX);
  const workDir = mkdtempSync(join(tmpdir(), 'kbp-ct-e2e-'));
  const manifests = join(workDir, 'manifests');
  const pinRoot = `/sys/fs/bpf/${PREFIX}`;
  const pinPath = `${pinRoot}/${NODE.name}`;
  let cluster: BuiltCluster;
  let agent: LabAgent | null = null;

  /** (Re)starts the node's agent with these bpf settings and waits for its first sync. */
  const startAgent = async (newFlowsPerSecondPerCpu: number) => {
    await agent?.stop();
    const config = join(workDir, 'config.yaml');
    writeFileSync(
      config,
      stringify({
        apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
        kind: 'KubeProxyConfiguration',
        mode: 'bpf',
        clusterCIDR: '10.244.0.0/16',
        iptables: { minSyncPeriod: '0s' },
        bpf: {
          pinPath,
          cgroupPath: await lab.ownCgroup(),
          mapSizes: { conntrack: CONNTRACK_ENTRIES },
          conntrackGCIntervalSeconds: 1,
          newFlowsPerSecondPerCpu,
        },
      }),
    );
    agent = LabAgent.start(lab, cluster.nodeNs(NODE.name), mainScript, [
      '--config',
      config,
      '--manifests',
      manifests,
      '--hostname-override',
      NODE.name,
    ]);
    await agent.waitForSync(1, 30_000);
  };

  const scrape = async (): Promise<Exposition> => {
    const { stdout } = await lab.exec(cluster.nodeNs(NODE.name), process.execPath, [
      '-e',
      FETCH,
      'http://127.0.0.1:10249/metrics',
    ]);
    return parseExposition(stdout);
  };

  beforeAll(async () => {
    await deleteStaleNamespaces(PREFIX);
    rmSync(pinRoot, { recursive: true, force: true });
    // Before any process starts: the lab's processes start in it, the agent's socket hooks go there.
    await lab.ownCgroup();
    mkdirSync(manifests);
    writeFileSync(join(manifests, 'ct.yaml'), MANIFESTS.map((m) => stringify(m)).join('---\n'));
    const tracker = new ChangeTracker('');
    tracker.apply(readManifests([manifests]).events);
    const spec = clusterSpecFromState(tracker.state(), [NODE], [ATTACKER], [`${FLOOD_EXTERNAL_IP}/32`]);
    // The steady and half-close backends are this test's own servers, not the lab's HTTP one.
    for (const pod of spec.pods) pod.tcpPorts = pod.tcpPorts.filter((p) => p === 8080);
    spec.pods.push(CLIENT_POD);
    // buildCluster shapes the node as distributions ship it: strict rp_filter, INVALID dropped.
    cluster = await buildCluster(lab, spec);
    for (const ip of STEADY_BACKENDS) {
      await waitForListening(
        lab.spawn(cluster.podNs(`pod-${ip}`), process.execPath, ['-e', LINE_SERVER, ip]),
      );
    }
    await waitForListening(
      lab.spawn(cluster.podNs(`pod-${HALF_BACKEND}`), process.execPath, ['-e', HALF_CLOSE_SERVER, '31000']),
    );
    await startAgent(FLOW_LIMIT);
  });

  afterAll(async () => {
    await agent?.stop();
    await lab.destroy();
    rmSync(pinRoot, { recursive: true, force: true });
    rmSync(workDir, { recursive: true, force: true });
  });

  it('a half-closed TCP stream idle for 30 s under conntrack GC still completes; a reset one is collected meanwhile', async () => {
    const gcRuns = async () => sampleValue(await scrape(), 'kube_bpf_proxy_conntrack_gc_runs_total');
    const runsBefore = await gcRuns();
    const client = cluster.podNs(CLIENT_POD.name);
    const half = events(
      lab.spawn(client, process.execPath, ['-e', HALF_CLOSE_CLIENT, HALF_VIP, String(HALF_PORT), 'half']),
    );
    const reset = events(
      lab.spawn(client, process.execPath, ['-e', HALF_CLOSE_CLIENT, HALF_VIP, String(HALF_PORT), 'reset']),
    );
    await until('both clients connected', () => half.length > 0 && reset.length > 0, 10_000);
    const [halfOpened, resetOpened] = [half[0]!, reset[0]!];
    expect(halfOpened.event).toBe('connected');
    expect(resetOpened.event).toBe('connected');
    const entriesOf = (port: number) => {
      const maps = openPinnedMaps(pinPath);
      try {
        return readConntrack(maps.fd.ct4Tcp).filter((r) => {
          const key = ct4Key.decode(Buffer.from(r.key, 'latin1'));
          return key.sport === port || key.dport === port;
        });
      } finally {
        maps.close();
      }
    };
    // The reset flow: closing, so GC removes it once idle past the closing timeout.
    await until('the reset flow collected', () => entriesOf(resetOpened.port!).length === 0, 20_000);
    // By then the half-closed flow has idled past that timeout too, FIN seen one way only.
    await until(
      'the half-closed flow idle past the closing timeout',
      () => Date.now() - halfOpened.at > (DEFAULT_CONNTRACK_TIMEOUTS.tcpClosingSeconds + 2) * 1000,
      20_000,
    );
    const halfEntries = entriesOf(halfOpened.port!);
    expect(halfEntries).toHaveLength(2);
    expect(halfEntries.filter((r) => !r.reply && r.tcpFlags & TCP_FLAG.FIN)).toHaveLength(1);
    expect(halfEntries.filter((r) => r.reply && r.tcpFlags & TCP_FLAG.FIN)).toHaveLength(0);
    // The server's answer comes 31 s after the client's FIN, and reaches it.
    await until(
      'the half-closed stream completed',
      () => half.some((e) => e.event === 'closed' || e.event === 'error'),
      45_000,
    );
    const closed = half.find((e) => e.event === 'closed');
    expect(half.filter((e) => e.event === 'error')).toEqual([]);
    expect(closed?.data).toBe('late');
    expect(closed!.at - halfOpened.at).toBeGreaterThanOrEqual(30_000);
    // GC ran all along (every second), not once before or after.
    expect((await gcRuns()) - runsBefore).toBeGreaterThanOrEqual(25);
  }, 90_000);

  /**
   * Eight flows from a pod to the steady service exchanging a line a second for 10 s, and a SYN
   * flood from outside against the flood target from 2.5 s on for 3 s. Returns the flows' events,
   * what the flood sent, and the metric deltas.
   */
  const floodAgainstEstablished = async () => {
    const before = await scrape();
    const started = Date.now();
    const flows = events(
      lab.spawn(cluster.podNs(CLIENT_POD.name), process.execPath, [
        '-e',
        LINE_CLIENT,
        STEADY_VIP,
        String(STEADY_PORT),
        '8',
        '10000',
        '1000',
      ]),
    );
    await new Promise((resolve) => setTimeout(resolve, 2500));
    const floodStarted = Date.now();
    const flood = await lab.synFlood(cluster.clientNs(ATTACKER.name), `${FLOOD_EXTERNAL_IP}:80`, {
      count: 1_000_000,
      seconds: FLOOD_SECONDS,
    });
    const floodEnded = Date.now();
    await until('the flows ended', () => Date.now() - started > 11_000, 15_000);
    const after = await scrape();
    const delta = (name: string, labels: Record<string, string>) =>
      sum(after, name, labels) - sum(before, name, labels);
    return {
      flows,
      flood,
      floodStarted,
      floodEnded,
      refused: delta('kube_bpf_proxy_drops_total', { reason: 'new_flow_rate' }),
      floodFlows: delta('kube_bpf_proxy_service_new_connections_total', { service: 'flood-target' }),
      steadyFlows: delta('kube_bpf_proxy_service_new_connections_total', { service: 'steady' }),
    };
  };

  const byFlow = (flows: Event[]) => {
    const out = new Map<number, Event[]>();
    for (const e of flows) out.set(e.flow!, [...(out.get(e.flow!) ?? []), e]);
    return out;
  };

  it('a SYN flood against one Service leaves established flows to another intact: same backend, none broken, the refusals counted', async () => {
    const run = await floodAgainstEstablished();
    console.log(
      `SYN flood with the limit (${FLOW_LIMIT}/s per CPU): ${run.flood.sent} SYNs in ${run.flood.seconds.toFixed(1)} s, ${run.refused} refused, ${run.floodFlows} flows created`,
    );
    const flows = byFlow(run.flows);
    expect(flows.size).toBe(8);
    for (const [flow, seen] of flows) {
      expect(
        seen.filter((e) => e.error),
        `flow ${flow}`,
      ).toEqual([]);
      expect(new Set(seen.map((e) => e.backend)).size, `flow ${flow} kept its backend`).toBe(1);
      // It exchanged lines before, during and after the flood.
      expect(seen.some((e) => e.at < run.floodStarted)).toBe(true);
      expect(seen.some((e) => e.at > run.floodStarted + 1000 && e.at < run.floodEnded)).toBe(true);
      expect(seen.some((e) => e.at > run.floodEnded + 1000)).toBe(true);
    }
    // The eight flows were never created again (an evicted entry would have been).
    expect(run.steadyFlows).toBe(8);
    // Every SYN either made a flow (at most the limit per CPU per second) or was refused and counted.
    expect(run.floodFlows).toBeLessThanOrEqual(FLOW_LIMIT * cpus().length * (FLOOD_SECONDS + 1));
    expect(run.refused + run.floodFlows).toBe(run.flood.sent);
    // Once the flood is over, the flood target serves new clients again.
    const [late] = await lab.requests(cluster.podNs(CLIENT_POD.name), `${FLOOD_VIP}:80`, {
      proto: 'tcp',
      count: 1,
      timeoutMs: 3000,
    });
    expect(late?.error).toBeNull();
  }, 60_000);

  it('the control: the same flood without the limit evicts the established flows, which break or move', async () => {
    await startAgent(0);
    // Whether the LRU evicts a flow that exchanges a line a second depends on how fast the flood
    // turns the table over, which a loaded machine slows; an evicted flow re-created on its old
    // backend goes on unharmed. So up to three floods, until one breaks or moves a flow.
    const rounds: { refused: number; recreated: number; broken: number; moved: number }[] = [];
    while (rounds.length < CONTROL_ROUNDS && !rounds.some((r) => r.broken + r.moved > 0)) {
      const run = await floodAgainstEstablished();
      const flows = byFlow(run.flows);
      const round = {
        refused: run.refused,
        recreated: run.steadyFlows - 8,
        broken: [...flows.values()].filter((seen) => seen.some((e) => e.error)).length,
        moved: [...flows.values()].filter((seen) => new Set(seen.flatMap((e) => e.backend ?? [])).size > 1)
          .length,
      };
      rounds.push(round);
      console.log(
        `SYN flood without the limit, round ${rounds.length}: ${run.flood.sent} SYNs in ${run.flood.seconds.toFixed(1)} s, ${run.floodFlows} flows created; of 8 established flows ${round.broken} broken, ${round.moved} moved to another backend, ${round.recreated} re-created after eviction`,
      );
      expect(run.flood.sent).toBeGreaterThan(CONNTRACK_ENTRIES);
    }
    expect(rounds.map((r) => r.refused)).toEqual(rounds.map(() => 0));
    const harmed = rounds.find((r) => r.broken + r.moved > 0);
    expect(harmed, 'a round in which the flood broke or moved an established flow').toBeDefined();
  }, 150_000);
});
