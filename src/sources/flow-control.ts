// Pacing of requests to the API server: retry backoff after failures, and the client-side
// rate limit kube-proxy's clientConnection.qps/burst impose on every request (client-go applies it
// per request; the watches of a healthy agent make a handful of requests an hour, a broken
// connection loop must not make thousands).

export interface BackoffPolicy {
  initialMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { initialMs: 200, maxMs: 30_000 };

/**
 * Delay before retry number `attempt` (0 for the first retry): the ceiling doubles from initialMs
 * up to maxMs and the delay is drawn from [ceiling/2, ceiling] ("equal jitter"), so that the agents
 * of a whole cluster, cut off together by one API server restart, do not reconnect in lockstep.
 * `random` is a number in [0, 1).
 */
export function backoffDelayMs(policy: BackoffPolicy, attempt: number, random: number): number {
  const ceiling = Math.min(policy.maxMs, policy.initialMs * 2 ** Math.min(attempt, 31));
  return Math.round(ceiling / 2 + (ceiling / 2) * random);
}

/**
 * Token bucket (client-go's flowcontrol semantics): `burst` requests may start at once, then
 * `qps` per second. A qps of 0 or less disables the limit, as a negative qps does in client-go.
 */
export class RequestRateLimiter {
  private tokens: number;
  private lastRefill: number;

  constructor(
    private readonly qps: number,
    private readonly burst: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = Math.max(1, burst);
    this.lastRefill = now();
  }

  /** Takes a token and returns how many milliseconds the caller must wait before its request. */
  reserve(): number {
    if (this.qps <= 0) return 0;
    const now = this.now();
    const capacity = Math.max(1, this.burst);
    this.tokens = Math.min(capacity, this.tokens + ((now - this.lastRefill) / 1000) * this.qps);
    this.lastRefill = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens / this.qps) * 1000);
  }
}
