// Pin directories for kernel and e2e tests, made by the product's own makeBpffsDir: it mounts
// bpffs at /sys/fs/bpf when missing, as the agent does, so no test hides a node without bpffs.

import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BPFFS_ROOT, makeBpffsDir } from '../../src/host/bpffs.js';
import { silentLogger } from '../../src/logger.js';

/** A fresh directory for this test run's pins, e.g. /sys/fs/bpf/kbp-test-layout-1234. */
export function makePinDir(label: string): string {
  const dir = join(BPFFS_ROOT, `kbp-test-${label}-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  makeBpffsDir(dir, silentLogger);
  return dir;
}

/** Unpins everything under the directory (pins are files on bpffs) and removes it. */
export function removePinDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** iproute2's own bpffs layout (tc/globals, with ip and xdp links to it), made by `tc` and `ip` on first use. */
const IPROUTE2_ENTRIES = ['ip', 'xdp', 'tc'].map((name) => join(BPFFS_ROOT, name));

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
