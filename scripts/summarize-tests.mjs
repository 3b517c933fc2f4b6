// Prints a closing line CI reads, "LABEL: N passed, N failed, N skipped", from one or more of
// vitest's JSON reports, the soak's report.json (scripts/soak.sh: each check counts as a test) and
// the conformance tier's summary.json (its counts of upstream e2e specs), plus the number of failed
// checks (build, lint, format, an install step) given with --checks-failed, each counted as a
// failure. A report that is missing or unreadable (its tier crashed before writing it) counts as
// one failure. Exits 1 when anything failed or nothing ran at all (every test skipped is not a
// failure: a root tier run without root).
//
//   node scripts/summarize-tests.mjs [--label LABEL] [--checks-failed N] REPORT.json...
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({
  options: { label: { type: 'string' }, 'checks-failed': { type: 'string', default: '0' } },
  allowPositionals: true,
});
// A test file that failed to load (a syntax or import error) reports no failed test, only its own
// failed status: count it once. vitest's numFailedTestSuites is no substitute: it also counts every
// describe block around a failed test, so one failed test read as three failures.
function filesFailedWithoutATest(report) {
  return (report.testResults ?? []).filter(
    (file) => file.status === 'failed' && !file.assertionResults?.some((test) => test.status === 'failed'),
  ).length;
}

const totals = { passed: 0, failed: Number(values['checks-failed']), skipped: 0 };
for (const path of positionals) {
  if (!existsSync(path)) {
    console.log(`no test report at ${path}: its tier did not finish`);
    totals.failed += 1;
    continue;
  }
  try {
    const report = JSON.parse(readFileSync(path, 'utf8'));
    if (Array.isArray(report.checks)) {
      const passed = report.checks.filter((check) => check.passed).length;
      totals.passed += passed;
      totals.failed += report.checks.length - passed;
      totals.skipped += report.skipped ?? 0;
    } else if (typeof report.numPassedTests === 'number') {
      totals.passed += report.numPassedTests;
      totals.failed += report.numFailedTests + filesFailedWithoutATest(report);
      totals.skipped += report.numPendingTests + report.numTodoTests;
    } else {
      // The conformance tier's summary.json (src/lab/real-cluster/main.ts): upstream e2e specs.
      totals.passed += report.passed;
      totals.failed += report.failed;
      totals.skipped += report.skipped;
    }
  } catch (err) {
    console.log(`could not read ${path}: ${err.message}`);
    totals.failed += 1;
  }
}
const prefix = values.label ? `${values.label}: ` : '';
console.log(`${prefix}${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
process.exit(totals.failed === 0 && totals.passed + totals.skipped > 0 ? 0 : 1);
