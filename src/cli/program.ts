// The kube-bpf-proxy command tree: one subcommand per file in src/cli/.

import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { registerVersionCommand, VERSION } from './version.js';

type Register = (program: Command) => void;

/** Each command's module, imported only when the command tree needs it: the agent's start does not
 * pay for the demo's or the renderers' modules (~0.1 s of the cold start). */
const COMMANDS: Record<string, () => Promise<Register>> = {
  run: async () => (await import('./run.js')).registerRunCommand,
  demo: () => importTool('demo', './demo.js', 'registerDemoCommand'),
  render: async () => (await import('./render.js')).registerRenderCommand,
  list: async () => (await import('./list.js')).registerListCommand,
  trace: async () => (await import('./trace.js')).registerTraceCommand,
  cleanup: async () => (await import('./cleanup.js')).registerCleanupCommand,
  bench: () => importTool('bench', '../../bench/cli.js', 'registerBenchCommand'),
  version: async () => registerVersionCommand,
};

/**
 * The demo and the bench build labs of network namespaces (and the bench a Kubernetes control
 * plane): tools of a checkout, not of the agent. Their modules (src/cli/demo.ts, and bench/cli.ts,
 * which has its own entry point, bench/main.ts) are named by a computed specifier, which the
 * compiler does not follow, so the image's build (tsconfig.build.json, from main.ts) leaves them
 * and the lab code out. In the image the commands say so.
 */
async function importTool(name: 'demo' | 'bench', path: string, exportName: string): Promise<Register> {
  const url = new URL(path, import.meta.url);
  try {
    return (await import(url.href))[exportName] as Register;
  } catch (err) {
    // Only the tool's own module missing means this build left it out; a module the tool imports
    // missing is a broken build, and says so.
    const missing = (err as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND';
    if (!missing || !(err as Error).message.includes(`'${fileURLToPath(url)}'`)) throw err;
    return toolMissing(name);
  }
}

function toolMissing(name: string): Register {
  return (program) =>
    program
      .command(name)
      .description(`(not in this build) the ${name} runs from a checkout of kube-bpf-proxy`)
      .allowUnknownOption()
      .action(() => {
        throw new Error(
          `${name} is a tool of a checkout, not part of this build (the agent image): run it from a clone`,
        );
      });
}

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
