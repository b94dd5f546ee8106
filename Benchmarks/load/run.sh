#!/usr/bin/env bash
# Load harness: wrk (keep-alive, 64 connections) against a fast upstream
# directly, through nginx, through HAProxy and through Portcullis — configured
# alike, interleaved in one run — or against your own deployment (--target).
# Every run has a fixed duration; the script stops by itself. See README.md.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: Benchmarks/load/run.sh [options]
  --rounds N          rounds, rows interleaved in each (default $ROUNDS or 3)
  --duration S        seconds per wrk run (default $DURATION or 10)
  --connections C     wrk connections (default $CONNECTIONS or 64)
  --warmup S          unmeasured wrk run per row before round 1 (default $WARMUP or 2; 0 = none)
  --only ROW[,ROW]    rows to run: upstream, nginx, haproxy, portcullis (default all)
  --target URL        measure only this URL (your deployment); no local servers are started
  --header 'N: V'     extra request header (repeatable), sent through a wrk Lua script
  --keep DIR          copy configs, logs and raw wrk outputs to DIR
  --baseline BIN      add a row for another portcullis binary (e.g. main's build), same config
  --summary FILE      also append one JSON line per row (medians, CPU per request, per-round
                      figures) to FILE, for all.sh or your own tooling (default $SUMMARY)
  --tls               the proxies terminate TLS (EC P-256 leaf, TLS 1.3, tickets) and wrk speaks https;
                      the upstream stays plain HTTP/1.1
  --tracing           add two rows: the same Portcullis with tracing on (W3C traceparent, OTLP/HTTP
                      export to the upstream nginx, which answers 200), sampling 1 % and 100 %
  --reload-every MS   add a row: the same Portcullis while its whole configuration is reloaded
                      (POST /reload) every MS milliseconds during the wrk run; the row fails if any
                      reload is refused or wrk sees an error
Environment: PORTCULLIS_BIN (default .build/release/portcullis), ROUNDS, DURATION,
CONNECTIONS, WARMUP, SUMMARY.
USAGE
}

ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-64}"
WARMUP="${WARMUP:-2}"
ONLY="upstream,nginx,haproxy,portcullis"
TARGET=""
HEADERS=()
KEEP=""
BASELINE_BIN=""
TLS=0
RELOAD_MS=0
TRACING=0
SUMMARY="${SUMMARY:-}"
INVOCATION="$0 $*"

while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --target) TARGET="$2"; shift 2 ;;
        --header) HEADERS+=("$2"); shift 2 ;;
        --keep) KEEP="$2"; shift 2 ;;
        --baseline) BASELINE_BIN="$2"; shift 2 ;;
        --tls) TLS=1; shift ;;
        --reload-every) RELOAD_MS="$2"; shift 2 ;;
        --tracing) TRACING=1; shift ;;
        --summary) SUMMARY="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for n in "$ROUNDS" "$DURATION" "$CONNECTIONS" "$WARMUP" "$RELOAD_MS"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "error: '$n' is not a whole number" >&2; exit 2; }
done
(( ROUNDS >= 1 && DURATION >= 1 && CONNECTIONS >= 1 )) || { echo "error: rounds, duration and connections must be >= 1" >&2; exit 2; }
command -v wrk >/dev/null || { echo "error: wrk not found (apt-get install wrk)" >&2; exit 1; }

WORKDIR="$(mktemp -d /tmp/portcullis-load.XXXXXX)"
source "$(dirname "${BASH_SOURCE[0]}")/servers.sh"

trap cleanup_workdir EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Descriptors for the servers and for wrk: as many as the hard limit allows.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

WRK_ARGS=(-t1 "-c$CONNECTIONS" "-d${DURATION}s" --timeout 5s --latency)
LUA=""
if [[ ${#HEADERS[@]} -gt 0 ]]; then
    LUA="$WORKDIR/headers.lua"
    $HELPER lua "${HEADERS[@]}" > "$LUA"
    WRK_ARGS+=(-s "$LUA")
fi

# Rows: name, label, URL, PIDs whose CPU counts as "the server".
ROW_NAMES=(); declare -A ROW_LABEL ROW_URL ROW_PIDS
add_row() { ROW_NAMES+=("$1"); ROW_LABEL[$1]="$2"; ROW_URL[$1]="$3"; ROW_PIDS[$1]="${4-}"; }

if [[ -n "$TARGET" ]]; then
    add_row target "$TARGET" "$TARGET" ""
else
    for r in ${ONLY//,/ }; do
        case "$r" in upstream|nginx|haproxy|portcullis) ;; *) echo "error: unknown row '$r' in --only" >&2; exit 2 ;; esac
    done
    start_upstream
    (( TLS )) && make_tls_material
    S="$(scheme)"; T=""; (( TLS )) && T=" (TLS)"
    wants upstream && add_row upstream "upstream direct (nginx return 200)" "http://127.0.0.1:$UPSTREAM_PORT/" "$UPSTREAM_PID"
    if wants nginx; then start_nginx_proxy; add_row nginx "nginx proxy$T" "$S://127.0.0.1:$NGINX_PORT/" "$NGINX_PID"; fi
    if wants haproxy; then start_haproxy; add_row haproxy "HAProxy proxy$T" "$S://127.0.0.1:$HAPROXY_PORT/" "$HAPROXY_PID"; fi
    if [[ -n "$BASELINE_BIN" ]]; then
        start_portcullis "" "$BASELINE_BIN" baseline
        add_row baseline "Portcullis baseline$T" "$S://127.0.0.1:$PORTCULLIS_PORT/" "$PORTCULLIS_PID"
    fi
    if wants portcullis; then start_portcullis; add_row portcullis "Portcullis$T" "$S://127.0.0.1:$PORTCULLIS_PORT/" "$PORTCULLIS_PID"; fi
    if (( TRACING )); then
        for ratio in 0.01 1; do
            name="tracing-${ratio/./}"
            start_portcullis "tracing: {endpoint: \"http://127.0.0.1:$UPSTREAM_PORT/v1/traces\", sample_ratio: $ratio}" "$PORTCULLIS_BIN" "$name"
            add_row "$name" "Portcullis$T, tracing $(awk -v r="$ratio" 'BEGIN { printf "%g %%", r * 100 }')" "$S://127.0.0.1:$PORTCULLIS_PORT/" "$PORTCULLIS_PID"
        done
    fi
    if (( RELOAD_MS > 0 )); then
        start_portcullis "" "$PORTCULLIS_BIN" reloading
        RELOAD_ADMIN="$PORTCULLIS_ADMIN"; RELOAD_TOKEN="$(cat "$WORKDIR/reloading/admin-token")"
        add_row reloading "Portcullis$T, reload every ${RELOAD_MS} ms" "$S://127.0.0.1:$PORTCULLIS_PORT/" "$PORTCULLIS_PID"
    fi
fi
[[ ${#ROW_NAMES[@]} -gt 0 ]] || { echo "error: no rows selected" >&2; exit 2; }

check_alive() {
    local row="$1" pid
    for pid in ${ROW_PIDS[$row]}; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "error: ${ROW_LABEL[$row]} (pid $pid) is no longer running" >&2
            [[ "$row" == portcullis || "$row" == baseline ]] && { echo "--- portcullis output:" >&2; cat "$WORKDIR/$row/portcullis.out" >&2; }
            exit 1
        fi
    done
}

echo "# Portcullis load harness"
echo
echo "- invocation: \`$INVOCATION\` (rounds=$ROUNDS, duration=${DURATION}s, connections=$CONNECTIONS, warm-up=${WARMUP}s per row)"
echo "- wrk command per row: \`wrk ${WRK_ARGS[*]} URL\`"
[[ ${#HEADERS[@]} -gt 0 ]] && echo "- extra headers (via Lua): $(for h in "${HEADERS[@]}"; do printf '`%s: …` ' "${h%%:*}"; done)"
echo "- machine: nproc=$(nproc), kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "- tools: $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), $(nginx -v 2>&1 | cut -d' ' -f3), $(haproxy -v | head -1 | cut -d' ' -f1-3)"
[[ -z "$TARGET" ]] && wants portcullis && echo "- portcullis: $PORTCULLIS_BIN (binary built $(date -u -r "$PORTCULLIS_BIN" +%Y-%m-%dT%H:%MZ); repo HEAD now $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$( [[ -n "$(git -C "$REPO_ROOT" status --porcelain -- Sources Package.swift 2>/dev/null)" ]] && echo ', working tree has uncommitted Sources changes'))"
[[ -n "$BASELINE_BIN" ]] && echo "- portcullis baseline: $BASELINE_BIN (binary built $(date -u -r "$BASELINE_BIN" +%Y-%m-%dT%H:%MZ))"
for row in "${ROW_NAMES[@]}"; do echo "- row ${ROW_LABEL[$row]}: ${ROW_URL[$row]}"; done
echo

if (( WARMUP > 0 )); then
    for row in "${ROW_NAMES[@]}"; do
        wrk -t1 "-c$CONNECTIONS" "-d${WARMUP}s" --timeout 5s ${LUA:+-s "$LUA"} "${ROW_URL[$row]}" > "$WORKDIR/warmup-$row.txt" 2>&1 || true
        check_alive "$row"
    done
fi

RESULTS="$WORKDIR/results.jsonl"
: > "$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
    for row in "${ROW_NAMES[@]}"; do
        out="$WORKDIR/wrk-$row-$round.txt"
        before=""; cpu="null"; hz=100
        [[ -n "${ROW_PIDS[$row]}" ]] && before="$($HELPER cpu ${ROW_PIDS[$row]})"
        reloader=""
        if [[ "$row" == reloading ]]; then
            # POST /reload every RELOAD_MS while wrk runs; each verdict is kept.
            ( end=$(( $(date +%s) + DURATION )); n=0
              while (( $(date +%s) < end )); do
                  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "authorization: Bearer $RELOAD_TOKEN" \
                         "http://127.0.0.1:$RELOAD_ADMIN/reload" || echo 000)
                  echo "$code"; n=$((n + 1))
                  sleep "$(awk -v ms="$RELOAD_MS" 'BEGIN { printf "%.3f", ms / 1000 }')"
              done ) > "$WORKDIR/reloads-$round.txt" &
            reloader=$!
        fi
        if ! wrk "${WRK_ARGS[@]}" "${ROW_URL[$row]}" > "$out" 2>&1; then
            echo "error: wrk failed against ${ROW_LABEL[$row]}:" >&2; cat "$out" >&2; exit 1
        fi
        if [[ -n "$reloader" ]]; then
            wait "$reloader" || true
            applied=$(grep -c '^200$' "$WORKDIR/reloads-$round.txt" || true)
            other=$(grep -vc '^200$' "$WORKDIR/reloads-$round.txt" || true)
            echo "round $round: $applied reloads applied during the run, $other not" >&2
            (( other == 0 )) || { echo "error: a reload was refused or failed" >&2; cat "$WORKDIR/reloading/portcullis.out" >&2; exit 1; }
            if grep -qE 'Non-2xx|Socket errors' "$out"; then echo "error: wrk saw errors while reloading:" >&2; cat "$out" >&2; exit 1; fi
        fi
        if [[ -n "$before" ]]; then
            after="$($HELPER cpu ${ROW_PIDS[$row]})"
            cpu=$(( ${after% *} - ${before% *} )); hz="${after#* }"
        fi
        check_alive "$row"
        printf '{"row": "%s", "label": "%s", "round": %d, "file": "%s", "cpu_ticks": %s, "hz": %s}\n' \
            "$row" "${ROW_LABEL[$row]//\"/\\\"}" "$round" "$out" "$cpu" "$hz" >> "$RESULTS"
        printf 'round %d/%d  %-36s %s req/s\n' "$round" "$ROUNDS" "${ROW_LABEL[$row]}" \
            "$(grep -m1 'Requests/sec' "$out" | awk '{print $2}')" >&2
    done
done

echo "Medians over $ROUNDS interleaved rounds:"
echo
SECTION=http1; (( TLS )) && SECTION=https; [[ -n "$TARGET" ]] && SECTION=target
$HELPER table "$RESULTS" ${SUMMARY:+--summary "$SUMMARY" --script run.sh --section "$SECTION"}
if [[ -z "$TARGET" ]]; then
    echo
    echo "CPU is utime+stime from /proc/PID/stat (all threads; nginx master and workers) over the wrk run, divided by the requests wrk completed. wrk itself shares the $(nproc) cores."
fi
