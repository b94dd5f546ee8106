#!/usr/bin/env bash
# Builds and runs the libFuzzer target of the HTTP/2 server path (Tests/Fuzz/HTTP2/HTTP2Fuzz.swift):
# arbitrary bytes after the client preface, into HTTP2ServerConnection on nghttp2.
#
#   Tests/Fuzz/run-h2-fuzz.sh [seconds]      # default 20; longer runs: e.g. 3600
#
# Exits non-zero if the fuzzer finds a crash or an invariant violation; the reproducer is written to
# .build-fuzz/h2/artifacts/ (replay with a normal build: .build/debug/PortcullisHTTP2Fuzz <file>).
# Inputs that found new coverage accumulate in .build-fuzz/h2/corpus. The target and everything it
# imports are built with -sanitize=fuzzer,address in their own build directory (.build-fuzz/h2/spm),
# in debug configuration (the target reaches the proxy's internals through @testable import).
set -euo pipefail

seconds="${1:-20}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$root/.build-fuzz/h2"
mkdir -p "$out/corpus" "$out/artifacts"

echo "building the HTTP/2 fuzz target (-sanitize=fuzzer,address)..."
(cd "$root" && swift build --build-path "$out/spm" --product PortcullisHTTP2Fuzz \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DPORTCULLIS_FUZZ 2>&1 | grep -E "error|warning: unre|Compiling PortcullisHTTP2Fuzz|Build complete" || true)
binary="$out/spm/debug/PortcullisHTTP2Fuzz"
[ -x "$binary" ] || { echo "h2-fuzz: build failed" >&2; exit 1; }

seeds="$(mktemp -d)"
trap 'rm -rf "$seeds"' EXIT
# Seed corpus: what real clients send after the preface (made with python3-h2).
/usr/bin/python3 - "$seeds" <<'PY'
import sys, h2.connection, h2.config, h2.events
out = sys.argv[1]
def client():
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None,
                                   validate_outbound_headers=False, normalize_outbound_headers=False))
    c.initiate_connection()
    return c
def save(name, c):
    data = c.data_to_send()
    open(f"{out}/{name}", "wb").write(data[24:])  # without the preface (the harness adds it)
base = [(b":method", b"GET"), (b":path", b"/a/b?c=1"), (b":scheme", b"http"), (b":authority", b"x.test")]
c = client(); c.send_headers(1, base, end_stream=True); save("get", c)
c = client(); c.send_headers(1, [(b":method", b"POST"), (b":path", b"/upload"), (b":scheme", b"https"), (b":authority", b"x"),
                                 (b"content-length", b"5")]); c.send_data(1, b"hello", end_stream=True); save("post", c)
c = client()
for i in range(5):
    c.send_headers(1 + 2 * i, base + [(b"cookie", b"a=%d" % i), (b"cookie", b"next-auth.session-token=x")], end_stream=True)
save("streams-cookies", c)
c = client(); c.send_headers(1, base); c.send_data(1, b"x" * 100); c.send_headers(1, [(b"x-trailer", b"1")], end_stream=True); save("trailers", c)
c = client(); c.send_headers(1, base, end_stream=True); c.reset_stream(1); c.ping(b"12345678"); c.increment_flow_control_window(1000)
c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}); save("control", c)
c = client(); c.send_headers(1, [(b":method", b"GET"), (b":path", b"*"), (b":scheme", b"http"), (b":authority", b"x"),
                                 (b"te", b"gzip"), (b"X-Up", b"1")], end_stream=True); save("hostile", c)
PY

echo "fuzzing for ${seconds}s..."
status=0
(cd "$out" && "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$out/corpus" "$seeds") || status=$?
if [ "$status" -ne 0 ]; then
    echo "h2-fuzz FAILED (exit $status); reproducer in $out/artifacts/" >&2
    exit "$status"
fi
echo "h2-fuzz: no crash in ${seconds}s"
