#!/usr/bin/env bash
# Builds and runs the libFuzzer target of the HTTP/1.1 codec (Tests/Fuzz/HTTPParser/main.swift).
#
#   Tests/Fuzz/run-http-fuzz.sh [seconds]      # default 20; longer runs: e.g. 3600
#
# Exits non-zero if the fuzzer finds a crash or an invariant violation; the reproducer is written to
# .build-fuzz/http/artifacts/ (replay: .build-fuzz/http/http-fuzz <file>). Inputs that found new
# coverage accumulate in .build-fuzz/http/corpus, so repeated runs go deeper.
#
# libFuzzer: the swift.org toolchain ships it (usr/lib/clang/<N>/lib/linux/libclang_rt.fuzzer-x86_64.a),
# which is what `swiftc -sanitize=fuzzer` links. A toolchain without it fails at link time with
# "libclang_rt.fuzzer... not found"; on Debian 12 the runtime comes with libclang-rt-14-dev
# (compiler-rt, /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/), but only a matching swift.org toolchain
# is known to work here.
set -euo pipefail

seconds="${1:-20}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$root/.build-fuzz/http"
mkdir -p "$out/corpus" "$out/artifacts"

echo "building http-fuzz (swiftc -sanitize=fuzzer,address -O)..."
# PortcullisHTTP imports PortcullisCore (Authority, the host rules): build that module first.
mapfile -t core < <(find "$root/Sources/PortcullisCore" -name '*.swift' | sort)
swiftc -sanitize=address -parse-as-library -O -module-name PortcullisCore -emit-module \
    -emit-module-path "$out/PortcullisCore.swiftmodule" -emit-library -static \
    "${core[@]}" -o "$out/libPortcullisCore.a"
swiftc -sanitize=fuzzer,address -parse-as-library -O -I "$out" \
    "$root"/Sources/PortcullisHTTP/*.swift "$root/Tests/Fuzz/HTTPParser/main.swift" \
    -module-name HTTPFuzz -L "$out" -lPortcullisCore -o "$out/http-fuzz"

seeds="$(mktemp -d)"
trap 'rm -rf "$seeds"' EXIT
# Seed corpus: byte 0 is the split point, the rest the message.
seed() { printf '%b' "$2" > "$seeds/$1"; }
seed get '\x80GET /a/../b?q=1 HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n'
seed post-cl '\x40POST /u HTTP/1.1\r\nHost: h:8080\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello'
seed chunked '\x30POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4;a=b\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\n'
seed body '\x10a;ext="v"\r\n0123456789\r\n0\r\n\r\n'
seed absolute '\xffGET http://h.example/%2e%2e//x\\y/%41?q#f HTTP/1.0\r\n\r\n'
seed options '\x01\r\nOPTIONS * HTTP/1.1\r\nHost: [::1]:80\r\n\r\n'
seed connect '\x20CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n'
seed response '\x90HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n'
seed response204 '\x50HTTP/1.0 204 No Content\r\nConnection: keep-alive\r\n\r\n'
seed path '\x00/a/./b/../../%2E%2e/c//d%3a?x=../y'

dict="$seeds/http.dict"
cat > "$dict" <<'DICT'
"\x0d\x0a"
"\x0d\x0a\x0d\x0a"
"HTTP/1.1"
"HTTP/1.0"
"Host: "
"Content-Length: "
"Transfer-Encoding: "
"chunked"
"Connection: "
"close"
"keep-alive"
"upgrade"
"Expect: 100-continue"
"%2e"
"%2F"
"%5c"
"/../"
"/./"
"http://"
"0\x0d\x0a\x0d\x0a"
DICT

echo "fuzzing for ${seconds}s..."
status=0
(cd "$out" && ./http-fuzz -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -dict="$dict" -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
    "$out/corpus" "$seeds") || status=$?
if [ "$status" -ne 0 ]; then
    echo "http-fuzz FAILED (exit $status); reproducer in $out/artifacts/" >&2
    exit "$status"
fi
echo "http-fuzz: no crash in ${seconds}s"
