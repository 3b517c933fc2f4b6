import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

// The count line CI reads, from reports written by the real vitest: a failed test nested in two
// describe blocks, a passing test, and a file that cannot load.
const fixtures = mkdtempSync(join(tmpdir(), 'kbp-summarize-'));
afterAll(() => rmSync(fixtures, { recursive: true, force: true }));

function vitestReport(files: Record<string, string>): string {
  for (const [name, text] of Object.entries(files)) writeFileSync(join(fixtures, name), text);
  const report = join(fixtures, 'report.json');
  // vitest exits 1 when a test failed: the report is what matters here.
  spawnSync('npx', ['vitest', 'run', '--root', fixtures, '--reporter=json', `--outputFile=${report}`], {
    encoding: 'utf8',
  });
  return report;
}

function summarize(...args: string[]): { line: string; status: number } {
  const run = spawnSync('node', ['scripts/summarize-tests.mjs', ...args], { encoding: 'utf8' });
  return { line: run.stdout.trim(), status: run.status ?? -1 };
}

describe('scripts/summarize-tests.mjs', () => {
  const report = vitestReport({
    'nested.test.ts': `import { describe, expect, it } from 'vitest';
describe('outer', () => { describe('inner', () => {
  it('fails', () => expect(1).toBe(2));
  it('passes', () => {});
}); });`,
    'broken.test.ts': `import './no-such-module.js';
import { it } from 'vitest';
it('never runs', () => {});`,
  });

  it('counts one failed test once, however deep its describe blocks, and a file that cannot load once', () => {
    expect(summarize('--label', 'unit', report)).toEqual({
      line: 'unit: 1 passed, 2 failed, 0 skipped',
      status: 1,
    });
  });

  it('adds the failed checks, and a missing report as a tier that did not finish', () => {
    const { line, status } = summarize('--checks-failed', '2', report, join(fixtures, 'absent.json'));
    expect(line.split('\n').at(-1)).toBe('1 passed, 5 failed, 0 skipped');
    expect(status).toBe(1);
  });

  it('passes a clean report', () => {
    const clean = join(fixtures, 'clean.json');
    writeFileSync(
      clean,
      JSON.stringify({
        numPassedTests: 3,
        numFailedTests: 0,
        numPendingTests: 1,
        numTodoTests: 0,
        testResults: [],
      }),
    );
    expect(summarize(clean)).toEqual({ line: '3 passed, 0 failed, 1 skipped', status: 0 });
  });

  it("counts each of the soak's checks as a test in the total, beside the vitest tiers", () => {
    const soak = join(fixtures, 'soak.json');
    const checks = [true, true, false].map((passed, i) => ({ name: `check ${i}`, passed, detail: '' }));
    writeFileSync(soak, JSON.stringify({ mode: 'bpf', checks }));
    const { line, status } = summarize('--label', 'total', report, soak);
    expect(line).toBe('total: 3 passed, 3 failed, 0 skipped');
    expect(status).toBe(1);
  });
});
