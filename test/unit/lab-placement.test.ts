// Lab code lives where its users are (issue 29): a file in src/lab/ serves the demo (src/cli/demo.ts),
// the bench (bench/) or a script's entry point (scripts/conformance.sh runs
// dist/src/lab/real-cluster/main.js); lab code only the tests use lives with them, in
// test/support/lab/. A lab file stays in src/lab/ only while something outside test/ reaches it,
// through imports or through the scripts it starts as processes (compiledSibling in src/lab/netns.ts).

import { readdirSync, readFileSync } from 'node:fs';
import { join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';
import { importsOf, ROOT, resolveImport, sourceFiles } from '../support/source-imports.js';

/** Repository paths of the .ts files a file imports or starts (`compiledSibling(import.meta.url, 'x.js')`). */
function edgesOf(file: string, text: string): string[] {
  const started = [...text.matchAll(/compiledSibling\(\s*import\.meta\.url,\s*'([^']+)'\s*\)/g)].map(
    (m) => m[1]!,
  );
  return [...importsOf(text), ...started.map((s) => `./${s}`)].map((spec) => resolveImport(file, spec));
}

/** The src/ files the scripts run as compiled entry points (`node dist/src/....js`). */
function scriptEntries(texts: string[]): string[] {
  return texts.flatMap((text) =>
    [...text.matchAll(/\bdist\/(src\/[\w/.-]+)\.js\b/g)].map((m) => normalize(`${m[1]}.ts`)),
  );
}

/** Every file reached from `roots` along `edges`. */
function reached(roots: string[], edges: (file: string) => string[]): Set<string> {
  const seen = new Set<string>();
  const stack = [...roots];
  for (let file = stack.pop(); file !== undefined; file = stack.pop()) {
    if (seen.has(file)) continue;
    seen.add(file);
    stack.push(...edges(file));
  }
  return seen;
}

/** The lab files nothing outside the tests reaches: they belong in test/support/lab/. */
function testOnlyLab(labFiles: string[], roots: string[], edges: (file: string) => string[]): string[] {
  const used = reached(roots, edges);
  return labFiles.filter((file) => !used.has(file));
}

describe('lab placement', () => {
  const shipped = ['src', 'bench', 'native'].flatMap(sourceFiles);
  const labFiles = shipped.filter((file) => file.startsWith('src/lab/'));
  const scripts = readdirSync(join(ROOT, 'scripts'))
    .filter((name) => name.endsWith('.sh'))
    .map((name) => readFileSync(join(ROOT, 'scripts', name), 'utf8'));
  const entries = scriptEntries(scripts);
  const roots = [...shipped.filter((file) => !file.startsWith('src/lab/')), ...entries];
  const edges = (file: string) =>
    file.endsWith('.ts') && shipped.includes(file)
      ? edgesOf(file, readFileSync(join(ROOT, file), 'utf8'))
      : [];

  it("finds the lab, its started scripts and the scripts' entry points", () => {
    expect(labFiles).toContain('src/lab/netns.ts');
    expect(entries).toContain('src/lab/real-cluster/main.ts');
    expect(edges('src/lab/netns.ts')).toContain('src/lab/backend-server.ts');
  });

  it('every file in src/lab/ has a user outside the tests', () => {
    expect(testOnlyLab(labFiles, roots, edges)).toEqual([]);
  });

  it('the test-only lab code is under test/support/lab/, used by the tests', () => {
    const testLab = sourceFiles('test/support/lab');
    expect(testLab).toContain('test/support/lab/streams.ts');
    const testFiles = sourceFiles('test');
    const users = testFiles.filter((file) =>
      edgesOf(file, readFileSync(join(ROOT, file), 'utf8')).some((target) => testLab.includes(target)),
    );
    expect(users).toContain('test/e2e/migration.test.ts');
  });

  it('tells a file only the tests reach from one the bench, the demo or a script reaches', () => {
    const graph: Record<string, string[]> = {
      'bench/main.ts': ['src/lab/a.ts'],
      'src/lab/a.ts': ['src/lab/b.ts'],
      'src/lab/c.ts': ['src/lab/d.ts'],
      'test/e2e/x.test.ts': ['src/lab/e.ts'],
    };
    const lab = ['src/lab/a.ts', 'src/lab/b.ts', 'src/lab/c.ts', 'src/lab/d.ts', 'src/lab/e.ts'];
    const roots = ['bench/main.ts', ...scriptEntries(['exec node dist/src/lab/c.js "$@"'])];
    expect(testOnlyLab(lab, roots, (f) => graph[f] ?? [])).toEqual(['src/lab/e.ts']);
    expect(
      edgesOf('src/lab/netns.ts', "const s = compiledSibling(import.meta.url, 'syn-flood.js');\n"),
    ).toEqual(['src/lab/syn-flood.ts']);
  });
});
