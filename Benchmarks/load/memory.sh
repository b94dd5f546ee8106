#!/usr/bin/env bash
# Memory harness for Portcullis:
#  1. resident memory per idle keep-alive client connection (10,000 of them,
#     each having done one complete request through a route to the upstream);
#  2. a bounded soak under wrk, sampling resident memory every few seconds.
# Starts its own upstream (nginx `return 200`) and gateway on free loopback
# ports; everything lives in a mktemp dir and is killed on exit. See README.md.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: Benchmarks/load/memory.sh [options]
  --connections N     idle connections to hold (default $IDLE_CONNECTIONS or 10000)
  --soak S            soak duration in seconds (default $SOAK or 60; 0 = skip)
  --interval S        RSS sample interval during the soak (default $INTERVAL or 5)
  --soak-connections C  wrk connections during the soak (default 64)
  --keep DIR          copy configs and logs to DIR
  --tls               TLS listeners (one EC P-256 leaf), and the same idle connections held
                      against nginx terminating TLS alike, for comparison
Environment: PORTCULLIS_BIN (default .build/release/portcullis).
Targets: <= 16 KiB per idle connection; during the soak, the last RSS sample
within 10% of the sample taken at 15 s.
USAGE
}

IDLE_CONNECTIONS="${IDLE_CONNECTIONS:-10000}"
SOAK="${SOAK:-60}"
INTERVAL="${INTERVAL:-5}"
SOAK_CONNECTIONS=64
KEEP=""
TLS=0
INVOCATION="$0 $*"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --connections) IDLE_CONNECTIONS="$2"; shift 2 ;;
        --soak) SOAK="$2"; shift 2 ;;
        --interval) INTERVAL="$2"; shift 2 ;;
        --soak-connections) SOAK_CONNECTIONS="$2"; shift 2 ;;
        --keep) KEEP="$2"; shift 2 ;;
        --tls) TLS=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for n in "$IDLE_CONNECTIONS" "$SOAK" "$INTERVAL" "$SOAK_CONNECTIONS"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "error: '$n' is not a whole number" >&2; exit 2; }
done
(( INTERVAL >= 1 )) || { echo "error: --interval must be >= 1" >&2; exit 2; }

WORKDIR="$(mktemp -d /tmp/portcullis-memory.XXXXXX)"
source "$(dirname "${BASH_SOURCE[0]}")/servers.sh"
WRK_PID=""
cleanup() {
    local rc=$?
    [[ -n "$WRK_PID" ]] && kill "$WRK_PID" 2>/dev/null || true
    stop_servers
    if [[ -n "$KEEP" ]]; then mkdir -p "$KEEP" && cp -r "$WORKDIR"/. "$KEEP"/ || true; fi
    rm -rf "$WORKDIR"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The gateway inherits this limit: it must accept N connections plus its upstream pool.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (( $(ulimit -n) < IDLE_CONNECTIONS + 200 )); then
    echo "error: RLIMIT_NOFILE is $(ulimit -n) (hard $(ulimit -Hn)); need $((IDLE_CONNECTIONS + 200)) for $IDLE_CONNECTIONS connections" >&2
    exit 1
fi

start_upstream
(( TLS )) && make_tls_material
# Idle connections must outlive the measurement: the default idle timeout is 60 s.
start_portcullis "timeouts: {idle: 300s}"
GW="$(scheme)://127.0.0.1:$PORTCULLIS_PORT/"

echo "# Portcullis memory harness"
echo
echo "- invocation: \`$INVOCATION\` (connections=$IDLE_CONNECTIONS, soak=${SOAK}s every ${INTERVAL}s, RLIMIT_NOFILE=$(ulimit -n))"
echo "- machine: nproc=$(nproc), kernel $(uname -r)"
echo "- portcullis: $PORTCULLIS_BIN (binary built $(date -u -r "$PORTCULLIS_BIN" +%Y-%m-%dT%H:%MZ); repo HEAD now $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')), pid $PORTCULLIS_PID, config: workers 2, access_log off, timeouts.idle 300s, upstream max_connections 128"
echo

fail=0
rss() { $HELPER rss "$PORTCULLIS_PID"; }
alive() {
    kill -0 "$PORTCULLIS_PID" 2>/dev/null && return 0
    echo "error: portcullis (pid $PORTCULLIS_PID) exited; its output:" >&2
    cat "$WORKDIR/portcullis/portcullis.out" >&2
    exit 1
}

## 1. Idle connections
echo "## $IDLE_CONNECTIONS idle keep-alive connections"
echo
echo '```'
python3 "$HARNESS_DIR/idle_connections.py" --pid "$PORTCULLIS_PID" --port "$PORTCULLIS_PORT" \
    --count "$IDLE_CONNECTIONS" $( (( TLS )) && echo --tls) | tee "$WORKDIR/idle.txt"
echo '```'
if (( TLS )); then
    start_nginx_proxy
    echo "nginx (TLS, 2 workers, same certificate), the same connections:"
    echo '```'
    python3 "$HARNESS_DIR/idle_connections.py" --pid "$NGINX_PID" --port "$NGINX_PORT" --tree --tls \
        --count "$IDLE_CONNECTIONS" | tee "$WORKDIR/idle-nginx.txt"
    echo '```'
fi
alive
result="$(sed -n 's/^RESULT //p' "$WORKDIR/idle.txt")"
nginx_result="$( (( TLS )) && sed -n 's/^RESULT //p' "$WORKDIR/idle-nginx.txt" || echo null)"
python3 - "$result" "$nginx_result" <<'PY' || fail=1
import json, sys
r = json.loads(sys.argv[1])
nginx = json.loads(sys.argv[2])
# Plain: <= 16 KiB. TLS (an OpenSSL session per connection): within 10% of nginx's, same certificate.
target = 16 if nginx is None else nginx["per_connection_kib"] * 1.1
ok = r["per_connection_kib"] <= target and r["failed"] == 0 and r["still_open_after_hold"] == r["opened"]
print()
print("| measure | value |")
print("|---|---:|")
print(f"| connections opened / asked | {r['opened']:,} / {r['count']:,} |")
print(f"| RSS at start | {r['rss_before_kib']:,} KiB |")
print(f"| RSS with the connections idle | {r['rss_idle_kib']:,} KiB |")
print(f"| (RSS idle − RSS start) / {r['count']:,} | **{r['per_connection_kib']:.2f} KiB per connection** (target ≤ {target:.1f}) |")
if nginx is not None:
    print(f"| nginx (TLS), same connections | {nginx['per_connection_kib']:.2f} KiB per connection |")
print(f"| still open after holding | {r['still_open_after_hold']:,} |")
print(f"| RSS after closing them | {r['rss_closed_kib']:,} KiB |")
print()
print("idle connections:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
echo

## 2. Soak
if (( SOAK > 0 )); then
    echo "## Soak: wrk -t1 -c$SOAK_CONNECTIONS -d${SOAK}s against $GW, RSS every ${INTERVAL}s"
    echo
    samples="$WORKDIR/soak.tsv"
    printf '0\t%s\n' "$(rss)" > "$samples"
    wrk -t1 "-c$SOAK_CONNECTIONS" "-d${SOAK}s" --timeout 5s --latency "$GW" > "$WORKDIR/soak-wrk.txt" 2>&1 &
    WRK_PID=$!
    start=$(date +%s.%N)
    for ((t = INTERVAL; t <= SOAK; t += INTERVAL)); do
        # Sleep to the absolute sample time so the series does not drift.
        now=$(date +%s.%N)
        sleep "$(python3 -c "print(max(0.0, $start + $t - $now))")"
        alive
        printf '%s\t%s\n' "$t" "$(rss)" >> "$samples"
    done
    wait "$WRK_PID" || true; WRK_PID=""
    alive
    sleep 2
    printf 'end+2\t%s\n' "$(rss)" >> "$samples"
    echo '```'
    cat "$WORKDIR/soak-wrk.txt"
    echo '```'
    echo
    python3 - "$samples" "$WORKDIR/soak-wrk.txt" "$HARNESS_DIR" <<'PY' || fail=1
import json, sys
sys.path.insert(0, sys.argv[3])
import harness
rows = [line.split("\t") for line in open(sys.argv[1]).read().split("\n") if line]
print("| t (s) | RSS KiB |")
print("|---:|---:|")
for t, kib in rows:
    print(f"| {t} | {int(kib):,} |")
series = {t: int(k) for t, k in rows}
w = harness.parse_wrk(sys.argv[2])
numeric = [(int(t), k) for t, k in series.items() if t.isdigit()]
ref = next((k for t, k in numeric if t >= 15), None)
last = numeric[-1][1]
print()
print(f"wrk: {w['requests']:,} requests, {w['rps']:,.0f} req/s, p99 {w['p99']} ms, "
      f"errors: {w['socket_errors']} socket, {w['non2xx']} non-2xx")
if ref is None:
    print("soak too short for the flatness check (needs a sample at >= 15 s)")
    sys.exit(0)
change = (last - ref) / ref * 100
flat = abs(change) <= 10
print(f"flat: last sample {last:,} KiB vs {ref:,} KiB at 15 s: {change:+.1f}% -> {'PASS' if flat else 'FAIL'} (within 10%)")
sys.exit(0 if flat and w["socket_errors"] == 0 and w["non2xx"] == 0 else 1)
PY
fi
exit "$fail"
