// Bad input at scale: hundreds of generated malformed objects mixed with good ones across YAML and JSON
// files, multi-document streams and lists. Reading must not crash; every malformed object must be
// reported once, located (file, document index, list item) and identified (kind, namespace/name) with a
// reason naming the field; every good object must come through and parse exactly as it does alone, and
// one with entries kube-proxy skips must come through without them, reported once.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type ObjectProblem, parseEvent } from '../../src/model/parse.js';
import { readManifests } from '../../src/sources/manifests.js';
import { expectedIdentity, type Mutation, writeMalformedCorpus } from '../support/malformed-corpus.js';

describe('malformed objects among good ones', () => {
  const root = mkdtempSync(join(tmpdir(), `kbp-malformed-${process.pid}-`));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  const { planted, malformed, good, alone } = writeMalformedCorpus(root);

  const started = performance.now();
  const read = readManifests([root]);
  const problems = [...read.problems];
  const leftOut: ObjectProblem[] = [];
  const parsed = new Map<string, ReturnType<typeof parseEvent>>();
  for (const event of read.events) {
    const result = parseEvent(event);
    parsed.set(event.origin, result);
    if (!result.ok) problems.push(result.problem);
    else if (result.problem) leftOut.push(result.problem);
  }
  const elapsedMs = performance.now() - started;

  it('generates at least 200 malformed objects across many files', () => {
    expect(malformed.length).toBeGreaterThanOrEqual(200);
    expect(new Set(planted.map((p) => p.origin.split('#')[0])).size).toBeGreaterThan(20);
    console.info(
      `${malformed.length} malformed + ${good.length} good objects in ${new Set(planted.map((p) => p.origin.split('#')[0])).size} files: read and validated in ${elapsedMs.toFixed(0)} ms`,
    );
  });

  it('reports each malformed object exactly once, located, identified and with the field at fault', () => {
    const byOrigin = new Map<string, ObjectProblem[]>();
    for (const p of problems) byOrigin.set(p.origin, [...(byOrigin.get(p.origin) ?? []), p]);
    const failures: string[] = [];
    for (const bad of malformed) {
      const reports = byOrigin.get(bad.origin) ?? [];
      const mutation = bad.mutation as Mutation;
      if (reports.length !== 1) {
        failures.push(`${bad.origin} (${mutation.what}): ${reports.length} reports`);
        continue;
      }
      const report = reports[0] as ObjectProblem;
      const identity = expectedIdentity(bad.object);
      const expectedKind = identity.kind;
      if (
        report.kind !== expectedKind ||
        report.namespace !== identity.namespace ||
        report.name !== identity.name
      ) {
        failures.push(
          `${bad.origin} (${mutation.what}): identified as ${report.kind} ${report.namespace}/${report.name.slice(0, 40)}, expected ${expectedKind} ${identity.namespace}/${identity.name.slice(0, 40)}`,
        );
      }
      if (!report.reason.includes(mutation.reason)) {
        failures.push(
          `${bad.origin} (${mutation.what}): reason ${JSON.stringify(report.reason.slice(0, 300))}`,
        );
      }
      if (report.reason.length > 1000)
        failures.push(`${bad.origin} (${mutation.what}): reason of ${report.reason.length} characters`);
    }
    expect(failures).toEqual([]);
    expect(problems).toHaveLength(malformed.length);
  });

  it('delivers every good object, which parses exactly as it does alone', () => {
    const failures: string[] = [];
    for (const ok of good) {
      const result = parsed.get(ok.origin);
      if (!result?.ok) {
        failures.push(`${ok.origin}: ${result ? result.problem.reason : 'not delivered'}`);
        continue;
      }
      expect(result.object.value).toEqual((alone.get(ok.object) as { ok: true; value: unknown }).value);
    }
    expect(failures).toEqual([]);
    expect(read.events.filter((e) => parsed.get(e.origin)?.ok)).toHaveLength(good.length);
  });

  it('reports the entries it left out of a good object once, and uses the rest', () => {
    const partly = good.filter((p) => p.leftOut !== undefined);
    expect(partly.length).toBeGreaterThan(0);
    expect(leftOut.map((p) => p.origin).sort()).toEqual(partly.map((p) => p.origin).sort());
    for (const p of partly) {
      const report = leftOut.find((r) => r.origin === p.origin);
      expect(report).toMatchObject({
        ...expectedIdentity(p.object),
        reason: p.leftOut,
        entriesLeftOut: true,
      });
    }
    const slice = partly.find((p) => p.kind === 'EndpointSlice');
    const result = parsed.get(slice?.origin ?? '');
    expect(
      result?.ok &&
        result.object.kind === 'EndpointSlice' &&
        result.object.value.endpoints.map((e) => e.addresses),
    ).toEqual([['10.244.1.10']]);
    const svc = partly.find((p) => p.kind === 'Service');
    const svcResult = parsed.get(svc?.origin ?? '');
    expect(
      svcResult?.ok && svcResult.object.kind === 'Service' && svcResult.object.value.externalIPs,
    ).toEqual(['010.001.002.003']);
  });
});
