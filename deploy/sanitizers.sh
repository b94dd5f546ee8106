#!/usr/bin/env bash
# The sanitizer runs of the test command (deploy/test.sh runs this before the main suite).
#
# AddressSanitizer: the gateway and the test bundle built with --sanitize=address; runs
# the connection layer's in-process tests (PortcullisProxyTests: late decisions, pool
# waits, upstream faults, back-pressure, tunnels), every end-to-end test against the
# ASan binary (TLS, HTTP/2, h2c, key refetches, Redis, hostile clients and upstreams),
# and a short seeded chaos run (Benchmarks/chaos) with every listener kind. Together
# they reach every object whose lifetime a late event depends on: exchanges, HTTP/1.1
# connections, HTTP/2 connections and streams (nghttp2 user_data), TLS sessions (BIO
# data, SSL_CTX callbacks), upstream connections and pools, the Redis client.
#
# ThreadSanitizer: the code that hops queues: the key manager and the key fetcher
# (fetch completions, refresh timers, waiters), the revocation stores and their Redis
# client (subscriber, supervisor, resolver), and the HTTP GET client used for keys.
#
# Any sanitizer report fails the run: every process writes its reports to one folder
# (log_path), which must be empty at the end. Leak detection is off: the Swift runtime's
# own metadata shows as leaks; the chaos run bounds memory and descriptors instead.
set -uo pipefail
cd "$(dirname "$0")/.."
reports="$(mktemp -d /tmp/portcullis-sanitizers.XXXXXX)"
status=0
failed=()
step() { echo "=== sanitizers: $* ==="; }
# A failed part is named again at the end (deploy/test.sh repeats it after the main suite).
fail() { status=1; failed+=("$1"); }

step "AddressSanitizer build"
if ! swift build --build-tests --sanitize=address --scratch-path .build-asan; then exit 1; fi
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:log_path=$reports/asan"
step "AddressSanitizer: proxy path and end-to-end tests"
# Memory measurements are left to the plain build: ASan keeps freed memory in its quarantine
# and adds shadow memory, so RSS says nothing about the gateway there.
timeout --kill-after=30 "${ASAN_TEST_TIMEOUT:-2400}" swift test --skip-build --sanitize=address --scratch-path .build-asan \
  --no-parallel --filter 'PortcullisProxyTests|PortcullisEndToEndTests' \
  --skip 'aLongLivedConnectionDoesNotKeepItsClosedStreams' || fail "AddressSanitizer tests"
step "AddressSanitizer: chaos (${CHAOS_SECONDS:-60} s, seed ${CHAOS_SEED:-1})"
# Memory is bounded by the debug-build run in deploy/test.sh: ASan holds freed memory in its
# quarantine (256 MiB) and maps shadow memory, so here RSS only has to stay under 1 GiB.
bash Benchmarks/chaos/run.sh --binary .build-asan/debug/portcullis --seconds "${CHAOS_SECONDS:-60}" \
  --seed "${CHAOS_SEED:-1}" --rss-limit-mib 1024 || fail "AddressSanitizer chaos"
unset ASAN_OPTIONS

step "ThreadSanitizer build"
if ! swift build --build-tests --sanitize=thread --scratch-path .build-tsan; then exit 1; fi
step "ThreadSanitizer: keys, stores, Redis"
TSAN_OPTIONS="halt_on_error=1:log_path=$reports/tsan" \
  timeout --kill-after=30 "${TSAN_TEST_TIMEOUT:-1200}" swift test --skip-build --sanitize=thread --scratch-path .build-tsan \
  --no-parallel --filter 'PortcullisKeysTests|PortcullisStoreTests|PortcullisRedisTests' || fail "ThreadSanitizer tests"

if [ -n "$(ls -A "$reports")" ]; then
  step "reports (each fails the run)"
  for f in "$reports"/*; do echo "--- $f"; head -60 "$f"; done
  fail "sanitizer reports"
fi
[ "$status" -eq 0 ] && step "clean" || step "FAILED: ${failed[*]}"
exit "$status"
