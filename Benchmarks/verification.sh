#!/usr/bin/env bash
# The verification hot-path benchmarks (ordo-one/benchmark, target
# AuthVerification) beside `openssl speed` for the same algorithms, run one
# after the other on this machine, then one summary table:
#
#   signature step   Portcullis p0 / p50 per call, openssl speed per call, ratios
#   targets          HS256 full verification < 3 us, cache hit < 0.5 us with 0 mallocs
#
# Usage: Benchmarks/verification.sh [extra `swift package benchmark` arguments]
#   OPENSSL_SECONDS=N   seconds per `openssl speed` algorithm (default 3)
# Needs only the Swift toolchain, openssl and python3 (for the summary).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${OPENSSL_SECONDS:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The HS256 row's signing input is 249 bytes (header.payload of the bench token).
# openssl speed runs before and after the suite: on a shared machine the two
# often differ, and the summary shows both.
openssl_speed() {
    echo "== openssl speed ($(openssl version)), ${seconds}s each ($1)"
    { openssl speed -seconds "$seconds" -mr rsa2048 ecdsap256 ed25519 2>/dev/null
      openssl speed -seconds "$seconds" -mr -bytes 249 -hmac sha256 2>/dev/null; } | grep '^+F' > "$work/openssl-$1.txt" || true
    cat "$work/openssl-$1.txt"
    [ -s "$work/openssl-$1.txt" ] || { echo "openssl speed printed no results" >&2; exit 1; }
}
openssl_speed before

echo "== swift package benchmark --target AuthVerification $*"
PORTCULLIS_BENCHMARKS=1 swift package benchmark --target AuthVerification --no-progress "$@" | tee "$work/benchmark.txt"

openssl_speed after

python3 - "$work" <<'PY'
import re, sys, os
work = sys.argv[1]

# openssl speed -mr: "+F2:i:2048:sign/s:verify/s" (RSA), "+F4:i:256:sign/s:verify/s" (ECDSA),
# "+F6:i:253:Ed25519:sign/s:verify/s" (EdDSA), "+F:i:hmac(sha256):bytes/s" (one size).
def openssl_speed(name):
    result = {}
    for line in open(os.path.join(work, f"openssl-{name}.txt")):
        f = line.strip().split(":")
        if f[0] == "+F2" and f[2] == "2048": result["RS256-2048"] = 1e9 / float(f[4])
        if f[0] == "+F4" and f[2] == "256": result["ES256"] = 1e9 / float(f[4])
        if f[0] == "+F6" and f[3] == "Ed25519": result["EdDSA"] = 1e9 / float(f[5])
        if f[0] == "+F" and f[2] == "hmac(sha256)": result["HS256"] = 249 / float(f[3]) * 1e9
    return result
before, after = openssl_speed("before"), openssl_speed("after")

# Benchmark text tables: a title line, then rows "│ Metric │ p0 │ p25 │ p50 │ ...".
rows, title = {}, None
scale = {"ns": 1.0, "us": 1e3, "μs": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
for line in open(os.path.join(work, "benchmark.txt"), encoding="utf-8"):
    line = line.rstrip("\n")
    if line and not line.startswith(("│", "╒", "╞", "├", "╘", "=", " ")) and "│" not in line:
        title = line.strip()
        continue
    if title and line.startswith("│"):
        cells = [c.strip() for c in line.strip("│").split("│")]
        metric, values = cells[0], cells[1:]
        if metric.startswith("Time (wall clock)"):
            unit = re.search(r"\((\w+)\)", metric[len("Time (wall clock)"):]).group(1)
            factor = scale.get(unit, 1.0)
            # x1000 rows run 1,000 calls per sample; the harness divides by
            # the scaling factor, so every row is already per call.
            rows.setdefault(title, {})["p0"] = float(values[0].replace(",", "")) * factor
            rows[title]["p50"] = float(values[2].replace(",", "")) * factor
        elif metric.startswith("Malloc (total)"):
            rows.setdefault(title, {})["mallocs_p50"] = int(values[2].replace(",", ""))

def fmt(ns):
    return f"{ns / 1000:8.2f} µs" if ns >= 10_000 else f"{ns:8.0f} ns"

print("\n== Signature step beside openssl speed (per call; ratio < 1.10 is within 10%;")
print("   ratios against the faster of the two openssl runs)")
print(f"{'algorithm':12} {'Portcullis p0':>14} {'p50':>12} {'openssl before':>15} {'after':>12} {'p0 ratio':>9} {'p50 ratio':>9}")
steps = {"HS256": "HS256 signature step (x1000, per call)", "RS256-2048": "RS256-2048 signature step",
         "ES256": "ES256 signature step", "EdDSA": "EdDSA signature step"}
for name, row in steps.items():
    r, b, a = rows.get(row), before.get(name), after.get(name)
    if not r or not b or not a:
        print(f"{name:12} (not measured in this run)")
        continue
    o = min(b, a)
    print(f"{name:12} {fmt(r['p0']):>14} {fmt(r['p50']):>12} {fmt(b):>15} {fmt(a):>12} {r['p0'] / o:9.2f} {r['p50'] / o:9.2f}")

print("\n== Targets")
checks = [("HS256 full verification (x1000, per call)", "HS256 full verification < 3 µs", 3000, None),
          ("Cache hit (HS256 token, 300 B) (x1000, per call)", "cache hit < 0.5 µs, 0 mallocs", 500, 0)]
for row, label, limit, mallocs in checks:
    r = rows.get(row)
    if not r:
        print(f"{label}: (not measured in this run)")
        continue
    ok = r["p50"] < limit and (mallocs is None or r.get("mallocs_p50", 0) <= mallocs)
    extra = f", {r.get('mallocs_p50')} mallocs per call" if "mallocs_p50" in r else ""
    print(f"{label}: p0 {fmt(r['p0']).strip()}, p50 {fmt(r['p50']).strip()}{extra} -> {'met' if ok else 'NOT met'}")
PY
