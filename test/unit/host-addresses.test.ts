// The host addresses a sync reads: probed once, again only after a netlink change or when they
// are older than their maximum age, and never kept when the probe failed.

import { describe, expect, it } from 'vitest';
import { CachedHostAddresses, type HostAddresses, type IpAddrInterface } from '../../src/host/interfaces.js';

function countingProbe(fail: { interfaces: boolean } = { interfaces: false }) {
  const calls = { interfaces: 0, defaultRouteIPs: 0 };
  const probe: HostAddresses = {
    async interfaces(): Promise<IpAddrInterface[]> {
      calls.interfaces++;
      if (fail.interfaces) throw new Error('ip: cannot talk to netlink');
      return [{ ifname: `eth${calls.interfaces}`, addr_info: [] }];
    },
    async defaultRouteIPs() {
      calls.defaultRouteIPs++;
      return [`10.0.0.${calls.defaultRouteIPs}`];
    },
  };
  return { calls, probe };
}

describe('CachedHostAddresses', () => {
  it('probes once until a change is reported, then once again', async () => {
    const { calls, probe } = countingProbe();
    const now = 0;
    const cache = new CachedHostAddresses(probe, 60_000, () => now);
    for (let i = 0; i < 5; i++) {
      expect((await cache.interfaces())[0]?.ifname).toBe('eth1');
      expect(await cache.defaultRouteIPs()).toEqual(['10.0.0.1']);
    }
    expect(calls).toEqual({ interfaces: 1, defaultRouteIPs: 1 });
    cache.changed();
    expect((await cache.interfaces())[0]?.ifname).toBe('eth2');
    expect(await cache.defaultRouteIPs()).toEqual(['10.0.0.2']);
    expect(calls).toEqual({ interfaces: 2, defaultRouteIPs: 2 });
  });

  it('probes again once the facts are older than their maximum age', async () => {
    const { calls, probe } = countingProbe();
    let now = 1_000;
    const cache = new CachedHostAddresses(probe, 60_000, () => now);
    await cache.interfaces();
    now += 59_999;
    await cache.interfaces();
    expect(calls.interfaces).toBe(1);
    now += 1;
    expect((await cache.interfaces())[0]?.ifname).toBe('eth2');
    expect(calls.interfaces).toBe(2);
  });

  it('does not keep a probe that failed: the next call probes again', async () => {
    const fail = { interfaces: true };
    const { calls, probe } = countingProbe(fail);
    const cache = new CachedHostAddresses(probe, 60_000, () => 0);
    await expect(cache.interfaces()).rejects.toThrow(/netlink/);
    fail.interfaces = false;
    expect((await cache.interfaces())[0]?.ifname).toBe('eth2');
    expect(calls.interfaces).toBe(2);
  });

  it('a change reported while a probe runs makes the next call probe again', async () => {
    const { calls, probe } = countingProbe();
    const cache = new CachedHostAddresses(probe, 60_000, () => 0);
    const first = cache.interfaces();
    cache.changed();
    await first;
    expect((await cache.interfaces())[0]?.ifname).toBe('eth2');
    expect(calls.interfaces).toBe(2);
  });
});
