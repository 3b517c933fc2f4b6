#!/usr/bin/env node
// The benchmark's own entry point, beside the agent's (src/cli/main.ts), which the image leaves
// out: `sudo node dist/bench/main.js [options]`, or `sudo npm run bench -- [options]`. From a
// checkout, `kube-bpf-proxy bench [options]` runs the same command (bench/cli.ts).

import { benchCommand } from './cli.js';

try {
  await benchCommand('kube-bpf-proxy-bench').parseAsync(process.argv);
} catch (err) {
  process.stderr.write(`kube-bpf-proxy-bench: ${(err as Error).message}\n`);
  process.exitCode = 1;
}
