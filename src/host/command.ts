// Running host commands: the one place production code starts a program and reads its output.
// Data planes take a CommandRunner, so tests (and the lab) can run the same code in another
// network namespace.

import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export interface ExecResult {
  stdout: string;
  stderr: string;
  code: number;
}

/** The CommandRunner of this process's own network namespace. */
export async function runCommand(
  cmd: string,
  args: string[],
  opts: { allowFailure?: boolean; input?: string } = {},
): Promise<ExecResult> {
  try {
    if (opts.input !== undefined)
      return await runWithInput(cmd, args, opts.input, opts.allowFailure ?? false);
    const { stdout, stderr } = await execFileAsync(cmd, args, { maxBuffer: 256 * 1024 * 1024 });
    return { stdout, stderr, code: 0 };
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; code?: number | string };
    const result = {
      stdout: e.stdout ?? '',
      stderr: e.stderr ?? String(err),
      code: typeof e.code === 'number' ? e.code : 1,
    };
    if (opts.allowFailure) return result;
    throw new Error(`${cmd} ${args.join(' ')} failed (${result.code}): ${result.stderr.trim()}`);
  }
}

function runWithInput(
  cmd: string,
  args: string[],
  input: string,
  allowFailure: boolean,
): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('error', reject);
    child.on('close', (code) => {
      const result = { stdout, stderr, code: code ?? 1 };
      if (result.code !== 0 && !allowFailure) {
        reject(new Error(`${cmd} ${args.join(' ')} failed (${result.code}): ${stderr.trim()}`));
      } else {
        resolve(result);
      }
    });
    child.stdin.end(input);
  });
}

/** Runs a command; throws on a non-zero exit unless allowFailure. */
export type CommandRunner = (
  cmd: string,
  args: string[],
  opts?: { input?: string; allowFailure?: boolean },
) => Promise<ExecResult>;
