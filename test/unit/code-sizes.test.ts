// Issue 29's size goals, kept true: no source file over 600 lines (src/, bench/, native/, scripts/,
// bpf/) and no function over 100 lines in the TypeScript of src/, bench/ and native/, except the
// declarative tables named below. The tests themselves are not held to these (a test file is a
// list of cases). Functions are found by the TypeScript parser: declarations, methods, arrow
// functions and function expressions, each counted from its first line to its last.

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/source-imports.js';

const MAX_FILE_LINES = 600;
const MAX_FUNCTION_LINES = 100;
/** Functions that are one declarative table: each line a metric's or an option's declaration. */
const TABLES = new Set(['src/metrics/kube-proxy.ts:createKubeProxyMetrics']);

const SOURCES = execFileSync('git', ['ls-files', 'src', 'bench', 'native', 'scripts', 'bpf'], {
  cwd: ROOT,
  encoding: 'utf8',
})
  .split('\n')
  .filter((f) => /\.(ts|mjs|c|h|sh)$/.test(f) && !f.startsWith('bench/results/'));

const lineCount = (text: string) => text.split('\n').length - (text.endsWith('\n') ? 1 : 0);

interface FunctionSize {
  name: string;
  lines: number;
}

/** The name a function goes by: its own, or the variable, property or call it is given to. */
function nameOf(node: ts.SignatureDeclaration, file: ts.SourceFile): string {
  if (node.name) return node.name.getText(file);
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent)) return parent.name.getText(file);
  if (ts.isCallExpression(parent)) return `(given to ${parent.expression.getText(file).slice(0, 40)})`;
  return '(anonymous)';
}

/** Every function with a body in `text`, with its length in lines. */
function functionSizes(path: string, text: string): FunctionSize[] {
  const file = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const sizes: FunctionSize[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
      const last = file.getLineAndCharacterOfPosition(node.end).line;
      sizes.push({ name: nameOf(node, file), lines: last - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return sizes;
}

describe('code sizes', () => {
  it('finds the sources it measures', () => {
    expect(SOURCES).toContain('src/brain/decide.ts');
    expect(SOURCES).toContain('bpf/lb.c');
  });

  it(`no source file is over ${MAX_FILE_LINES} lines`, () => {
    const long = SOURCES.map((f) => `${f}: ${lineCount(readFileSync(join(ROOT, f), 'utf8'))}`).filter(
      (row) => Number(row.split(': ')[1]) > MAX_FILE_LINES,
    );
    expect(long).toEqual([]);
  });

  it(`no function is over ${MAX_FUNCTION_LINES} lines but the declarative tables`, () => {
    const long = SOURCES.filter((f) => f.endsWith('.ts') && !f.startsWith('scripts/')).flatMap((f) =>
      functionSizes(f, readFileSync(join(ROOT, f), 'utf8'))
        .filter((fn) => fn.lines > MAX_FUNCTION_LINES && !TABLES.has(`${f}:${fn.name}`))
        .map((fn) => `${f}:${fn.name} ${fn.lines}`),
    );
    expect(long).toEqual([]);
  });

  it('measures functions of every kind, named as the code names them', () => {
    const text = [
      'function a() {\n  return 1;\n}',
      'const b = (x: number) => {\n  return x;\n};',
      'class C {\n  m(): void {\n    run(() => 0);\n  }\n}',
    ].join('\n');
    expect(functionSizes('x.ts', text)).toEqual([
      { name: 'a', lines: 3 },
      { name: 'b', lines: 3 },
      { name: 'm', lines: 3 },
      { name: '(given to run)', lines: 1 },
    ]);
  });
});
