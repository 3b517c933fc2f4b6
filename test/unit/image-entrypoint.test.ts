// The image's entry point (scripts/image-entrypoint.sh) sizes V8's heap to the container's memory
// limit: these run it with `echo` as node against cgroup files a temporary folder holds.

import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ROOT } from '../support/source-imports.js';

const ENTRYPOINT = join(ROOT, 'scripts/image-entrypoint.sh');
const MiB = 1024 * 1024;
let cgroupRoot = '';

/** The command line the entry point would exec, with these cgroup files under a fresh root. */
function commandLine(files: Record<string, string>, nodeOptions = '', memoryLimit = ''): string {
  cgroupRoot = mkdtempSync(join(tmpdir(), 'kbp-entrypoint-'));
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(dirname(join(cgroupRoot, file)), { recursive: true });
    writeFileSync(join(cgroupRoot, file), `${text}\n`);
  }
  const env = {
    PATH: process.env.PATH,
    KBP_CGROUP_ROOT: cgroupRoot,
    KBP_NODE: 'echo',
    KBP_MAIN: 'main.js',
    NODE_OPTIONS: nodeOptions,
    KBP_MEMORY_LIMIT: memoryLimit,
  };
  return execFileSync('sh', [ENTRYPOINT, 'run', '--config', 'c'], { env, encoding: 'utf8' }).trim();
}

afterEach(() => rmSync(cgroupRoot, { recursive: true, force: true }));

describe('the image entry point', () => {
  it('caps the old generation at the cgroup v2 limit less the reserve (64 MiB + 3 semi-spaces)', () => {
    expect(commandLine({ 'memory.max': String(512 * MiB) })).toBe(
      '--max-semi-space-size=8 --max-old-space-size=424 main.js run --config c',
    );
  });

  it("reads cgroup v1's memory controller, in a container's layout and inside the hierarchy", () => {
    expect(commandLine({ 'memory/memory.limit_in_bytes': String(2048 * MiB) })).toContain(
      '--max-old-space-size=1960',
    );
    expect(commandLine({ 'memory.limit_in_bytes': String(1024 * MiB) })).toContain(
      '--max-old-space-size=936',
    );
  });

  it("takes the chart's limit from KBP_MEMORY_LIMIT before the cgroup's files", () => {
    expect(commandLine({ 'memory.max': 'max' }, '', String(1024 * MiB))).toContain(
      '--max-old-space-size=936',
    );
    expect(commandLine({ 'memory.max': String(512 * MiB) }, '', String(2048 * MiB))).toContain(
      '--max-old-space-size=1960',
    );
    expect(() => commandLine({}, '', '1Gi')).toThrow(/KBP_MEMORY_LIMIT is not a number of bytes: 1Gi/);
  });

  it('sets only the semi-space without a limit', () => {
    expect(commandLine({ 'memory.max': 'max' })).toBe('--max-semi-space-size=8 main.js run --config c');
    expect(commandLine({ 'memory/memory.limit_in_bytes': '9223372036854771712' })).toBe(
      '--max-semi-space-size=8 main.js run --config c',
    );
    expect(commandLine({})).toBe('--max-semi-space-size=8 main.js run --config c');
  });

  it('keeps a floor of 64 MiB under a tiny limit', () => {
    expect(commandLine({ 'memory.max': String(100 * MiB) })).toContain('--max-old-space-size=64');
  });

  it('leaves a heap flag the user set in NODE_OPTIONS alone', () => {
    expect(commandLine({ 'memory.max': String(512 * MiB) }, '--max-old-space-size=300')).toBe(
      '--max-semi-space-size=8 main.js run --config c',
    );
    expect(commandLine({ 'memory.max': String(512 * MiB) }, '--max-semi-space-size=2')).toBe(
      '--max-old-space-size=424 main.js run --config c',
    );
  });
});
