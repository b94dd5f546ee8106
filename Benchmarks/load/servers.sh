# Shared by run.sh and memory.sh (sourced, not run): starts the servers under
# test on free loopback ports, each writing only under $WORKDIR, and records
# their PIDs so that `stop_servers` (installed as an EXIT trap by the callers)
# kills exactly what was started here.
#
# Every server is configured alike: keep-alive to clients and to the upstream,
# no access log, no request cap per connection.

HARNESS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HARNESS_DIR/../.." && pwd)"
PORTCULLIS_BIN="${PORTCULLIS_BIN:-$REPO_ROOT/.build/release/portcullis}"
HELPER="python3 $HARNESS_DIR/harness.py"

STARTED_PIDS=()

# TLS (run.sh --tls, tls.sh): one EC P-256 leaf for 127.0.0.1 from a throwaway CA, made
# in $WORKDIR. When TLS_CERT is set, the proxies' listeners terminate TLS with it, alike:
# TLS 1.2/1.3, session tickets on, HTTP/1.1.
TLS_CERT=""; TLS_KEY=""; TLS_BUNDLE=""
make_tls_material() {
    local d="$WORKDIR/tls"; mkdir -p "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/ca.key" -out "$d/ca.pem" \
        -days 2 -subj "/CN=Load CA" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/leaf.key" -out "$d/leaf.csr" \
        -subj "/CN=127.0.0.1" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$d/leaf.ext"
    openssl x509 -req -in "$d/leaf.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 1 \
        -extfile "$d/leaf.ext" -out "$d/leaf.pem" 2>/dev/null
    TLS_CERT="$d/leaf.pem"; TLS_KEY="$d/leaf.key"
    cat "$d/leaf.pem" "$d/leaf.key" > "$d/haproxy.pem"; TLS_BUNDLE="$d/haproxy.pem"
}
scheme() { [[ -n "$TLS_CERT" ]] && echo https || echo http; }

# HTTP/2 (h2.sh sets HTTP2=1 before starting servers): every proxy then offers h2 on its
# TLS listener through ALPN (h2, http/1.1) and opens a second, plaintext listener on
# *_H2C_PORT for h2c with prior knowledge; at most 100 concurrent streams per connection
# everywhere. The upstream side stays HTTP/1.1 keep-alive, as in the other scripts.
HTTP2=0
# Pooled keep-alive connections to the upstream: nginx `keepalive` (idle connections kept
# per worker) and Portcullis `max_connections` (a total, shared by its loops). 128 is ample
# for wrk's 64 connections; h2.sh raises it to twice its streams in flight (8 x 32 x 2 = 512)
# so that no proxy queues or churns upstream connections (HAProxy and h2o pool without a cap).
UPSTREAM_POOL=128

free_port() { $HELPER port; }

stop_servers() {
    local pid
    for pid in "${STARTED_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${STARTED_PIDS[@]}"; do
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    STARTED_PIDS=()
}

# start_redis_cluster DIR: a local Redis Cluster, 3 masters and 3 replicas on free ports (bus
# ports free too), joined with `redis-cli --cluster create` and waited for until every node
# says cluster_state:ok; sets CLUSTER_PORTS, CLUSTER_PIDS and CLUSTER_STORE (a `store:` line with
# two seeds).
# The nodes stop with the other servers.
start_redis_cluster() {
    local dir="$1" port bus i ok
    command -v redis-server >/dev/null || { echo "error: redis-server not found (apt-get install redis-server)" >&2; exit 1; }
    CLUSTER_PORTS=(); CLUSTER_PIDS=()
    for i in 1 2 3 4 5 6; do
        port="$(free_port)"; bus="$(free_port)"
        mkdir -p "$dir/$port"
        (cd "$dir/$port" && exec redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
            --cluster-config-file nodes.conf --cluster-port "$bus" --cluster-node-timeout 2000 \
            --repl-diskless-sync-delay 0 --save "" --appendonly no) > "$dir/$port/out.log" 2>&1 &
        STARTED_PIDS+=("$!"); CLUSTER_PIDS+=("$!"); CLUSTER_PORTS+=("$port")
    done
    for port in "${CLUSTER_PORTS[@]}"; do
        for _ in $(seq 1 50); do redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
    done
    redis-cli --cluster create $(printf '127.0.0.1:%s ' "${CLUSTER_PORTS[@]}") --cluster-replicas 1 --cluster-yes \
        > "$dir/create.out" 2>&1 || { echo "error: redis-cli --cluster create failed" >&2; cat "$dir/create.out" >&2; exit 1; }
    for _ in $(seq 1 300); do
        ok=1
        for port in "${CLUSTER_PORTS[@]}"; do
            redis-cli -p "$port" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || ok=0
        done
        (( ok )) && break
        sleep 0.1
    done
    (( ok )) || { echo "error: the Redis Cluster did not become ok" >&2; exit 1; }
    # Every replica in sync with its master: a WAIT 1 before then waits its whole timeout.
    for _ in $(seq 1 300); do
        ok=1
        for port in "${CLUSTER_PORTS[@]}"; do
            redis-cli -p "$port" info replication 2>/dev/null | grep -q -e 'role:master' -e 'master_link_status:up' || ok=0
        done
        (( ok )) && break
        sleep 0.1
    done
    (( ok )) || { echo "error: the Redis Cluster's replicas did not sync" >&2; exit 1; }
    CLUSTER_STORE="store: {cluster: {nodes: [\"127.0.0.1:${CLUSTER_PORTS[0]}\", \"127.0.0.1:${CLUSTER_PORTS[1]}\"]}}"
}

# wait_http URL [EXPECTED_BODY] — up to 10 s for a 200 (and the body, if given).
wait_http() {
    local url="$1" body="${2-}" out
    for _ in $(seq 1 100); do
        if out="$(curl -kfsS --max-time 1 "$url" 2>/dev/null)"; then
            if [[ -z "$body" || "$out" == "$body" ]]; then return 0; fi
        fi
        sleep 0.1
    done
    echo "error: $url did not answer 200${body:+ with '$body'} within 10 s" >&2
    return 1
}

# start_upstream -> sets UPSTREAM_PORT, UPSTREAM_PID
# nginx, 1 worker, `return 200 "ok"`.
start_upstream() {
    UPSTREAM_PORT="$(free_port)"
    local d="$WORKDIR/upstream"; mkdir -p "$d"
    cat > "$d/nginx.conf" <<CONF
daemon off;
master_process on;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 16384; }
http {
    access_log off;
    client_body_temp_path $d/client_body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    # The app stand-in reads a request head of a few KB in one buffer, as app servers do
    # (Node's limit is 16 KB). With nginx's default of 1 KB, a head past 1 KB is copied
    # into a large buffer and parsed again: the assertion rows (a 661-byte Authorization
    # plus a 434-byte assertion) cost this upstream +3.4-4.5 µs per request that way,
    # which the rows without an assertion never pay (+0.6-0.9 µs with 4 KB).
    client_header_buffer_size 4k;
    server {
        listen 127.0.0.1:$UPSTREAM_PORT backlog=4096;
        location / { default_type text/plain; return 200 "ok"; }
    }
}
CONF
    nginx -e "$d/error.log" -p "$d" -c "$d/nginx.conf" &
    UPSTREAM_PID=$!; STARTED_PIDS+=("$UPSTREAM_PID")
    wait_http "http://127.0.0.1:$UPSTREAM_PORT/" ok
}

# start_nginx_proxy -> sets NGINX_PORT, NGINX_PID (and NGINX_H2C_PORT with HTTP2=1)
# nginx, 2 workers, pooled keep-alive to the upstream.
start_nginx_proxy() {
    NGINX_PORT="$(free_port)"
    (( HTTP2 )) && NGINX_H2C_PORT="$(free_port)"
    local d="$WORKDIR/nginx"; mkdir -p "$d"
    cat > "$d/nginx.conf" <<CONF
daemon off;
master_process on;
worker_processes 2;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 16384; }
http {
    access_log off;
    client_body_temp_path $d/client_body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    upstream fast {
        server 127.0.0.1:$UPSTREAM_PORT;
        keepalive $UPSTREAM_POOL;
        keepalive_requests 1000000000;
        keepalive_timeout 300s;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT backlog=4096$([[ -n "$TLS_CERT" ]] && echo " ssl")$([[ -n "$TLS_CERT" ]] && (( HTTP2 )) && echo " http2");
$( (( HTTP2 )) && printf '        listen 127.0.0.1:%s backlog=4096 http2;\n        http2_max_concurrent_streams 100;\n' "$NGINX_H2C_PORT")
$([[ -n "$TLS_CERT" ]] && printf '        ssl_certificate %s;\n        ssl_certificate_key %s;\n        ssl_protocols TLSv1.2 TLSv1.3;\n        ssl_session_tickets on;\n' "$TLS_CERT" "$TLS_KEY")
        location / {
            proxy_pass http://fast;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
CONF
    nginx -e "$d/error.log" -p "$d" -c "$d/nginx.conf" &
    NGINX_PID=$!; STARTED_PIDS+=("$NGINX_PID")
    wait_http "$(scheme)://127.0.0.1:$NGINX_PORT/" ok
}

# start_haproxy [FRONTEND_RULES] -> sets HAPROXY_PORT, HAPROXY_PID (and HAPROXY_H2C_PORT with HTTP2=1)
# HAProxy 2.6, 2 threads, server connections reused across clients. FRONTEND_RULES
# (e.g. http-request lines) go into the frontend; with rules, readiness is only
# checked by `haproxy -c` and the port, since the rules may refuse a bare GET.
start_haproxy() {
    local rules="${1-}"
    HAPROXY_PORT="$(free_port)"
    (( HTTP2 )) && HAPROXY_H2C_PORT="$(free_port)"
    local d="$WORKDIR/haproxy"; mkdir -p "$d"
    cat > "$d/haproxy.cfg" <<CONF
global
    nbthread 2
    maxconn 4096
$( (( HTTP2 )) && echo "    tune.h2.max-concurrent-streams 100")

defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout http-keep-alive 300s

frontend fe
    bind 127.0.0.1:$HAPROXY_PORT$([[ -n "$TLS_CERT" ]] && echo " ssl crt $TLS_BUNDLE ssl-min-ver TLSv1.2 alpn $( (( HTTP2 )) && echo h2,)http/1.1")
$( (( HTTP2 )) && echo "    bind 127.0.0.1:$HAPROXY_H2C_PORT proto h2")
$rules
    default_backend fast

backend fast
    server upstream 127.0.0.1:$UPSTREAM_PORT
CONF
    haproxy -c -f "$d/haproxy.cfg" >/dev/null || return 1
    haproxy -db -f "$d/haproxy.cfg" > "$d/haproxy.out" 2>&1 &
    HAPROXY_PID=$!; STARTED_PIDS+=("$HAPROXY_PID")
    if [[ -n "$rules" ]]; then
        for _ in $(seq 1 100); do curl -ks -o /dev/null "$(scheme)://127.0.0.1:$HAPROXY_PORT/" && return 0; sleep 0.1; done
        echo "error: HAProxy did not listen on $HAPROXY_PORT" >&2; return 1
    fi
    wait_http "$(scheme)://127.0.0.1:$HAPROXY_PORT/" ok
}

# start_h2o -> sets H2O_PORT, H2O_PID (and H2O_H2C_PORT with HTTP2=1); used by h2.sh.
# h2o 2.2 (Debian package h2o), 2 threads, reverse proxy with pooled keep-alive to the
# upstream. Runs as `nobody` when started as root (h2o's own default): the key is read first.
start_h2o() {
    H2O_PORT="$(free_port)"
    (( HTTP2 )) && H2O_H2C_PORT="$(free_port)"
    local d="$WORKDIR/h2o"; mkdir -p "$d"
    cat > "$d/h2o.conf" <<CONF
num-threads: 2
error-log: $d/error.log
max-connections: 16384
http2-max-concurrent-requests-per-connection: 100
http2-idle-timeout: 300
http1-request-timeout: 300
proxy.timeout.keepalive: 300000
listen:
  host: 127.0.0.1
  port: $H2O_PORT
$([[ -n "$TLS_CERT" ]] && printf '  ssl:\n    certificate-file: %s\n    key-file: %s\n    minimum-version: TLSv1.2\n    ocsp-update-interval: 0\n' "$TLS_CERT" "$TLS_KEY")
$( (( HTTP2 )) && printf 'listen:\n  host: 127.0.0.1\n  port: %s\n' "$H2O_H2C_PORT")
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:$UPSTREAM_PORT/
CONF
    h2o -t -c "$d/h2o.conf" > "$d/h2o-test.out" 2>&1 || { cat "$d/h2o-test.out" >&2; return 1; }
    h2o -c "$d/h2o.conf" > "$d/h2o.out" 2>&1 &
    H2O_PID=$!; STARTED_PIDS+=("$H2O_PID")
    wait_http "$(scheme)://127.0.0.1:$H2O_PORT/" ok || { cat "$d/h2o.out" "$d/error.log" >&2 2>/dev/null; return 1; }
}

# start_portcullis [EXTRA_YAML [BIN [NAME [ROUTE_AUTH]]]] -> sets PORTCULLIS_PORT, PORTCULLIS_ADMIN, PORTCULLIS_PID
# (and PORTCULLIS_H2C_PORT with HTTP2=1)
# The release binary (or BIN, in $WORKDIR/NAME), 2 workers, pooled keep-alive to the
# upstream; the one route's auth is ROUTE_AUTH (default none; EXTRA_YAML then has the providers).
start_portcullis() {
    local extra="${1-}" bin="${2:-$PORTCULLIS_BIN}" name="${3:-portcullis}" route_auth="${4:-none}"
    if [[ ! -x "$bin" ]]; then
        echo "error: $bin not found; build it with:" >&2
        echo "  cd $REPO_ROOT && swift build -c release --product portcullis" >&2
        return 1
    fi
    PORTCULLIS_PORT="$(free_port)"
    PORTCULLIS_ADMIN="$(free_port)"
    local d="$WORKDIR/$name"; mkdir -p "$d"
    local listen
    if (( HTTP2 )); then
        PORTCULLIS_H2C_PORT="$(free_port)"
        listen="listen:
  - address: \"127.0.0.1:$PORTCULLIS_PORT\"$( [[ -z "$TLS_CERT" ]] || printf '\n    tls: {certificates: [{certificate: "%s", private_key: "%s"}], alpn: [h2, http/1.1]}' "$TLS_CERT" "$TLS_KEY")
    http2: {max_concurrent_streams: 100}
  - {address: \"127.0.0.1:$PORTCULLIS_H2C_PORT\", h2c: true}"
    else
        listen="listen: [{address: \"127.0.0.1:$PORTCULLIS_PORT\"$( [[ -z "$TLS_CERT" ]] || echo ", tls: {certificates: [{certificate: \"$TLS_CERT\", private_key: \"$TLS_KEY\"}]}")}]"
    # (a failing [[ ]] && … as the last command of a substitution would end the caller under set -e)
    fi
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$d/admin-token"
    cat > "$d/portcullis.yaml" <<CONF
$listen
admin: {address: "127.0.0.1:$PORTCULLIS_ADMIN", token: "$(cat "$d/admin-token")"}
workers: 2
access_log: off
log_level: warning
upstreams:
  fast: {url: "http://127.0.0.1:$UPSTREAM_PORT", max_connections: $UPSTREAM_POOL}
routes:
  - {path: /, upstream: fast, auth: $route_auth}
$extra
CONF
    "$bin" check-config "$d/portcullis.yaml" >/dev/null || return 1
    "$bin" run --config "$d/portcullis.yaml" > "$d/portcullis.out" 2>&1 &
    PORTCULLIS_PID=$!; STARTED_PIDS+=("$PORTCULLIS_PID")
    wait_http "http://127.0.0.1:$PORTCULLIS_ADMIN/healthz" || { cat "$d/portcullis.out" >&2; return 1; }
    if [[ "$route_auth" == none ]]; then
        wait_http "$(scheme)://127.0.0.1:$PORTCULLIS_PORT/" ok || { cat "$d/portcullis.out" >&2; return 1; }
    fi
}

# The scripts' exit trap (`trap cleanup_workdir EXIT`): stops every server started here,
# copies the work directory to $KEEP when one was asked for, removes it, keeps the status.
cleanup_workdir() {
    local rc=$?
    stop_servers
    if [[ -n "${KEEP-}" ]]; then mkdir -p "$KEEP" && cp -r "$WORKDIR"/. "$KEEP"/ || true; fi
    rm -rf "$WORKDIR"
    exit "$rc"
}

# Row helpers the scripts share: `wants ROW` (listed in $ONLY), `last_line FILE` (its last
# non-empty line, for a failure reason), `one_line TEXT` (a reason on one line, at most 400
# characters, no tabs: the row tables are tab-separated).
wants() { [[ ",$ONLY," == *",$1,"* ]]; }
last_line() { grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -1 || true; }
one_line() { local reason="${1//$'\t'/ }"; reason="${reason//$'\n'/ }"; printf '%s' "${reason:0:400}"; }
