#!/usr/bin/env bash
# TLS handshakes per second: nginx, HAProxy, h2o and Portcullis (and, with --baseline,
# another portcullis binary) terminating TLS with the same EC P-256 certificate (TLS 1.3,
# X25519), full handshakes (`openssl s_time -new`) and ticket resumptions (`-reuse`,
# TLS 1.2), CLIENTS parallel clients per row, rows interleaved over ROUNDS rounds; beside
# the physical limit per core from `openssl speed` for the handshake's own public-key
# operations (one P-256 signature + two X25519 operations). A row that cannot be measured
# (its server does not start, completes no handshake, or dies) is printed as failed with
# the reason; the other rows still run. Bounded: fixed durations, stops by itself.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: Benchmarks/load/tls.sh [options]
  --rounds N          rounds, rows interleaved in each (default $ROUNDS or 3)
  --duration S        seconds per s_time run (default $DURATION or 8)
  --clients C         parallel s_time clients per run (default $CLIENTS or 4)
  --only ROW[,ROW]    servers: nginx, haproxy, h2o, portcullis (default all)
  --baseline BIN      add a row for another portcullis binary (e.g. main's build), same config
  --keep DIR          copy configs, logs and raw s_time outputs to DIR
  --summary FILE      also append one JSON line per row and handshake kind (medians, CPU per
                      handshake, per-round figures) to FILE (default $SUMMARY)
Environment: PORTCULLIS_BIN (default .build/release/portcullis), ROUNDS, DURATION, CLIENTS, SUMMARY.
Exit status: 0 when every row was measured, 3 when some row failed (the table is printed).
USAGE
}

ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-8}"
CLIENTS="${CLIENTS:-4}"
ONLY="nginx,haproxy,h2o,portcullis"
BASELINE_BIN=""
KEEP=""
SUMMARY="${SUMMARY:-}"
INVOCATION="$0 $*"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --baseline) BASELINE_BIN="$2"; shift 2 ;;
        --keep) KEEP="$2"; shift 2 ;;
        --summary) SUMMARY="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for n in "$ROUNDS" "$DURATION" "$CLIENTS"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "error: '$n' is not a whole number" >&2; exit 2; }
done
(( ROUNDS >= 1 && DURATION >= 1 && CLIENTS >= 1 )) || { echo "error: rounds, duration and clients must be >= 1" >&2; exit 2; }
for r in ${ONLY//,/ }; do
    case "$r" in nginx|haproxy|h2o|portcullis) ;; *) echo "error: unknown row '$r' in --only" >&2; exit 2 ;; esac
done
[[ -z "$BASELINE_BIN" || -x "$BASELINE_BIN" ]] || { echo "error: --baseline $BASELINE_BIN is not an executable" >&2; exit 2; }

WORKDIR="$(mktemp -d /tmp/portcullis-tls.XXXXXX)"
source "$(dirname "${BASH_SOURCE[0]}")/servers.sh"
trap cleanup_workdir EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


# Rows: name, label, port, PIDs whose CPU counts as the server; FAIL holds the reason once
# a row cannot be measured.
ROWS=(); declare -A LABEL PORT PID FAIL NEGOTIATED
add_row() { ROWS+=("$1"); LABEL[$1]="$2"; PORT[$1]="${3-}"; PID[$1]="${4-}"; }
fail_row() {
    FAIL[$1]="$(one_line "$2")"
    echo "row ${LABEL[$1]}: failed: ${FAIL[$1]}" >&2
}
active() { [[ -z "${FAIL[$1]-}" ]]; }
# start NAME LABEL FUNCTION ARGS... -> adds the row; a server that does not start fails it.
start() {
    local name="$1" label="$2"; shift 2
    if "$@" 2> "$WORKDIR/start-$name.err"; then return 0; fi
    add_row "$name" "$label"
    fail_row "$name" "did not start: $(grep -v '^[[:space:]]*$' "$WORKDIR/start-$name.err" | tail -2 | paste -sd'|' | sed 's/|/ \/ /')"
    return 1
}

start_upstream
make_tls_material
if wants nginx && start nginx nginx start_nginx_proxy; then add_row nginx nginx "$NGINX_PORT" "$NGINX_PID"; fi
if wants haproxy && start haproxy HAProxy start_haproxy; then add_row haproxy HAProxy "$HAPROXY_PORT" "$HAPROXY_PID"; fi
if wants h2o; then
    if ! command -v h2o >/dev/null; then
        add_row h2o h2o; fail_row h2o "h2o not installed (apt-get install h2o)"
    elif start h2o h2o start_h2o; then
        add_row h2o h2o "$H2O_PORT" "$H2O_PID"
    fi
fi
if wants portcullis && start portcullis Portcullis start_portcullis; then
    add_row portcullis Portcullis "$PORTCULLIS_PORT" "$PORTCULLIS_PID"
fi
if [[ -n "$BASELINE_BIN" ]] && start baseline "Portcullis baseline" start_portcullis "" "$BASELINE_BIN" baseline; then
    add_row baseline "Portcullis baseline" "$PORTCULLIS_PORT" "$PORTCULLIS_PID"
fi
[[ ${#ROWS[@]} -gt 0 ]] || { echo "error: no rows selected" >&2; exit 2; }

# alive ROW WHEN -> 0 if the row's server runs; else fails the row.
alive() {
    local p
    for p in ${PID[$1]}; do
        kill -0 "$p" 2>/dev/null && continue
        local d="$WORKDIR/$1" f out="no output"
        for f in portcullis.out haproxy.out h2o.out error.log; do
            [[ -s "$d/$f" ]] && { out="$f: $(last_line "$d/$f")"; break; }
        done
        fail_row "$1" "$2: server (pid $p) exited; $out"
        return 1
    done
}

# Probe: one full handshake per row, which must be TLS 1.3; what was negotiated is printed.
for row in "${ROWS[@]}"; do
    active "$row" || continue
    timeout 10 openssl s_client -connect "127.0.0.1:${PORT[$row]}" -brief < /dev/null > "$WORKDIR/probe-$row.txt" 2>&1 || true
    proto="$(sed -n 's/^Protocol version: *//p' "$WORKDIR/probe-$row.txt" | head -1)"
    if [[ -z "$proto" ]]; then
        fail_row "$row" "probe: no TLS handshake ($(last_line "$WORKDIR/probe-$row.txt"))"
    else
        NEGOTIATED[$row]="$proto, $(sed -n 's/^Ciphersuite: *//p' "$WORKDIR/probe-$row.txt" | head -1), $(sed -n 's/^Peer Temp Key: *//p; s/^Server Temp Key: *//p' "$WORKDIR/probe-$row.txt" | head -1 | cut -d, -f1)"
        [[ "$proto" == TLSv1.3 ]] || fail_row "$row" "probe: negotiated $proto, not TLSv1.3"
    fi
done

# One measurement: CLIENTS parallel s_time clients for DURATION s; prints
# "handshakes cpu_ticks hz resumed" (resumed: s_time prints 'r' for each resumed connection).
measure() {
    local row="$1" mode="$2" round="$3" before after total=0 reused=0 i n pids=()
    before="$($HELPER cpu ${PID[$row]})"
    for i in $(seq 1 "$CLIENTS"); do
        # -reuse under TLS 1.2: s_time keeps the session right after the handshake, before a
        # TLS 1.3 ticket arrives, so a TLS 1.3 "-reuse" run never resumes (it measured full handshakes).
        local version=""; [[ "$mode" == -reuse ]] && version="-tls1_2"
        timeout $((DURATION + 10)) openssl s_time -connect "127.0.0.1:${PORT[$row]}" "$mode" $version -time "$DURATION" \
            > "$WORKDIR/stime-$row$mode-$round-$i.txt" 2>&1 &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || true; done
    after="$($HELPER cpu ${PID[$row]})"
    for i in $(seq 1 "$CLIENTS"); do
        n=$(grep -m1 -oE '^[0-9]+ connections in' "$WORKDIR/stime-$row$mode-$round-$i.txt" | awk '{print $1}' || true)
        total=$((total + ${n:-0}))
        n=$(grep -E '^[r*t3]+$' "$WORKDIR/stime-$row$mode-$round-$i.txt" | tr -cd r | wc -c || true)
        reused=$((reused + ${n:-0}))
    done
    echo "$total $(( ${after% *} - ${before% *} )) ${after#* } $reused"
}

echo "# TLS handshakes: \`openssl s_time -new|-reuse -time $DURATION\` x $CLIENTS clients, $ROUNDS interleaved rounds, medians"
echo "- machine: nproc=$(nproc), $(openssl version), $(nginx -v 2>&1 | cut -d' ' -f3), $(haproxy -v | head -1 | cut -d' ' -f1-3)$(wants h2o && command -v h2o >/dev/null && echo ", $(h2o --version | head -1)")"
echo "- invocation: \`$INVOCATION\`"
if wants portcullis; then
    echo "- portcullis: $PORTCULLIS_BIN$([[ -x "$PORTCULLIS_BIN" ]] && echo " (binary built $(date -u -r "$PORTCULLIS_BIN" +%Y-%m-%dT%H:%MZ); repo HEAD now $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$( [[ -n "$(git -C "$REPO_ROOT" status --porcelain -- Sources Package.swift 2>/dev/null)" ]] && echo ', working tree has uncommitted Sources changes'))")"
fi
[[ -n "$BASELINE_BIN" ]] && echo "- portcullis baseline: $BASELINE_BIN (binary built $(date -u -r "$BASELINE_BIN" +%Y-%m-%dT%H:%MZ))"
for row in "${ROWS[@]}"; do
    if active "$row"; then echo "- row ${LABEL[$row]}: 127.0.0.1:${PORT[$row]} (${NEGOTIATED[$row]})"
    else echo "- row ${LABEL[$row]}: not measured: ${FAIL[$row]}"; fi
done
echo
RESULTS="$WORKDIR/results.txt"; : > "$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
    for mode in -new -reuse; do
        for row in "${ROWS[@]}"; do
            active "$row" || continue
            read -r conns ticks hz reused <<<"$(measure "$row" "$mode" "$round")"
            alive "$row" "round $round, $mode" || continue
            if (( conns == 0 )); then
                fail_row "$row" "round $round, $mode: no handshake completed ($(last_line "$WORKDIR/stime-$row$mode-$round-1.txt"))"
                continue
            fi
            echo "$row $mode $conns $ticks $hz $reused" >> "$RESULTS"
            printf 'round %d %-20s %-7s %6.0f handshakes/s\n' "$round" "${LABEL[$row]}" "$mode" "$(echo "$conns / $DURATION" | bc -l)" >&2
        done
    done
done

# Physical limit per core: the server's public-key work in a TLS 1.3 full handshake.
speed="$(openssl speed -seconds 2 ecdsap256 ecdhx25519 2>/dev/null)"
sign=$(echo "$speed" | awk '/256 bits ecdsa \(nistp256\)/ {print $(NF-1); exit}')
x25519=$(echo "$speed" | awk '/253 bits ecdh \(X25519\)/ {print $NF; exit}')

ROWS_TSV="$WORKDIR/rows.tsv"; : > "$ROWS_TSV"
for row in "${ROWS[@]}"; do printf '%s\t%s\t%s\n' "$row" "${LABEL[$row]}" "${FAIL[$row]-}" >> "$ROWS_TSV"; done
$HELPER tlstable "$ROWS_TSV" "$RESULTS" "$DURATION" "$sign" "$x25519" ${SUMMARY:+--summary "$SUMMARY"}

for row in "${ROWS[@]}"; do
    active "$row" || exit 3
done
exit 0
