import { describe, expect, it } from 'vitest';
import { type CrossNodeRun, crossNodeTable, settingsOrder } from '../../bench/cross-node.js';

const summary = (median: number) => ({ median, p99: median * 2, n: 100 });

function run(setting: 'bpf' | 'stack', rep: number, connPerSec: number, connect: number): CrossNodeRun {
  return {
    flannel: 'vxlan',
    setting,
    family: 'IPv4',
    rep,
    connPerSec,
    connectUs: summary(connect),
    requestUs: summary(connect * 2),
    errors: 0,
    nodeAConntrack: setting === 'bpf' ? 0 : 5000,
  };
}

describe('bench --cross-node', () => {
  it('alternates which setting goes first, so drift falls on both', () => {
    expect([0, 1, 2].map(settingsOrder)).toEqual([
      ['bpf', 'stack'],
      ['stack', 'bpf'],
      ['bpf', 'stack'],
    ]);
  });

  it('reports each measure as the medians of the runs and host routing ÷ the stack', () => {
    const runs = [
      run('bpf', 0, 7000, 50),
      run('stack', 0, 6000, 60),
      run('bpf', 1, 7400, 52),
      run('stack', 1, 6200, 64),
    ];
    const table = crossNodeTable(runs);
    // Medians of two runs (nearest rank: the lower one).
    expect(table).toContain('| vxlan | IPv4 | new connections per second | 7000 | 6000 | 1.17× |');
    expect(table).toContain('| vxlan | IPv4 | TCP connect time, median (µs) | 50.0 | 60.0 | 0.83× |');
    expect(table).toContain("| vxlan | IPv4 | node-a's conntrack entries of the flow | 0 | 5000 | 0.00× |");
  });
});
