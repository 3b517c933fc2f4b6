#!/usr/bin/env bash
# Runs every check and every test tier, after installing what they need. The README's test
# command and the body of .ci/run. Kernel and e2e tiers need root; outside CI they skip (and say
# so) when not root, in CI they must run.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh || exit 1
checks_failed=0
run_check() {
  echo "== $*"
  if ! "$@"; then
    echo "check failed: $*"
    checks_failed=$((checks_failed + 1))
  fi
}
run_check npm run --silent build
run_check npx tsc -p tsconfig.test.json
run_check npx biome check .
run_check bash scripts/check-c-format.sh
npx vitest run --reporter=default --reporter=json --outputFile=.vitest-results.json "$@"
vitest_rc=$?
node scripts/summarize-tests.mjs .vitest-results.json "$checks_failed"
summary_rc=$?
((vitest_rc == 0 && summary_rc == 0 && checks_failed == 0))
