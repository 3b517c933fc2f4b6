#!/usr/bin/env node
// The kube-bpf-proxy executable.

import { buildProgram } from './program.js';

try {
  await (await buildProgram(process.argv)).parseAsync(process.argv);
} catch (err) {
  process.stderr.write(`kube-bpf-proxy: ${(err as Error).message}\n`);
  process.exitCode = 1;
}
