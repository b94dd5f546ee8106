#!/usr/bin/env bash
# Sessions load harness (#27), rows interleaved in one run:
#   es256      GET / with ES256 access tokens of an ordinary oidc provider (N distinct): the reference
#   session    GET / with the gateway's own session access tokens (N distinct sessions)
#   exchange   POST /auth/session with RS256 ID tokens (rotating through N): one new session each
#   refresh    POST /auth/refresh, embedded store (store.state_dir): each connection's session
#              refreshes with the token the last answer gave it (a Lua free list), so every
#              request is a real rotation
#   refreshR   the same with the sessions in a local redis-server (store.redis)
#   refreshC   the same on a local Redis Cluster, 3 masters and 3 replicas (store.cluster)
# wrk -t1 -cC per row; Portcullis release build; bounded in time.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: Benchmarks/load/sessions.sh [options]
  --rounds N        rounds (default $ROUNDS or 3)
  --duration S      seconds per wrk run (default $DURATION or 8)
  --connections C   wrk connections (default 64; also the sessions refreshed at once)
  --distinct N      distinct tokens for es256/session/exchange (default 2000)
  --only ROWS       es256,session,exchange,refresh,refreshR,refreshC (default all)
  --keep DIR        keep configs, tokens and raw wrk outputs
USAGE
}

ROUNDS="${ROUNDS:-3}"; DURATION="${DURATION:-8}"; CONNECTIONS="${CONNECTIONS:-64}"; WARMUP="${WARMUP:-2}"
DISTINCT=2000; ONLY="es256,session,exchange,refresh,refreshR,refreshC"; KEEP=""
INVOCATION="$0 $*"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --distinct) DISTINCT="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --keep) KEEP="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for n in "$ROUNDS" "$DURATION" "$CONNECTIONS" "$DISTINCT"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "error: '$n' is not a whole number" >&2; exit 2; }
done
command -v wrk >/dev/null || { echo "error: wrk not found (apt-get install wrk)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "error: redis-server not found (apt-get install redis-server)" >&2; exit 1; }

WORKDIR="$(mktemp -d /tmp/portcullis-sessions-load.XXXXXX)"
source "$(dirname "${BASH_SOURCE[0]}")/servers.sh"
REDIS_PID=""
cleanup() {
    local rc=$?
    stop_servers
    [[ -n "$REDIS_PID" ]] && kill -TERM "$REDIS_PID" 2>/dev/null || true
    if [[ -n "$KEEP" ]]; then mkdir -p "$KEEP" && cp -r "$WORKDIR"/. "$KEEP"/ || true; fi
    rm -rf "$WORKDIR"
    exit "$rc"
}
trap cleanup EXIT; trap 'exit 130' INT; trap 'exit 143' TERM
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[[ -x "$PORTCULLIS_BIN" ]] || { echo "error: build first: swift build -c release --product portcullis" >&2; exit 1; }

K="$WORKDIR/keys"; mkdir -p "$K"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$K/idp.key.pem" 2>/dev/null
openssl pkey -in "$K/idp.key.pem" -pubout -out "$K/idp.pub.pem"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$K/es.key.pem" 2>/dev/null
openssl pkey -in "$K/es.key.pem" -pubout -out "$K/es.pub.pem"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$K/session.key.pem" 2>/dev/null
SECRET="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"

REDIS_PORT="$(free_port)"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no > "$WORKDIR/redis.out" 2>&1 &
REDIS_PID=$!
for _ in $(seq 1 50); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done

start_upstream
PROVIDERS="providers:
  - {name: idp, type: oidc, issuer: \"https://id.example.test\", audiences: [\"app\"], algorithms: [RS256], public_key: \"$K/idp.pub.pem\", key_id: k1, forward_claims: []}
  - {name: corp, type: oidc, issuer: \"https://corp.example.test\", audiences: [\"api\"], algorithms: [ES256], public_key: \"$K/es.pub.pem\", key_id: e1, forward_claims: []}"
sessions_block() {
    echo "sessions:
  issuer: \"https://api.example.test\"
  accept: [idp]
  access_token: {lifetime: 1h, signing_keys: [\"$K/session.key.pem\"]}
  refresh_token: {secret: \"$SECRET\", reuse_grace: 10s}
  require_tls: false
$1"
}
start_portcullis "$PROVIDERS
$(sessions_block "store: {state_dir: \"$WORKDIR/state\"}")" "" portcullis required
EMB_PORT="$PORTCULLIS_PORT"; EMB_PID="$PORTCULLIS_PID"; CONFIG="$WORKDIR/portcullis/portcullis.yaml"
start_portcullis "$PROVIDERS
$(sessions_block "store: {redis: \"redis://127.0.0.1:$REDIS_PORT/0\"}")" "" portcullis-redis required
RED_PORT="$PORTCULLIS_PORT"; RED_PID="$PORTCULLIS_PID"
if wants refreshC; then
    start_redis_cluster "$WORKDIR/cluster"
    start_portcullis "$PROVIDERS
$(sessions_block "$CLUSTER_STORE")" "" portcullis-cluster required
    CLU_PORT="$PORTCULLIS_PORT"; CLU_PID="$PORTCULLIS_PID"
fi

echo "minting $DISTINCT ID tokens and $DISTINCT ES256 tokens, opening sessions ..." >&2
"$PORTCULLIS_BIN" mint --config "$CONFIG" --provider idp --key "$K/idp.key.pem" --kid k1 --ttl 2h --count "$DISTINCT" > "$WORKDIR/id.txt"
"$PORTCULLIS_BIN" mint --config "$CONFIG" --provider corp --key "$K/es.key.pem" --kid e1 --ttl 2h --count "$DISTINCT" --format header > "$WORKDIR/es.txt"
# open_sessions PORT COUNT OUT FIELD: COUNT new sessions through PORT's exchange; FIELD of each
# answer to OUT (access tokens as header lines, refresh tokens bare).
open_sessions() {
    python3 - "$WORKDIR/id.txt" "$1" "$2" "$3" "$4" <<'PY'
import http.client, json, sys
ids = open(sys.argv[1]).read().split()
port, count, out, field = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
c = http.client.HTTPConnection("127.0.0.1", port)
with open(out, "w") as f:
    for i in range(count):
        c.request("POST", "/auth/session", json.dumps({"idToken": ids[i % len(ids)]}), {"content-type": "application/json"})
        r = c.getresponse(); body = r.read()
        if r.status != 200: sys.exit(f"exchange answered {r.status}: {body[:200]}")
        token = json.loads(body)[field]
        f.write(f"Authorization: Bearer {token}\n" if field == "access_token" else token + "\n")
PY
}
open_sessions "$EMB_PORT" "$DISTINCT" "$WORKDIR/session.txt" access_token

# Lua: header rotation (GETs), ID-token bodies (exchange), refresh chaining (a free list:
# each answer's refresh token goes back for the next request, one request per session at a time).
cat > "$WORKDIR/headers.lua.in" <<'LUA'
local lines = {}
for line in io.lines(FILE) do
  local name, value = line:match("^([^:]+):%s*(.*)$")
  if name then lines[#lines + 1] = {name, value} end
end
local requests = {}
init = function(args)  -- formatted once (see auth.sh's make_lua)
  for k = 1, #lines do requests[k] = wrk.format(nil, nil, {[lines[k][1]] = lines[k][2]}) end
end
local i = 0
request = function()
  i = i % #requests + 1
  return requests[i]
end
LUA
cat > "$WORKDIR/exchange.lua.in" <<'LUA'
local tokens = {}
for line in io.lines(FILE) do tokens[#tokens + 1] = line end
local requests = {}
init = function(args)  -- formatted once (see auth.sh's make_lua)
  for k = 1, #tokens do
    requests[k] = wrk.format("POST", "/auth/session", {["content-type"] = "application/json"}, '{"idToken":"' .. tokens[k] .. '"}')
  end
end
local i = 0
request = function()
  i = i % #requests + 1
  return requests[i]
end
LUA
cat > "$WORKDIR/refresh.lua.in" <<'LUA'
local free = {}
for line in io.lines(FILE) do free[#free + 1] = line end
request = function()
  local token = table.remove(free) or "none"
  return wrk.format("POST", "/auth/refresh", {["content-type"] = "application/json"}, '{"refresh_token":"' .. token .. '"}')
end
response = function(status, headers, body)
  local token = body:match('"refresh_token":"([^"]+)"')
  if token then free[#free + 1] = token end
end
LUA
lua_for() { sed "s|FILE|\"$2\"|" "$WORKDIR/$1.lua.in" > "$WORKDIR/$3.lua"; }
lua_for headers "$WORKDIR/es.txt" es256; lua_for headers "$WORKDIR/session.txt" session
lua_for exchange "$WORKDIR/id.txt" exchange
# The refresh rows start every run with CONNECTIONS + 8 fresh sessions (a run leaves its tokens
# rotated: the file's would be reuses; wrk asks for one request more than it has connections
# when a thread starts, and a connection must never find the free list empty).
lua_for refresh "$WORKDIR/refresh.txt" refresh; lua_for refresh "$WORKDIR/refreshR.txt" refreshR
lua_for refresh "$WORKDIR/refreshC.txt" refreshC
fresh_tokens() {
    case "$1" in
        refresh) open_sessions "$EMB_PORT" "$((CONNECTIONS + 8))" "$WORKDIR/refresh.txt" refresh_token ;;
        refreshR) open_sessions "$RED_PORT" "$((CONNECTIONS + 8))" "$WORKDIR/refreshR.txt" refresh_token ;;
        refreshC) open_sessions "$CLU_PORT" "$((CONNECTIONS + 8))" "$WORKDIR/refreshC.txt" refresh_token ;;
    esac
}

ROW_NAMES=(); declare -A ROW_LABEL ROW_URL ROW_PIDS ROW_LUA
add_row() { ROW_NAMES+=("$1"); ROW_LABEL[$1]="$2"; ROW_URL[$1]="$3"; ROW_PIDS[$1]="$4"; ROW_LUA[$1]="$WORKDIR/$1.lua"; }
wants es256 && add_row es256 "GET, ES256 oidc tokens ($DISTINCT)" "http://127.0.0.1:$EMB_PORT/" "$EMB_PID"
wants session && add_row session "GET, session access tokens ($DISTINCT)" "http://127.0.0.1:$EMB_PORT/" "$EMB_PID"
wants exchange && add_row exchange "POST /auth/session (embedded, state_dir)" "http://127.0.0.1:$EMB_PORT/" "$EMB_PID"
wants refresh && add_row refresh "POST /auth/refresh (embedded, state_dir)" "http://127.0.0.1:$EMB_PORT/" "$EMB_PID"
wants refreshR && add_row refreshR "POST /auth/refresh (redis)" "http://127.0.0.1:$RED_PORT/" "$RED_PID"
wants refreshC && add_row refreshC "POST /auth/refresh (redis cluster)" "http://127.0.0.1:$CLU_PORT/" "$CLU_PID"

echo "# Portcullis sessions load harness"
echo
echo "- invocation: \`$INVOCATION\` (rounds=$ROUNDS, duration=${DURATION}s, connections=$CONNECTIONS)"
echo "- wrk per row: \`wrk -t1 -c$CONNECTIONS -d${DURATION}s --timeout 5s --latency -s ROW.lua URL\`"
echo "- machine: nproc=$(nproc), $(redis-server --version | cut -d' ' -f1-3)"
echo

RESULTS="$WORKDIR/results.jsonl"; : > "$RESULTS"
for round in $(seq 0 "$ROUNDS"); do
    for row in "${ROW_NAMES[@]}"; do
        out="$WORKDIR/wrk-$row-$round.txt"
        fresh_tokens "$row"
        # Round 0 is the warm-up (WARMUP seconds, not recorded).
        if (( round == 0 )); then
            wrk -t1 "-c$CONNECTIONS" "-d${WARMUP}s" --timeout 5s -s "${ROW_LUA[$row]}" "${ROW_URL[$row]}" > "$out" 2>&1 || true
            continue
        fi
        before="$($HELPER cpu ${ROW_PIDS[$row]})"
        wrk -t1 "-c$CONNECTIONS" "-d${DURATION}s" --timeout 5s --latency -s "${ROW_LUA[$row]}" "${ROW_URL[$row]}" > "$out" 2>&1 \
            || { echo "error: wrk failed against ${ROW_LABEL[$row]}" >&2; cat "$out" >&2; exit 1; }
        after="$($HELPER cpu ${ROW_PIDS[$row]})"; cpu=$(( ${after% *} - ${before% *} )); hz="${after#* }"
        printf '{"row": "%s", "label": "%s", "round": %d, "file": "%s", "cpu_ticks": %s, "hz": %s}\n' \
            "$row" "${ROW_LABEL[$row]}" "$round" "$out" "$cpu" "$hz" >> "$RESULTS"
        printf 'round %d/%d  %-44s %s req/s\n' "$round" "$ROUNDS" "${ROW_LABEL[$row]}" \
            "$(grep -m1 'Requests/sec' "$out" | awk '{print $2}')" >&2
    done
done
echo "Medians over $ROUNDS interleaved rounds (ratio column: to the first row); errors = non-2xx + socket errors:"
echo
$HELPER table "$RESULTS"
