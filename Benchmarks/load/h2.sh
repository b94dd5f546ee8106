#!/usr/bin/env bash
# HTTP/2 load harness: h2load (8 connections x 32 streams, one thread) through nginx,
# HAProxy, h2o and Portcullis to the same fast HTTP/1.1 upstream — configured alike,
# same certificate, rows interleaved in one run:
#   h2 over TLS 1.3 (ALPN h2)          nginx, HAProxy, h2o, Portcullis [, baseline]
#   h2c with prior knowledge           nginx, HAProxy, h2o, Portcullis [, baseline]
#   h2 over TLS 1.3 + RS256 Bearer     Portcullis [, baseline] (token on every stream),
#                                      HAProxy passing the same header through unchecked
# A row that cannot be measured (its server does not start, does not speak h2, dies, or
# h2load fails) is printed as failed with the reason; the other rows still run.
# Every run has a fixed duration; the script stops by itself. See README.md.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: Benchmarks/load/h2.sh [options]
  --rounds N          rounds, rows interleaved in each (default $ROUNDS or 3)
  --duration S        seconds per measured h2load run (-D) (default $DURATION or 10)
  --warmup S          unmeasured h2load run per row before round 1 (default $WARMUP or 2; 0 = none)
  --clients C         h2load connections (-c) (default $CLIENTS or 8)
  --streams M         concurrent streams per connection (-m) (default $STREAMS or 32)
  --only ROW[,ROW]    servers: nginx, haproxy, h2o, portcullis, auth (default all)
  --protocols P[,P]   h2 (over TLS), h2c (default both; the auth rows are h2)
  --keep DIR          copy configs, logs and raw h2load outputs to DIR (not the per-request logs)
  --baseline BIN      add rows for another portcullis binary (e.g. main's build), same configs
  --summary FILE      also append one JSON line per row (medians, CPU per request, per-round
                      figures; failed rows with their reason) to FILE (default $SUMMARY)
Environment: PORTCULLIS_BIN (default .build/release/portcullis), ROUNDS, DURATION, WARMUP,
CLIENTS, STREAMS, SUMMARY.
Exit status: 0 when every row was measured, 3 when some row failed (the table is printed).
USAGE
}

ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-2}"
CLIENTS="${CLIENTS:-8}"
STREAMS="${STREAMS:-32}"
ONLY="nginx,haproxy,h2o,portcullis,auth"
PROTOCOLS="h2,h2c"
KEEP=""
BASELINE_BIN=""
SUMMARY="${SUMMARY:-}"
INVOCATION="$0 $*"

while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --streams) STREAMS="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --protocols) PROTOCOLS="$2"; shift 2 ;;
        --keep) KEEP="$2"; shift 2 ;;
        --baseline) BASELINE_BIN="$2"; shift 2 ;;
        --summary) SUMMARY="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for n in "$ROUNDS" "$DURATION" "$WARMUP" "$CLIENTS" "$STREAMS"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "error: '$n' is not a whole number" >&2; exit 2; }
done
(( ROUNDS >= 1 && DURATION >= 1 && CLIENTS >= 1 && STREAMS >= 1 )) || { echo "error: rounds, duration, clients and streams must be >= 1" >&2; exit 2; }
for r in ${ONLY//,/ }; do
    case "$r" in nginx|haproxy|h2o|portcullis|auth) ;; *) echo "error: unknown row '$r' in --only" >&2; exit 2 ;; esac
done
for p in ${PROTOCOLS//,/ }; do
    case "$p" in h2|h2c) ;; *) echo "error: unknown protocol '$p' in --protocols" >&2; exit 2 ;; esac
done
[[ -z "$BASELINE_BIN" || -x "$BASELINE_BIN" ]] || { echo "error: --baseline $BASELINE_BIN is not an executable" >&2; exit 2; }
command -v h2load >/dev/null || { echo "error: h2load not found (apt-get install nghttp2-client)" >&2; exit 1; }

WORKDIR="$(mktemp -d /tmp/portcullis-h2-load.XXXXXX)"
source "$(dirname "${BASH_SOURCE[0]}")/servers.sh"
HTTP2=1
# Up to CLIENTS x STREAMS requests are in flight: pools sized so that none binds (servers.sh).
UPSTREAM_POOL=$(( 2 * CLIENTS * STREAMS ))

cleanup() {
    local rc=$?
    stop_servers
    rm -f "$WORKDIR"/h2load-*.log
    if [[ -n "$KEEP" ]]; then mkdir -p "$KEEP" && cp -r "$WORKDIR"/. "$KEEP"/ || true; fi
    rm -rf "$WORKDIR"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# Every h2load run: h2 only in ALPN (a server that does not offer h2 fails instead of
# silently running HTTP/1.1), one TLS 1.3 cipher for all rows (servers' preferences differ:
# HAProxy would pick AES-256-GCM, the others AES-128-GCM). Without TLS h2load sends the
# h2c preface directly (prior knowledge; -p h2c is its default).
H2LOAD_ARGS=(-t1 "-c$CLIENTS" "-m$STREAMS" --npn-list=h2 --tls13-ciphers=TLS_AES_128_GCM_SHA256)
RUN_LIMIT=$(( DURATION + 30 ))   # hard stop for one h2load run (connect phase included)

wants_proto() { [[ ",$PROTOCOLS," == *",$1,"* ]]; }

# Rows: name, section (h2 | h2c | auth), label, URL, PIDs whose CPU counts as the server,
# extra h2load arguments; ROW_FAIL holds the reason once a row cannot be measured.
ROW_NAMES=(); declare -A ROW_SECTION ROW_LABEL ROW_URL ROW_PIDS ROW_HEADER ROW_FAIL ROW_NEGOTIATED
add_row() {
    ROW_NAMES+=("$1"); ROW_SECTION[$1]="$2"; ROW_LABEL[$1]="$3"; ROW_URL[$1]="$4"; ROW_PIDS[$1]="${5-}"; ROW_HEADER[$1]="${6-}"
}
fail_row() {
    ROW_FAIL[$1]="$(one_line "$2")"
    echo "row ${ROW_LABEL[$1]} (${ROW_SECTION[$1]}): failed: ${ROW_FAIL[$1]}" >&2
}
active() { [[ -z "${ROW_FAIL[$1]-}" ]]; }

# start SERVER FUNCTION ARGS... -> 0 if started; else records the reason in START_FAIL[SERVER].
declare -A START_FAIL
start() {
    local server="$1"; shift
    if ! "$@" 2> "$WORKDIR/start-$server.err"; then
        # the last two lines: e.g. "error: URL did not answer …" and the server's own last word
        START_FAIL[$server]="did not start: $(grep -v '^[[:space:]]*$' "$WORKDIR/start-$server.err" | tail -2 | paste -sd'|' | sed 's/|/ \/ /')"
        [[ -n "${START_FAIL[$server]#did not start: }" ]] || START_FAIL[$server]="did not start"
        return 1
    fi
}

# add_server_rows NAME LABEL TLS_PORT H2C_PORT PID START_OK
add_server_rows() {
    local name="$1" label="$2" tls_port="$3" h2c_port="$4" pid="$5" ok="$6"
    if wants_proto h2; then
        add_row "$name-tls" h2 "$label" "https://127.0.0.1:$tls_port/" "$pid"
        (( ok )) || fail_row "$name-tls" "${START_FAIL[$name]}"
    fi
    if wants_proto h2c; then
        add_row "$name-h2c" h2c "$label" "http://127.0.0.1:$h2c_port/" "$pid"
        (( ok )) || fail_row "$name-h2c" "${START_FAIL[$name]}"
    fi
}

start_upstream
make_tls_material

if wants nginx; then
    ok=1; start nginx start_nginx_proxy || ok=0
    add_server_rows nginx "nginx" "${NGINX_PORT-}" "${NGINX_H2C_PORT-}" "${NGINX_PID-}" "$ok"
fi
if wants haproxy; then
    ok=1; start haproxy start_haproxy || ok=0
    add_server_rows haproxy "HAProxy" "${HAPROXY_PORT-}" "${HAPROXY_H2C_PORT-}" "${HAPROXY_PID-}" "$ok"
fi
if wants h2o; then
    ok=1
    if ! command -v h2o >/dev/null; then
        START_FAIL[h2o]="h2o not installed (apt-get install h2o)"; ok=0
    else
        start h2o start_h2o || ok=0
    fi
    add_server_rows h2o "h2o" "${H2O_PORT-}" "${H2O_H2C_PORT-}" "${H2O_PID-}" "$ok"
fi

# Portcullis: the binary under test and, with --baseline, another one; each NAME gets an
# unauthenticated instance (rows NAME-tls, NAME-h2c) and, with `auth`, one whose route
# requires an RS256 Bearer token (row NAME-auth, h2 over TLS).
PORTCULLIS_BINS=()
wants portcullis || wants auth && PORTCULLIS_BINS+=("portcullis=$PORTCULLIS_BIN")
[[ -n "$BASELINE_BIN" ]] && PORTCULLIS_BINS+=("baseline=$BASELINE_BIN")
TOKEN_HEADER=""
if wants auth && (( ${#PORTCULLIS_BINS[@]} > 0 )); then
    # A throwaway RSA key; the token comes from `portcullis mint`, given a plain HTTP/1.1
    # configuration with the same provider (minting does not depend on HTTP/2 support).
    K="$WORKDIR/keys"; mkdir -p "$K"
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$K/rsa.key.pem" 2>/dev/null
    openssl pkey -in "$K/rsa.key.pem" -pubout -out "$K/rsa.pub.pem"
    PROVIDERS="providers:
  - {name: corp, type: oidc, issuer: \"https://id.example.test\", audiences: [\"api\"], algorithms: [RS256], public_key: \"$K/rsa.pub.pem\", key_id: k1, forward_claims: []}"
    cat > "$K/mint.yaml" <<CONF
listen: [{address: "127.0.0.1:$(free_port)"}]
upstreams:
  fast: {url: "http://127.0.0.1:$UPSTREAM_PORT"}
routes:
  - {path: /, upstream: fast, auth: required}
$PROVIDERS
CONF
    MINT_BIN="$PORTCULLIS_BIN"; [[ -x "$MINT_BIN" ]] || MINT_BIN="$BASELINE_BIN"
    if [[ -x "$MINT_BIN" ]] && "$MINT_BIN" mint --config "$K/mint.yaml" --provider corp --key "$K/rsa.key.pem" \
            --kid k1 --ttl 2h --format header > "$K/token.txt" 2> "$K/mint.err"; then
        line="$(head -1 "$K/token.txt")"
        TOKEN_HEADER="authorization:${line#*:}"   # HTTP/2 header names are lower case
    elif [[ ! -x "$MINT_BIN" ]]; then
        MINT_FAIL="token not minted: $PORTCULLIS_BIN not found"
    else
        MINT_FAIL="token not minted: $(last_line "$K/mint.err")"
    fi
fi
for entry in "${PORTCULLIS_BINS[@]}"; do
    name="${entry%%=*}"; bin="${entry#*=}"
    label="Portcullis"; [[ "$name" == baseline ]] && label="Portcullis baseline"
    if [[ "$name" == baseline ]] || wants portcullis; then
        ok=1; start "$name" start_portcullis "" "$bin" "$name" || ok=0
        add_server_rows "$name" "$label" "${PORTCULLIS_PORT-}" "${PORTCULLIS_H2C_PORT-}" "${PORTCULLIS_PID-}" "$ok"
    fi
    if wants auth; then
        add_row "$name-auth" auth "$label, RS256 Bearer" "" "" "$TOKEN_HEADER"
        if [[ -z "$TOKEN_HEADER" ]]; then
            fail_row "$name-auth" "${MINT_FAIL:-token not minted}"
        elif start "$name-auth" start_portcullis "$PROVIDERS" "$bin" "$name-auth" required; then
            ROW_URL[$name-auth]="https://127.0.0.1:$PORTCULLIS_PORT/"; ROW_PIDS[$name-auth]="$PORTCULLIS_PID"
        else
            fail_row "$name-auth" "${START_FAIL[$name-auth]}"
        fi
    fi
done
# What carrying the token costs a proxy that does nothing with it: HAProxy (the h2 row's
# instance) with the same authorization header on every stream, passed to the upstream.
if wants auth && wants haproxy && wants_proto h2; then
    add_row haproxy-auth auth "HAProxy, same header passed through" "https://127.0.0.1:${HAPROXY_PORT-}/" "${HAPROXY_PID-}" "$TOKEN_HEADER"
    if [[ -n "${START_FAIL[haproxy]-}" ]]; then fail_row haproxy-auth "${START_FAIL[haproxy]}"
    elif [[ -z "$TOKEN_HEADER" ]]; then fail_row haproxy-auth "${MINT_FAIL:-token not minted}"; fi
fi
[[ ${#ROW_NAMES[@]} -gt 0 ]] || { echo "error: no rows selected" >&2; exit 2; }

# server_log ROW -> the last line of the row's server output (its directory in $WORKDIR).
server_log() {
    local d="$WORKDIR/${1%-tls}" f; d="${d%-h2c}"
    for f in portcullis.out haproxy.out h2o.out error.log; do
        [[ -s "$d/$f" ]] && { echo "$f: $(last_line "$d/$f")"; return; }
    done
    echo "no output"
}
# alive ROW [WHEN] -> 0 if every server process of the row runs; else fails the row.
alive() {
    local row="$1" when="${2-}" pid
    for pid in ${ROW_PIDS[$row]}; do
        if ! kill -0 "$pid" 2>/dev/null; then
            fail_row "$row" "${when:+$when: }server (pid $pid) exited; $(server_log "$row")"
            return 1
        fi
    done
}

# h2load_row ROW OUT [ARGS...] -> runs h2load against the row, bounded; returns h2load's status.
h2load_row() {
    local row="$1" out="$2"; shift 2
    local header=()
    [[ -n "${ROW_HEADER[$row]}" ]] && header=(-H "${ROW_HEADER[$row]}")
    timeout -k 5 "$RUN_LIMIT" h2load "${H2LOAD_ARGS[@]}" "${header[@]}" "$@" "${ROW_URL[$row]}" > "$out" 2>&1
}
expected_proto() { [[ "${ROW_URL[$1]}" == https:* ]] && echo h2 || echo h2c; }

# Probe every row once: one request must come back 2xx over h2 (h2c); the auth rows must
# also refuse a request without the token.
for row in "${ROW_NAMES[@]}"; do
    active "$row" || continue
    alive "$row" "at start" || continue
    out="$WORKDIR/probe-$row.txt"
    if ! h2load_row "$row" "$out" -n1 -c1 -m1; then :; fi
    if ! probe="$($HELPER h2run "$row" 0 "$out" /dev/null "$(expected_proto "$row")" "" 100 2> "$WORKDIR/probe-$row.err")"; then
        fail_row "$row" "probe: $(last_line "$WORKDIR/probe-$row.err")"
        continue
    fi
    ROW_NEGOTIATED[$row]="$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(", ".join(x for x in (r["tls"], r["cipher"], r["temp_key"], "ALPN " + r["protocol"] if r["tls"] else r["protocol"] + " prior knowledge") if x))' "$probe")"
    if [[ "${ROW_SECTION[$row]}" == auth && "$row" != haproxy-auth ]]; then
        timeout -k 2 10 h2load "${H2LOAD_ARGS[@]}" -n1 -c1 -m1 "${ROW_URL[$row]}" > "$WORKDIR/probe-$row-notoken.txt" 2>&1 || true
        grep -q '^status codes: 0 2xx, 0 3xx, 1 4xx' "$WORKDIR/probe-$row-notoken.txt" \
            || fail_row "$row" "probe: a request without the token was not refused with 4xx ($(grep -m1 '^status codes' "$WORKDIR/probe-$row-notoken.txt" || last_line "$WORKDIR/probe-$row-notoken.txt"))"
    fi
done

echo "# Portcullis HTTP/2 load harness"
echo
echo "- invocation: \`$INVOCATION\` (rounds=$ROUNDS, duration=${DURATION}s, warm-up=${WARMUP}s per row, clients=$CLIENTS, streams=$STREAMS)"
echo "- h2load command per row: \`h2load ${H2LOAD_ARGS[*]} -D $DURATION --log-file LOG [-H 'authorization: Bearer …'] URL\` (bounded by \`timeout $RUN_LIMIT\`)"
echo "- upstream pools: nginx \`keepalive $UPSTREAM_POOL\` per worker, Portcullis \`max_connections: $UPSTREAM_POOL\`; HAProxy and h2o pool without a cap"
echo "- machine: nproc=$(nproc), kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "- tools: $(h2load --version | head -1), $(nginx -v 2>&1 | cut -d' ' -f3), $(haproxy -v | head -1 | cut -d' ' -f1-3), $(command -v h2o >/dev/null && h2o --version | head -1 || echo 'h2o not installed'), $(openssl version | cut -d' ' -f1-2)"
if [[ " ${PORTCULLIS_BINS[*]-} " == *" portcullis="* ]]; then
    if [[ -x "$PORTCULLIS_BIN" ]]; then
        echo "- portcullis: $PORTCULLIS_BIN (binary built $(date -u -r "$PORTCULLIS_BIN" +%Y-%m-%dT%H:%MZ); repo HEAD now $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$( [[ -n "$(git -C "$REPO_ROOT" status --porcelain -- Sources Package.swift 2>/dev/null)" ]] && echo ', working tree has uncommitted Sources changes'))"
    else
        echo "- portcullis: $PORTCULLIS_BIN (not found)"
    fi
fi
[[ -n "$BASELINE_BIN" ]] && echo "- portcullis baseline: $BASELINE_BIN (binary built $(date -u -r "$BASELINE_BIN" +%Y-%m-%dT%H:%MZ))"
for row in "${ROW_NAMES[@]}"; do
    if active "$row"; then
        echo "- row ${ROW_SECTION[$row]} ${ROW_LABEL[$row]}: ${ROW_URL[$row]} (${ROW_NEGOTIATED[$row]})"
    else
        echo "- row ${ROW_SECTION[$row]} ${ROW_LABEL[$row]}: not measured: ${ROW_FAIL[$row]}"
    fi
done
echo

if (( WARMUP > 0 )); then
    for row in "${ROW_NAMES[@]}"; do
        active "$row" || continue
        h2load_row "$row" "$WORKDIR/warmup-$row.txt" -D "$WARMUP" || true
        alive "$row" "warm-up" || true
    done
fi

RESULTS="$WORKDIR/results.jsonl"
: > "$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
    for row in "${ROW_NAMES[@]}"; do
        active "$row" || continue
        alive "$row" "before round $round" || continue
        out="$WORKDIR/h2load-$row-$round.txt"; log="$WORKDIR/h2load-$row-$round.log"
        before=""; cpu=""; hz=100
        [[ -n "${ROW_PIDS[$row]}" ]] && before="$($HELPER cpu ${ROW_PIDS[$row]})"
        rc=0; h2load_row "$row" "$out" -D "$DURATION" --log-file="$log" || rc=$?
        if [[ -n "$before" ]]; then
            after="$($HELPER cpu ${ROW_PIDS[$row]})"
            cpu=$(( ${after% *} - ${before% *} )); hz="${after#* }"
        fi
        if ! alive "$row" "round $round"; then
            :
        elif (( rc == 124 || rc == 137 )); then
            fail_row "$row" "round $round: h2load did not finish within ${RUN_LIMIT}s"
        elif line="$($HELPER h2run "$row" "$round" "$out" "$log" "$(expected_proto "$row")" "$cpu" "$hz" 2> "$WORKDIR/h2run.err")"; then
            echo "$line" >> "$RESULTS"
        else
            fail_row "$row" "round $round: $(last_line "$WORKDIR/h2run.err")"
        fi
        rm -f "$log"   # up to millions of lines; the percentiles are in $RESULTS
        active "$row" && printf 'round %d/%d  %-4s %-34s %s req/s\n' "$round" "$ROUNDS" "${ROW_SECTION[$row]}" "${ROW_LABEL[$row]}" \
            "$(grep -m1 '^finished in' "$out" | cut -d, -f2 | awk '{print $1}')" >&2
    done
done

ROWS_TSV="$WORKDIR/rows.tsv"
: > "$ROWS_TSV"
for row in "${ROW_NAMES[@]}"; do
    printf '%s\t%s\t%s\t%s\n' "$row" "${ROW_SECTION[$row]}" "${ROW_LABEL[$row]}" "${ROW_FAIL[$row]-}" >> "$ROWS_TSV"
done
echo "Medians over $ROUNDS interleaved rounds (ratio: to the HAProxy row of the same protocol; the RS256 rows to HAProxy h2 over TLS):"
echo
$HELPER h2table "$ROWS_TSV" "$RESULTS" ${SUMMARY:+--summary "$SUMMARY"}
echo
echo "p50/p99 are nearest-rank percentiles of the per-request times in h2load's --log-file (stream start to end of response, every request of the run). CPU is utime+stime from /proc/PID/stat (all threads and child processes) over the h2load run, divided by its 2xx responses. h2load itself shares the $(nproc) cores."

for row in "${ROW_NAMES[@]}"; do
    active "$row" || exit 3
done
exit 0
