// The kube-bpf-proxy command tree: one subcommand per file in src/cli/.

import { Command } from 'commander';
import { registerBenchCommand } from './bench.js';
import { registerCleanupCommand } from './cleanup.js';
import { registerDemoCommand } from './demo.js';
import { registerListCommand } from './list.js';
import { registerRenderCommand } from './render.js';
import { registerRunCommand } from './run.js';
import { registerTraceCommand } from './trace.js';
import { registerVersionCommand, VERSION } from './version.js';

export function buildProgram(): Command {
  const program = new Command('kube-bpf-proxy')
    .description(
      'A kube-proxy replacement: kube-proxy semantics, carried by eBPF (or iptables, nftables, ipvs)',
    )
    .version(VERSION, '--version', 'print the version')
    .showHelpAfterError()
    .enablePositionalOptions();
  registerRunCommand(program);
  registerDemoCommand(program);
  registerRenderCommand(program);
  registerListCommand(program);
  registerTraceCommand(program);
  registerCleanupCommand(program);
  registerBenchCommand(program);
  registerVersionCommand(program);
  return program;
}
