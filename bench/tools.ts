// The benchmark's helper programs: the C backend and load generator (compiled from bench/c on
// first use, with the same clang the BPF build uses), wrk, and the agent's own CLI entry point.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCommand } from '../src/host/command.js';

/** A path under the package root, from bench/ (vitest) or from dist/bench/ (built). */
function fromRoot(relative: string): string {
  const fromSource = fileURLToPath(new URL(`../${relative}`, import.meta.url));
  if (existsSync(fromSource)) return fromSource;
  return fileURLToPath(new URL(`../../${relative}`, import.meta.url));
}

/** dist/src/cli/main.js: the agent runs as its own process, as in production. */
export function cliEntryPoint(): string {
  const path = fromRoot('dist/src/cli/main.js');
  if (!existsSync(path)) throw new Error(`${path} not found: run \`npm run build\` first`);
  return path;
}

/**
 * The words that start the agent as the image does: through its entry point
 * (scripts/image-entrypoint.sh: V8's semi-space, and the old generation capped below the memory
 * limit), with this checkout's Node and `cli`. With `cgroupDir`, the process first joins that
 * memory cgroup, whose limit the entry point then reads.
 */
export function imageEntrypoint(cli: string, cgroupDir?: string): string[] {
  const env = ['env', `KBP_NODE=${process.execPath}`, `KBP_MAIN=${cli}`];
  const entrypoint = fromRoot('scripts/image-entrypoint.sh');
  if (!cgroupDir) return [...env, 'sh', entrypoint];
  const joining = ['sh', '-c', 'echo $$ > "$0/cgroup.procs" && exec sh "$@"', cgroupDir];
  return [...env, `KBP_CGROUP_ROOT=${cgroupDir}`, ...joining, entrypoint];
}

export interface Tools {
  backend: string;
  loadgen: string;
}

export async function compileTools(workDir: string): Promise<Tools> {
  const tools = { backend: join(workDir, 'bench-backend'), loadgen: join(workDir, 'bench-loadgen') };
  for (const [name, out] of [
    ['backend.c', tools.backend],
    ['loadgen.c', tools.loadgen],
  ] as const) {
    await runCommand('clang', ['-O2', '-Wall', '-Wextra', '-Werror', '-o', out, fromRoot(`bench/c/${name}`)]);
  }
  return tools;
}

/** "wrk 4.1.0 [epoll] ..." → "4.1.0". */
export function parseWrkVersion(text: string): string {
  return /wrk\s+(\S+)/.exec(text)?.[1] ?? 'unknown';
}

export interface WrkResult {
  requestsPerSec: number;
  /** Requests completed in the run ("N requests in Ts"): the units of its CPU per request. */
  requests: number;
  /** Socket errors and non-2xx responses: a run with any is reported, not hidden. */
  errors: number;
}

export function parseWrk(output: string): WrkResult {
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(output);
  const requests = /(\d+) requests in /.exec(output);
  if (!rps?.[1] || !requests?.[1])
    throw new Error(`wrk printed no Requests/sec or request count:\n${output}`);
  let errors = 0;
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(output);
  if (socket) errors += socket.slice(1).reduce((s, n) => s + Number(n), 0);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(output);
  if (non2xx?.[1]) errors += Number(non2xx[1]);
  return { requestsPerSec: Number(rps[1]), requests: Number(requests[1]), errors };
}

export interface LoadgenSummary {
  attempts: number;
  errors: number;
  elapsedUs: number;
}

export function parseLoadgen(stdout: string): LoadgenSummary {
  const line = stdout.trim().split('\n').at(-1) ?? '';
  const parsed = JSON.parse(line) as LoadgenSummary;
  if (typeof parsed.attempts !== 'number') throw new Error(`loadgen printed ${line}`);
  return parsed;
}

/** Columns of the loadgen's sample file ("a b" per line). */
export function parseColumns(text: string, columns: number): number[][] {
  const out: number[][] = Array.from({ length: columns }, () => []);
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const parts = line.split(' ');
    for (let c = 0; c < columns; c++) out[c]?.push(Number(parts[c]));
  }
  return out;
}
