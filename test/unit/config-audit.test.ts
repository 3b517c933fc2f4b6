// docs/config.md's "Configuration audit" has one row for every field of the configuration file,
// saying what the field does here; a field added to the schema (src/config/file.ts) without a row
// fails this test. The bpf section's fields are each in that section's own table.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fieldPaths } from '../../src/config/decode.js';
import { kubeProxyConfiguration } from '../../src/config/file.js';
import { loadConfig } from '../../src/config/load.js';
import { ROOT } from '../support/source-imports.js';

const KINDS = ['applied', 'applied differently', 'warned'] as const;
const doc = readFileSync(join(ROOT, 'docs/config.md'), 'utf8');

/** The rows of the table that follows `heading`: first cell's backticked names, and the cells. */
function tableRows(heading: string): { names: string[]; cells: string[] }[] {
  const start = doc.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`docs/config.md has no "${heading}"`);
  const rest = doc.slice(start + heading.length + 2);
  const lines = rest.slice(0, rest.search(/\n#{2,3} /)).split('\n');
  return lines
    .filter((l) => l.startsWith('| `'))
    .map((l) => {
      const cells = l
        .split('|')
        .slice(1, -1)
        .map((c) => c.trim());
      return { names: [...(cells[0] ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1] as string), cells };
    });
}

const schema = fieldPaths(kubeProxyConfiguration);
const kubeProxyFields = schema.filter((f) => !f.startsWith('bpf.'));
const audit = tableRows('## Configuration audit');
const audited = audit.flatMap((r) => r.names);

describe('the configuration audit (docs/config.md)', () => {
  it('reads the schema and the table', () => {
    expect(kubeProxyFields).toContain('conntrack.tcpBeLiberal');
    expect(kubeProxyFields).toContain('logging.options.json.infoBufferSize');
    expect(audit.length).toBeGreaterThan(20);
  });

  it('has a row for every field of the file, and only for those', () => {
    expect(kubeProxyFields.filter((f) => !audited.includes(f))).toEqual([]);
    expect(audited.filter((f) => !kubeProxyFields.includes(f))).toEqual([]);
  });

  it('names each field once', () => {
    expect(audited.filter((f, i) => audited.indexOf(f) !== i)).toEqual([]);
  });

  it('gives every row one of the three kinds and says what happens', () => {
    for (const row of audit) {
      expect(KINDS, row.cells[0]).toContain(row.cells[1]);
      expect((row.cells[2] ?? '').length, row.cells[0]).toBeGreaterThan(10);
    }
  });

  it('every bpf field is in the bpf section table', () => {
    const bpfRows = tableRows('## The `bpf:` section').flatMap((r) => r.names);
    const documented = (field: string) =>
      bpfRows.some((name) => name === field || (name.endsWith('.*') && field.startsWith(name.slice(0, -1))));
    const bpfFields = schema.filter((f) => f.startsWith('bpf.')).map((f) => f.slice('bpf.'.length));
    expect(bpfFields.length).toBeGreaterThan(10);
    expect(bpfFields.filter((f) => !documented(f))).toEqual([]);
  });
});

describe('the start-up warnings of the "warned" rows', () => {
  const load = (lines: string[], flags: Record<string, string> = {}) => {
    const result = loadConfig({
      fileText: [
        'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
        'kind: KubeProxyConfiguration',
        ...lines,
      ].join('\n'),
      flags,
    });
    if (!result.ok) throw new Error(JSON.stringify(result.problems));
    return result.warnings;
  };

  it('defaults say nothing', () => {
    expect(load([])).toEqual([]);
  });

  it('each setting that asks for something the agent does not do is named once', () => {
    const warnings = load([
      'enableProfiling: true',
      'showHiddenMetricsForVersion: "1.36"',
      'bindAddress: 10.0.0.5',
      'logging:',
      '  format: text',
      '  vmodule: [{filePattern: "proxier*", verbosity: 4}]',
      '  options: {json: {splitStream: true}}',
    ]);
    expect(warnings.map((w) => w.split(/[ :]/)[0])).toEqual([
      'enableProfiling',
      'showHiddenMetricsForVersion',
      'logging.vmodule',
      'logging.options',
      'logging.format',
      'bindAddress',
    ]);
  });

  it('an explicit --logging-format=text warns; json does not', () => {
    expect(load([], { 'logging-format': 'text' })).toEqual([
      'logging.format: text has no effect: the agent logs JSON lines',
    ]);
    expect(load(['logging: {format: json}'])).toEqual([]);
  });
});
