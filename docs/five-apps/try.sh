#!/usr/bin/env bash
# Runs the five seed apps' configurations (Config/examples/*.yaml) against local stand-ins and
# checks, request by request, what docs/fitting-the-five-apps.md says each one does. From a
# fresh clone, with nothing outside the repository:
#
#   swift build --product portcullis && bash docs/five-apps/try.sh              # all five
#   bash docs/five-apps/try.sh golfai foliomind                                 # some
#   PORTCULLIS=.build/release/portcullis KEEP=1 bash docs/five-apps/try.sh      # keep the files
#
# Stand-ins, all on 127.0.0.1 (free ports): a Google, an Apple and a Firebase key host
# (Tests/PortcullisKeysTests/Fixtures/key_server.py; Firebase publishes a kid -> PEM certificate
# map, as Google does for it), the app itself (Tests/PortcullisEndToEndTests/Fixtures/echo_upstream.py:
# it answers with the request it received, so each check sees the headers the app got), a test CA
# and certificates made with openssl. Tokens are minted outside the gateway, as the apps' own
# backends and Google/Apple/Firebase issue them (Fixtures/mint_jwt.py, PyJWT); Auth.js cookies with
# `portcullis mint --claim`. Each app's gateway is the real binary on the shipped file, with the
# file's own variables pointed at the stand-ins. Prints one line per check; exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

BIN=${PORTCULLIS:-}
if [ -z "$BIN" ]; then
  for candidate in .build/debug/portcullis .build/release/portcullis; do
    if [ -x "$candidate" ]; then BIN=$ROOT/$candidate; break; fi
  done
fi
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
  echo "no portcullis binary: run 'swift build --product portcullis' first (or set PORTCULLIS=PATH)" >&2
  exit 2
fi
# Debian's python3 (a pyenv or venv one may lack the packages).
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
for tool in curl openssl; do
  command -v $tool > /dev/null || { echo "$tool is needed (apt-get install $tool)" >&2; exit 2; }
done
$PY -c 'import jwt, cryptography' 2> /dev/null \
  || { echo "python3-jwt and python3-cryptography are needed (apt-get install python3-jwt python3-cryptography)" >&2; exit 2; }

APPS=("$@")
[ ${#APPS[@]} -eq 0 ] && APPS=(rvu-tracker paperboxd golfai foliomind vcnotebook rvu-tracker-sessions paperboxd-sessions golfai-sessions foliomind-sessions)
W=$(mktemp -d /tmp/portcullis-five-apps.XXXXXX)
# Every process started, by pid (apps run in subshells: a file, not a variable).
PIDS=$W/pids
: > "$PIDS"
started() { echo "$1" >> "$PIDS"; }
cleanup() {
  for pid in $(cat "$PIDS"); do kill -TERM "$pid" 2> /dev/null; done
  sleep 0.3
  for pid in $(cat "$PIDS"); do kill -KILL "$pid" 2> /dev/null; done
  if [ "${KEEP:-0}" = 1 ]; then echo "files kept in $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT

FIX=$ROOT/Tests/PortcullisEndToEndTests/Fixtures
mint() { $PY "$FIX/mint_jwt.py" "$@"; }
free_port() { $PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_file() { for _ in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "timed out waiting for $1" >&2; return 1; }

# One line per check in $RESULTS ("ok" or "FAIL"): each app runs in a subshell, so its
# variables (each file's environment) never leak into the next one.
RESULTS=$W/results
: > "$RESULTS"
passed() { echo ok >> "$RESULTS"; printf '  ok    %s\n' "$1"; }
failed() { echo FAIL >> "$RESULTS"; printf '  FAIL  %s\n' "$1"; }
# check WHAT STATUS [PATTERN ...] -- CURL_ARGS: the response (head and body) has STATUS and
# contains every PATTERN (fixed strings; "!TEXT": must not contain TEXT).
check() {
  local what=$1 want=$2 patterns=() out status ok=1
  shift 2
  while [ "$1" != "--" ]; do patterns+=("$1"); shift; done
  shift
  out=$(curl -s -i -m 15 "$@" 2>&1)
  if [ -z "$out" ]; then
    # No answer at all within 15 s (seen once under AddressSanitizer on a loaded 2-core CI
    # machine): asked once more, and said so, so a real refusal is never retried away.
    echo "    (no answer to '$what' within 15 s; asking once more)"
    out=$(curl -s -i -m 30 "$@" 2>&1)
  fi
  status=$(printf '%s\n' "$out" | awk 'NR == 1 { print $2 }')
  [ "$status" = "$want" ] || ok=0
  for p in "${patterns[@]}"; do
    if [ "${p:0:1}" = "!" ]; then grep -qF -- "${p:1}" <<< "$out" && ok=0
    else grep -qF -- "$p" <<< "$out" || ok=0; fi
  done
  if [ $ok = 1 ]; then passed "$what -> $status"
  else failed "$what: wanted $want ${patterns[*]:-}; got:"$'\n'"$(printf '%s' "$out" | head -c 2000)"; fi
}
# check_status WHAT STATUS CURL_ARGS: the status only (large bodies).
check_status() {
  local what=$1 want=$2 status
  shift 2
  status=$(curl -s -o /dev/null -w '%{http_code}' -m 30 "$@")
  if [ "$status" = "$want" ]; then passed "$what -> $status"; else failed "$what: wanted $want, got $status"; fi
}
# expect WHAT COMMAND...: a command that must succeed (check-config, revoke).
expect() {
  local what=$1 out
  shift
  if out=$("$@" 2>&1); then passed "$what"; else failed "$what:"$'\n'"$out"; fi
}

# --- shared stand-ins ------------------------------------------------------------------------
echo "== stand-ins (in $W)"
mkdir -p "$W/tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=localhost" \
  -addext "subjectAltName=DNS:localhost,DNS:trackmyrvu.com,DNS:paperboxd.in,DNS:api.golfai.example,IP:127.0.0.1" \
  -keyout "$W/tls/server.key" -out "$W/tls/server.pem" 2> /dev/null
# The key hosts exit when their standard input closes: this one closes when the script ends.
mkfifo "$W/keep-open"
sleep 86400 > "$W/keep-open" &
started $!
for p in google apple firebase; do
  mkdir -p "$W/keys-$p"
  format=jwks; [ $p = firebase ] && format=pem
  echo "{\"publish\": [\"k1\"], \"cache_control\": \"max-age=600\", \"format\": \"$format\"}" > "$W/keys-$p/state.json"
  $PY "$ROOT/Tests/PortcullisKeysTests/Fixtures/key_server.py" --dir "$W/keys-$p" --keys k1:RS256 < "$W/keep-open" > "$W/keys-$p/log" 2>&1 &
  started $!
done
for p in google apple firebase; do wait_file "$W/keys-$p/port" || exit 1; done
export GOOGLE_JWKS_URL="http://127.0.0.1:$(cat "$W/keys-google/port")/"
export APPLE_JWKS_URL="http://127.0.0.1:$(cat "$W/keys-apple/port")/"
export FIREBASE_JWKS_URL="http://127.0.0.1:$(cat "$W/keys-firebase/port")/"
export TLS_CERT=$W/tls/server.pem TLS_KEY=$W/tls/server.key PORTCULLIS_ADMIN_TOKEN=local-admin-token-0123456789
echo "  key hosts: google $GOOGLE_JWKS_URL apple $APPLE_JWKS_URL firebase $FIREBASE_JWKS_URL"

# start_app NAME [echo_upstream.py extra args]: the stand-in app; sets UPSTREAM_PORT.
start_app() {
  UPSTREAM_PORT=$(free_port)
  $PY "$FIX/echo_upstream.py" "$UPSTREAM_PORT" "$@" > "$W/app-$1.log" 2>&1 &
  started $!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null ${2:+-k} "$([ -n "${2:-}" ] && echo https || echo http)://127.0.0.1:$UPSTREAM_PORT/__seen" \
      ${4:+--cert "$W/mtls/gateway-client.pem" --key "$W/mtls/gateway-client.key"} && return 0
    sleep 0.1
  done
}

# start_gateway FILE: check-config, run, wait until /readyz is 200 (every provider's keys fetched).
start_gateway() {
  local file=$1
  export LISTEN=${LISTEN:-127.0.0.1:$(free_port)} ADMIN_LISTEN=127.0.0.1:$(free_port) STATE_DIR=$W/state/$(basename "$file" .yaml)
  expect "check-config $file" "$BIN" check-config "$file"
  "$BIN" run --config "$file" > "$W/gateway-$(basename "$file" .yaml).log" 2>&1 &
  GATEWAY=$!
  started $GATEWAY
  for _ in $(seq 1 200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$ADMIN_LISTEN/readyz")" = 200 ] && return 0
    sleep 0.1
  done
  failed "the gateway did not become ready:"$'\n'"$(tail -20 "$W/gateway-$(basename "$file" .yaml).log")"
}

stop_gateway() {
  kill -TERM "$GATEWAY"
  local status
  wait "$GATEWAY"; status=$?
  if [ $status = 0 ]; then passed "SIGTERM: the gateway stopped, exit 0"; else failed "SIGTERM: exit $status"; fi
  unset LISTEN LISTEN_HTTP
}

json() { printf '%s' "$1"; }
google_token() {  # google_token AUDIENCE SUB [ISS]
  mint --rs256 "$W/keys-google/k1.key.pem" k1 "{\"iss\":\"${3:-https://accounts.google.com}\",\"azp\":\"$1\",\"aud\":\"$1\",\"sub\":\"$2\",\"email\":\"user@example.com\",\"email_verified\":true,\"name\":\"John Doe\",\"iat\":\"-0\",\"exp\":\"+3600\"}"
}
apple_token() {  # apple_token AUDIENCE SUB
  mint --rs256 "$W/keys-apple/k1.key.pem" k1 "{\"iss\":\"https://appleid.apple.com\",\"aud\":\"$1\",\"sub\":\"$2\",\"email\":\"jay@privaterelay.appleid.com\",\"email_verified\":\"true\",\"is_private_email\":true,\"auth_time\":\"-0\",\"iat\":\"-0\",\"exp\":\"+600\"}"
}

# --- RVU Tracker ------------------------------------------------------------------------------
rvu-tracker() {
  start_app rvu
  export AUTH_SECRET=rvu-local-auth-secret-0123456789abcdef0123
  export GOOGLE_CLIENT_ID=386826311054-web.apps.googleusercontent.com GOOGLE_IOS_CLIENT_ID=386826311054-ios.apps.googleusercontent.com
  export APPLE_CLIENT_ID=com.trackmyrvu.web APPLE_IOS_BUNDLE_ID=com.trackmyrvu.ios
  export VERCEL_AUTOMATION_BYPASS_SECRET=local-bypass-secret-0123456789abcdef RVU_UPSTREAM_URL=http://127.0.0.1:$UPSTREAM_PORT
  export LISTEN=127.0.0.1:$(free_port) LISTEN_HTTP=127.0.0.1:$(free_port)
  local port=${LISTEN##*:} http=$LISTEN_HTTP
  start_gateway Config/examples/rvu-tracker.yaml
  local C=(--cacert "$TLS_CERT" --resolve "trackmyrvu.com:$port:127.0.0.1") B=https://trackmyrvu.com:$port U=117584285732048297471
  local tok exp gtok other ck
  tok=$(mint "$AUTH_SECRET" "{\"sub\":\"$U\",\"email\":\"user@example.com\",\"name\":\"John Doe\",\"iat\":\"-0\",\"exp\":\"+2592000\"}")
  check "iOS Bearer (HS256, 30 days); spoofed X-User-Id dropped" 200 "\"X-User-Id\", \"$U\"" '"X-Auth-Provider", "app"' '"X-User-Email", "user@example.com"' '!attacker' -- \
    "${C[@]}" -H "Authorization: Bearer $tok" -H "X-User-Id: attacker" -H "x_user_id: attacker2" "$B/api/visits"
  check "no credential: 401 in the app's shape" 401 '{"error": "No credentials"}' 'www-authenticate: Bearer' -- "${C[@]}" "$B/api/visits"
  exp=$(mint "$AUTH_SECRET" "{\"sub\":\"$U\",\"iat\":\"-2592100\",\"exp\":\"-100\"}")
  check "expired access token" 401 '{"error": "The access token expired"}' -- "${C[@]}" -H "Authorization: Bearer $exp" "$B/api/visits"
  check "token under another secret" 401 '"error": "The access token signature is invalid"' -- "${C[@]}" \
    -H "Authorization: Bearer $(mint other-secret-0123456789abcdef0123456789 "{\"sub\":\"$U\",\"exp\":\"+600\"}")" "$B/api/visits"
  gtok=$(google_token "$GOOGLE_IOS_CLIENT_ID" "$U")
  check "Google exchange: ID token in {idToken}, body forwarded" 200 "\"X-User-Id\", \"$U\"" '"X-Auth-Provider", "google"' '\"idToken\"' -- "${C[@]}" \
    -X POST -H 'Content-Type: application/json' -d "{\"idToken\":\"$gtok\"}" "$B/api/auth/mobile/google"
  other=$(google_token other-client.apps.googleusercontent.com "$U")
  check "Google exchange: another client's audience" 401 '{"error": "The ID token audience is not accepted"}' -- "${C[@]}" \
    -X POST -H 'Content-Type: application/json' -d "{\"idToken\":\"$other\"}" "$B/api/auth/mobile/google"
  check "Google exchange: body without idToken" 400 '{"error": "The request body has no idToken member"}' 'error="invalid_request"' -- "${C[@]}" \
    -X POST -H 'Content-Type: application/json' -d '{}' "$B/api/auth/mobile/google"
  check "Google exchange: the app's own token is not a Google ID token" 401 '{"error": "The ID token is from a provider this route does not accept"}' -- "${C[@]}" \
    -X POST -H 'Content-Type: application/json' -d "{\"idToken\":\"$tok\"}" "$B/api/auth/mobile/google"
  check "Apple exchange: {identityToken}" 200 '"X-Auth-Provider", "apple"' '"X-User-Id", "001234.abcdef0123456789.0123"' -- "${C[@]}" \
    -X POST -H 'Content-Type: application/json' -d "{\"identityToken\":\"$(apple_token "$APPLE_IOS_BUNDLE_ID" 001234.abcdef0123456789.0123)\",\"fullName\":\"J\"}" "$B/api/auth/mobile/apple"
  ck=$("$BIN" mint --config Config/examples/rvu-tracker.yaml --provider web --sub "$U" --ttl 720h \
         --claim sub=5b7c0e0e-8a53-4c55-9d0e-2f1d7b2c7a11 --format header)
  check "web: Auth.js v5 cookie, user id from its id claim" 200 "\"X-User-Id\", \"$U\"" '"X-Auth-Provider", "web"' -- "${C[@]}" -H "$ck; other=1" "$B/analytics"
  check "page without a session: to the sign-in page" 302 'location: /sign-in?callbackUrl=/analytics%3Frange%3Dweek' -- "${C[@]}" "$B/analytics?range=week"
  check "sign-out (the app answers), cookie revoked" 200 -- "${C[@]}" -X POST -H "$ck" -d 'csrfToken=abc' "$B/api/auth/signout"
  check "the signed-out cookie on the API" 401 '{"error": "The session cookie has been revoked"}' -- "${C[@]}" -H "$ck" "$B/api/visits"
  check "plain HTTP: 308 to https" 308 'location: https://trackmyrvu.com/api/visits' -- -H 'Host: trackmyrvu.com' "http://$http/api/visits"
  check "the app got the Vercel bypass header and its own Host" 200 '"x-vercel-protection-bypass", "local-bypass-secret' '"x-forwarded-proto", "https"' '"host", "127.0.0.1:'"$UPSTREAM_PORT"'"' -- \
    "${C[@]}" -H "Authorization: Bearer $tok" "$B/api/visits"
  stop_gateway
}

# --- PaperBoxd --------------------------------------------------------------------------------
paperboxd() {
  start_app paperboxd
  export NEXTAUTH_SECRET=paperboxd-local-nextauth-secret-0123456789ab GOOGLE_CLIENT_ID_WEB=893085484645-web.apps.googleusercontent.com
  export VERCEL_AUTOMATION_BYPASS_SECRET=local-bypass-secret-paperboxd-0123456789 PAPERBOXD_UPSTREAM_URL=http://127.0.0.1:$UPSTREAM_PORT
  export LISTEN=127.0.0.1:$(free_port) LISTEN_HTTP=127.0.0.1:$(free_port)
  local port=${LISTEN##*:}
  start_gateway Config/examples/paperboxd.yaml
  local C=(--cacert "$TLS_CERT" --resolve "paperboxd.in:$port:127.0.0.1") B=https://paperboxd.in:$port U=507f1f77bcf86cd799439011
  local ios=893085484645-7788sam2d7posge2bcild48duripv8h4.apps.googleusercontent.com tok old big header
  tok=$(mint "$NEXTAUTH_SECRET" "{\"userId\":\"$U\",\"email\":\"user@example.com\",\"username\":\"user\",\"iat\":\"-0\",\"exp\":\"+2592000\"}")
  check "iOS JWT {userId} (no sub)" 200 "\"X-User-Id\", \"$U\"" '"X-User-Name", "user"' -- "${C[@]}" -H "Authorization: Bearer $tok" "$B/api/me"
  check "private route without a credential" 401 '{"error": "No credentials"}' -- "${C[@]}" "$B/api/me"
  check "public API: anonymous, no identity headers" 200 '!X-User-Id' -- "${C[@]}" "$B/api/books/public"
  check "public API: a malformed Bearer is refused" 401 '{"error": "The access token is malformed"}' -- "${C[@]}" -H 'Authorization: Bearer abc' "$B/api/books/public"
  old=$(mint "$NEXTAUTH_SECRET" "{\"userId\":\"$U\",\"email\":\"user@example.com\",\"username\":\"user\",\"iat\":\"-2332800\",\"exp\":\"+259200\"}")
  check "refresh: the token in {token}" 200 "\"X-User-Id\", \"$U\"" -- "${C[@]}" -X POST -H 'Content-Type: application/json' -d "{\"token\":\"$old\"}" "$B/api/auth/refresh"
  check "refresh: an expired token in {token}" 401 '{"error": "The token expired"}' -- "${C[@]}" -X POST -H 'Content-Type: application/json' \
    -d "{\"token\":\"$(mint "$NEXTAUTH_SECRET" "{\"userId\":\"$U\",\"iat\":\"-2592100\",\"exp\":\"-100\"}")\"}" "$B/api/auth/refresh"
  check "Google exchange (iss without scheme, the iOS client)" 200 '"X-User-Id", "110248495921238986420"' '"X-Auth-Provider", "google"' -- "${C[@]}" \
    -X POST -H 'Content-Type: application/json' -d "{\"idToken\":\"$(google_token "$ios" 110248495921238986420 accounts.google.com)\"}" "$B/api/auth/google-mobile"
  # A 33 KB data: avatar in the session: Auth.js splits the cookie into chunks of 3936 bytes.
  big=$("$BIN" mint --config Config/examples/paperboxd.yaml --provider web --sub "$U" --ttl 720h --claim username=reader \
          --claim "picture=data:image/png;base64,$(head -c 33000 /dev/urandom | base64 -w0)" --format header)
  # "Cookie: NAME=VALUE" -> "Cookie: NAME.0=…; NAME.1=…", as Auth.js chunks it.
  header=$($PY -c "import sys; name, v = sys.argv[1][len('Cookie: '):].split('=', 1); n = 3936; print('Cookie: ' + '; '.join(f'{name}.{i}={v[j:j + n]}' for i, j in enumerate(range(0, len(v), n))))" "$big")
  check "a 45 KB chunked Auth.js session over h2" 200 "\"X-User-Id\", \"$U\"" -- "${C[@]}" --http2 -H "$header" "$B/api/me"
  check "the same over HTTP/1.1" 200 "\"X-User-Id\", \"$U\"" -- "${C[@]}" --http1.1 -H "$header" "$B/api/me"
  expect "sign a user out everywhere (portcullis revoke --subject)" "$BIN" revoke --config Config/examples/paperboxd.yaml --subject "$U"
  check "that user's older token after it" 401 '{"error": "The access token has been revoked"}' -- "${C[@]}" -H "Authorization: Bearer $tok" "$B/api/me"
  sleep 1
  check "a token issued after it" 200 -- "${C[@]}" -H "Authorization: Bearer $(mint "$NEXTAUTH_SECRET" "{\"userId\":\"$U\",\"iat\":\"-0\",\"exp\":\"+600\"}")" "$B/api/me"
  stop_gateway
}

# --- golfai -----------------------------------------------------------------------------------
# golfai_pki: the test CA, the app's server certificate and the gateway's client certificate in $W/mtls.
golfai_pki() {
  local M=$W/mtls
  [ -s "$M/gateway-client.pem" ] && return 0
  mkdir -p "$M"
  (cd "$M" && {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=golfai test server CA" -keyout server-ca.key -out server-ca.pem
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=golfai.duckdns.org" -keyout upstream.key -out upstream.csr
    printf "subjectAltName=DNS:golfai.duckdns.org,IP:127.0.0.1\n" > san.ext
    openssl x509 -req -in upstream.csr -CA server-ca.pem -CAkey server-ca.key -CAcreateserial -days 2 -extfile san.ext -out upstream.pem
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=portcullis client CA" -keyout client-ca.key -out client-ca.pem
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=portcullis-gateway" -keyout gateway-client.key -out gateway-client.csr
    printf "extendedKeyUsage=clientAuth\n" > client.ext
    openssl x509 -req -in gateway-client.csr -CA client-ca.pem -CAkey client-ca.key -CAcreateserial -days 2 -extfile client.ext -out gateway-client.pem
  } > /dev/null 2>&1)
}

golfai() {
  local M=$W/mtls
  golfai_pki
  # The app behind nginx-style client-certificate checking: TLS, a certificate from the gateway's CA required.
  start_app golfai "$M/upstream.pem" "$M/upstream.key" "$M/client-ca.pem"
  if curl -s -m 5 --cacert "$M/server-ca.pem" "https://127.0.0.1:$UPSTREAM_PORT/auth/profile" -H 'X-User-Id: victim' > /dev/null 2>&1; then
    failed "the app answered a caller without a client certificate"
  else passed "the app refuses a caller without the gateway's client certificate"; fi
  export AUTH_SECRET_KEY=golfai-local-auth-secret-key-0123456789abcdef APPLE_BUNDLE_ID=com.golfswingai.app
  export GOLFAI_UPSTREAM_URL=https://127.0.0.1:$UPSTREAM_PORT GOLFAI_UPSTREAM_CA=$M/server-ca.pem
  export GATEWAY_CLIENT_CERT=$M/gateway-client.pem GATEWAY_CLIENT_KEY=$M/gateway-client.key
  export LISTEN=127.0.0.1:$(free_port)
  local port=${LISTEN##*:}
  start_gateway Config/examples/golfai.yaml
  local C=(--cacert "$TLS_CERT" --resolve "api.golfai.example:$port:127.0.0.1") B=https://api.golfai.example:$port U=3f2b8c1e-7d4a-4b9e-9c1a-2e5f6a7b8c9d
  local cid=565652533895-84ia5eudkma9ch65ciu5blm9pd8jtk8t.apps.googleusercontent.com acc refresh g
  acc=$(mint "$AUTH_SECRET_KEY" "{\"sub\":\"$U\",\"exp\":\"+2592000\"}")
  check "access token (python-jose, no iat); spoof dropped" 200 "\"X-User-Id\", \"$U\"" '!someone-else' -- "${C[@]}" \
    -H "Authorization: Bearer $acc" -H "X-User-Id: someone-else" "$B/auth/profile"
  check "no credential: FastAPI's {detail}" 401 '{"detail": "No credentials"}' -- "${C[@]}" "$B/auth/profile"
  refresh=$(mint "$AUTH_SECRET_KEY" "{\"sub\":\"$U\",\"exp\":\"+7776000\"}")
  check "refresh: {refresh_token}, 90 days" 200 '"X-Auth-Provider", "app_refresh"' -- "${C[@]}" -X POST -H 'Content-Type: application/json' \
    -d "{\"refresh_token\":\"$refresh\"}" "$B/auth/refresh"
  check "refresh: not a JWT" 401 '{"detail": "The refresh token is malformed"}' -- "${C[@]}" -X POST -H 'Content-Type: application/json' -d '{"refresh_token":"refresh_abc"}' "$B/auth/refresh"
  check "the 90-day refresh token as an access token" 401 '{"detail": "The access token lifetime is too long"}' -- "${C[@]}" -H "Authorization: Bearer $refresh" "$B/auth/profile"
  g=$(google_token "$cid" 109876543210987654321)
  check "older exchange {google_token}" 200 '"X-User-Id", "109876543210987654321"' -- "${C[@]}" -X POST -H 'Content-Type: application/json' \
    -d "{\"google_token\":\"$g\",\"user_info\":{\"email\":\"golfer@gmail.com\"}}" "$B/auth/signin/google"
  check "the seed's unsigned google_id alone" 401 '{"detail": "No credentials"}' -- "${C[@]}" -X POST -H 'Content-Type: application/json' \
    -d '{"google_id":"109876543210987654321","email":"golfer@gmail.com"}' "$B/auth/google"
  check "with the Google ID token as Bearer" 200 '"X-User-Id", "109876543210987654321"' -- "${C[@]}" -X POST -H "Authorization: Bearer $g" \
    -H 'Content-Type: application/json' -d '{"google_id":"109876543210987654321"}' "$B/auth/google"
  check "Apple ID token as Bearer on /auth/apple" 200 '"X-User-Id", "000111.aaaabbbbcccc.2222"' -- "${C[@]}" -X POST \
    -H "Authorization: Bearer $(apple_token "$APPLE_BUNDLE_ID" 000111.aaaabbbbcccc.2222)" "$B/auth/apple"
  check "analysis API stays anonymous" 200 '!X-User-Id' -- "${C[@]}" -X POST -d '{}' "$B/predict"
  check "logout (the app answers)" 200 -- "${C[@]}" -X POST -H "Authorization: Bearer $acc" "$B/auth/logout"
  check "the logged-out token" 401 '{"detail": "The access token has been revoked"}' -- "${C[@]}" -H "Authorization: Bearer $acc" "$B/auth/profile"
  stop_gateway
  # The lock: the same file with a client certificate the app does not trust gets no answer from it.
  export GATEWAY_CLIENT_CERT=$TLS_CERT GATEWAY_CLIENT_KEY=$TLS_KEY LISTEN=127.0.0.1:$(free_port)
  port=${LISTEN##*:}
  start_gateway Config/examples/golfai.yaml
  check "a gateway with another CA's certificate: the app refuses it" 502 'failed the TLS handshake' -- \
    --cacert "$TLS_CERT" --resolve "api.golfai.example:$port:127.0.0.1" "https://api.golfai.example:$port/health"
  stop_gateway
}

# --- FolioMind --------------------------------------------------------------------------------
foliomind() {
  start_app foliomind
  export FOLIOMIND_JWT_SECRET=foliomind-local-jwt-secret-0123456789abcdef FOLIOMIND_UPSTREAM_URL=http://127.0.0.1:$UPSTREAM_PORT
  unset APPLE_BUNDLE_ID
  start_gateway Config/examples/foliomind.yaml
  local B=http://$LISTEN A acc
  A=$(apple_token com.lz.studio.FolioMind 001122.0f1e2d3c4b5a69788796a5b4c3d2e1f0.1234)
  check "Sign in with Apple: {identity_token}" 200 '"X-User-Id", "001122.0f1e2d3c4b5a69788796a5b4c3d2e1f0.1234"' '"X-Auth-Provider", "apple"' -- \
    -X POST -H 'Content-Type: application/json' -d "{\"identity_token\":\"$A\",\"device_id\":\"6F1A0C9E\",\"app_version\":\"1.0\"}" "$B/api/v1/auth/apple"
  check "Apple token for another app" 401 '{"detail": "The ID token audience is not accepted"}' -- -X POST -H 'Content-Type: application/json' \
    -d "{\"identity_token\":\"$(apple_token com.other.app 001122.x)\"}" "$B/api/v1/auth/apple"
  acc=$(mint "$FOLIOMIND_JWT_SECRET" '{"sub":"user_8f14e45f","type":"access","iat":"-0","exp":"+3600"}')
  check "API with the 60-minute access JWT" 200 '"X-User-Id", "user_8f14e45f"' -- -X POST -H "Authorization: Bearer $acc" \
    -H 'Content-Type: application/json' -d '{"ocr_text":"Receipt"}' "$B/api/v1/analyze"
  check "API without a credential" 401 '{"detail": "No credentials"}' 'www-authenticate: Bearer' -- -X POST -d '{}' "$B/api/v1/analyze"
  check "opaque refresh passes unchanged, no identity" 200 '!X-User-Id' 'refresh_abc123' -- -X POST -H 'Content-Type: application/json' \
    -d '{"refresh_token":"refresh_abc123"}' "$B/api/v1/auth/refresh"
  head -c 3145728 /dev/urandom > "$W/img.jpg"
  check_status "3 MiB image upload" 200 -X POST -H "Authorization: Bearer $acc" -F "file=@$W/img.jpg;type=image/jpeg" "$B/api/v1/upload/image"
  check "logout (the app answers)" 200 -- -X POST -H "Authorization: Bearer $acc" -d '{}' "$B/api/v1/auth/logout"
  check "the logged-out token" 401 '{"detail": "The access token has been revoked"}' -- -X POST -H "Authorization: Bearer $acc" -d '{}' "$B/api/v1/analyze"
  check "/health is public" 200 -- "$B/health"
  stop_gateway
}

# with_sessions FILE OUT: FILE changed as its sessions comment says: the commented `sessions:`
# block uncommented, the lines marked "sign-in route" deleted, a route line marked "with
# sessions" uncommented. Nothing else.
with_sessions() {
  awk '/^# sessions:/ { block = 1 } block && /^#( |$)/ { sub(/^# ?/, ""); print; next } { block = 0; print }' "$1" \
    | grep -v '# sign-in route' | sed -E 's/^( *)# (- .*# with sessions)/\1\2/' > "$2"
}

# member JSON PATH: a member of a JSON answer (dotted path), strings bare, others as JSON; empty if absent.
member() {
  $PY -c 'import json, sys
try:
    o = json.loads(sys.argv[1])
    for k in sys.argv[2].split("."):
        o = o.get(k) if isinstance(o, dict) else None
except ValueError:
    o = None
print("" if o is None else o if isinstance(o, str) else json.dumps(o))' "$1" "$2"
}
# expect_members WHAT JSON PATH=VALUE...: the answer has each member with that value ("*": any non-empty).
expect_members() {
  local what=$1 answer=$2 pair ok=1
  shift 2
  for pair in "$@"; do
    local got; got=$(member "$answer" "${pair%%=*}")
    if [ "${pair#*=}" = "*" ]; then [ -n "$got" ] || ok=0; else [ "$got" = "${pair#*=}" ] || ok=0; fi
  done
  if [ $ok = 1 ]; then passed "$what"; else failed "$what: wanted $*; got: $answer"; fi
}
# post_json URL BODY [CURL_ARGS...]: the answer's body.
post_json() { local url=$1 body=$2; shift 2; curl -s -m 15 "$@" -X POST -H 'Content-Type: application/json' -d "$body" "$url"; }
# lookup_id PROVIDER SUBJECT: the user id the stand-in app's find-or-create answers (echo_upstream.py).
lookup_id() { $PY -c 'import hashlib, sys; print(hashlib.sha1(sys.argv[1].encode()).hexdigest()[:24])' "$1:$2"; }

# RVU Tracker with its iOS sign-in at the edge: Google and Apple at their own paths and members,
# the answer in the members its client decodes.
rvu-tracker-sessions() {
  start_app rvu
  export AUTH_SECRET=rvu-local-auth-secret-0123456789abcdef0123
  export GOOGLE_CLIENT_ID=386826311054-web.apps.googleusercontent.com GOOGLE_IOS_CLIENT_ID=386826311054-ios.apps.googleusercontent.com
  export APPLE_CLIENT_ID=com.trackmyrvu.web APPLE_IOS_BUNDLE_ID=com.trackmyrvu.ios
  export VERCEL_AUTOMATION_BYPASS_SECRET=local-bypass-secret-0123456789abcdef RVU_UPSTREAM_URL=http://127.0.0.1:$UPSTREAM_PORT
  export SESSION_SECRET=rvu-local-session-secret-0123456789abcdef SESSION_SIGNING_KEY=$W/rvu-session-es256.pem
  export LISTEN=127.0.0.1:$(free_port) LISTEN_HTTP=127.0.0.1:$(free_port)
  expect "portcullis keys generate (the session signing key)" "$BIN" keys generate "$SESSION_SIGNING_KEY"
  with_sessions Config/examples/rvu-tracker.yaml "$W/rvu-tracker-sessions.yaml"
  local port=${LISTEN##*:}
  start_gateway "$W/rvu-tracker-sessions.yaml"
  local C=(--cacert "$TLS_CERT" --resolve "trackmyrvu.com:$port:127.0.0.1") B=https://trackmyrvu.com:$port U=117584285732048297471
  local answer session refresh apple tok ck
  answer=$(post_json "$B/api/auth/mobile/google" "{\"idToken\":\"$(google_token "$GOOGLE_IOS_CLIENT_ID" "$U")\"}" "${C[@]}")
  expect_members "Google sign-in at the edge: the members the iOS client decodes" "$answer" success=true "user.id=google:$U" \
    user.email=user@example.com "user.name=John Doe" 'sessionToken=*' 'refreshToken=*' expiresIn=900
  session=$(member "$answer" sessionToken); refresh=$(member "$answer" refreshToken)
  check "the API with the sessionToken" 200 "\"X-User-Id\", \"google:$U\"" '"X-Auth-Provider", "session"' '"X-User-Email", "user@example.com"' -- \
    "${C[@]}" -H "Authorization: Bearer $session" "$B/api/visits"
  apple=$(post_json "$B/api/auth/mobile/apple" "{\"identityToken\":\"$(apple_token "$APPLE_IOS_BUNDLE_ID" 001234.abcdef0123456789.0123)\",\"fullName\":\"J\"}" "${C[@]}")
  expect_members "Apple sign-in at its own path and member (identityToken)" "$apple" success=true user.id=apple:001234.abcdef0123456789.0123 'sessionToken=*'
  check "a Google ID token on the Apple path" 400 'invalid_grant' 'The ID token is from a provider this route does not accept' -- "${C[@]}" -X POST \
    -H 'Content-Type: application/json' -d "{\"identityToken\":\"$(google_token "$GOOGLE_IOS_CLIENT_ID" "$U")\"}" "$B/api/auth/mobile/apple"
  tok=$(mint "$AUTH_SECRET" "{\"sub\":\"$U\",\"email\":\"user@example.com\",\"name\":\"John Doe\",\"iat\":\"-0\",\"exp\":\"+2592000\"}")
  check "a sessionToken the app issued before the move, until it expires" 200 "\"X-User-Id\", \"$U\"" '"X-Auth-Provider", "app"' -- \
    "${C[@]}" -H "Authorization: Bearer $tok" "$B/api/visits"
  ck=$("$BIN" mint --config "$W/rvu-tracker-sessions.yaml" --provider web --sub "$U" --ttl 720h --claim sub=5b7c0e0e-8a53-4c55-9d0e-2f1d7b2c7a11 --format header)
  check "the web cookie, untouched" 200 "\"X-User-Id\", \"$U\"" '"X-Auth-Provider", "web"' -- "${C[@]}" -H "$ck" "$B/analytics"
  answer=$(post_json "$B/api/auth/mobile/refresh" "{\"refresh_token\":\"$refresh\"}" "${C[@]}")
  expect_members "refresh instead of signing out on a 401: the same members" "$answer" 'sessionToken=*' 'refreshToken=*' expiresIn=900
  session=$(member "$answer" sessionToken)
  check "sign-out at last (/api/auth/mobile/logout)" 204 -- "${C[@]}" -X POST -H "Authorization: Bearer $session" "$B/api/auth/mobile/logout"
  check "the signed-out sessionToken" 401 '{"error": "The access token has been revoked"}' -- "${C[@]}" -H "Authorization: Bearer $session" "$B/api/visits"
  stop_gateway
}

# PaperBoxd with its Google sign-in at the edge: the app's find-or-create names the user (the
# lookup hook), so X-User-Id stays its Mongo id; two exchange paths.
paperboxd-sessions() {
  start_app paperboxd
  export NEXTAUTH_SECRET=paperboxd-local-nextauth-secret-0123456789ab GOOGLE_CLIENT_ID_WEB=893085484645-web.apps.googleusercontent.com
  export VERCEL_AUTOMATION_BYPASS_SECRET=local-bypass-secret-paperboxd-0123456789 PAPERBOXD_UPSTREAM_URL=http://127.0.0.1:$UPSTREAM_PORT
  export SESSION_SECRET=paperboxd-local-session-secret-0123456789ab SESSION_SIGNING_KEY=$W/paperboxd-session-es256.pem
  export LISTEN=127.0.0.1:$(free_port) LISTEN_HTTP=127.0.0.1:$(free_port)
  "$BIN" keys generate "$SESSION_SIGNING_KEY" > /dev/null
  with_sessions Config/examples/paperboxd.yaml "$W/paperboxd-sessions.yaml"
  local port=${LISTEN##*:}
  start_gateway "$W/paperboxd-sessions.yaml"
  local C=(--cacert "$TLS_CERT" --resolve "paperboxd.in:$port:127.0.0.1") B=https://paperboxd.in:$port G=110248495921238986420
  local ios=893085484645-7788sam2d7posge2bcild48duripv8h4.apps.googleusercontent.com uid answer token refresh old
  uid=$(lookup_id google $G)
  answer=$(post_json "$B/api/auth/google-mobile" "{\"idToken\":\"$(google_token "$ios" $G accounts.google.com)\"}" "${C[@]}")
  expect_members "Google sign-in at the edge: {token} as today, the user the app's find-or-create named" "$answer" 'token=*' 'refreshToken=*' \
    "user.id=$uid" user.username=user
  token=$(member "$answer" token); refresh=$(member "$answer" refreshToken)
  check "the API with the gateway's token: X-User-Id is the app's own id" 200 "\"X-User-Id\", \"$uid\"" '"X-Auth-Provider", "session"' \
    '"X-User-Name", "user"' '"X-User-Email", "user@example.com"' -- "${C[@]}" -H "Authorization: Bearer $token" "$B/api/me"
  answer=$(post_json "$B/api/mobile/v1/auth/google-mobile" "{\"idToken\":\"$(google_token "$ios" $G)\"}" "${C[@]}")
  expect_members "the same sign-in under the mobile API prefix: the same user" "$answer" 'token=*' "user.id=$uid"
  check "the lookup hook's path is the gateway's alone" 404 -- "${C[@]}" -X POST -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -d '{"provider":"google","subject":"x","email":"victim@example.com"}' "$B/api/internal/users/resolve"
  old=$(mint "$NEXTAUTH_SECRET" "{\"userId\":\"507f1f77bcf86cd799439011\",\"email\":\"user@example.com\",\"username\":\"user\",\"iat\":\"-2332800\",\"exp\":\"+259200\"}")
  check "a JWT the app issued before the move, on the API" 200 '"X-User-Id", "507f1f77bcf86cd799439011"' '"X-Auth-Provider", "app"' -- \
    "${C[@]}" -H "Authorization: Bearer $old" "$B/api/me"
  check "and on the app's own refresh route" 200 '"X-User-Id", "507f1f77bcf86cd799439011"' -- "${C[@]}" -X POST \
    -H 'Content-Type: application/json' -d "{\"token\":\"$old\"}" "$B/api/auth/refresh"
  answer=$(post_json "$B/api/auth/session/refresh" "{\"refresh_token\":\"$refresh\"}" "${C[@]}")
  expect_members "refresh at the edge" "$answer" 'token=*' 'refreshToken=*'
  stop_gateway
}

# golfai with its Google sign-in at the edge: its own members (is_new_user, user_profile from
# the lookup hook, asked over mutual TLS), refresh and logout at the same paths as today.
golfai-sessions() {
  local M=$W/mtls
  golfai_pki
  start_app golfai "$M/upstream.pem" "$M/upstream.key" "$M/client-ca.pem"
  export AUTH_SECRET_KEY=golfai-local-auth-secret-key-0123456789abcdef APPLE_BUNDLE_ID=com.golfswingai.app
  export GOLFAI_UPSTREAM_URL=https://127.0.0.1:$UPSTREAM_PORT GOLFAI_UPSTREAM_CA=$M/server-ca.pem
  export GATEWAY_CLIENT_CERT=$M/gateway-client.pem GATEWAY_CLIENT_KEY=$M/gateway-client.key
  export SESSION_SECRET=golfai-local-session-secret-0123456789abcdef SESSION_SIGNING_KEY=$W/golfai-session-es256.pem
  export LISTEN=127.0.0.1:$(free_port)
  "$BIN" keys generate "$SESSION_SIGNING_KEY" > /dev/null
  with_sessions Config/examples/golfai.yaml "$W/golfai-sessions.yaml"
  expect "check-config --probe: the lookup hook is reachable over mutual TLS" "$BIN" check-config --probe "$W/golfai-sessions.yaml"
  local port=${LISTEN##*:}
  start_gateway "$W/golfai-sessions.yaml"
  local C=(--cacert "$TLS_CERT" --resolve "api.golfai.example:$port:127.0.0.1") B=https://api.golfai.example:$port G=109876543210987654321
  local cid=565652533895-84ia5eudkma9ch65ciu5blm9pd8jtk8t.apps.googleusercontent.com uid answer access refresh old
  uid=$(lookup_id google $G)
  answer=$(post_json "$B/auth/signin/google" "{\"google_token\":\"$(google_token "$cid" $G)\",\"user_info\":{\"email\":\"golfer@gmail.com\"}}" "${C[@]}")
  expect_members "sign-in at the edge: golfai's members, a new user" "$answer" 'access_token=*' 'refresh_token=*' token_type=bearer \
    is_new_user=true "user_profile.id=$uid"
  access=$(member "$answer" access_token); refresh=$(member "$answer" refresh_token)
  answer=$(post_json "$B/auth/signin/google" "{\"google_token\":\"$(google_token "$cid" $G https://accounts.google.com)\"}" "${C[@]}")
  expect_members "signing in again: not a new user" "$answer" is_new_user=false "user_profile.id=$uid"
  check "the API with the gateway's access token" 200 "\"X-User-Id\", \"$uid\"" '"X-Auth-Provider", "session"' -- \
    "${C[@]}" -H "Authorization: Bearer $access" "$B/auth/profile"
  old=$(mint "$AUTH_SECRET_KEY" "{\"sub\":\"3f2b8c1e-7d4a-4b9e-9c1a-2e5f6a7b8c9d\",\"exp\":\"+7776000\"}")
  check "a refresh JWT the app issued before the move still reaches the app" 200 '!X-User-Id' "$old" -- "${C[@]}" -X POST \
    -H 'Content-Type: application/json' -d "{\"refresh_token\":\"$old\"}" "$B/auth/refresh"
  answer=$(post_json "$B/auth/refresh" "{\"refresh_token\":\"$refresh\"}" "${C[@]}")
  expect_members "the gateway's refresh token at the same path: a new pair" "$answer" 'access_token=*' 'refresh_token=*'
  access=$(member "$answer" access_token)
  check "the lookup hook's path is the gateway's alone" 404 -- "${C[@]}" -X POST -d '{}' "$B/auth/internal/users/resolve"
  check "logout at the edge" 200 'logged_out' -- "${C[@]}" -X POST -H "Authorization: Bearer $access" "$B/auth/logout"
  check "the logged-out access token" 401 '{"detail": "The access token has been revoked"}' -- "${C[@]}" -H "Authorization: Bearer $access" "$B/auth/profile"
  stop_gateway
}

# FolioMind with its sign-in moved to the edge (the file's sessions comment, followed literally).
foliomind-sessions() {
  start_app foliomind
  export FOLIOMIND_JWT_SECRET=foliomind-local-jwt-secret-0123456789abcdef FOLIOMIND_UPSTREAM_URL=http://127.0.0.1:$UPSTREAM_PORT
  export SESSION_SECRET=foliomind-local-session-secret-0123456789abcdef SESSION_SIGNING_KEY=$W/foliomind-session-es256.pem
  unset APPLE_BUNDLE_ID
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$SESSION_SIGNING_KEY" 2> /dev/null
  with_sessions Config/examples/foliomind.yaml "$W/foliomind-sessions.yaml"
  start_gateway "$W/foliomind-sessions.yaml"
  local B=http://$LISTEN A pair access refresh next acc U=001122.0f1e2d3c4b5a69788796a5b4c3d2e1f0.1234
  A=$(apple_token com.lz.studio.FolioMind $U)
  pair=$(curl -s -m 15 -X POST -H 'Content-Type: application/json' \
    -d "{\"identity_token\":\"$A\",\"device_id\":\"6F1A0C9E\",\"app_version\":\"1.0\"}" "$B/api/v1/auth/apple")
  access=$($PY -c 'import json,sys; print(json.load(sys.stdin).get("access_token", ""))' <<< "$pair" 2> /dev/null)
  refresh=$($PY -c 'import json,sys; print(json.load(sys.stdin).get("refresh_token", ""))' <<< "$pair" 2> /dev/null)
  if [ -n "$access" ] && [ -n "$refresh" ]; then passed "Sign in with Apple at the edge: a session pair"
  else failed "Sign in with Apple at the edge: wanted a session pair; got: $pair"; fi
  check "API with the gateway's access token" 200 "\"X-User-Id\", \"apple:$U\"" '"X-Auth-Provider", "session"' -- -X POST \
    -H "Authorization: Bearer $access" -H 'Content-Type: application/json' -d '{"ocr_text":"Receipt"}' "$B/api/v1/analyze"
  acc=$(mint "$FOLIOMIND_JWT_SECRET" '{"sub":"user_8f14e45f","type":"access","iat":"-0","exp":"+3600"}')
  check "API with the app's own access JWT, until it expires" 200 '"X-User-Id", "user_8f14e45f"' '"X-Auth-Provider", "app"' -- -X POST \
    -H "Authorization: Bearer $acc" -H 'Content-Type: application/json' -d '{}' "$B/api/v1/analyze"
  check "a refresh token the app issued before the move still goes to the app" 200 '!X-User-Id' 'refresh_abc123' -- -X POST \
    -H 'Content-Type: application/json' -d '{"refresh_token":"refresh_abc123"}' "$B/api/v1/auth/refresh"
  next=$(curl -s -m 15 -X POST -H 'Content-Type: application/json' -d "{\"refresh_token\":\"$refresh\"}" "$B/api/v1/auth/refresh")
  access=$($PY -c 'import json,sys; print(json.load(sys.stdin).get("access_token", ""))' <<< "$next" 2> /dev/null)
  if [ -n "$access" ]; then passed "refresh at the edge: a new pair"; else failed "refresh at the edge: got: $next"; fi
  check "the device list names the device_id the client sent" 200 '"current":true' '"device":"6F1A0C9E"' -- \
    -H "Authorization: Bearer $access" "$B/api/v1/auth/sessions"
  check "logout at the edge (200, as the app answered)" 200 'logged_out' -- -X POST -H "Authorization: Bearer $access" "$B/api/v1/auth/logout"
  check "the logged-out access token" 401 -- -X POST -H "Authorization: Bearer $access" -d '{}' "$B/api/v1/analyze"
  check "logout by a client from before the move (the app's own JWT)" 200 'logged_out' -- -X POST -H "Authorization: Bearer $acc" "$B/api/v1/auth/logout"
  check "that JWT afterwards" 401 -- -X POST -H "Authorization: Bearer $acc" -d '{}' "$B/api/v1/analyze"
  check "its refresh token" 400 'invalid_grant' -- -X POST -H 'Content-Type: application/json' -d "{\"refresh_token\":\"$refresh\"}" "$B/api/v1/auth/refresh"
  stop_gateway
}

# --- VCNotebook -------------------------------------------------------------------------------
vcnotebook() {
  start_app vcnotebook
  export FIREBASE_PROJECT_ID=vcnotebook-plus VCNOTEBOOK_UPSTREAM_URL=http://127.0.0.1:$UPSTREAM_PORT
  start_gateway Config/examples/vcnotebook.yaml
  local B=http://$LISTEN P=vcnotebook-plus fb anon
  fb=$(mint --rs256 "$W/keys-firebase/k1.key.pem" k1 "{\"name\":\"Dee\",\"iss\":\"https://securetoken.google.com/$P\",\"aud\":\"$P\",\"auth_time\":\"-60\",\"user_id\":\"kXy3PqR9sTu1VwZ2aB4cD6eF8gH0\",\"sub\":\"kXy3PqR9sTu1VwZ2aB4cD6eF8gH0\",\"iat\":\"-0\",\"exp\":\"+3600\",\"email\":\"dee@gmail.com\",\"email_verified\":true,\"firebase\":{\"identities\":{\"google.com\":[\"1122334455\"]},\"sign_in_provider\":\"google.com\"}}")
  check "checkout with a Firebase ID token (keys from a PEM certificate map)" 200 '"X-User-Id", "kXy3PqR9sTu1VwZ2aB4cD6eF8gH0"' \
    '"X-User-Email", "dee@gmail.com"' '"X-Sign-In-Provider", "google.com"' -- -X POST -H "Authorization: Bearer $fb" \
    -H 'Content-Type: application/json' -d '{"userId":"kXy3PqR9sTu1VwZ2aB4cD6eF8gH0"}' "$B/api/checkout/create"
  check "checkout as the clients call it today (userId, no token)" 401 '{"error": "No credentials"}' -- -X POST \
    -H 'Content-Type: application/json' -d '{"userId":"someone"}' "$B/api/checkout/create"
  anon=$(mint --rs256 "$W/keys-firebase/k1.key.pem" k1 "{\"iss\":\"https://securetoken.google.com/$P\",\"aud\":\"$P\",\"auth_time\":\"-60\",\"sub\":\"anonUid123\",\"iat\":\"-0\",\"exp\":\"+3600\",\"firebase\":{\"identities\":{},\"sign_in_provider\":\"anonymous\"}}")
  check "an anonymous Firebase user may not pay" 403 'error="insufficient_scope"' '{"error": "The access token lacks a required claim"}' -- -X POST -H "Authorization: Bearer $anon" -d '{}' "$B/api/checkout/create"
  check "a token of another Firebase project" 401 '{"error": "The access token issuer is not accepted"}' -- -H "Authorization: Bearer $(mint --rs256 "$W/keys-firebase/k1.key.pem" k1 \
    '{"iss":"https://securetoken.google.com/other","aud":"other","auth_time":"-60","sub":"u","iat":"-0","exp":"+3600"}')" "$B/api/user/subscription-status"
  check "public config stays public" 200 '!X-User-Id' -- "$B/api/config"
  stop_gateway
}

for app in "${APPS[@]}"; do
  case $app in
    rvu-tracker|paperboxd|golfai|foliomind|vcnotebook) echo "== $app (Config/examples/$app.yaml)"; ( "$app" ) ;;
    *-sessions) echo "== $app (Config/examples/${app%-sessions}.yaml, its sessions block on as its comment says)"; ( "$app" ) ;;
    *) echo "unknown app '$app' (rvu-tracker, paperboxd, golfai, foliomind, vcnotebook; rvu-tracker-sessions, paperboxd-sessions, golfai-sessions, foliomind-sessions)" >&2; exit 2 ;;
  esac
done
CHECKS=$(wc -l < "$RESULTS")
FAILED=$(grep -c FAIL "$RESULTS")
echo "== ${#APPS[@]} app(s), $CHECKS checks, $FAILED failed"
[ "$FAILED" = 0 ]
