import { existsSync, rmSync } from 'node:fs';
import { afterAll, expect, it } from 'vitest';
import { createMap, dumpMap, mapLookup, mapUpdate } from '../../native/libbpf/map.js';
import { pinObject } from '../../native/libbpf/object.js';
import { closeFd } from '../../native/libc.js';
import {
  backend4,
  backend6,
  ct4Key,
  ct4Val,
  PROGRAMS,
  slotKey,
  slotVal4,
  slotVal6,
  u32Codec,
} from '../../src/dataplanes/bpf/layout.js';
import { type LoadedObject, loadPinnedObject, mapPinPath } from '../../src/dataplanes/bpf/object.js';
import { silentLogger } from '../../src/logger.js';
import { buildPacket, IPPROTO_TCP, parsePacket, TCP } from '../../src/net/packets.js';
import { bpfConfig } from '../support/bpf-fixtures.js';
import { type LoadedLb, run, writeConfig, writeFrontend } from '../support/lb-object.js';
import { describeRoot } from '../support/privileges.js';

const pinPath = `/sys/fs/bpf/kbp-test-object-load-${process.pid}`;

describeRoot('loading the data plane object', () => {
  let lb: LoadedObject | undefined;
  afterAll(() => {
    lb?.close();
    rmSync(pinPath, { recursive: true, force: true });
  });

  // The agent reads its Services while the kernel verifies the programs (src/cli/run.ts): that
  // only overlaps if the event loop keeps turning during bpf_object__load.
  it('verifies the programs off the event loop, and the loaded object serves its maps and programs', async () => {
    let turns = 0;
    let spinning = true;
    const spin = () => {
      turns++;
      if (spinning) setImmediate(spin);
    };
    setImmediate(spin);
    try {
      lb = await loadPinnedObject({
        pinPath,
        mapSizes: { ...bpfConfig().mapSizes, conntrack: 1024, affinity: 1024 },
        log: silentLogger,
      });
    } finally {
      spinning = false;
    }
    expect(turns).toBeGreaterThan(1);
    expect(lb.fd.svc4).toBeGreaterThan(0);
    expect(lb.capacity.ct4Tcp).toBe(1024);
    expect(lb.prog('kbp_tc_pod')).toBeGreaterThan(0);
  });

  it('copies the slots of an older agent (kbp_slot_v1: backend ids) into kbp_slot_v2, with their backends, before any program reads them', async () => {
    const load = () =>
      loadPinnedObject({
        pinPath,
        mapSizes: { ...bpfConfig().mapSizes, conntrack: 1024, affinity: 1024 },
        log: silentLogger,
      });
    lb ??= await load();
    // What the older agent left: its backends (kept, same map) and its slots in kbp_slot_v1.
    mapUpdate(
      lb.fd.backends4,
      u32Codec.encode(7),
      backend4.encode({ addr: '10.244.2.7', port: 8080, flags: 1 }),
    );
    mapUpdate(
      lb.fd.backends6,
      u32Codec.encode(8),
      backend6.encode({ addr: 'fd00::7', port: 8443, flags: 0 }),
    );
    const v1 = createMap(1 /* BPF_MAP_TYPE_HASH */, 'kbp_slot_v1', slotKey.size, 4, 16);
    const slot = (svcId: number) => slotKey.encode({ svcId, slot: 0, gen: 3 });
    mapUpdate(v1, slot(1), u32Codec.encode(7));
    mapUpdate(v1, slot(2), u32Codec.encode(8));
    mapUpdate(v1, slot(3), u32Codec.encode(99)); // a backend no map has: not copied
    const v1Pin = `${lb.pinDir}/maps/kbp_slot_v1`;
    pinObject(v1, v1Pin);
    closeFd(v1);
    const v2Pin = mapPinPath(lb.pinDir, 'slots');
    lb.close();
    rmSync(v2Pin);
    lb = await load();
    const read = (svcId: number) => {
      const v = Buffer.alloc(slotVal4.size);
      return mapLookup(lb!.fd.slots, slot(svcId), v) ? v : null;
    };
    expect(slotVal4.decode(read(1)!)).toEqual({ backendId: 7, port: 8080, addr: '10.244.2.7' });
    expect(slotVal6.decode(read(2)!)).toEqual({ backendId: 8, port: 8443, addr: 'fd00::7' });
    expect(read(3)).toBeNull();
    expect(existsSync(v1Pin)).toBe(false);
    expect(existsSync(v2Pin)).toBe(true);
  });

  // The agent verifies at start only what its node's interfaces use (programsAtStart); an
  // interface that needs another program gets it from a second copy of the object on the same maps.
  it('verifies only the programs asked for, and loads another on first use, on the same maps', async () => {
    const lazyPin = `${pinPath}-lazy`;
    const lazy = await loadPinnedObject({
      pinPath: lazyPin,
      mapSizes: { ...bpfConfig().mapSizes, conntrack: 1024, affinity: 1024 },
      programs: [PROGRAMS.tcFromExternal],
      log: silentLogger,
    });
    try {
      expect(lazy.prog(PROGRAMS.tcFromExternal)).toBeGreaterThan(0);
      expect(() => lazy.prog(PROGRAMS.tcFromPod)).toThrow(/kbp_tc_pod is not loaded/);
      const asLb = {
        ...lazy,
        constants: { coarseClock: true, sockSetRetval: false, hostRouting: false },
      } as LoadedLb;
      writeConfig(asLb);
      writeFrontend(asLb, {
        svcId: 1,
        addr: '10.96.0.11',
        port: 80,
        proto: IPPROTO_TCP,
        backends: [{ id: 1, addr: '10.244.2.11', port: 8080 }],
      });
      const [first, again] = await Promise.all([
        lazy.loadPrograms([PROGRAMS.tcFromExternal, PROGRAMS.tcFromPod]),
        lazy.loadPrograms([PROGRAMS.tcFromPod]),
      ]);
      expect(first).toEqual([PROGRAMS.tcFromPod]);
      expect(again).toEqual([]);
      // The late program reads the Service the first object's map fds wrote, and its conntrack
      // entry lands in the map those fds read.
      const syn = buildPacket({
        saddr: '10.244.1.10',
        daddr: '10.96.0.11',
        proto: IPPROTO_TCP,
        sport: 40000,
        dport: 80,
        tcpFlags: TCP.SYN,
      });
      expect(parsePacket(run(asLb, PROGRAMS.tcFromPod, syn).dataOut)).toMatchObject({
        daddr: '10.244.2.11',
        dport: 8080,
      });
      const tracked = dumpMap(lazy.fd.ct4Tcp, ct4Key.size, ct4Val.size).keys.map((k) => ct4Key.decode(k));
      expect(tracked).toContainEqual(expect.objectContaining({ sport: 40000 }));
      await expect(lazy.loadPrograms(['kbp_no_such_program'])).rejects.toThrow(/no such bpf program/);
    } finally {
      lazy.close();
      rmSync(lazyPin, { recursive: true, force: true });
    }
  });

  it('reports a load failure as an error naming bpf_object__load', async () => {
    const missing = `${pinPath}-bad`;
    await expect(
      loadPinnedObject({
        pinPath: missing,
        // Larger than any kernel allows a hash map: the map creation fails during the load.
        mapSizes: { ...bpfConfig().mapSizes, conntrack: 2 ** 31 },
        log: silentLogger,
      }),
    ).rejects.toThrow(/bpf_object__load/);
    rmSync(missing, { recursive: true, force: true });
  });
});
