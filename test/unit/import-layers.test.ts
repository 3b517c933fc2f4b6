// Keeps the folder map of ARCHITECTURE.md true: every import in src/, bench/ and native/ points down the
// layers, never up or sideways, and no shipped code imports the tests.
//
//   cli → bench → lab → metrics → health → dataplanes | sources → brain → model → config → net, host, native, logger
//
// A folder may import its own files and any folder of a lower layer. dataplanes and sources share
// a layer and may not import each other. Only cli, bench and the tests import lab; only the tests
// import test/ (lab code only the tests use lives there, in test/support/lab/: see
// test/unit/lab-placement.test.ts).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { importsOf, ROOT, resolveImport, sourceFiles } from '../support/source-imports.js';

/** Higher imports lower; equal ranks in different folders may not import each other. */
const LAYERS: Record<string, number> = {
  'src/net': 0,
  native: 0,
  'src/logger.ts': 0,
  'src/host': 1,
  'src/config': 2,
  'src/model': 3,
  'src/brain': 4,
  'src/dataplanes': 5,
  'src/sources': 5,
  'src/health': 6,
  'src/metrics': 7,
  'src/lab': 8,
  bench: 9,
  'src/cli': 10,
};

/** The folder (or bottom-layer file) a repository path belongs to. */
function layerOf(path: string): string | null {
  const parts = path.split('/');
  if (parts[0] === 'src' && parts.length > 1) {
    const key = `src/${parts[1]}`;
    return key in LAYERS ? key : null;
  }
  return parts[0]! in LAYERS ? parts[0]! : null;
}

/** Why importing `to` from `from` goes against the map, or null when it does not. */
function layerViolation(from: string, to: string): string | null {
  if (to.startsWith('test/')) return 'shipped code imports test code';
  const a = layerOf(from);
  const b = layerOf(to);
  if (a === null) return `${from} is in no layer of the map`;
  if (b === null) return `${to} is in no layer of the map`;
  if (a === b) return null;
  const ra = LAYERS[a]!;
  const rb = LAYERS[b]!;
  if (rb < ra) return null;
  return rb === ra ? `${a} and ${b} share a layer and may not import each other` : `${a} may not import ${b}`;
}

describe('import layers', () => {
  const files = ['src', 'bench', 'native'].flatMap(sourceFiles);

  it('finds the code it checks', () => {
    expect(files.length).toBeGreaterThan(100);
    expect(files).toContain('src/brain/decide.ts');
  });

  it('every import points down the layers', () => {
    const violations: string[] = [];
    for (const file of files) {
      for (const spec of importsOf(readFileSync(join(ROOT, file), 'utf8'))) {
        const target = resolveImport(file, spec);
        const why = layerViolation(file, target);
        if (why) violations.push(`${file} → ${target}: ${why}`);
      }
    }
    expect(violations).toEqual([]);
  });

  it('catches imports against the flow', () => {
    expect(layerViolation('src/brain/decide.ts', 'src/dataplanes/types.ts')).toMatch(/may not import/);
    expect(layerViolation('src/dataplanes/iptables/backend.ts', 'src/lab/netns.ts')).toMatch(
      /may not import/,
    );
    expect(layerViolation('bench/cell.ts', 'src/cli/cleanup.ts')).toMatch(/may not import/);
    expect(layerViolation('bench/bpf-cost.ts', 'test/support/packets.ts')).toMatch(/test code/);
    expect(layerViolation('src/lab/netns.ts', 'test/support/lab/streams.ts')).toMatch(/test code/);
    expect(layerViolation('src/dataplanes/ipvs/dataplane.ts', 'src/sources/host.ts')).toMatch(
      /share a layer/,
    );
    expect(layerViolation('src/config/validate.ts', 'src/net/ip.ts')).toBeNull();
    expect(layerViolation('src/cli/program.ts', 'bench/cli.ts')).toBeNull();
    expect(layerViolation('src/dataplanes/bpf/plan.ts', 'src/dataplanes/types.ts')).toBeNull();
  });
});
