// The decisions of issue 30's live migration (src/dataplanes/bpf/conntrack-takeover.ts): which
// netfilter flows the agent leaves to the kernel, as which BPF conntrack pairs, and which flows of
// the programs `cleanup` writes back to netfilter, as which conntrack commands. The e2e test
// (test/e2e/migration.test.ts) runs them against the real kube-proxy.

import { describe, expect, it } from 'vitest';
import { ctRecord } from '../../src/dataplanes/bpf/conntrack-gc.js';
import { takeOverNetfilterFlows } from '../../src/dataplanes/bpf/conntrack-handoff.js';
import {
  type BpfCtEntry,
  HANDBACK_TIMEOUT_SECONDS,
  handbackDeletes,
  handbackInsertLine,
  handbacks,
  missingHandbacks,
  type NetfilterFlow,
  type PlanFrontends,
  parseNetfilterFlows,
  stackEntries,
} from '../../src/dataplanes/bpf/conntrack-takeover.js';
import { CT_F, ct4Key, ct4Val, TCP_FLAG } from '../../src/dataplanes/bpf/layout.js';
import { silentLogger } from '../../src/logger.js';

const LIST = `tcp      6 431999 ESTABLISHED src=10.244.1.2 dst=10.96.1.3 sport=40000 dport=80 src=10.244.2.3 dst=10.244.1.2 sport=7000 dport=40000 [ASSURED] mark=0 use=1
tcp      6 119 TIME_WAIT src=10.244.1.2 dst=10.96.1.3 sport=40001 dport=80 src=10.244.2.3 dst=10.244.1.2 sport=7000 dport=40001 [ASSURED] mark=0 use=1
udp      17 29 src=192.0.2.100 dst=10.10.0.1 sport=5000 dport=30053 [UNREPLIED] src=10.244.2.3 dst=10.244.1.0 sport=5353 dport=24787 mark=0 use=1
tcp      6 431999 ESTABLISHED src=10.244.1.2 dst=10.244.2.9 sport=40002 dport=7000 src=10.244.2.9 dst=10.244.1.2 sport=7000 dport=40002 [ASSURED] mark=0 use=1
tcp      6 431999 ESTABLISHED src=10.244.1.2 dst=10.96.9.9 sport=40003 dport=80 src=10.244.2.3 dst=10.244.1.2 sport=7000 dport=40003 [ASSURED] mark=0 use=1
sctp     132 10 CLOSED src=10.244.1.2 dst=10.96.1.3 sport=1 dport=2 src=10.244.2.3 dst=10.244.1.2 sport=2 dport=1 mark=0 use=1
conntrack v1.4.7 (conntrack-tools): 6 flow entries have been shown.
`;

const backend = (id: number, address: string, port: number) => ({
  id,
  family: 'IPv4' as const,
  address,
  port,
});

const PLAN: PlanFrontends = {
  frontends: [
    {
      key: { family: 'IPv4', address: '10.96.1.3', port: 80, protocol: 'TCP', scope: 'all' },
      serviceId: 7,
      action: 'forward',
    },
    {
      key: { family: 'IPv4', address: '0.0.0.0', port: 30053, protocol: 'UDP', scope: 'all' },
      serviceId: 8,
      action: 'forward',
    },
  ],
  backends: [backend(3, '10.244.2.3', 7000), backend(4, '10.244.2.3', 5353)],
};

describe('parseNetfilterFlows', () => {
  it("reads each TCP and UDP entry's tuples and TCP state, and nothing else", () => {
    const flows = parseNetfilterFlows(LIST);
    expect(flows.map((f) => `${f.protocol} ${f.state} ${f.orig.sport}`)).toEqual([
      'tcp ESTABLISHED 40000',
      'tcp TIME_WAIT 40001',
      'udp null 5000',
      'tcp ESTABLISHED 40002',
      'tcp ESTABLISHED 40003',
    ]);
    expect(flows[2]).toEqual({
      protocol: 'udp',
      state: null,
      orig: { src: '192.0.2.100', dst: '10.10.0.1', sport: 5000, dport: 30053 },
      reply: { src: '10.244.2.3', dst: '10.244.1.0', sport: 5353, dport: 24787 },
    });
  });

  it('reads IPv6 entries with their addresses canonical', () => {
    const [flow] = parseNetfilterFlows(
      'tcp 6 300 ESTABLISHED src=fd00:244:0:1:0:0:0:2 dst=fd00:10:96::1:3 sport=1 dport=80 src=fd00:244:0:2::3 dst=fd00:244:0:1::2 sport=7000 dport=1 [ASSURED] mark=0 use=1',
    );
    expect(flow?.orig.src).toBe('fd00:244:0:1::2');
    expect(flow?.reply.src).toBe('fd00:244:0:2::3');
  });
});

describe('takeOverNetfilterFlows', () => {
  it("lists both families' netfilter flows at once, and reports a family whose listing failed", async () => {
    const listing: string[] = [];
    let inFlight = 0;
    let most = 0;
    const exec = async (cmd: string, args: string[]) => {
      listing.push(`${cmd} ${args.join(' ')}`);
      most = Math.max(most, ++inFlight);
      await new Promise((resolve) => setTimeout(resolve, 20));
      inFlight--;
      const failed = args.includes('ipv6');
      return { stdout: '', stderr: failed ? 'no nf_conntrack_ipv6' : '', code: failed ? 1 : 0 };
    };
    const fds = { ct4Tcp: -1, ct4Any: -1, ct6Tcp: -1, ct6Any: -1 };
    const report = await takeOverNetfilterFlows(PLAN, ['IPv4', 'IPv6'], fds, silentLogger, exec);
    expect(listing).toEqual(['conntrack -L -f ipv4 --dst-nat', 'conntrack -L -f ipv6 --dst-nat']);
    expect(most).toBe(2);
    expect(report).toEqual({
      flows: 0,
      errors: ['conntrack -L -f ipv6 --dst-nat (1): no nf_conntrack_ipv6'],
    });
  });
});

describe('stackEntries (kube-proxy → bpf)', () => {
  const entries = stackEntries(parseNetfilterFlows(LIST), PLAN, 'IPv4', 1234n);

  it('takes the open flows kube-proxy translated to a frontend of the plan, and no other', () => {
    // Left out: TIME_WAIT (over), the flow without NAT, the one to an address the plan does not serve, SCTP.
    expect(entries.map((e) => `${e.key.saddr}:${e.key.sport}>${e.key.daddr}:${e.key.dport}`)).toEqual([
      '10.244.1.2:40000>10.96.1.3:80',
      '10.244.2.3:7000>10.244.1.2:40000',
      '192.0.2.100:5000>10.10.0.1:30053',
      '10.244.2.3:5353>10.244.1.0:24787',
    ]);
  });

  it('writes each as the pair the programs would have: forward and reply, flagged for the stack', () => {
    const [forward, reply] = entries;
    expect(forward?.value).toEqual({
      lastSeenNs: 1234n,
      xlateSaddr: '10.244.1.2',
      xlateDaddr: '10.244.2.3',
      xlateSport: 40000,
      xlateDport: 7000,
      svcId: 7,
      backendId: 3,
      flags: CT_F.STACK,
      tcpFlags: TCP_FLAG.ACK,
    });
    expect(reply?.value).toMatchObject({
      xlateSaddr: '10.96.1.3',
      xlateDaddr: '10.244.1.2',
      xlateSport: 80,
      xlateDport: 40000,
      flags: CT_F.STACK | CT_F.REPLY,
    });
    // A NodePort on every node address, its source masqueraded by kube-proxy: UDP, no TCP flags.
    expect(entries[2]?.value).toMatchObject({
      svcId: 8,
      backendId: 4,
      xlateSaddr: '10.244.1.0',
      xlateSport: 24787,
      tcpFlags: 0,
    });
  });

  it("pairs as conntrack GC pairs the programs' entries: each key is the other's translated tuple reversed", () => {
    const records = entries.map((e) =>
      ctRecord(ct4Key.encode({ ...e.key }), 0, ct4Val.encode({ ...e.value }), 0),
    );
    for (let i = 0; i < records.length; i += 2) {
      expect(records[i]?.pairKey).toBe(records[i + 1]?.key);
      expect(records[i + 1]?.pairKey).toBe(records[i]?.key);
    }
  });

  it('names no backend (0) when kube-proxy chose one the plan no longer has', () => {
    const gone = stackEntries(parseNetfilterFlows(LIST), { ...PLAN, backends: [] }, 'IPv4', 0n);
    expect(gone.map((e) => e.value.backendId)).toEqual([0, 0, 0, 0]);
  });

  it('leaves out frontends that do not forward, and other families', () => {
    const rejecting = {
      ...PLAN,
      frontends: PLAN.frontends.map((f) => ({ ...f, action: 'reject' as const })),
    };
    expect(stackEntries(parseNetfilterFlows(LIST), rejecting, 'IPv4', 0n)).toEqual([]);
    expect(stackEntries(parseNetfilterFlows(LIST), PLAN, 'IPv6', 0n)).toEqual([]);
  });
});

/** A flow of the programs: client 10.244.1.2:40000 → 10.96.1.3:80, translated to 10.244.2.3:7000. */
function programFlow(
  over: { forward?: Partial<BpfCtEntry['value']>; reply?: Partial<BpfCtEntry['value']>; snat?: boolean } = {},
): BpfCtEntry[] {
  const src = over.snat ? { addr: '10.244.1.0', port: 61001 } : { addr: '10.244.1.2', port: 40000 };
  const common = { lastSeenNs: 1n, svcId: 7, backendId: 3, tcpFlags: TCP_FLAG.ACK };
  return [
    {
      key: { saddr: '10.244.1.2', daddr: '10.96.1.3', sport: 40000, dport: 80, proto: 6 },
      value: {
        ...common,
        xlateSaddr: src.addr,
        xlateDaddr: '10.244.2.3',
        xlateSport: src.port,
        xlateDport: 7000,
        flags: over.snat ? CT_F.SNAT | CT_F.ROUTE : 0,
        ...over.forward,
      },
    },
    {
      key: { saddr: '10.244.2.3', daddr: src.addr, sport: 7000, dport: src.port, proto: 6 },
      value: {
        ...common,
        xlateSaddr: '10.96.1.3',
        xlateDaddr: '10.244.1.2',
        xlateSport: 80,
        xlateDport: 40000,
        flags: CT_F.REPLY,
        ...over.reply,
      },
    },
  ];
}

describe('handbacks (bpf → kube-proxy)', () => {
  it('hands back each open forward flow of the programs with where they send it', () => {
    expect(handbacks(programFlow())).toEqual([
      {
        protocol: 'tcp',
        orig: { src: '10.244.1.2', dst: '10.96.1.3', sport: 40000, dport: 80 },
        translated: { src: '10.244.1.2', dst: '10.244.2.3', sport: 40000, dport: 7000 },
        forwardKey: { saddr: '10.244.1.2', daddr: '10.96.1.3', sport: 40000, dport: 80, proto: 6 },
      },
    ]);
  });

  it("leaves out the stack's flows, closed TCP flows and reply entries; keeps half-closed ones", () => {
    expect(handbacks(programFlow({ forward: { flags: CT_F.STACK } }))).toEqual([]);
    expect(handbacks(programFlow({ reply: { tcpFlags: TCP_FLAG.ACK | TCP_FLAG.RST } }))).toEqual([]);
    const fin = TCP_FLAG.ACK | TCP_FLAG.FIN;
    expect(handbacks(programFlow({ forward: { tcpFlags: fin }, reply: { tcpFlags: fin } }))).toEqual([]);
    expect(handbacks(programFlow({ forward: { tcpFlags: fin } }))).toHaveLength(1);
    expect(handbacks(programFlow().slice(1))).toEqual([]);
  });

  it('deletes the entries that would clash, by exact tuple, and inserts the flow with its NAT', () => {
    const [pod] = handbacks(programFlow());
    expect(handbackDeletes(pod!)).toEqual([
      { protocol: 'tcp', src: '10.244.1.2', dst: '10.244.2.3', sport: 40000, dport: 7000 },
      { protocol: 'tcp', src: '10.244.2.3', dst: '10.244.1.2', sport: 7000, dport: 40000 },
      { protocol: 'tcp', src: '10.244.1.2', dst: '10.96.1.3', sport: 40000, dport: 80 },
    ]);
    expect(handbackInsertLine(pod!)).toBe(
      `-I -p tcp -s 10.244.1.2 -d 10.96.1.3 --sport 40000 --dport 80 --dst-nat 10.244.2.3:7000 --state ESTABLISHED --status SEEN_REPLY,ASSURED --timeout ${HANDBACK_TIMEOUT_SECONDS.tcp}`,
    );
    const [routed] = handbacks(programFlow({ snat: true }));
    expect(handbackInsertLine(routed!)).toContain('--dst-nat 10.244.2.3:7000 --src-nat 10.244.1.0:61001 ');
    const udp = { ...routed!, protocol: 'udp' as const };
    expect(handbackInsertLine(udp)).toMatch(
      /--src-nat 10\.244\.1\.0:61001 --status SEEN_REPLY,ASSURED --timeout 120$/,
    );
  });

  it('brackets IPv6 addresses in the NAT targets', () => {
    const h = {
      protocol: 'tcp' as const,
      orig: { src: 'fd00::2', dst: 'fd00:10:96::1:3', sport: 1, dport: 80 },
      translated: { src: 'fd00::2', dst: 'fd00::3', sport: 1, dport: 7000 },
      forwardKey: { saddr: 'fd00::2', daddr: 'fd00:10:96::1:3', sport: 1, dport: 80, proto: 6 },
    };
    expect(handbackInsertLine(h)).toContain('--dst-nat [fd00::3]:7000 ');
  });

  it('finds the flows netfilter does not carry as asked, and the takeover would leave them to netfilter', () => {
    const hs = handbacks([
      ...programFlow(),
      ...programFlow({ snat: true }).map((e, i) => (i === 0 ? { ...e, key: { ...e.key, sport: 40009 } } : e)),
    ]);
    // What `conntrack -L` would show once the first went in as asked.
    const carried: NetfilterFlow = {
      protocol: 'tcp',
      state: 'ESTABLISHED',
      orig: hs[0]!.orig,
      reply: { src: '10.244.2.3', dst: '10.244.1.2', sport: 7000, dport: 40000 },
    };
    expect(missingHandbacks(hs, [carried])).toEqual([hs[1]]);
    // Read back by the next agent's takeover, it is one of the stack's flows again.
    const plan = { ...PLAN, frontends: PLAN.frontends.slice(0, 1) };
    expect(stackEntries([carried], plan, 'IPv4', 0n)[0]?.key).toEqual(hs[0]!.forwardKey);
  });
});
