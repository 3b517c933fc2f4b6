// Prints the one closing line CI reads: "N passed, N failed, N skipped", from vitest's JSON
// report plus the number of failed static checks (build, lint, format), each counted as a failure.
import { readFileSync } from 'node:fs';

const [reportPath, checksFailedArg = '0'] = process.argv.slice(2);
let report;
try {
  report = JSON.parse(readFileSync(reportPath, 'utf8'));
} catch (err) {
  console.log(`could not read ${reportPath}: ${err.message}`);
  console.log(`0 passed, ${1 + Number(checksFailedArg)} failed`);
  process.exit(1);
}
const failed = report.numFailedTests + Number(checksFailedArg) + (report.numFailedTestSuites ?? 0);
const skipped = report.numPendingTests + report.numTodoTests;
console.log(`${report.numPassedTests} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed === 0 && report.numPassedTests > 0 ? 0 : 1);
