// Issue 27: the chart's agent in iptables mode (not privileged: /proc/sys read-only) failed every
// sync on the real cluster, because writing net.ipv4.conf.all.route_localnet failed, and the node
// had no Service rules at all. It now reads the sysctl first (kube-proxy's EnsureSysctl) and, when
// the write is refused, warns once and syncs the rules.

import { describe, expect, it } from 'vitest';
import { decide } from '../../src/brain/decide.js';
import { IptablesDataplane } from '../../src/dataplanes/iptables/dataplane.js';
import type { CommandRunner } from '../../src/host/command.js';
import type { Logger } from '../../src/logger.js';
import { brainConfig, node, nodeEnv, service, serviceCIDRMap } from '../support/model-fixtures.js';

const decisions = decide(
  {
    services: new Map([
      [
        'ns/np',
        service('ns', 'np', {
          type: 'NodePort',
          ports: [{ name: 'p', protocol: 'TCP', port: 80, nodePort: 30080 }],
        }),
      ],
    ]),
    endpointSlices: new Map(),
    node: node('test-node'),
    serviceCIDRs: serviceCIDRMap(),
  },
  nodeEnv({ nodeIPs: ['192.168.0.2'] }),
  brainConfig(),
);
const FULL = { full: true, changedServices: new Set<string>(), reason: 'test: a full sync' };

/** A host whose commands all succeed but a sysctl write, with route_localnet at `current`. */
function host(current: string) {
  const calls: string[] = [];
  const exec: CommandRunner = async (cmd, args) => {
    const line = [cmd, ...args].join(' ');
    calls.push(line);
    if (line.startsWith('sysctl -qw'))
      throw new Error(`${line} failed (255): sysctl: permission denied on key`);
    return { stdout: line.startsWith('sysctl -n') ? `${current}\n` : '', stderr: '', code: 0 };
  };
  const warnings: string[] = [];
  const log = { warn: (_: unknown, msg: string) => warnings.push(msg) } as unknown as Logger;
  const dataplane = new IptablesDataplane(
    'nft',
    { randomFully: true, nfacct: false },
    {
      config: { syncPeriodSeconds: 30, conntrack: { tcpBeLiberal: false } },
      exec,
      now: Date.now,
      log,
    },
  );
  return { calls, warnings, dataplane };
}

describe('route_localnet for NodePorts on 127.0.0.1 (iptables mode)', () => {
  it('a refused write is a warning, once, and the rules are still written', async () => {
    const { calls, warnings, dataplane } = host('0');
    await dataplane.sync(decisions, FULL);
    await dataplane.sync(decisions, FULL);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('NodePorts do not answer on 127.0.0.1');
    expect(calls.filter((c) => c.startsWith('sysctl -qw'))).toHaveLength(1);
    expect(calls.filter((c) => c.startsWith('iptables-nft-restore'))).toHaveLength(2);
  });

  it('is not written when the node has it already, as kube-proxy does', async () => {
    const { calls, warnings, dataplane } = host('1');
    await dataplane.sync(decisions, FULL);
    expect(warnings).toEqual([]);
    expect(calls).toContain('sysctl -n net.ipv4.conf.all.route_localnet');
    expect(calls.some((c) => c.startsWith('sysctl -qw'))).toBe(false);
  });
});
