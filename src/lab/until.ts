// Polls a condition until it holds, bounded in time: for tests that wait on the kernel or on a
// process they started.

/** Resolves with the milliseconds it took; throws naming `what` once `timeoutMs` has passed. */
export async function until(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<number> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > timeoutMs) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return Date.now() - started;
}
