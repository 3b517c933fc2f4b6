// Reading the repository's TypeScript imports as text, for the tests that check what imports what.

import { readdirSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';

/** The repository root, from this file. */
export const ROOT = join(dirname(new URL(import.meta.url).pathname), '..', '..');

/** The .ts files under `dir`, as repository paths. */
export function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => relative(ROOT, join(e.parentPath, e.name)));
}

/** The repository path of the .ts file a relative specifier in `file` names ("./x.js" → "<dir>/x.ts"). */
export function resolveImport(file: string, spec: string): string {
  return normalize(join(dirname(file), spec)).replace(/\.js$/, '.ts');
}

/** Relative module specifiers of static imports, re-exports and dynamic imports. */
export function importsOf(text: string): string[] {
  const specs: string[] = [];
  const pattern = /(?:\bfrom\s+|\bimport\s*\(\s*|^import\s+)['"](\.[^'"]+)['"]/gm;
  for (const match of text.matchAll(pattern)) specs.push(match[1]!);
  return specs;
}
