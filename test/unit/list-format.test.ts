import { describe, expect, it } from 'vitest';
import { formatFrontends } from '../../src/cli/list.js';
import type { BackendView, Counters, FrontendView } from '../../src/dataplanes/bpf/inspect-list.js';

const counters: Counters = {
  connections: 3,
  inPackets: 9,
  inBytes: 900,
  outPackets: 6,
  outBytes: 600,
  drops: 0,
};

function backend(id: number, address: string, local = false): BackendView {
  return { slot: id, id, address, port: 8080, local, terminating: false, stats: counters };
}

function frontend(address: string, backends: BackendView[]): FrontendView {
  const host = address.includes(':') ? `[${address}]` : address;
  return {
    frontend: `TCP/${host}:80`,
    address,
    port: 80,
    protocol: 'TCP',
    scope: 'all',
    serviceId: 1,
    servicePort: 'demo/web:http',
    kind: 'ClusterIP',
    scheduler: 'random',
    action: 'forward',
    flags: [],
    affinityTimeoutSeconds: 0,
    gen: 0,
    stats: counters,
    backends,
  };
}

describe('list: the frontends table', () => {
  it('writes IPv6 backends as [address]:port, IPv4 ones as address:port', () => {
    const text = formatFrontends([
      frontend('10.96.0.10', [backend(1, '10.244.1.10', true)]),
      frontend('fd00:96::a', [backend(2, 'fd00:244:0:1::a', true)]),
    ]);
    const lines = text.split('\n');
    expect(lines.find((l) => l.includes('-> 10.244.1.10:8080'))).toMatch(/local/);
    expect(lines.find((l) => l.includes('-> [fd00:244:0:1::a]:8080'))).toMatch(/local/);
    expect(text).not.toContain('fd00:244:0:1::a:8080');
  });
});
