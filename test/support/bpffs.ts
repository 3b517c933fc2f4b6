// bpffs for kernel and e2e tests: mounted at /sys/fs/bpf when missing, and a per-run directory
// under it that the caller removes in afterAll.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';

export const BPFFS = '/sys/fs/bpf';

function bpffsMounted(): boolean {
  return readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .some((line) => {
      const [, mountPoint, type] = line.split(' ');
      return mountPoint === BPFFS && type === 'bpf';
    });
}

export function ensureBpffs(): void {
  if (!bpffsMounted()) execFileSync('mount', ['-t', 'bpf', 'bpf', BPFFS]);
}

/** A fresh directory for this test run's pins, e.g. /sys/fs/bpf/kbp-test-layout-1234. */
export function makePinDir(label: string): string {
  ensureBpffs();
  const dir = join(BPFFS, `kbp-test-${label}-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir);
  return dir;
}

/** Unpins everything under the directory (pins are files on bpffs) and removes it. */
export function removePinDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** iproute2's own bpffs layout (tc/globals, with ip and xdp links to it), made by `tc` and `ip` on first use. */
const IPROUTE2_ENTRIES = ['ip', 'xdp', 'tc'].map((name) => join(BPFFS, name));

/**
 * Tests that run `tc filter show` or `ip link show` on BPF programs make iproute2 create its
 * layout under bpffs. Call before them; the returned function removes that layout again if the
 * tests created it.
 */
export function keepIproute2LayoutAsFound(): () => void {
  const existed = IPROUTE2_ENTRIES.map((path) => existsSync(path));
  return () => {
    IPROUTE2_ENTRIES.forEach((path, i) => {
      if (!existed[i]) rmSync(path, { recursive: true, force: true });
    });
  };
}
