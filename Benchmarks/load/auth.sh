#!/usr/bin/env bash
# Auth load harness: RS256 Bearer tokens verified at the edge, in one run,
# rows interleaved:
#   nginx proxy (no auth)                                  — the reference
#   HAProxy 2.6 jwt_verify, one token repeated / N distinct — its documented setup:
#       alg allow-list first, then jwt_verify, then an exp check
#   Portcullis (RS256 + revocation check), one token / N distinct
#   Portcullis (RS256 + revocation check) with identity.assertion on (an ES256 JWS signed
#       for the upstream, reused per credential for half its lifetime), one token / N distinct
#   Portcullis with its verified-token cache off (token_cache.max_entries: 0), N distinct:
#       every request pays the RS256 verification, as every HAProxy request does
#   Portcullis RS256, N distinct, with a per-user rate limit high enough that nothing is
#       refused: counted in process (limitN), or in a local redis-server shared as a fleet
#       would share it (limitRN, store.redis), or on a local Redis Cluster of 3 masters and
#       3 replicas (limitCN, store.cluster): what a limit costs each request
#   A fleet of two Portcullis instances sharing that Redis Cluster, N distinct, with the limit
#       (fleetLimitCN) and without (fleetCN): one wrk per instance at the same time (half the
#       connections each), their req/s summed, CPU summed over both instances; p50/p99 are the
#       larger of the two wrk figures
#   The rows on Redis (limitRN, limitCN, fleetCN, fleetLimitCN) also show the redis-servers'
#   CPU per request (all six nodes on the cluster, replicas included): what Redis pays;
#   the limited ones also the rate-limit script's calls and the keys it charged per 1,000
#   requests (the masters' INFO commandstats, reset before each run)
# Tokens come from `portcullis mint` with a throwaway RSA key; every row sends
# them through the same wrk Lua script (one header per request, rotating
# through the token file), so wrk's own cost is alike. Bounded in time.
#
# Against your own deployment: --target URL --tokens FILE (lines 'Name: value',
# e.g. from `portcullis mint --config YOURS --provider NAME --count N --format header`).
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: Benchmarks/load/auth.sh [options]
  --rounds N        rounds (default $ROUNDS or 3)
  --duration S      seconds per wrk run (default $DURATION or 10)
  --connections C   wrk connections (default 64)
  --distinct N      distinct tokens for the "distinct" rows (default 10000)
  --only ROWS       nginx,haproxy1,haproxyN,portcullis1,portcullisN,assert1,assertN,portcullisCold,limitN,limitRN,limitCN,
                    fleetCN,fleetLimitCN
                    (default all)
  --target URL      measure only this URL with --tokens FILE (no local servers)
  --tokens FILE     header lines to rotate through (with --target)
  --warmup S        unmeasured wrk run per row before round 1 (default $WARMUP or 2; 0 = none)
  --keep DIR        keep configs, tokens and raw wrk outputs
  --baseline BIN    add rows for another portcullis binary (e.g. main's build), same config, 1 and N tokens
  --summary FILE    also append one JSON line per row (medians, CPU per request, per-round
                    figures) to FILE, for all.sh or your own tooling (default $SUMMARY)
USAGE
}

ROUNDS="${ROUNDS:-3}"; DURATION="${DURATION:-10}"; CONNECTIONS="${CONNECTIONS:-64}"; WARMUP="${WARMUP:-2}"
DISTINCT=10000; ONLY="nginx,haproxy1,haproxyN,portcullis1,portcullisN,assert1,assertN,portcullisCold,limitN,limitRN,limitCN,fleetCN,fleetLimitCN"; TARGET=""; TOKENS=""; KEEP=""; BASELINE_BIN=""
SUMMARY="${SUMMARY:-}"
INVOCATION="$0 $*"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --distinct) DISTINCT="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --target) TARGET="$2"; shift 2 ;;
        --tokens) TOKENS="$2"; shift 2 ;;
        --keep) KEEP="$2"; shift 2 ;;
        --baseline) BASELINE_BIN="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --summary) SUMMARY="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for n in "$ROUNDS" "$DURATION" "$CONNECTIONS" "$DISTINCT" "$WARMUP"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "error: '$n' is not a whole number" >&2; exit 2; }
done
[[ -n "$TARGET" && -z "$TOKENS" ]] && { echo "error: --target needs --tokens FILE" >&2; exit 2; }
command -v wrk >/dev/null || { echo "error: wrk not found (apt-get install wrk)" >&2; exit 1; }

WORKDIR="$(mktemp -d /tmp/portcullis-auth-load.XXXXXX)"
source "$(dirname "${BASH_SOURCE[0]}")/servers.sh"
trap cleanup_workdir EXIT; trap 'exit 130' INT; trap 'exit 143' TERM
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# rotate.lua FILE: each request carries the next header line of FILE. The requests are
# formatted once, in init (wrk's own advice: building one in request() is expensive): on a
# 2-core machine the client's CPU is taken from the server under test, and a Lua table plus
# a string built per request cost wrk ~2 us each (the one-token Portcullis row measured
# 26.5-27.5k req/s with them, 28.2-28.9k without, same binary).
make_lua() {
    cat > "$2" <<LUA
local lines = {}
for line in io.lines("$1") do
  local name, value = line:match("^([^:]+):%s*(.*)$")
  if name then lines[#lines + 1] = {name, value} end
end
local requests = {}
init = function(args)
  for k = 1, #lines do
    local h = {}
    h[lines[k][1]] = lines[k][2]
    requests[k] = wrk.format(nil, nil, h)
  end
end
local i = 0
request = function()
  i = i % #requests + 1
  return requests[i]
end
LUA
}

ROW_NAMES=(); declare -A ROW_LABEL ROW_URL ROW_PIDS ROW_LUA ROW_STORE_PIDS ROW_LIMIT_PORTS
# add_row NAME LABEL URLS PIDS LUA [STORE_PIDS]: STORE_PIDS, the redis-servers the row's
# gateways share, whose CPU per request gets a column of its own.
add_row() { ROW_NAMES+=("$1"); ROW_LABEL[$1]="$2"; ROW_URL[$1]="$3"; ROW_PIDS[$1]="$4"; ROW_LUA[$1]="$5"; ROW_STORE_PIDS[$1]="${6-}"; ROW_LIMIT_PORTS[$1]="${7-}"; }

if [[ -n "$TARGET" ]]; then
    make_lua "$(realpath "$TOKENS")" "$WORKDIR/target.lua"
    add_row target "$TARGET ($(wc -l < "$TOKENS") credentials)" "$TARGET" "" "$WORKDIR/target.lua"
else
    [[ -x "$PORTCULLIS_BIN" ]] || { echo "error: build first: swift build -c release --product portcullis" >&2; exit 1; }
    K="$WORKDIR/keys"; mkdir -p "$K"
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$K/rsa.key.pem" 2>/dev/null
    openssl pkey -in "$K/rsa.key.pem" -pubout -out "$K/rsa.pub.pem"
    start_upstream
    PROVIDERS="providers:
  - {name: corp, type: oidc, issuer: \"https://id.example.test\", audiences: [\"api\"], algorithms: [RS256], public_key: \"$K/rsa.pub.pem\", key_id: k1, forward_claims: []}"
    start_portcullis "$PROVIDERS" "" "" required
    CONFIG="$WORKDIR/portcullis/portcullis.yaml"
    CACHED_PORT="$PORTCULLIS_PORT"; CACHED_PID="$PORTCULLIS_PID"
    if wants portcullisCold; then
        start_portcullis "$PROVIDERS
token_cache: {max_entries: 0}" "" portcullis-cold required
        COLD_PORT="$PORTCULLIS_PORT"; COLD_PID="$PORTCULLIS_PID"
    fi
    if wants assert1 || wants assertN; then
        start_portcullis "$PROVIDERS
identity: {assertion: {issuer: \"https://api.example.test\", lifetime: 60s}}" "" portcullis-assert required
        ASSERT_PORT="$PORTCULLIS_PORT"; ASSERT_PID="$PORTCULLIS_PID"
    fi
    # A limit nothing reaches (10^9 per second): every request pays the check, none is refused.
    LIMITS="rate_limits: [{name: per-user, key: user, rate: 1000000000/s}]"
    if wants limitN; then
        start_portcullis "$PROVIDERS
$LIMITS" "" portcullis-limit required
        LIMIT_PORT="$PORTCULLIS_PORT"; LIMIT_PID="$PORTCULLIS_PID"
    fi
    if wants limitRN; then
        command -v redis-server >/dev/null || { echo "error: redis-server not found (apt-get install redis-server)" >&2; exit 1; }
        REDIS_PORT="$(free_port)"
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no > "$WORKDIR/redis.out" 2>&1 &
        STARTED_PIDS+=("$!"); REDIS_PID="$!"
        for _ in $(seq 1 50); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
        start_portcullis "$PROVIDERS
$LIMITS
store: {redis: \"redis://127.0.0.1:$REDIS_PORT/0\"}" "" portcullis-limit-redis required
        LIMITR_PORT="$PORTCULLIS_PORT"; LIMITR_PID="$PORTCULLIS_PID"
    fi
    if wants limitCN || wants fleetCN || wants fleetLimitCN; then start_redis_cluster "$WORKDIR/cluster"; fi
    if wants limitCN; then
        start_portcullis "$PROVIDERS
$LIMITS
$CLUSTER_STORE" "" portcullis-limit-cluster required
        LIMITC_PORT="$PORTCULLIS_PORT"; LIMITC_PID="$PORTCULLIS_PID"
    fi
    # Two-instance fleets on the cluster: URLs and PIDs of both, space-separated.
    FLEET_URLS=""; FLEET_PIDS=""; FLEET_LIMIT_URLS=""; FLEET_LIMIT_PIDS=""
    for i in 1 2; do
        if wants fleetCN; then
            start_portcullis "$PROVIDERS
$CLUSTER_STORE" "" "portcullis-fleet-$i" required
            FLEET_URLS+="http://127.0.0.1:$PORTCULLIS_PORT/ "; FLEET_PIDS+="$PORTCULLIS_PID "
        fi
        if wants fleetLimitCN; then
            start_portcullis "$PROVIDERS
$LIMITS
$CLUSTER_STORE" "" "portcullis-fleet-limit-$i" required
            FLEET_LIMIT_URLS+="http://127.0.0.1:$PORTCULLIS_PORT/ "; FLEET_LIMIT_PIDS+="$PORTCULLIS_PID "
        fi
    done
    if [[ -n "$BASELINE_BIN" ]]; then
        start_portcullis "$PROVIDERS" "$BASELINE_BIN" baseline required
        BASE_PORT="$PORTCULLIS_PORT"; BASE_PID="$PORTCULLIS_PID"
        if wants assert1 || wants assertN; then
            start_portcullis "$PROVIDERS
identity: {assertion: {issuer: \"https://api.example.test\", lifetime: 60s}}" "$BASELINE_BIN" baseline-assert required
            BASE_ASSERT_PORT="$PORTCULLIS_PORT"; BASE_ASSERT_PID="$PORTCULLIS_PID"
        fi
    fi
    echo "minting 1 + $DISTINCT RS256 tokens ..." >&2
    "$PORTCULLIS_BIN" mint --config "$CONFIG" --provider corp --key "$K/rsa.key.pem" --kid k1 --ttl 2h --format header > "$WORKDIR/one.txt"
    "$PORTCULLIS_BIN" mint --config "$CONFIG" --provider corp --key "$K/rsa.key.pem" --kid k1 --ttl 2h --count "$DISTINCT" --format header > "$WORKDIR/many.txt"
    make_lua "$WORKDIR/one.txt" "$WORKDIR/one.lua"; make_lua "$WORKDIR/many.txt" "$WORKDIR/many.lua"
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "$(head -1 "$WORKDIR/one.txt")" "http://127.0.0.1:$CACHED_PORT/")
    [[ "$code" == 200 ]] || { echo "error: Portcullis refused a minted token ($code)" >&2; cat "$WORKDIR/portcullis/portcullis.out" >&2; exit 1; }

    # HAProxy 2.6 with jwt_verify, configured as its documentation shows:
    # alg allow-list first, then the signature, then exp.
    start_haproxy "    http-request deny content-type text/plain string \"Missing Authorization\" unless { req.hdr(authorization) -m found }
    http-request set-var(txn.bearer) http_auth_bearer
    http-request set-var(txn.jwt_alg) var(txn.bearer),jwt_header_query('\$.alg')
    http-request deny unless { var(txn.jwt_alg) -m str \"RS256\" }
    http-request deny unless { var(txn.bearer),jwt_verify(txn.jwt_alg,\"$K/rsa.pub.pem\") -m int 1 }
    http-request set-var(txn.exp) var(txn.bearer),jwt_payload_query('\$.exp','int')
    http-request set-var(txn.now) date()
    http-request deny if { var(txn.exp),sub(txn.now) -m int lt 0 }"
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "$(head -1 "$WORKDIR/one.txt")" "http://127.0.0.1:$HAPROXY_PORT/")
    [[ "$code" == 200 ]] || { echo "error: HAProxy refused a minted token ($code)" >&2; cat "$WORKDIR/haproxy/haproxy.out" >&2; exit 1; }
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer x.y.z" "http://127.0.0.1:$HAPROXY_PORT/")
    [[ "$code" == 403 ]] || { echo "error: HAProxy accepted a bad token ($code)" >&2; exit 1; }

    start_nginx_proxy
    wants nginx && add_row nginx "nginx proxy, no auth" "http://127.0.0.1:$NGINX_PORT/" "$NGINX_PID" "$WORKDIR/one.lua"
    wants haproxy1 && add_row haproxy1 "HAProxy jwt_verify, 1 token" "http://127.0.0.1:$HAPROXY_PORT/" "$HAPROXY_PID" "$WORKDIR/one.lua"
    wants haproxyN && add_row haproxyN "HAProxy jwt_verify, $DISTINCT tokens" "http://127.0.0.1:$HAPROXY_PORT/" "$HAPROXY_PID" "$WORKDIR/many.lua"
    wants portcullis1 && add_row portcullis1 "Portcullis RS256, 1 token" "http://127.0.0.1:$CACHED_PORT/" "$CACHED_PID" "$WORKDIR/one.lua"
    wants portcullisN && add_row portcullisN "Portcullis RS256, $DISTINCT tokens" "http://127.0.0.1:$CACHED_PORT/" "$CACHED_PID" "$WORKDIR/many.lua"
    wants assert1 && add_row assert1 "Portcullis RS256 + assertion, 1 token" "http://127.0.0.1:$ASSERT_PORT/" "$ASSERT_PID" "$WORKDIR/one.lua"
    wants assertN && add_row assertN "Portcullis RS256 + assertion, $DISTINCT tokens" "http://127.0.0.1:$ASSERT_PORT/" "$ASSERT_PID" "$WORKDIR/many.lua"
    if [[ -n "$BASELINE_BIN" ]]; then
        add_row base1 "Portcullis baseline, 1 token" "http://127.0.0.1:$BASE_PORT/" "$BASE_PID" "$WORKDIR/one.lua"
        add_row baseN "Portcullis baseline, $DISTINCT tokens" "http://127.0.0.1:$BASE_PORT/" "$BASE_PID" "$WORKDIR/many.lua"
        wants assert1 && add_row baseA1 "Portcullis baseline + assertion, 1 token" "http://127.0.0.1:$BASE_ASSERT_PORT/" "$BASE_ASSERT_PID" "$WORKDIR/one.lua"
        wants assertN && add_row baseAN "Portcullis baseline + assertion, $DISTINCT tokens" "http://127.0.0.1:$BASE_ASSERT_PORT/" "$BASE_ASSERT_PID" "$WORKDIR/many.lua"
    fi
    wants limitN && add_row limitN "Portcullis RS256 + rate limit, $DISTINCT tokens" "http://127.0.0.1:$LIMIT_PORT/" "$LIMIT_PID" "$WORKDIR/many.lua"
    wants limitRN && add_row limitRN "Portcullis RS256 + rate limit on Redis, $DISTINCT tokens" "http://127.0.0.1:$LIMITR_PORT/" "$LIMITR_PID" "$WORKDIR/many.lua" "$REDIS_PID" "$REDIS_PORT"
    wants limitCN && add_row limitCN "Portcullis RS256 + rate limit on Redis Cluster, $DISTINCT tokens" "http://127.0.0.1:$LIMITC_PORT/" "$LIMITC_PID" "$WORKDIR/many.lua" "${CLUSTER_PIDS[*]}" "${CLUSTER_PORTS[*]}"
    wants fleetCN && add_row fleetCN "2 Portcullis on Redis Cluster, RS256, $DISTINCT tokens" "${FLEET_URLS% }" "${FLEET_PIDS% }" "$WORKDIR/many.lua" "${CLUSTER_PIDS[*]}"
    wants fleetLimitCN && add_row fleetLimitCN "2 Portcullis on Redis Cluster, RS256 + rate limit, $DISTINCT tokens" "${FLEET_LIMIT_URLS% }" "${FLEET_LIMIT_PIDS% }" "$WORKDIR/many.lua" "${CLUSTER_PIDS[*]}" "${CLUSTER_PORTS[*]}"
    wants portcullisCold && add_row portcullisCold "Portcullis RS256, cache off, $DISTINCT tokens" "http://127.0.0.1:$COLD_PORT/" "$COLD_PID" "$WORKDIR/many.lua"
fi

echo "# Portcullis auth load harness"
echo
echo "- invocation: \`$INVOCATION\` (rounds=$ROUNDS, duration=${DURATION}s, connections=$CONNECTIONS)"
echo "- wrk per row: \`wrk -t1 -c$CONNECTIONS -d${DURATION}s --timeout 5s --latency -s rotate.lua URL\`"
echo "- machine: nproc=$(nproc), $(haproxy -v | head -1 | cut -d' ' -f1-3), $(nginx -v 2>&1 | cut -d' ' -f3)"
echo

if (( WARMUP > 0 )); then
    for row in "${ROW_NAMES[@]}"; do
        for url in ${ROW_URL[$row]}; do
            wrk -t1 "-c$CONNECTIONS" "-d${WARMUP}s" --timeout 5s -s "${ROW_LUA[$row]}" "$url" > /dev/null 2>&1 || true
        done
    done
fi
RESULTS="$WORKDIR/results.jsonl"; : > "$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
    for row in "${ROW_NAMES[@]}"; do
        out="$WORKDIR/wrk-$row-$round.txt"; before=""; cpu="null"; hz=100; store_before=""; store="null"
        [[ -n "${ROW_PIDS[$row]}" ]] && before="$($HELPER cpu ${ROW_PIDS[$row]})"
        [[ -n "${ROW_STORE_PIDS[$row]}" ]] && store_before="$($HELPER cpu ${ROW_STORE_PIDS[$row]})"
        charges="null null"
        [[ -n "${ROW_LIMIT_PORTS[$row]}" ]] && $HELPER redisstats reset ${ROW_LIMIT_PORTS[$row]}
        read -r -a urls <<< "${ROW_URL[$row]}"
        if (( ${#urls[@]} == 1 )); then
            wrk -t1 "-c$CONNECTIONS" "-d${DURATION}s" --timeout 5s --latency -s "${ROW_LUA[$row]}" "${urls[0]}" > "$out" 2>&1 \
                || { echo "error: wrk failed against ${ROW_LABEL[$row]}" >&2; cat "$out" >&2; exit 1; }
        else
            # A fleet: one wrk per instance, at the same time, the connections shared out.
            wrk_pids=()
            for i in "${!urls[@]}"; do
                wrk -t1 "-c$(( CONNECTIONS / ${#urls[@]} ))" "-d${DURATION}s" --timeout 5s --latency -s "${ROW_LUA[$row]}" \
                    "${urls[$i]}" > "$out.$i" 2>&1 &
                wrk_pids+=("$!")
            done
            for i in "${!wrk_pids[@]}"; do
                wait "${wrk_pids[$i]}" || { echo "error: wrk failed against ${urls[$i]} (${ROW_LABEL[$row]})" >&2; cat "$out.$i" >&2; exit 1; }
            done
            $HELPER mergewrk "$out" "$out".[0-9]*
        fi
        if [[ -n "$before" ]]; then
            after="$($HELPER cpu ${ROW_PIDS[$row]})"; cpu=$(( ${after% *} - ${before% *} )); hz="${after#* }"
        fi
        if [[ -n "$store_before" ]]; then
            after="$($HELPER cpu ${ROW_STORE_PIDS[$row]})"; store=$(( ${after% *} - ${store_before% *} ))
        fi
        [[ -n "${ROW_LIMIT_PORTS[$row]}" ]] && charges="$($HELPER redisstats read ${ROW_LIMIT_PORTS[$row]})"
        read -r calls keys <<< "$charges"
        printf '{"row": "%s", "label": "%s", "round": %d, "file": "%s", "cpu_ticks": %s, "store_ticks": %s, "hz": %s, "script_calls": %s, "keys_charged": %s}\n' \
            "$row" "${ROW_LABEL[$row]}" "$round" "$out" "$cpu" "$store" "$hz" "$calls" "$keys" >> "$RESULTS"
        printf 'round %d/%d  %-40s %s req/s\n' "$round" "$ROUNDS" "${ROW_LABEL[$row]}" \
            "$(grep -m1 'Requests/sec' "$out" | awk '{print $2}')" >&2
    done
done
echo "Medians over $ROUNDS interleaved rounds (ratio column: to the first row):"
echo
$HELPER table "$RESULTS" ${SUMMARY:+--summary "$SUMMARY" --script auth.sh --section "$( [[ -n "$TARGET" ]] && echo target || echo auth)"}
