import { describe, expect, it } from 'vitest';
import { BoundedFrequencyRunner, type RunnerTimers, TokenBucket } from '../../src/brain/runner.js';

/** A manual clock: timers fire only when the test advances time. */
class ManualTimers implements RunnerTimers {
  time = 0;
  private queue: { at: number; fn: () => void; id: number }[] = [];
  private nextId = 1;
  now(): number {
    return this.time;
  }
  setTimeout(fn: () => void, ms: number): unknown {
    const id = this.nextId++;
    this.queue.push({ at: this.time + ms, fn, id });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.queue = this.queue.filter((t) => t.id !== handle);
  }
  async advance(ms: number): Promise<void> {
    const end = this.time + ms;
    for (;;) {
      this.queue.sort((a, b) => a.at - b.at);
      const next = this.queue[0];
      if (!next || next.at > end) break;
      this.queue.shift();
      this.time = next.at;
      next.fn();
      for (let i = 0; i < 5; i++) await Promise.resolve();
    }
    this.time = end;
  }
}

describe('TokenBucket', () => {
  it('allows a burst, then one token per interval', () => {
    const bucket = new TokenBucket(2, 1000, 0);
    expect(bucket.waitMs(0)).toBe(0);
    bucket.take(0);
    expect(bucket.waitMs(0)).toBe(0);
    bucket.take(0);
    expect(bucket.waitMs(0)).toBe(1000);
    expect(bucket.waitMs(400)).toBe(600);
    expect(bucket.waitMs(1000)).toBe(0);
  });
});

describe('BoundedFrequencyRunner (minSyncPeriod, syncPeriod, burst 2)', () => {
  function setup() {
    const timers = new ManualTimers();
    const runs: number[] = [];
    const runner = new BoundedFrequencyRunner(
      async () => {
        runs.push(timers.now());
      },
      { minIntervalMs: 1000, maxIntervalMs: 30_000, burst: 2, timers },
    );
    return { timers, runs, runner };
  }

  it('runs at once for the first two requests, then at most once per minInterval', async () => {
    const { timers, runs, runner } = setup();
    runner.run();
    await timers.advance(0);
    runner.run();
    await timers.advance(0);
    runner.run();
    runner.run();
    await timers.advance(0);
    expect(runs).toEqual([0, 0]);
    await timers.advance(1000);
    expect(runs).toEqual([0, 0, 1000]);
  });

  it('coalesces many requests within one interval into one run', async () => {
    const { timers, runs, runner } = setup();
    runner.run();
    runner.run();
    await timers.advance(0);
    runner.run();
    await timers.advance(0);
    for (let i = 0; i < 10; i++) runner.run();
    await timers.advance(2500);
    expect(runs).toEqual([0, 0, 1000]);
  });

  it('runs every maxInterval without requests', async () => {
    const { timers, runs, runner } = setup();
    runner.start();
    await timers.advance(65_000);
    expect(runs).toEqual([0, 30_000, 60_000]);
  });

  it('retries after a failure no sooner than the rate limit allows', async () => {
    const { timers, runs, runner } = setup();
    runner.start();
    await timers.advance(0);
    runner.retryAfter(5000);
    await timers.advance(6000);
    expect(runs).toEqual([0, 5000]);
  });

  it('stops scheduling after stop()', async () => {
    const { timers, runs, runner } = setup();
    runner.start();
    await timers.advance(0);
    await runner.stop();
    runner.run();
    await timers.advance(100_000);
    expect(runs).toEqual([0]);
  });
});
