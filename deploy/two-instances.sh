#!/usr/bin/env bash
# Two gateway instances sharing one redis-server on this machine, in front of the demo
# echo apps: a logout (revocation) on instance A is refused at once on instance B.
# Runs until Ctrl-C; everything listens on 127.0.0.1 only.
#   bash deploy/two-instances.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
command -v redis-server >/dev/null || bash deploy/install-deps.sh
swift build -c release --product portcullis >&2
BIN="$ROOT/.build/release/portcullis"
DIR="$(mktemp -d /tmp/portcullis-two.XXXXXX)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT INT TERM

redis-server --port 6390 --bind 127.0.0.1 --save "" --appendonly no > "$DIR/redis.log" 2>&1 & pids+=($!)
python3 Tests/PortcullisEndToEndTests/Fixtures/echo_upstream.py 3101 visits > /dev/null 2>&1 & pids+=($!)
for i in a b; do
    port=$([[ $i == a ]] && echo 8181 || echo 8182); admin=$([[ $i == a ]] && echo 9981 || echo 9982)
    cat > "$DIR/$i.yaml" <<CONF
listen: [{address: "127.0.0.1:$port"}]
admin: {address: "127.0.0.1:$admin", token: "two-instances-admin-token"}
access_log: off
providers:
  - {name: app, type: hs256, secret: "two-instances-demo-secret-0123456789abcdef"}
store: {redis: "redis://127.0.0.1:6390/0"}
upstreams:
  visits: {url: "http://127.0.0.1:3101"}
routes:
  - {path: /api/v1/auth/logout, upstream: visits, auth: required, revoke_on_success: true}
  - {path: /, upstream: visits, auth: required}
CONF
    "$BIN" run --config "$DIR/$i.yaml" > "$DIR/$i.log" 2>&1 & pids+=($!)
done
sleep 1.5
H="$("$BIN" mint --config "$DIR/a.yaml" --provider app --format header)"
echo "instance A :8181, instance B :8182, Redis :6390"
echo "B with the token:         $(curl -s -o /dev/null -w '%{http_code}' -H "$H" http://127.0.0.1:8182/api/visits)"
echo "logout through A:         $(curl -s -o /dev/null -w '%{http_code}' -X POST -H "$H" http://127.0.0.1:8181/api/v1/auth/logout)"
sleep 0.1
echo "B with the same token:    $(curl -s -o /dev/null -w '%{http_code}' -H "$H" http://127.0.0.1:8182/api/visits)"
echo "Redis holds:              $(redis-cli -p 6390 --scan | tr '\n' ' ')"
echo "Try it: curl -si -H '$H' http://127.0.0.1:8182/api/visits   (Ctrl-C stops everything)"
wait
