// One agent (`kube-bpf-proxy run`) in a lab namespace, as the demo, the benchmark and the e2e
// tests run it: started, followed through its JSON log lines (each "synced" line is a sync),
// its memory read from /proc, stopped.

import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { Lab } from './netns.js';

export interface SyncLine {
  /** performance.now() when the line arrived. */
  at: number;
  durationMs: number;
  full: boolean;
}

export class LabAgent {
  readonly syncs: SyncLine[] = [];
  /** Every structured log line, for mode-specific facts (e.g. the iptables backend chosen). */
  readonly lines: Record<string, unknown>[] = [];
  private log = '';
  private exited: number | null | undefined;
  private waiters: (() => void)[] = [];

  private constructor(
    private readonly child: ChildProcess,
    readonly startedAt: number,
  ) {
    let partial = '';
    child.stderr?.on('data', (d: Buffer) => {
      partial += d.toString();
      const lines = partial.split('\n');
      partial = lines.pop() ?? '';
      for (const text of lines) this.onLine(text);
    });
    child.stdout?.on('data', () => {});
    // 'close', not 'exit': the last stderr lines (the reason it stopped) arrive before 'close' only.
    child.once('close', (code) => {
      this.exited = code;
      this.notify();
    });
  }

  static start(lab: Lab, ns: string, cli: string, args: string[]): LabAgent {
    const startedAt = performance.now();
    return new LabAgent(lab.spawn(ns, process.execPath, [cli, 'run', ...args]), startedAt);
  }

  private onLine(text: string): void {
    this.log = `${this.log}${text}\n`.slice(-20_000);
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return;
    }
    this.lines.push(parsed);
    if (parsed.msg === 'synced') {
      this.syncs.push({
        at: performance.now(),
        durationMs: Number(parsed.durationMs),
        full: parsed.full === true,
      });
    }
    this.notify();
  }

  private notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** Resolves with the (count)th sync line; rejects when the agent exits or the time runs out. */
  waitForSync(count: number, timeoutMs: number): Promise<SyncLine> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(new Error(`agent did not sync (${count}) within ${timeoutMs} ms; log tail:\n${this.log}`)),
        timeoutMs,
      );
      const check = () => {
        const sync = this.syncs[count - 1];
        if (sync) {
          clearTimeout(timer);
          resolve(sync);
        } else if (this.exited !== undefined) {
          clearTimeout(timer);
          reject(new Error(`agent exited (${this.exited}); log tail:\n${this.log}`));
        } else {
          this.waiters.push(check);
        }
      };
      check();
    });
  }

  /** VmRSS and VmHWM (peak) of the agent process, in MiB. */
  memory(): { rssMiB: number; peakMiB: number } {
    const status = readFileSync(`/proc/${this.child.pid}/status`, 'utf8');
    const kib = (field: string) =>
      Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? Number.NaN);
    return { rssMiB: kib('VmRSS') / 1024, peakMiB: kib('VmHWM') / 1024 };
  }

  tail(): string {
    return this.log;
  }

  /** SIGTERM, then SIGKILL after 10 s. The kernel state stays; the caller cleans it up. */
  async stop(): Promise<void> {
    if (this.exited !== undefined) return;
    const exited = new Promise<void>((resolve) => this.child.once('close', () => resolve()));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
}
