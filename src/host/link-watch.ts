// Follows the links, addresses and routes of the agent's network namespace (the one the calling
// thread is in when the monitor starts or restarts) through netlink: a long-lived
// `ip monitor link address route` child whose every event line calls `changed`. The events are
// only a trigger (the caller re-discovers from scratch), so their text is not parsed.
// A child that dies is started again after a pause, followed by one `changed` for the events it
// may have missed. setpriv (util-linux) makes the kernel kill the child when the agent dies, even
// by SIGKILL: an orphaned monitor would keep a deleted network namespace alive.

import { type ChildProcess, spawn } from 'node:child_process';
import type { Logger } from '../logger.js';

export const MONITOR_RESTART_MS = 1000;

export class LinkWatch {
  private child: ChildProcess | null = null;
  private restartTimer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly changed: () => void,
    private readonly log: Logger,
  ) {}

  start(): void {
    const child = spawn(
      'setpriv',
      ['--pdeathsig', 'KILL', '--', 'ip', 'monitor', 'link', 'address', 'route'],
      {
        stdio: ['ignore', 'pipe', 'ignore'],
      },
    );
    this.child = child;
    let ended = false;
    const end = (why: string) => {
      // 'error' and 'exit' can both come for one child.
      if (ended) return;
      ended = true;
      this.child = null;
      if (this.closed) return;
      this.log.warn({ why, restartInMs: MONITOR_RESTART_MS }, 'ip monitor stopped; restarting it');
      this.restartTimer = setTimeout(() => {
        this.restartTimer = null;
        if (this.closed) return;
        this.start();
        this.changed();
      }, MONITOR_RESTART_MS);
      this.restartTimer.unref();
    };
    child.on('error', (err) => end(err.message));
    child.on('exit', (code, signal) => end(signal ? `signal ${signal}` : `exit code ${code}`));
    child.stdout?.on('data', () => this.changed());
  }

  close(): void {
    this.closed = true;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.restartTimer = null;
    this.child?.kill();
    this.child = null;
  }
}
