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
# The agent image the pod tests run (test/e2e/image.test.ts and the pod variant of
# test/e2e/real-node.test.ts), and a newer build of it for the upgrade test: cached outside the
# checkout by their inputs (the Debian base layer separately, so a new commit rebuilds only the
# app layer). Root only (mmdebstrap); elsewhere those tests skip and say why.
build_images() {
  local cache=${XDG_CACHE_HOME:-$HOME/.cache}/kube-bpf-proxy version
  version=$(node -p 'require("./package.json").version')
  KBP_IMAGE=$(bash scripts/build-image.sh --cache-dir "$cache" | tail -1) &&
    KBP_IMAGE_NEXT=$(bash scripts/build-image.sh --cache-dir "$cache" --version "$version-next" | tail -1) &&
    export KBP_IMAGE KBP_IMAGE_NEXT
}
if [[ $(id -u) -eq 0 && -z ${KBP_IMAGE:-} ]]; then
  run_check build_images
fi
run_check npx tsc -p tsconfig.test.json
run_check npx biome check .
run_check bash scripts/check-c-format.sh
npx vitest run --reporter=default --reporter=json --outputFile=.vitest-results.json "$@"
vitest_rc=$?
node scripts/summarize-tests.mjs .vitest-results.json "$checks_failed"
summary_rc=$?
((vitest_rc == 0 && summary_rc == 0 && checks_failed == 0))
