// The kube-bpf-proxy command tree: one subcommand per file in src/cli/.

import { Command } from 'commander';
import { registerVersionCommand, VERSION } from './version.js';

type Register = (program: Command) => void;

/** Each command's module, imported only when the command tree needs it: the agent's start does not
 * pay for the bench's, the demo's or the renderers' modules (~0.1 s of the cold start). */
const COMMANDS: Record<string, () => Promise<Register>> = {
  run: async () => (await import('./run.js')).registerRunCommand,
  demo: async () => (await import('./demo.js')).registerDemoCommand,
  render: async () => (await import('./render.js')).registerRenderCommand,
  list: async () => (await import('./list.js')).registerListCommand,
  trace: async () => (await import('./trace.js')).registerTraceCommand,
  cleanup: async () => (await import('./cleanup.js')).registerCleanupCommand,
  bench: async () => (await import('./bench.js')).registerBenchCommand,
  version: async () => registerVersionCommand,
};

/**
 * The tree for `argv` (as process.argv): the named command alone when the first argument names
 * one, else every command (help, an unknown command's error).
 */
export async function buildProgram(argv: readonly string[] = []): Promise<Command> {
  const program = new Command('kube-bpf-proxy')
    .description(
      'A kube-proxy replacement: kube-proxy semantics, carried by eBPF (or iptables, nftables, ipvs)',
    )
    .version(VERSION, '--version', 'print the version')
    .showHelpAfterError()
    .enablePositionalOptions();
  const named = argv[2];
  const wanted = named !== undefined && Object.hasOwn(COMMANDS, named) ? [named] : Object.keys(COMMANDS);
  const registers = await Promise.all(wanted.map((name) => COMMANDS[name]!()));
  for (const register of registers) register(program);
  return program;
}
