// BPF host routing (bpf.hostRouting; bpf/host_route.h) with BPF_PROG_TEST_RUN: each value of the
// setting resolved as the agent resolves it (hostRoutingDecision) and loaded as the agent loads
// it (.rodata kbp_host_routing, the pods' devices in kbp_hostif_v1). The redirect's target is the
// FIB's egress device, which the test run does not carry out: the frame's MACs are that device's
// (source) and its neighbour's (destination), the TTL is one less, as the redirect sends it.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mapDelete, mapUpdate } from '../../native/libbpf/map.js';
import { ifNameToIndex } from '../../native/libc.js';
import type { BpfConfig } from '../../src/config/types.js';
import { hostRoutingDecision } from '../../src/dataplanes/bpf/host-route.js';
import { BE_F, HOST_IF, PROGRAMS, u32Codec } from '../../src/dataplanes/bpf/layout.js';
import { Lab } from '../../src/lab/netns.js';
import {
  buildPacket,
  ETH_HLEN,
  IPPROTO_TCP,
  IPV6_EXT,
  onesSum,
  parsePacket,
  replyTo,
  TCP,
} from '../../src/net/packets.js';
import { FAMILY_CASES, type FamilyCase } from '../support/families.js';
import { buildRoutingNamespace, macOf, NEIGHBOURS } from '../support/fib-lab.js';
import { enterNetns } from '../support/in-netns.js';
import {
  type LoadedLb,
  loadLb,
  run,
  TC_ACT_REDIRECT,
  TC_ACT_UNSPEC,
  writeConfig,
  writeFrontend,
} from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

const { tcFromPod: TC_POD, tcFromExternal: TC_EXT, tcEgress: TC_EGRESS } = PROGRAMS;

/** Two pods behind r2 (the fib namespace's pod-facing device): the client, and a backend. */
const CLIENT_POD = NEIGHBOURS.pod;
const BACKEND_POD = { ip: '10.244.2.62', mac: '02:00:00:00:02:62' };
/** A backend on r2's network without a neighbour entry: bpf_redirect_neigh resolves it. */
const UNRESOLVED_POD = '10.244.2.63';
const VIP = '10.96.0.80';

/** Each value of bpf.hostRouting on a node with the helpers: auto twice, without and with a
 * NetworkPolicy engine's chains in netfilter. */
const SETTINGS: { setting: BpfConfig['hostRouting']; chains: string[]; bypass: boolean }[] = [
  { setting: 'bpf', chains: [], bypass: true },
  { setting: 'auto', chains: ['FORWARD', 'FLANNEL-FWD'], bypass: true },
  { setting: 'auto', chains: ['FORWARD', 'cali-FORWARD'], bypass: false },
  { setting: 'stack', chains: [], bypass: false },
];

let nextSport = 30000;

/** A new flow's SYN from the client pod to `daddr`:80, in the family of `A`, from a fresh port. */
function synFromClient(A: FamilyCase['A'], daddr: string): Buffer {
  return buildPacket({
    saddr: A(CLIENT_POD.ip),
    daddr: A(daddr),
    proto: IPPROTO_TCP,
    sport: nextSport++,
    dport: 80,
    tcpFlags: TCP.SYN,
  });
}

describeRoot('bpf.hostRouting in bpf/lb.o (BPF_PROG_TEST_RUN)', () => {
  const lab = new Lab(`kbphr${process.pid}`);
  let leave: (() => void) | null = null;
  const loaded = new Map<boolean, LoadedLb>();
  let r2: number;
  let r2Mac: string;

  beforeAll(async () => {
    await buildRoutingNamespace(lab);
    for (const { A } of FAMILY_CASES) {
      await lab.exec('fib', 'ip', [
        'neigh',
        'add',
        A(BACKEND_POD.ip),
        'lladdr',
        BACKEND_POD.mac,
        'dev',
        'r2',
        'nud',
        'permanent',
      ]);
    }
    const { stdout } = await lab.exec('fib', 'ip', ['-j', 'link', 'show', 'r2']);
    r2Mac = (JSON.parse(stdout) as { address: string }[])[0]!.address;
    leave = enterNetns(lab.ns('fib'));
    r2 = ifNameToIndex('r2');
    // The two objects the agent can load: kbp_host_routing 1 and 0, each with r2 listed (as the
    // agent lists it only with 1, the listing alone must not bypass anything).
    for (const hostRouting of [true, false]) {
      const lb = loadLb({}, { coarseClock: true, sockSetRetval: false, hostRouting });
      writeConfig(lb);
      mapUpdate(lb.fd.hostIfs, u32Codec.encode(r2), u32Codec.encode(HOST_IF.peer));
      loaded.set(hostRouting, lb);
    }
  });
  afterAll(async () => {
    for (const lb of loaded.values()) lb.close();
    leave?.();
    await lab.destroy();
  });

  describe.each(
    SETTINGS.flatMap((s) =>
      FAMILY_CASES.map((f) => ({ ...s, ...f, name: `${s.setting}, ${s.chains.join(' ')}` })),
    ),
  )('$name ($family)', ({ setting, chains, bypass, A, family }) => {
    let lb: LoadedLb;
    beforeAll(() => {
      const decision = hostRoutingDecision(setting, { helpers: true, chains });
      expect(decision?.bpf).toBe(bypass);
      lb = loaded.get(decision!.bpf)!;
      // Service ids are per frontend, so per family, as the planner gives them: a slot holds its
      // backend's address (kbp_slot_v2), and one id in both families would share its slots.
      const ids = family === 'IPv4' ? 80 : 180;
      writeFrontend(lb, {
        svcId: ids,
        addr: A(VIP),
        port: 80,
        proto: IPPROTO_TCP,
        backends: [{ id: 80, addr: A(BACKEND_POD.ip), port: 8080, flags: BE_F.LOCAL }],
      });
      writeFrontend(lb, {
        svcId: ids + 1,
        addr: A('10.96.0.81'),
        port: 80,
        proto: IPPROTO_TCP,
        backends: [{ id: 81, addr: A(NEIGHBOURS.remoteBackend.ip), port: 8080 }],
      });
      writeFrontend(lb, {
        svcId: ids + 2,
        addr: A('10.96.0.82'),
        port: 80,
        proto: IPPROTO_TCP,
        backends: [{ id: 82, addr: A(UNRESOLVED_POD), port: 8080, flags: BE_F.LOCAL }],
      });
    });

    const syn = (daddr: string) => synFromClient(A, daddr);
    const ttlOf = (frame: Buffer) => frame[ETH_HLEN + (family === 'IPv4' ? 8 : 7)];

    it(
      bypass
        ? 'a flow between two local pods: both directions redirected to the pod, the reply translated at ingress'
        : 'a flow between two local pods: both directions left to the stack, the reply translated at egress',
      () => {
        const out = run(lb, TC_POD, syn(VIP));
        const p = parsePacket(out.dataOut);
        expect(p).toMatchObject({ saddr: A(CLIENT_POD.ip), daddr: A(BACKEND_POD.ip), dport: 8080 });
        expect(p.l4ChecksumOk).toBe(true);
        const reply = replyTo(out.dataOut);
        const back = run(lb, TC_POD, reply);
        if (bypass) {
          expect(out.retval).toBe(TC_ACT_REDIRECT);
          expect([macOf(out.dataOut, 0), macOf(out.dataOut, 6)]).toEqual([BACKEND_POD.mac, r2Mac]);
          expect(ttlOf(out.dataOut)).toBe(63);
          expect(back.retval).toBe(TC_ACT_REDIRECT);
          const r = parsePacket(back.dataOut);
          expect(r).toMatchObject({ saddr: A(VIP), sport: 80, daddr: A(CLIENT_POD.ip), dport: p.sport });
          expect(r.l4ChecksumOk).toBe(true);
          expect([macOf(back.dataOut, 0), macOf(back.dataOut, 6)]).toEqual([CLIENT_POD.mac, r2Mac]);
          // Already translated: the client's device's egress program leaves it alone.
          const egress = run(lb, TC_EGRESS, back.dataOut);
          expect(egress.retval).toBe(TC_ACT_UNSPEC);
          expect(egress.dataOut).toEqual(back.dataOut);
        } else {
          expect(out.retval).toBe(TC_ACT_UNSPEC);
          expect(ttlOf(out.dataOut)).toBe(64);
          expect(back.retval).toBe(TC_ACT_UNSPEC);
          expect(back.dataOut).toEqual(reply);
          const egress = run(lb, TC_EGRESS, reply);
          expect(parsePacket(egress.dataOut)).toMatchObject({
            saddr: A(VIP),
            sport: 80,
            daddr: A(CLIENT_POD.ip),
          });
        }
      },
    );

    it('a local pod without a neighbour entry yet: the kernel resolves it (bpf_redirect_neigh)', () => {
      const out = run(lb, TC_POD, syn('10.96.0.82'));
      expect(parsePacket(out.dataOut)).toMatchObject({ daddr: A(UNRESOLVED_POD), dport: 8080 });
      expect(out.retval).toBe(bypass ? TC_ACT_REDIRECT : TC_ACT_UNSPEC);
    });

    it('a backend on another node keeps the stack`s path both ways', () => {
      const out = run(lb, TC_POD, syn('10.96.0.81'));
      expect(out.retval).toBe(TC_ACT_UNSPEC);
      expect(parsePacket(out.dataOut)).toMatchObject({ daddr: A(NEIGHBOURS.remoteBackend.ip) });
      const reply = replyTo(out.dataOut);
      const back = run(lb, TC_EXT, reply);
      expect(back.retval).toBe(TC_ACT_UNSPEC);
      expect(back.dataOut).toEqual(reply);
    });

    it('a first fragment keeps the stack`s path (the stack reassembles the datagram)', () => {
      const spec = {
        saddr: A(CLIENT_POD.ip),
        daddr: A(VIP),
        proto: IPPROTO_TCP,
        sport: nextSport++,
        dport: 80,
      } as const;
      let frame: Buffer;
      if (family === 'IPv4') {
        frame = buildPacket(spec);
        // More fragments, offset 0; the header checksum again.
        frame.writeUInt16BE(0x2000, ETH_HLEN + 6);
        frame.writeUInt16BE(0, ETH_HLEN + 10);
        frame.writeUInt16BE(~onesSum(frame.subarray(ETH_HLEN, ETH_HLEN + 20)) & 0xffff, ETH_HLEN + 10);
      } else {
        frame = buildPacket({ ...spec, extHeaders: [IPV6_EXT.FRAGMENT] });
      }
      const out = run(lb, TC_POD, frame);
      expect(out.retval).toBe(TC_ACT_UNSPEC);
      expect(parsePacket(out.dataOut)).toMatchObject({ daddr: A(BACKEND_POD.ip), dport: 8080 });
    });
  });

  it('a bridge of pod veths: the same redirect, out of the bridge (bpf_redirect)', () => {
    const lb = loaded.get(true)!;
    const { A } = FAMILY_CASES[0]!;
    mapUpdate(lb.fd.hostIfs, u32Codec.encode(r2), u32Codec.encode(HOST_IF.bridge));
    try {
      const out = run(lb, TC_POD, synFromClient(A, VIP));
      expect(out.retval).toBe(TC_ACT_REDIRECT);
      expect([macOf(out.dataOut, 0), macOf(out.dataOut, 6)]).toEqual([BACKEND_POD.mac, r2Mac]);
    } finally {
      mapUpdate(lb.fd.hostIfs, u32Codec.encode(r2), u32Codec.encode(HOST_IF.peer));
    }
  });

  it('a device the agent did not list keeps the stack`s path with host routing loaded', () => {
    const lb = loaded.get(true)!;
    const { A } = FAMILY_CASES[0]!;
    mapDelete(lb.fd.hostIfs, u32Codec.encode(r2));
    try {
      const out = run(lb, TC_POD, synFromClient(A, VIP));
      expect(out.retval).toBe(TC_ACT_UNSPEC);
      expect(parsePacket(out.dataOut)).toMatchObject({ daddr: A(BACKEND_POD.ip) });
    } finally {
      mapUpdate(lb.fd.hostIfs, u32Codec.encode(r2), u32Codec.encode(HOST_IF.peer));
    }
  });
});
