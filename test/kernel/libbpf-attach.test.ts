// native/libbpf/attach.ts calls against a real interface: tcx links, clsact filters and XDP, each
// shown to carry traffic (a UDP datagram between two namespaces this test creates is counted by
// the program) and to stop when detached.

import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  linkCreate,
  linkDetach,
  tcAttach,
  tcDetach,
  tcHookCreate,
  tcQuery,
  xdpAttach,
  xdpDetach,
  xdpQueryId,
} from '../../native/libbpf/attach.js';
import { BPF_TC_INGRESS, BPF_TCX_INGRESS, XDP_FLAGS_DRV_MODE } from '../../native/libbpf/constants.js';
import { mapLookup, mapUpdate } from '../../native/libbpf/map.js';
import { getPinned, pinObject } from '../../native/libbpf/object.js';
import { possibleCpus } from '../../native/libbpf/probe.js';
import { closeFd, ifNameToIndex } from '../../native/libc.js';
import { perCpuValueSize, sumPerCpu } from '../../src/dataplanes/bpf/codec.js';
import { BE_F, PROGRAMS, SVC_F, trafficStats, u32Codec } from '../../src/dataplanes/bpf/layout.js';
import { Lab } from '../../src/lab/netns.js';
import { IPPROTO_UDP } from '../../src/net/packets.js';
import { makePinDir, removePinDir } from '../support/bpffs.js';
import { inNetns } from '../support/in-netns.js';
import { type LoadedLb, loadLb, writeConfig, writeFrontend } from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

const VIP = '10.96.0.10';

describeRoot('native/libbpf/attach.ts (tcx, clsact, XDP) on a veth', () => {
  const lab = new Lab(`kbpat${process.pid}`);
  let lb: LoadedLb;
  let pinDir = '';
  let ifindex = 0;

  const inNamespace = <T>(name: string, fn: () => T): T => inNetns(lab.ns(name), fn);

  function forwarded(): bigint {
    const buf = Buffer.alloc(perCpuValueSize(trafficStats.size, possibleCpus()));
    mapLookup(lb.fd.svcStats, u32Codec.encode(1), buf);
    return sumPerCpu(trafficStats, buf, possibleCpus()).fwdPackets;
  }

  async function send(): Promise<void> {
    await lab.exec('a', 'bash', ['-c', `echo ping > /dev/udp/${VIP}/53`]);
  }

  /** Whether one datagram from `a` was handled by the program on `b`'s interface. */
  async function counted(): Promise<boolean> {
    const before = forwarded();
    await send();
    return forwarded() > before;
  }

  beforeAll(async () => {
    pinDir = makePinDir('attach');
    lb = loadLb();
    writeConfig(lb);
    writeFrontend(lb, {
      svcId: 1,
      addr: VIP,
      port: 53,
      proto: IPPROTO_UDP,
      flags: SVC_F.EXTERNAL,
      backends: [{ id: 1, addr: '10.200.0.2', port: 5353, flags: BE_F.LOCAL }],
    });
    await lab.addNamespace('a');
    await lab.addNamespace('b');
    await lab.link('a', 'veth0', 'b', 'veth1');
    await lab.addAddress('a', 'veth0', '10.200.0.1/24');
    await lab.addAddress('b', 'veth1', '10.200.0.2/24');
    await lab.addRoute('a', `${VIP}/32`, 'via', '10.200.0.2');
    ifindex = inNamespace('b', () => ifNameToIndex('veth1'));
  });

  afterAll(async () => {
    await lab.destroy();
    lb?.close();
    removePinDir(pinDir);
  });

  it('clsact: a direct-action filter carries traffic until it is detached', async () => {
    expect(await counted()).toBe(false);
    const filter = inNamespace('b', () => {
      tcHookCreate(ifindex);
      tcHookCreate(ifindex); // an existing clsact is fine
      return tcAttach(ifindex, BPF_TC_INGRESS, lb.prog(PROGRAMS.tcFromExternal), { handle: 1, priority: 1 });
    });
    expect(filter).toMatchObject({ handle: 1, priority: 1 });
    expect(inNamespace('b', () => tcQuery(ifindex, BPF_TC_INGRESS, 1, 1))).toBe(filter.progId);
    expect(await counted()).toBe(true);
    inNamespace('b', () => tcDetach(ifindex, BPF_TC_INGRESS, 1, 1));
    expect(inNamespace('b', () => tcQuery(ifindex, BPF_TC_INGRESS, 1, 1))).toBeNull();
    expect(await counted()).toBe(false);
  });

  it('tcx: a pinned link carries traffic until it is detached', async () => {
    const link = inNamespace('b', () => linkCreate(lb.prog(PROGRAMS.tcFromPod), ifindex, BPF_TCX_INGRESS));
    try {
      pinObject(link, `${pinDir}/link`);
      expect(await counted()).toBe(true);
      const pinned = getPinned(`${pinDir}/link`);
      linkDetach(pinned);
      closeFd(pinned);
      expect(await counted()).toBe(false);
    } finally {
      closeFd(link);
    }
  });

  it('XDP (native on veth): attached, queried, carrying traffic, detached', async () => {
    inNamespace('b', () => xdpAttach(ifindex, lb.prog(PROGRAMS.xdpFromExternal), XDP_FLAGS_DRV_MODE));
    try {
      expect(inNamespace('b', () => xdpQueryId(ifindex, XDP_FLAGS_DRV_MODE))).toBeGreaterThan(0);
      expect(await counted()).toBe(true);
    } finally {
      inNamespace('b', () => xdpDetach(ifindex, XDP_FLAGS_DRV_MODE));
    }
    expect(inNamespace('b', () => xdpQueryId(ifindex, XDP_FLAGS_DRV_MODE))).toBe(0);
    expect(await counted()).toBe(false);
  });

  it('reports failures with the libbpf function and the errno text', () => {
    expect(() =>
      mapUpdate(lb.fd.svcStats, u32Codec.encode(1 << 30), Buffer.alloc(48 * possibleCpus())),
    ).toThrow(/bpf_map_update_elem: .*\(errno \d+\)/);
    expect(() => getPinned(`${pinDir}/missing`)).toThrow(
      /bpf_obj_get \(.*missing\): No such file or directory \(errno 2\)/,
    );
  });
});
