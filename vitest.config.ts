import { defineConfig } from 'vitest/config';

// Three tiers (ARCHITECTURE.md, and `bash scripts/test.sh unit|kernel|e2e` runs one): unit tests are pure; kernel and e2e tests need root and a real kernel.
// Root tiers run one file at a time: they share the host's bpffs and iptables backend.
export default defineConfig({
  test: {
    projects: [
      { test: { name: 'unit', include: ['test/unit/**/*.test.ts'], testTimeout: 20_000 } },
      {
        test: {
          name: 'kernel',
          include: ['test/kernel/**/*.test.ts'],
          // Fails a test that leaves a socket hook of ours at the machine's cgroup2 root.
          setupFiles: ['test/support/cgroup-root-guard.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          fileParallelism: false,
        },
      },
      {
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          // Fails a test that leaves a socket hook of ours at the machine's cgroup2 root.
          setupFiles: ['test/support/cgroup-root-guard.ts'],
          testTimeout: 180_000,
          hookTimeout: 180_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
