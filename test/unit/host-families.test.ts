// The families a rule mode runs: kube-proxy v1.37's platformCheckSupported (server_linux.go).

import { describe, expect, it } from 'vitest';
import { kernelHasIPv6, parseNodeEnv, proxyFamiliesFor } from '../../src/sources/host.js';

describe('IP families of the proxy', () => {
  const kernel = (files: Record<string, string>) =>
    kernelHasIPv6(
      async (path) => {
        const text = files[path];
        if (text === undefined) throw new Error(`ENOENT ${path}`);
        return text;
      },
      async (path) => path in files,
    );

  it('finds IPv6 when /proc/net/if_inet6 exists and IPv6 is not disabled', async () => {
    const on = { '/proc/net/if_inet6': '', '/proc/sys/net/ipv6/conf/all/disable_ipv6': '0\n' };
    expect(await kernel(on)).toBe(true);
    expect(await kernel({ ...on, '/proc/sys/net/ipv6/conf/all/disable_ipv6': '1\n' })).toBe(false);
    expect(await kernel({ '/proc/sys/net/ipv6/conf/all/disable_ipv6': '0\n' })).toBe(false);
    // An unreadable switch does not disable it (kube-proxy ignores the read error).
    expect(await kernel({ '/proc/net/if_inet6': '' })).toBe(true);
  });

  it('runs both families in iptables and nftables modes when the kernel has IPv6; bpf and ipvs decide by node IPs', async () => {
    const yes = async () => true;
    const no = async () => false;
    expect(await proxyFamiliesFor('iptables', yes)).toEqual(['IPv4', 'IPv6']);
    expect(await proxyFamiliesFor('nftables', yes)).toEqual(['IPv4', 'IPv6']);
    expect(await proxyFamiliesFor('nftables', no)).toEqual(['IPv4']);
    expect(await proxyFamiliesFor('bpf', yes)).toBeUndefined();
    expect(await proxyFamiliesFor('ipvs', yes)).toBeUndefined();
  });

  it('takes proxyFamilies from a node-env file, and leaves it unset when absent', () => {
    const env = parseNodeEnv(JSON.stringify({ nodeName: 'n', proxyFamilies: ['IPv4', 'IPv6'] }), 'env.json');
    expect(env.proxyFamilies).toEqual(['IPv4', 'IPv6']);
    expect(parseNodeEnv(JSON.stringify({ nodeName: 'n' }), 'env.json').proxyFamilies).toBeUndefined();
  });
});
