// Issue 30's flows that the kernel's conntrack translates, in bpf/lb.o (BPF_PROG_TEST_RUN): a pair
// written by stackEntries() (src/dataplanes/bpf/conntrack-takeover.ts) for a flow kube-proxy opened
// passes both ways untouched, whatever the plan's backends; a new SYN on its tuple is a flow of
// ours; a flow being handed to netfilter (KBP_CT_F_HOLD) has its forward packets dropped, counted.

import { beforeAll, describe, expect, it } from 'vitest';
import { mapLookup, mapUpdate } from '../../native/libbpf/map.js';
import { stackEntries } from '../../src/dataplanes/bpf/conntrack-takeover.js';
import {
  BE_F,
  CT_F,
  ct4Key,
  ct4Val,
  ct6Key,
  ct6Val,
  DROP_REASON,
  PROGRAMS,
} from '../../src/dataplanes/bpf/layout.js';
import { Lab } from '../../src/lab/netns.js';
import { buildPacket, IPPROTO_TCP, parsePacket, replyTo, TCP } from '../../src/net/packets.js';
import { FAMILY_CASES } from '../support/families.js';
import {
  dropCount,
  type LoadedLb,
  lbInRoutingNamespace,
  run,
  TC_ACT_SHOT,
  TC_ACT_UNSPEC,
  writeFrontend,
} from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

const { tcFromPod: TC_POD, tcEgress: TC_EGRESS } = PROGRAMS;

describeRoot('bpf/lb.o with flows the kernel conntrack translates (BPF_PROG_TEST_RUN)', () => {
  let lb: LoadedLb;
  lbInRoutingNamespace(new Lab(`kbpsf${process.pid}`), (loaded) => {
    lb = loaded;
  });
  let nextSport = 30000;

  describe.each(FAMILY_CASES)('$family', ({ A, v4, family }) => {
    const CLIENT = A('10.244.1.10');
    const VIP = A('10.96.0.70');
    /** kube-proxy's choice, which the plan does not have. */
    const KUBE_PROXY_BACKEND = A('10.244.2.9');
    const PLAN_BACKEND = A('10.244.2.5');
    const ctTcp = () => (v4 ? lb.fd.ct4Tcp : lb.fd.ct6Tcp);
    const codecs = v4 ? { key: ct4Key, value: ct4Val } : { key: ct6Key, value: ct6Val };

    beforeAll(() => {
      writeFrontend(lb, {
        svcId: 70,
        addr: VIP,
        port: 80,
        proto: IPPROTO_TCP,
        backends: [{ id: 70, addr: PLAN_BACKEND, port: 8080, flags: BE_F.LOCAL }],
      });
    });

    /** The flow kube-proxy opened, taken over as the agent's first sync does; returns its client port. */
    function takeOver(): number {
      const src = nextSport++;
      const plan = {
        frontends: [
          {
            key: { family, address: VIP, port: 80, protocol: 'TCP' as const, scope: 'all' as const },
            serviceId: 70,
            action: 'forward' as const,
          },
        ],
        backends: [],
      } as unknown as Parameters<typeof stackEntries>[1];
      const flow = {
        protocol: 'tcp' as const,
        state: 'ESTABLISHED',
        orig: { src: CLIENT, dst: VIP, sport: src, dport: 80 },
        reply: { src: KUBE_PROXY_BACKEND, dst: CLIENT, sport: 8080, dport: src },
      };
      for (const e of stackEntries([flow], plan, family, process.hrtime.bigint()))
        mapUpdate(ctTcp(), codecs.key.encode(e.key), codecs.value.encode(e.value));
      return src;
    }

    const packet = (src: number, flags: number) =>
      buildPacket({ saddr: CLIENT, daddr: VIP, proto: IPPROTO_TCP, sport: src, dport: 80, tcpFlags: flags });

    it("passes both directions untouched, to kube-proxy's backend", () => {
      const src = takeOver();
      const data = packet(src, TCP.ACK);
      const out = run(lb, TC_POD, data);
      expect(out.retval).toBe(TC_ACT_UNSPEC);
      expect(out.dataOut).toEqual(data);
      // netfilter sent it to kube-proxy's backend; its answer passes as netfilter translated it.
      const answer = buildPacket({
        saddr: KUBE_PROXY_BACKEND,
        daddr: CLIENT,
        proto: IPPROTO_TCP,
        sport: 8080,
        dport: src,
        tcpFlags: TCP.ACK,
      });
      for (const program of [TC_POD, TC_EGRESS]) {
        const back = run(lb, program, answer);
        expect(back.retval).toBe(TC_ACT_UNSPEC);
        expect(back.dataOut).toEqual(answer);
      }
    });

    it('a new SYN on its tuple is a flow of ours, to the plan’s backend both ways', () => {
      const src = takeOver();
      const out = run(lb, TC_POD, packet(src, TCP.SYN));
      expect(parsePacket(out.dataOut)).toMatchObject({ daddr: PLAN_BACKEND, dport: 8080, sport: src });
      const back = parsePacket(run(lb, TC_EGRESS, replyTo(out.dataOut)).dataOut);
      expect(back).toMatchObject({ saddr: VIP, sport: 80, daddr: CLIENT, dport: src });
    });

    it('holds (drops and counts) the forward packets of a flow being handed to netfilter', () => {
      const src = takeOver();
      const key = codecs.key.encode({ saddr: CLIENT, daddr: VIP, sport: src, dport: 80, proto: IPPROTO_TCP });
      const value = Buffer.alloc(codecs.value.size);
      mapLookup(ctTcp(), key, value);
      const entry = codecs.value.decode(value);
      mapUpdate(ctTcp(), key, codecs.value.encode({ ...entry, flags: CT_F.HOLD }));
      const before = dropCount(lb, DROP_REASON.handoff);
      expect(run(lb, TC_POD, packet(src, TCP.ACK)).retval).toBe(TC_ACT_SHOT);
      expect(dropCount(lb, DROP_REASON.handoff) - before).toBe(1n);
    });
  });
});
