// kube-proxy's bounded-frequency runner (pkg/util/async, pkg/proxy/runner): a sync runs when
// asked, but never more than `burst` runs back to back and then at most one per minInterval
// (a token bucket); it also runs every maxInterval without being asked, and a failed run can ask
// for a retry sooner. Runs never overlap.

export interface RunnerTimers {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realTimers: RunnerTimers = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

export interface RunnerOptions {
  minIntervalMs: number;
  maxIntervalMs: number;
  burst: number;
  timers?: RunnerTimers;
  /** Called with whatever a run threw; the runner keeps going. */
  onError?: (err: unknown) => void;
}

/** The token bucket, pure: how long until a run may start, and taking a token. */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly capacity: number,
    private readonly refillEveryMs: number,
    now: number,
  ) {
    this.tokens = capacity;
    this.last = now;
  }

  private refill(now: number): void {
    if (this.refillEveryMs <= 0) {
      this.tokens = this.capacity;
    } else {
      this.tokens = Math.min(this.capacity, this.tokens + (now - this.last) / this.refillEveryMs);
    }
    this.last = now;
  }

  /** Milliseconds until a token is available (0 when one is now). */
  waitMs(now: number): number {
    this.refill(now);
    return this.tokens >= 1 ? 0 : Math.ceil((1 - this.tokens) * this.refillEveryMs);
  }

  take(now: number): void {
    this.refill(now);
    this.tokens = Math.max(0, this.tokens - 1);
  }
}

export class BoundedFrequencyRunner {
  private readonly timers: RunnerTimers;
  private readonly bucket: TokenBucket;
  private timer: unknown = null;
  private timerDueAt = Number.POSITIVE_INFINITY;
  private running = false;
  private requestedWhileRunning = false;
  private stopped = false;
  private idle: Promise<void> = Promise.resolve();

  constructor(
    private readonly fn: () => Promise<void>,
    private readonly opts: RunnerOptions,
  ) {
    this.timers = opts.timers ?? realTimers;
    this.bucket = new TokenBucket(opts.burst, opts.minIntervalMs, this.timers.now());
  }

  /** Starts the periodic loop with a first run now. */
  start(): void {
    this.run();
  }

  /** Asks for a run as soon as the rate limit allows. */
  run(): void {
    if (this.stopped) return;
    if (this.running) {
      this.requestedWhileRunning = true;
      return;
    }
    this.schedule(this.bucket.waitMs(this.timers.now()));
  }

  /** Asks for a run no later than `ms` from now (a retry after a failure). */
  retryAfter(ms: number): void {
    if (!this.stopped) this.schedule(Math.max(ms, this.bucket.waitMs(this.timers.now())));
  }

  /** Stops scheduling and waits for a run in progress to finish. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.clear();
    await this.idle;
  }

  private schedule(delayMs: number): void {
    const dueAt = this.timers.now() + delayMs;
    if (dueAt >= this.timerDueAt) return;
    this.clear();
    this.timerDueAt = dueAt;
    this.timer = this.timers.setTimeout(() => {
      this.timer = null;
      this.timerDueAt = Number.POSITIVE_INFINITY;
      this.idle = this.execute();
    }, delayMs);
  }

  private clear(): void {
    if (this.timer !== null) this.timers.clearTimeout(this.timer);
    this.timer = null;
    this.timerDueAt = Number.POSITIVE_INFINITY;
  }

  private async execute(): Promise<void> {
    if (this.stopped) return;
    this.running = true;
    this.bucket.take(this.timers.now());
    try {
      await this.fn();
    } catch (err) {
      this.opts.onError?.(err);
    } finally {
      this.running = false;
    }
    if (this.stopped) return;
    this.schedule(this.opts.maxIntervalMs);
    if (this.requestedWhileRunning) {
      this.requestedWhileRunning = false;
      this.run();
    }
  }
}
