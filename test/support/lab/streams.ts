// Long-lived flows from a lab namespace (stream-client.mjs), followed while a node changes its
// proxy: started once every flow has its first answer, reported on demand, stopped at the end.
// Lab code only the tests use (test/e2e/migration.test.ts), beside the tests; the lab it runs in
// is src/lab/netns.ts.

import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { type Lab, waitForLine } from '../../../src/lab/netns.js';

const streamScript = fileURLToPath(new URL('./stream-client.mjs', import.meta.url));

export interface FlowSpec {
  id: string;
  proto: 'tcp' | 'udp';
  /** "ip:port" */
  target: string;
}

/** What stream-client.mjs reports of one flow. */
export interface FlowReport {
  id: string;
  proto: 'tcp' | 'udp';
  /** The backend that answered first. */
  backend: string | null;
  /** Every backend that answered, in order. */
  backends: string[];
  asked: number;
  answers: number;
  /** What the flow's socket met: error codes, "closed", unreadable answers. */
  errors: string[];
  /** The longest silence between two answers. */
  maxGapMs: number;
  /** Since the last answer; -1 before the first. */
  sinceAnswerMs: number;
}

const REPORT_TIMEOUT_MS = 5000;

export class LabStreams {
  private lines = '';
  private readonly waiting: ((line: string) => void)[] = [];

  private constructor(private readonly child: ChildProcess) {
    child.stdout?.on('data', (d: Buffer) => {
      this.lines += d.toString();
      for (let nl = this.lines.indexOf('\n'); nl >= 0; nl = this.lines.indexOf('\n')) {
        const line = this.lines.slice(0, nl);
        this.lines = this.lines.slice(nl + 1);
        if (line.startsWith('{"report"')) this.waiting.shift()?.(line);
      }
    });
  }

  /** Opens the flows, asking every `intervalMs`, for at most `seconds`; resolves once each has answered (or 5 s passed). */
  static async start(
    lab: Lab,
    ns: string,
    flows: FlowSpec[],
    opts: { intervalMs: number; seconds: number },
  ): Promise<LabStreams> {
    const child = lab.spawn(ns, process.execPath, [
      streamScript,
      '--streams',
      JSON.stringify(flows),
      '--interval',
      String(opts.intervalMs),
      '--seconds',
      String(opts.seconds),
    ]);
    await waitForLine(child, 'ready', 10_000);
    return new LabStreams(child);
  }

  /** Each flow's state now. */
  report(): Promise<FlowReport[]> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error('no report from the stream client')),
        REPORT_TIMEOUT_MS,
      );
      this.waiting.push((line) => {
        clearTimeout(timer);
        resolve((JSON.parse(line) as { report: FlowReport[] }).report);
      });
      this.child.kill('SIGUSR1');
    });
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.kill('SIGTERM');
    await exited;
  }
}
