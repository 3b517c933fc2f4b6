// Reading ipvsadm/ipset output back (samples printed by ipvsadm 1.31 and ipset 7.17 on Debian's
// 6.1 kernel in the IPVS lab) and the diff the applier writes from it.
import { describe, expect, it } from 'vitest';
import {
  diffVirtualServers,
  ipsetRestoreInput,
  parseConnectionCounts,
  parseIpsetSave,
  parseIpvsadmSave,
} from '../../src/dataplanes/ipvs/kernel-state.js';
import type { IpsetContent, VirtualServer } from '../../src/dataplanes/ipvs/plan.js';

const SAVE = `-A -t 192.168.1.5:30080 -s rr -p 10800
-a -t 192.168.1.5:30080 -r 10.244.1.10:8080 -m -w 1
-a -t 192.168.1.5:30080 -r 10.244.2.10:8080 -m -w 0
-A -u 10.96.0.53:53 -s rr
-a -u 10.96.0.53:53 -r 10.244.1.53:5353 -m -w 1
-A -t [fd00:96::10]:80 -s rr
-A -t 10.200.0.1:80 -s wlc
`;

const LIST = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  192.168.1.5:30080 rr persistent 10800
  -> 10.244.1.10:8080             Masq    1      0          0
  -> 10.244.2.10:8080             Masq    0      1          2
UDP  10.96.0.53:53 rr
  -> 10.244.1.53:5353             Masq    1      0          4
FWM  7 rr
  -> 10.244.9.9:80                Masq    1      5          0
`;

const vs = (extra: Partial<VirtualServer>): VirtualServer => ({
  protocol: 'TCP',
  address: '192.168.1.5',
  port: 30080,
  scheduler: 'rr',
  persistenceTimeout: 10800,
  sourceHash: false,
  realServers: [],
  servicePortName: 'ns/web:http',
  ...extra,
});

describe('parsing the kernel state', () => {
  it('ipvsadm -Sn: virtual servers by service argument, real servers with weights', () => {
    const applied = parseIpvsadmSave(SAVE);
    expect([...applied.keys()]).toEqual([
      '-t 192.168.1.5:30080',
      '-u 10.96.0.53:53',
      '-t [fd00:96::10]:80',
      '-t 10.200.0.1:80',
    ]);
    const np = applied.get('-t 192.168.1.5:30080');
    expect(np?.line).toBe('-A -t 192.168.1.5:30080 -s rr -p 10800');
    expect(np?.address).toBe('192.168.1.5');
    expect([...(np?.realServers ?? [])]).toEqual([
      ['10.244.1.10:8080', 1],
      ['10.244.2.10:8080', 0],
    ]);
    expect(applied.get('-t [fd00:96::10]:80')?.address).toBe('fd00:96::10');
  });

  it('ipvsadm -Ln: active plus inactive connections per real server, FWM services ignored', () => {
    expect([...parseConnectionCounts(LIST)]).toEqual([
      ['-t 192.168.1.5:30080/10.244.1.10:8080', 0],
      ['-t 192.168.1.5:30080/10.244.2.10:8080', 3],
      ['-u 10.96.0.53:53/10.244.1.53:5353', 4],
    ]);
  });

  it('ipset save: members per set, the random initval of hash sets ignored', () => {
    const sets = parseIpsetSave(
      [
        'create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 comment bucketsize 12 initval 0x6cfa7e16',
        'add KUBE-CLUSTER-IP 10.96.0.10,tcp:80',
        'create KUBE-NODE-PORT-TCP bitmap:port range 0-65535 comment',
        'add KUBE-NODE-PORT-TCP 30080',
        'create KUBE-IPVS-IPS hash:ip family inet hashsize 1024 maxelem 65536 comment bucketsize 12 initval 0xc07dea47',
      ].join('\n'),
    );
    expect(sets).toEqual(
      new Map([
        ['KUBE-CLUSTER-IP', new Set(['10.96.0.10,tcp:80'])],
        ['KUBE-NODE-PORT-TCP', new Set(['30080'])],
        ['KUBE-IPVS-IPS', new Set()],
      ]),
    );
  });
});

describe('the diff the applier writes', () => {
  it('ipset restore: creates missing sets, adds missing members, deletes stale ones', () => {
    const desired: IpsetContent[] = [
      {
        name: 'KUBE-CLUSTER-IP',
        type: 'hash:ip,port',
        family: 'IPv4',
        comment: 'c',
        entries: ['10.96.0.20,tcp:80'],
      },
      { name: 'KUBE-NODE-PORT-TCP', type: 'bitmap:port', family: 'IPv4', comment: 'c', entries: ['30080'] },
    ];
    const applied = new Map([
      ['KUBE-CLUSTER-IP', new Set(['10.96.0.10,tcp:80'])],
      ['KUBE-OTHER', new Set(['x'])],
    ]);
    expect(ipsetRestoreInput(desired, applied)).toBe(
      [
        'del KUBE-CLUSTER-IP 10.96.0.10,tcp:80 -exist',
        'add KUBE-CLUSTER-IP 10.96.0.20,tcp:80 -exist',
        'create KUBE-NODE-PORT-TCP bitmap:port range 0-65535 comment -exist',
        'add KUBE-NODE-PORT-TCP 30080 -exist',
        '',
      ].join('\n'),
    );
    expect(ipsetRestoreInput(desired.slice(1), new Map([['KUBE-NODE-PORT-TCP', new Set(['30080'])]]))).toBe(
      '',
    );
  });

  it('adds, edits and deletes virtual servers of its own family outside excludeCIDRs', () => {
    const desired = [
      vs({
        persistenceTimeout: 0,
        realServers: [
          { address: '10.244.1.10', port: 8080, weight: 1 },
          { address: '10.244.3.10', port: 8080, weight: 1 },
        ],
      }),
      vs({ address: '10.96.0.10', port: 80, persistenceTimeout: 0, realServers: [] }),
    ];
    const diff = diffVirtualServers(desired, parseIpvsadmSave(SAVE), {
      family: 'IPv4',
      excludeCIDRs: ['10.200.0.0/16'],
      draining: new Set(),
    });
    expect(diff.commands).toEqual([
      // Persistence turned off: edited in place.
      '-E -t 192.168.1.5:30080 -s rr',
      // A new real server is added ...
      '-a -t 192.168.1.5:30080 -r 10.244.3.10:8080 -m -w 1',
      '-A -t 10.96.0.10:80 -s rr',
      // ... the UDP service is gone; the IPv6 one and the excluded one are not ours to delete.
      '-D -u 10.96.0.53:53',
    ]);
    expect(diff.removed).toEqual([
      { service: '-t 192.168.1.5:30080', realServer: '10.244.2.10:8080', graceful: true },
    ]);
  });

  it('draining real servers are left alone, and revived when wanted again', () => {
    const applied = parseIpvsadmSave(SAVE);
    const draining = new Set(['-t 192.168.1.5:30080/10.244.2.10:8080']);
    const stillGone = diffVirtualServers(
      [vs({ realServers: [{ address: '10.244.1.10', port: 8080, weight: 1 }] })],
      applied,
      { family: 'IPv4', excludeCIDRs: ['10.0.0.0/8'], draining },
    );
    expect(stillGone.commands).toEqual([]);
    expect(stillGone.removed).toEqual([]);
    const back = diffVirtualServers(
      [
        vs({
          realServers: [
            { address: '10.244.1.10', port: 8080, weight: 1 },
            { address: '10.244.2.10', port: 8080, weight: 1 },
          ],
        }),
      ],
      applied,
      { family: 'IPv4', excludeCIDRs: ['10.0.0.0/8'], draining },
    );
    expect(back.commands).toEqual(['-e -t 192.168.1.5:30080 -r 10.244.2.10:8080 -m -w 1']);
    expect(back.revived).toEqual(['-t 192.168.1.5:30080/10.244.2.10:8080']);
  });

  it('UDP real servers are removed without draining', () => {
    const diff = diffVirtualServers(
      [vs({ protocol: 'UDP', address: '10.96.0.53', port: 53, persistenceTimeout: 0 })],
      parseIpvsadmSave(SAVE),
      { family: 'IPv6', excludeCIDRs: [], draining: new Set() },
    );
    expect(diff.removed).toEqual([
      { service: '-u 10.96.0.53:53', realServer: '10.244.1.53:5353', graceful: false },
    ]);
    // Family IPv6: only the IPv6 virtual server not wanted is deleted.
    expect(diff.commands).toEqual(['-D -t [fd00:96::10]:80']);
  });
});
