#!/usr/bin/env bash
# Builds and runs the libFuzzer target of PortcullisAuth (Tests/Fuzz/Auth/main.swift):
# base64url, the strict JSON parser, JWS/JWE parsing and verification, cookie chunk joining.
#
#   Tests/Fuzz/run-auth-fuzz.sh [seconds]      # default 20
#
# Exits non-zero if the fuzzer finds a crash or an invariant violation; the reproducer is
# written to .build-fuzz/auth/artifacts/ (replay: .build-fuzz/auth/auth-fuzz <file>).
# Inputs that found new coverage accumulate in .build-fuzz/auth/corpus.
set -euo pipefail

seconds="${1:-20}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$root/.build-fuzz/auth"
mkdir -p "$out/corpus" "$out/artifacts"

echo "building auth-fuzz (swiftc -sanitize=fuzzer,address -O)..."
# PortcullisAuth imports PortcullisCore (its Lock): build that module first.
mapfile -t core < <(find "$root/Sources/PortcullisCore" -name '*.swift' | sort)
swiftc -sanitize=address -parse-as-library -O -module-name PortcullisCore -emit-module \
    -emit-module-path "$out/PortcullisCore.swiftmodule" -emit-library -static \
    "${core[@]}" -o "$out/libPortcullisCore.a"
mapfile -t sources < <(find "$root/Sources/PortcullisAuth" -name '*.swift' | sort)
swiftc -sanitize=fuzzer,address -parse-as-library -O -I "$root/Sources/COpenSSL" -I "$out" \
    "${sources[@]}" "$root/Tests/Fuzz/Auth/main.swift" \
    -module-name AuthFuzz -L "$out" -lPortcullisCore -lssl -lcrypto -o "$out/auth-fuzz"

seeds="$(mktemp -d)"
trap 'rm -rf "$seeds"' EXIT
# Seed corpus: byte 0 selects the entry point (0 base64url, 1 JSON, 2-3 bearer, 4 cookies, 5 JWE body).
seed() { printf '%b' "$2" > "$seeds/$1"; }
seed b64 '\x00eyJhbGciOiJIUzI1NiJ9'
seed json '\x01{"a":[1,2.5e3,"x\\u00e9",true,null,{"b":{}}],"c":"\\ud83d\\ude00"}'
seed jws '\x02eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1IiwiZXhwIjoxNzAwMDAzNjAwfQ.AAAA'
seed es256 '\x03eyJhbGciOiJFUzI1NiIsImtpZCI6ImUifQ.eyJpc3MiOiJpIiwiYXVkIjoiYSIsInN1YiI6InMiLCJleHAiOjE3MDAwMDM2MDB9.DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q'
seed v4 '\x02eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIn0..AAECAwQFBgcICQoL.D9w7kt5B9FSTpYnNJhk6eKY6U5qd60sCA_6YEyCW5DMGkn31LVU1jMJUPAZOXSIdYTZBmw96CMm7G6Kpxuoh0dQSW2P0DVJSti13AH-_ThuW83Evff_pzDfu3BvjNakRr1mgfI44nCgeOMCM5h9YclN4nK0jp0U1_WOKd0toSSoDDAYH0iyMak7Cvg7_PXby8nPur3rZmut2q1lUtjpPFlgOZOAwDX6Fzztpl0o40QAfYHe_QA.TtoqWDZIp2VTpUgGDQTVHQ'
seed cookies '\x04authjs.session-token.0=eyJhbGciOiJkaXIi;authjs.session-token.1=LCJlbmMiOiJBMjU2R0NNIn0..AAAA.BBBB.CCCC;next-auth.session-token=x'
seed jwebody '\x05.AAECAwQFBgcICQoL.D9w7kt5B9FSTpYnNJhk6eKY6U5qd60sCA_6YEyCW5DMGkn31LVU1jMJUPAZOXSIdYTZBmw96CMm7G6Kpxuoh0dQSW2P0DVJSti13AH-_ThuW83Evff_pzDfu3BvjNakRr1mgfI44nCgeOMCM5h9YclN4nK0jp0U1_WOKd0toSSoDDAYH0iyMak7Cvg7_PXby8nPur3rZmut2q1lUtjpPFlgOZOAwDX6Fzztpl0o40QAfYHe_QA.TtoqWDZIp2VTpUgGDQTVHQ'

echo "fuzzing for ${seconds}s..."
# Leak detection is off: LeakSanitizer reports the fuzz target's global
# verifier (built once) as leaked because Swift stores class references in
# enum payloads with tag bits set, which LSan does not recognise as pointers.
# valgrind --leak-check=full on repeated CredentialVerifier construction and
# use reports 0 bytes lost.
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" "$out/auth-fuzz" "$out/corpus" "$seeds" \
    -max_total_time="$seconds" -max_len=20000 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 -detect_leaks=0
