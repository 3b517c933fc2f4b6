// One task at a time, in order, for the bpf data plane's background work.

/** Runs tasks one after the other: discovery passes never overwrite a newer snapshot with an
 * older one, and GC passes (each in slices, between which syncs run) never overlap. */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.tail.then(task);
    this.tail = result.catch(() => {});
    return result;
  }

  /** Resolves when every task queued so far has settled. */
  async idle(): Promise<void> {
    await this.tail;
  }
}
