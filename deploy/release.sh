#!/usr/bin/env bash
# Builds the release tarball: portcullis-<version>-linux-<arch>.tar.gz in .build/dist/, with
#   bin/portcullis         the release binary, Swift's runtime and Foundation linked in
#                          (--static-swift-stdlib): it needs only Debian 12's libssl3,
#                          libnghttp2-14, libhiredis0.14 and zlib1g (on every Debian already)
#   etc/                   Config/portcullis.yaml (the commented reference), demo.yaml, examples/
#   systemd/portcullis.service
#   README.md LICENSE CHANGELOG.md SECURITY.md
#   SHA256SUMS             of every file above
# and the tarball's own .sha256 beside it.
#
#   bash deploy/release.sh            # build it
#   bash deploy/release.sh --check    # build it, then unpack it into an empty folder and start it
#                                     # there with an empty environment (what the test suite runs)
#
# SOURCE_DATE_EPOCH (default: the commit's date) stamps the binary and the archive's file
# times, so one commit gives one tarball.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CHECK=0
[ "${1:-}" = "--check" ] && CHECK=1

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2> /dev/null || date +%s)}
swift build -c release --product portcullis --static-swift-stdlib
BIN=$(swift build -c release --product portcullis --static-swift-stdlib --show-bin-path)/portcullis
VERSION=$("$BIN" --version | awk 'NR == 1 { print $2 }')
ARCH=$(uname -m)
NAME=portcullis-$VERSION-linux-$ARCH
DIST=$ROOT/.build/dist
STAGE=$DIST/$NAME
rm -rf "$STAGE" "$DIST/$NAME.tar.gz" "$DIST/$NAME.tar.gz.sha256"
mkdir -p "$STAGE/bin" "$STAGE/etc" "$STAGE/systemd"
install -m 0755 "$BIN" "$STAGE/bin/portcullis"
strip --strip-debug "$STAGE/bin/portcullis" 2> /dev/null || true
cp Config/portcullis.yaml Config/demo.yaml "$STAGE/etc/"
cp -r Config/examples "$STAGE/etc/examples"
cp deploy/systemd/portcullis.service "$STAGE/systemd/"
cp README.md LICENSE CHANGELOG.md SECURITY.md "$STAGE/"
(cd "$STAGE" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" -C "$DIST" -czf "$DIST/$NAME.tar.gz" "$NAME"
(cd "$DIST" && sha256sum "$NAME.tar.gz" > "$NAME.tar.gz.sha256")
rm -rf "$STAGE"
echo "$DIST/$NAME.tar.gz"
[ $CHECK = 1 ] || exit 0

# --check: in an empty folder, as on a clean Debian 12 with only the three C libraries.
T=$(mktemp -d /tmp/portcullis-release.XXXXXX)
cleanup() { [ -n "${PID:-}" ] && kill "$PID" 2> /dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "release check: $*" >&2; exit 1; }
(cd "$DIST" && sha256sum -c --quiet "$NAME.tar.gz.sha256") || fail "the tarball's checksum does not match"
tar -xzf "$DIST/$NAME.tar.gz" -C "$T"
cd "$T/$NAME"
sha256sum -c --quiet SHA256SUMS || fail "SHA256SUMS does not match the files"
# No Swift runtime from the toolchain, nothing missing: only the system's C libraries.
deps=$(ldd bin/portcullis)
if grep -q "not found" <<< "$deps"; then fail "missing libraries:"$'\n'"$deps"; fi
if grep -qiE "swift|/opt/" <<< "$deps"; then fail "linked to the toolchain's libraries:"$'\n'"$deps"; fi
for lib in libssl.so.3 libcrypto.so.3 libnghttp2.so.14 libhiredis.so.0.14; do
  grep -q "$lib" <<< "$deps" || fail "not linked to $lib:"$'\n'"$deps"
done
# SwiftPM sets RUNPATH $ORIGIN (the binary's own folder, empty of libraries here); any other is a leak.
runpath=$(readelf -d bin/portcullis | grep -E "RUNPATH|RPATH" || true)
if [ -n "$runpath" ] && ! grep -q 'path: \[\$ORIGIN\]$' <<< "$runpath"; then fail "a RUNPATH outside the tarball: $runpath"; fi
E=(env -i PATH=/usr/bin:/bin HOME="$T")
"${E[@]}" bin/portcullis --version | grep -q "^portcullis $VERSION (commit " || fail "--version: $("${E[@]}" bin/portcullis --version 2>&1)"
"${E[@]}" bin/portcullis check-config etc/demo.yaml > /dev/null || fail "check-config etc/demo.yaml"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
admin=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$T/min.yaml" << YAML
listen: [{address: "127.0.0.1:$port"}]
admin: {address: "127.0.0.1:$admin"}
providers:
  - {name: app, type: hs256, secret: "release-check-secret-0123456789abcdef"}
upstreams:
  app: {url: "http://127.0.0.1:9"}
routes:
  - {path: /, upstream: app, auth: required}
YAML
"${E[@]}" bin/portcullis run --config "$T/min.yaml" > "$T/gateway.log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin/readyz")" = 200 ] && break
  sleep 0.1
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")" = 401 ] || fail "the unpacked gateway did not refuse a request without credentials: $(tail -5 "$T/gateway.log")"
token=$("${E[@]}" bin/portcullis mint --config "$T/min.yaml" --provider app --sub release-check)
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://127.0.0.1:$port/")" = 502 ] \
  || fail "a verified request was not forwarded (502 from the closed upstream port expected)"
kill -TERM "$PID"; wait "$PID" || fail "SIGTERM: exit $?"
PID=
echo "release check: $NAME.tar.gz unpacked into an empty folder, started with an empty environment: ok"
