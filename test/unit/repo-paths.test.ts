// Every repository path that a comment or a doc names must exist, so that a reader who follows
// one lands somewhere. A path is resolved against the naming file's folder and each folder above
// it (a chart's template names chart-relative paths, a source file src/-relative ones), and may be
// a glob; src/ is a base too (docs name src/-relative paths such as model/parse.ts); generated files (git-ignored: bpf/*.o, dist/, .tools/, .cache/) count as existing.
// Upstream facts are cited by their upstream file and version (kube-proxy's pkg/..., Cilium's
// bpf/lib/..., katran/lib/bpf/...), and system headers by their include path: neither is a path of this repository.

import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/source-imports.js';

const TRACKED = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' })
  .split('\n')
  // This file's own examples name paths that do not exist on purpose.
  .filter((f) => f !== '' && !f.startsWith('bench/results/') && f !== 'test/unit/repo-paths.test.ts');

/** A path-like token: folders and a file with one of the extensions this repository names. */
const PATH =
  /(?<![\w./@:$-])((?:\.{1,2}\/)*[A-Za-z_.][\w.-]*(?:\/[\w.*-]+)+\.(?:ts|mjs|c|h|sh|md|json|yaml|o|tpl|txt|png|svg))\b/g;
/** A folder of this repository, named with its trailing slash (bench/results/<run>/). */
const FOLDER =
  /(?<![\w./@:$-])((?:bench|bpf|charts|docs|native|scripts|src|test)(?:\/[\w.-]+)*\/)(?![\w.*-])/g;
/** A top-level document named without a folder (README.md, DESIGN.md). */
const TOP_LEVEL_DOC = /(?<![\w./-])([A-Z][A-Z_]+\.md)\b/g;
/** Paths that are not this repository's: upstream projects' files and system headers. */
const FOREIGN =
  /^(pkg|cmd|staging|k8s\.io|github\.com|bpf\/lib|katran|lib|include|tools|kernel|fs|mm|drivers|arch|net\/(?:core|ipv4|ipv6|netfilter|sched)|linux|sys|netinet|arpa|asm|bpf\/bpf_[a-z_]+\.h$)/;

/** The text a file says to readers: a doc whole; in code, its comments only. */
function commentText(path: string, text: string): string {
  if (path.endsWith('.md')) return text;
  if (/\.(sh|yaml|tpl)$/.test(path)) {
    return [...text.matchAll(/(?:^|\s)#(?!include|define|if|endif|else|pragma|undef)([^\n]*)/g)]
      .map((m) => m[1])
      .join('\n');
  }
  return [...text.matchAll(/\/\/([^\n]*)|\/\*([\s\S]*?)\*\//g)].map((m) => m[1] ?? m[2]).join('\n');
}

function namedPaths(path: string, text: string): string[] {
  const said = commentText(path, text);
  const found = [...said.matchAll(PATH), ...said.matchAll(FOLDER), ...said.matchAll(TOP_LEVEL_DOC)].map(
    (m) => m[1] as string,
  );
  return [...new Set(found)].filter((p) => !FOREIGN.test(p));
}

/** A glob (`*`, `**`) as a regular expression over repository paths. */
function globPattern(glob: string): RegExp {
  const escaped = glob.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`^${escaped.replace(/\*\*\//g, '(?:.*/)?').replace(/\*/g, '[^/]*')}$`);
}

function exists(path: string): boolean {
  if (!path.includes('*')) return existsSync(join(ROOT, path));
  const pattern = globPattern(path);
  return TRACKED.some((f) => pattern.test(f));
}

function ignoredByGit(path: string): boolean {
  try {
    execFileSync('git', ['check-ignore', '-q', '--no-index', path], { cwd: ROOT, stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function resolves(from: string, named: string): boolean {
  const bases = ['src'];
  for (let dir = dirname(from); ; dir = dirname(dir)) {
    bases.push(dir);
    if (dir === '.') break;
  }
  return bases.some((base) => {
    const candidate = join(base, named);
    // A bench run's own folder is git-ignored until a commit keeps it: ignored there means absent.
    return exists(candidate) || (!candidate.startsWith('bench/results/') && ignoredByGit(candidate));
  });
}

describe('paths named in comments and docs', () => {
  it('finds paths in comments and docs, not in code or system includes', () => {
    const c =
      '#include <linux/bpf.h>\n// see bpf/lb.c and pkg/proxy/iptables/proxier.go\nconst x = "src/a.ts";';
    expect(namedPaths('bpf/x.h', c)).toEqual(['bpf/lb.c']);
    expect(namedPaths('scripts/x.sh', 'cp a b # from scripts/lib/debs.sh\n')).toEqual([
      'scripts/lib/debs.sh',
    ]);
    expect(namedPaths('docs/x.md', 'Read DESIGN.md and [a](../src/a.ts).')).toEqual([
      '../src/a.ts',
      'DESIGN.md',
    ]);
    // A run folder a doc cites, which git ignores until a commit names it <date>-<what>/.
    expect(namedPaths('docs/x.md', 'see `bench/results/socket-lb-quick/` and https://x.io/src/')).toEqual([
      'bench/results/socket-lb-quick/',
    ]);
  });

  it('resolves a path against the naming file and the folders above it', () => {
    expect(resolves('src/metrics/registry.ts', 'brain/decide.ts')).toBe(true);
    expect(resolves('src/metrics/registry.ts', 'proxy/decide.ts')).toBe(false);
    expect(resolves('docs/config.md', '../charts/kube-bpf-proxy/values.yaml')).toBe(true);
    expect(resolves('README.md', 'bpf/*.o')).toBe(true);
    expect(resolves('docs/benchmark.md', 'bench/results/2026-12-02-kube-proxy/')).toBe(true);
    expect(resolves('docs/benchmark.md', 'bench/results/socket-lb-quick/')).toBe(false);
    expect(resolves('docs/benchmark.md', 'bench/results/2026-12-06T22-10-00-000Z/')).toBe(false);
  });

  it('every path a tracked file names exists', () => {
    const missing = TRACKED.filter((f) => /\.(ts|mjs|c|h|sh|md|yaml|tpl)$/.test(f)).flatMap((file) =>
      namedPaths(file, readFileSync(join(ROOT, file), 'utf8'))
        .filter((named) => !resolves(file, named))
        .map((named) => `${file}: ${named}`),
    );
    expect(missing).toEqual([]);
  });
});
