import { describe } from 'vitest';

// Kernel and e2e tests load BPF programs and build network namespaces: they need root.
// In CI (root) they must run; elsewhere they skip with the reason printed once.
export const isRoot = process.getuid?.() === 0;
const inCI = process.env.CI === 'true';

if (inCI && !isRoot) {
  throw new Error('CI=true but not running as root: the kernel and e2e tiers cannot run');
}

let explained = false;
export const describeRoot: typeof describe = isRoot
  ? describe
  : (((...args: Parameters<typeof describe>) => {
      if (!explained) {
        console.warn('skipping root-only tests: not running as root (they run in CI, which is root)');
        explained = true;
      }
      return describe.skip(...args);
    }) as typeof describe);
