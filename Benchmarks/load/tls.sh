#!/usr/bin/env bash
# TLS handshakes per second: nginx, HAProxy and Portcullis terminating TLS with the
# same EC P-256 certificate (TLS 1.3, X25519), full handshakes (`openssl s_time -new`)
# and ticket resumptions (`-reuse`, TLS 1.2), CLIENTS parallel clients per row, rows
# interleaved over ROUNDS rounds; beside the physical limit per core from
# `openssl speed` for the handshake's own public-key operations (one P-256
# signature + two X25519 operations). Bounded: fixed durations, stops by itself.
set -euo pipefail
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-8}"
CLIENTS="${CLIENTS:-4}"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        -h|--help) echo "usage: Benchmarks/load/tls.sh [--rounds N] [--duration S] [--clients C]"; exit 0 ;;
        *) echo "unknown option: $1" >&2; exit 2 ;;
    esac
done
WORKDIR="$(mktemp -d /tmp/portcullis-tls.XXXXXX)"
source "$(dirname "${BASH_SOURCE[0]}")/servers.sh"
cleanup() { local rc=$?; stop_servers; rm -rf "$WORKDIR"; exit "$rc"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_upstream
make_tls_material
start_nginx_proxy
start_haproxy
start_portcullis
declare -A PORT=([nginx]=$NGINX_PORT [haproxy]=$HAPROXY_PORT [portcullis]=$PORTCULLIS_PORT)
declare -A PID=([nginx]=$NGINX_PID [haproxy]=$HAPROXY_PID [portcullis]=$PORTCULLIS_PID)
ROWS=(nginx haproxy portcullis)

# One measurement: CLIENTS parallel s_time clients for DURATION s; prints "conns cpu_ticks hz".
measure() {
    local row="$1" mode="$2" before after total=0 i
    before="$($HELPER cpu ${PID[$row]})"
    for i in $(seq 1 "$CLIENTS"); do
        # -reuse under TLS 1.2: s_time keeps the session right after the handshake, before a
        # TLS 1.3 ticket arrives, so a TLS 1.3 "-reuse" run never resumes (it measured full handshakes).
        local version=""; [[ "$mode" == -reuse ]] && version="-tls1_2"
        timeout $((DURATION + 10)) openssl s_time -connect "127.0.0.1:${PORT[$row]}" "$mode" $version -time "$DURATION" \
            > "$WORKDIR/stime-$row-$mode-$i.txt" 2>&1 &
    done
    wait
    after="$($HELPER cpu ${PID[$row]})"
    for i in $(seq 1 "$CLIENTS"); do
        n=$(grep -m1 -oE '^[0-9]+ connections in' "$WORKDIR/stime-$row-$mode-$i.txt" | awk '{print $1}')
        total=$((total + ${n:-0}))
    done
    echo "$total $(( ${after% *} - ${before% *} )) ${after#* }"
}

echo "# TLS handshakes: \`openssl s_time -new|-reuse -time $DURATION\` x $CLIENTS clients, $ROUNDS interleaved rounds, medians"
echo "- machine: nproc=$(nproc), $(openssl version), $(nginx -v 2>&1 | cut -d' ' -f3), $(haproxy -v | head -1 | cut -d' ' -f1-3)"
echo
RESULTS="$WORKDIR/results.txt"; : > "$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
    for mode in -new -reuse; do
        for row in "${ROWS[@]}"; do
            read -r conns ticks hz <<<"$(measure "$row" "$mode")"
            echo "$row $mode $conns $ticks $hz" >> "$RESULTS"
            printf 'round %d %-10s %-7s %6.0f handshakes/s\n' "$round" "$row" "$mode" "$(echo "$conns / $DURATION" | bc -l)" >&2
        done
    done
done

# Physical limit per core: the server's public-key work in a TLS 1.3 full handshake.
speed="$(openssl speed -seconds 2 ecdsap256 ecdhx25519 2>/dev/null)"
sign=$(echo "$speed" | awk '/256 bits ecdsa \(nistp256\)/ {print $(NF-1); exit}')
x25519=$(echo "$speed" | awk '/253 bits ecdh \(X25519\)/ {print $NF; exit}')

python3 - "$RESULTS" "$DURATION" "$sign" "$x25519" <<'PY'
import sys, statistics
path, duration, sign, x = sys.argv[1], float(sys.argv[2]), float(sys.argv[3] or 0), float(sys.argv[4] or 0)
rows = {}
for line in open(path):
    row, mode, conns, ticks, hz = line.split()
    rows.setdefault((row, mode), []).append((int(conns) / duration, int(ticks) / int(hz) * 1e6 / max(1, int(conns))))
labels = {"nginx": "nginx", "haproxy": "HAProxy", "portcullis": "Portcullis"}
limit = 1 / (1 / sign + 2 / x) if sign and x else None
print("| handshake | server | per s | ratio to nginx | server CPU µs per handshake |")
print("|---|---|---:|---:|---:|")
for mode, name in (("-new", "full (TLS 1.3)"), ("-reuse", "resumed (TLS 1.2 ticket)")):
    base = statistics.median(r[0] for r in rows[("nginx", mode)])
    for row in ("nginx", "haproxy", "portcullis"):
        rate = statistics.median(r[0] for r in rows[(row, mode)])
        cpu = statistics.median(r[1] for r in rows[(row, mode)])
        print(f"| {name} | {labels[row]} | {rate:,.0f} | {rate / base:.2f} | {cpu:,.0f} |")
if limit:
    print()
    print(f"Physical limit per core (`openssl speed`): P-256 sign {sign:,.0f}/s, X25519 {x:,.0f} op/s -> "
          f"{limit:,.0f} full handshakes/s per core ({1e6 / limit:,.0f} µs of public-key work each); the machine has the same 2 cores for clients and server.")
PY
