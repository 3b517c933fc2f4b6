// Runs code with this thread inside a network namespace. BPF_PROG_TEST_RUN builds its skb in the
// caller's namespace, so bpf_fib_lookup answers from routes and neighbours a test sets up there;
// attach calls resolve interfaces there. koffi calls run on the JS thread, which is the one moved.

import { CLONE_NEWNET, closeFd, openPath, setns } from '../../native/libc.js';

/** Moves this thread into /run/netns/<name>; the returned function moves it back. */
export function enterNetns(name: string): () => void {
  const home = openPath('/proc/self/ns/net');
  const target = openPath(`/run/netns/${name}`);
  try {
    setns(target, CLONE_NEWNET);
  } catch (err) {
    closeFd(home);
    throw err;
  } finally {
    closeFd(target);
  }
  return () => {
    try {
      setns(home, CLONE_NEWNET);
    } finally {
      closeFd(home);
    }
  };
}

export function inNetns<T>(name: string, fn: () => T): T {
  const leave = enterNetns(name);
  try {
    return fn();
  } finally {
    leave();
  }
}
