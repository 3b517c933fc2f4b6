// What `kube-bpf-proxy run` loads before it starts: the static import closure of the executable
// for the agent's command (src/cli/main.ts, program.ts importing run.ts), as the compiled code
// keeps it (type-only imports are erased). Every module in it is evaluated on the event loop before
// the BPF load and the source's list begin, so the other commands, the lab, the bench, both sources
// and the rule modes stay out of it: they are imported when chosen.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, resolveImport } from '../support/source-imports.js';

/** Relative specifiers the compiled module imports at load time (not `import type`, not `import()`). */
function staticImports(text: string): string[] {
  const specs: string[] = [];
  const pattern = /^(?:import|export)\s+(type\s+)?(?:([^'";]*?)\s+from\s+)?['"](\.[^'"]+)['"]/gm;
  for (const match of text.matchAll(pattern)) {
    const [, typeOnly, clause = '', spec] = match;
    if (typeOnly) continue;
    const named = /^\{([^}]*)\}$/.exec(clause.trim());
    const bindings =
      named?.[1]
        ?.split(',')
        .map((b) => b.trim())
        .filter(Boolean) ?? [];
    if (named && bindings.length > 0 && bindings.every((b) => b.startsWith('type '))) continue;
    specs.push(spec!);
  }
  return specs;
}

/** Relative specifiers of `import('...')` written as a literal: the compiler follows these too. */
function literalDynamicImports(text: string): string[] {
  return [...text.matchAll(/\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g)].map((m) => m[1]!);
}

function closure(entries: string[], imports: (text: string) => string[] = staticImports): Set<string> {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file) || !file.endsWith('.ts')) return;
    seen.add(file);
    for (const spec of imports(readFileSync(join(ROOT, file), 'utf8'))) visit(resolveImport(file, spec));
  };
  for (const entry of entries) visit(entry);
  return seen;
}

describe("the agent's start-up imports", () => {
  const loaded = closure(['src/cli/main.ts', 'src/cli/program.ts', 'src/cli/run.ts']);

  it('hold the agent and the bpf data plane', () => {
    expect(loaded).toContain('src/cli/run.ts');
    expect(loaded).toContain('src/dataplanes/bpf/dataplane.ts');
  });

  it("leave the first sync's modules to run.ts, which imports them once the BPF load is under way", () => {
    const deferred = [
      'src/sources/host.ts',
      'src/host/interfaces.ts',
      'src/model/parse.ts',
      'src/model/tracker.ts',
      'src/brain/sync-loop.ts',
      'src/metrics/status-servers.ts',
    ];
    expect(deferred.filter((file) => loaded.has(file))).toEqual([]);
    const later = closure(['src/cli/run.ts'], (text) => [
      ...staticImports(text),
      ...literalDynamicImports(text),
    ]);
    for (const file of deferred) expect(later).toContain(file);
    // zod (~3 MiB of heap, tens of ms to load) comes with them, not before the BPF load.
    const zod = [...loaded].filter((file) => /from 'zod'/.test(readFileSync(join(ROOT, file), 'utf8')));
    expect(zod).toEqual([]);
  });

  it('leave out the other commands, the lab, the bench, the sources and the rule modes', () => {
    const unwanted = [...loaded].filter(
      (file) =>
        /^src\/cli\/(demo|render|list|trace|cleanup)\.ts$/.test(file) ||
        /^src\/(lab|sources\/(kube|manifests|reflector|protobuf))\b/.test(file) ||
        /^src\/dataplanes\/(iptables|nftables|ipvs)\//.test(file) ||
        file.startsWith('bench/'),
    );
    expect(unwanted).toEqual([]);
  });

  it('reads static imports as the compiler keeps them', () => {
    const text = [
      "import { a, type B } from './kept.js';",
      "import type { C } from './type-only.js';",
      "import { type D, type E } from './types-only.js';",
      "export { f } from './reexported.js';",
      "import './side-effect.js';",
      "const g = await import('./dynamic.js');",
    ].join('\n');
    expect(staticImports(text)).toEqual(['./kept.js', './reexported.js', './side-effect.js']);
  });
});

// The image is compiled by tsconfig.build.json from src/cli/main.ts, and the compiler follows every
// static and literal dynamic import: what it reaches is what the image ships.
describe("the image's build", () => {
  const shipped = closure(['src/cli/main.ts'], (text) => [
    ...staticImports(text),
    ...literalDynamicImports(text),
  ]);

  it('holds every command of the agent', () => {
    for (const command of ['run', 'render', 'list', 'trace', 'cleanup', 'version'])
      expect(shipped).toContain(`src/cli/${command}.ts`);
  });

  it('holds no bench, demo, lab or test code', () => {
    const tools = [...shipped].filter((file) =>
      /^(bench|test)\/|^src\/lab\/|^src\/cli\/(demo|bench)\.ts$/.test(file),
    );
    expect(tools).toEqual([]);
  });
});
