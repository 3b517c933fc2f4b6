import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { LinkWatch, MONITOR_RESTART_MS } from '../../src/host/link-watch.js';
import { until } from '../../src/lab/until.js';
import { silentLogger } from '../../src/logger.js';
import { enterNetns } from '../support/in-netns.js';
import { describeRoot } from '../support/privileges.js';

const ns = `kbpt-watch-${process.pid}`;
const ip = (...args: string[]) => execFileSync('ip', ['-n', ns, ...args], { encoding: 'utf8' });

/** The pids of this process's `ip monitor` children. */
const monitors = () =>
  execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes('ip monitor'))
    .map((l) => Number.parseInt(l, 10));

describeRoot('following links through ip monitor', () => {
  beforeAll(() => execFileSync('ip', ['netns', 'add', ns]));
  afterAll(() => execFileSync('ip', ['netns', 'del', ns]));

  it('reports link changes, restarts a monitor that died, and stops it on close', async () => {
    let events = 0;
    // The monitor watches the namespace it is (re)started in: the test stays in the node's, as
    // the agent does.
    const leave = enterNetns(ns);
    const watch = new LinkWatch(() => events++, silentLogger);
    try {
      watch.start();
      await until('monitor running', () => monitors().length === 1, 2000);
      // Give the monitor a moment to subscribe before the first change.
      await new Promise((r) => setTimeout(r, 100));
      ip('link', 'add', 'w0', 'type', 'veth', 'peer', 'name', 'w1');
      await until('link event', () => events > 0, 1000);

      const [first] = monitors();
      process.kill(first!, 'SIGKILL');
      const before = events;
      // Restarted after MONITOR_RESTART_MS, with one event for what it may have missed.
      await until('restart', () => events > before && monitors().length === 1, MONITOR_RESTART_MS + 2000);
      expect(monitors()[0]).not.toBe(first);
      await new Promise((r) => setTimeout(r, 100));
      const restarted = events;
      ip('link', 'del', 'w0');
      await until('event after restart', () => events > restarted, 1000);
      watch.close();
      await until('monitor stopped', () => monitors().length === 0, 2000);
    } finally {
      watch.close();
      leave();
    }
  });
});
