#!/usr/bin/env bash
# Runs `portcullis demo` with its embedded defaults (the text of Config/demo.yaml): the gateway on 127.0.0.1:8080 in front of three
# demo apps (visits, notes, books) and a local key host, and walks through what it does.
# Builds the release binary only when it is missing or older than the sources. The walkthrough
# is printed here; the gateway's own log and its access log go to .build/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bin=.build/release/portcullis
if [[ ! -x "$bin" ]] || [[ -n "$(find Sources Package.swift -newer "$bin" -print -quit)" ]]; then
    swift build -c release --product portcullis
fi
mkdir -p .build/demo
log="$PWD/.build/demo/gateway.log"
access="$PWD/.build/demo/access.log"
echo "gateway log: $log"
echo "access log:  $access"
echo
PORTCULLIS_DEMO_ACCESS_LOG="$access" exec "$bin" demo 2>>"$log"   # the embedded defaults: the text of Config/demo.yaml
