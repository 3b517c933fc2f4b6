// An agent's JSON log as the lab follows it (a process's stderr, or `podman logs -f`): every
// structured line, each "synced" line as a sync, the tail for error messages, and waits that end
// when the awaited line arrives, the log ends, or the time runs out. Another program's log (the real
// kube-proxy's klog text) is followed the same way with a reader of its own for each line.

export interface SyncLine {
  /** performance.now() when the line arrived. */
  at: number;
  durationMs: number;
  full: boolean;
}

const TAIL_CHARS = 20_000;

/** What one log line says: a structured line to keep, and whether it reports a sync. */
export interface LogLineReading {
  line?: Record<string, unknown>;
  sync?: Omit<SyncLine, 'at'>;
}

/** Our agent's JSON lines; a sync is a "synced" line. */
export function readAgentLine(text: string): LogLineReading {
  let parsed: Record<string, unknown>;
  try {
    parsed = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return {};
  }
  return {
    line: parsed,
    ...(parsed.msg === 'synced'
      ? { sync: { durationMs: Number(parsed.durationMs), full: parsed.full === true } }
      : {}),
  };
}

export class AgentLog {
  readonly syncs: SyncLine[] = [];
  /** Every structured log line, for mode-specific facts (e.g. the iptables backend chosen). */
  readonly lines: Record<string, unknown>[] = [];
  private text = '';
  private partial = '';
  private endCode: number | null | undefined;
  private waiters: (() => void)[] = [];

  /** `who` names the agent in error messages ("agent", "pod node-a"). */
  constructor(
    private readonly who: string,
    private readonly read: (text: string) => LogLineReading = readAgentLine,
  ) {}

  /** A chunk of the log stream, split into lines here. */
  feed(chunk: Buffer | string): void {
    const lines = (this.partial + chunk.toString()).split('\n');
    this.partial = lines.pop() ?? '';
    for (const line of lines) this.onLine(line);
    this.notify();
  }

  /** The log ended: the agent exited with `code` (null: killed), or its log follower stopped. */
  end(code: number | null): void {
    this.endCode = code;
    this.notify();
  }

  /** The exit code once the log has ended; undefined while it runs. */
  get exitCode(): number | null | undefined {
    return this.endCode;
  }

  tail(): string {
    return this.text;
  }

  /** Resolves with the (count)th sync line. */
  waitForSync(count: number, timeoutMs: number): Promise<SyncLine> {
    return this.waitFor(() => this.syncs[count - 1], timeoutMs, `sync (${count})`);
  }

  /** Resolves with the first line that matches. */
  waitForLine(
    match: (line: Record<string, unknown>) => boolean,
    timeoutMs: number,
  ): Promise<Record<string, unknown>> {
    return this.waitFor(() => this.lines.find(match), timeoutMs, 'matching line');
  }

  private waitFor<T>(find: () => T | undefined, timeoutMs: number, what: string): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${this.who}: no ${what} within ${timeoutMs} ms; log tail:\n${this.text}`)),
        timeoutMs,
      );
      const check = () => {
        const found = find();
        if (found !== undefined) {
          clearTimeout(timer);
          resolve(found);
        } else if (this.endCode !== undefined) {
          clearTimeout(timer);
          reject(
            new Error(`${this.who} exited (${this.endCode}) before its ${what}; log tail:\n${this.text}`),
          );
        } else {
          this.waiters.push(check);
        }
      };
      check();
    });
  }

  private onLine(text: string): void {
    this.text = `${this.text}${text}\n`.slice(-TAIL_CHARS);
    const { line, sync } = this.read(text);
    if (line) this.lines.push(line);
    if (sync) this.syncs.push({ at: performance.now(), ...sync });
  }

  private notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }
}
