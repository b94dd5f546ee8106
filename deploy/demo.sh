#!/usr/bin/env bash
# Builds Portcullis and runs `portcullis demo`: the gateway on 127.0.0.1:8080 with
# embedded defaults, in front of three demo apps (visits, notes, books).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
swift build -c release --product portcullis
exec .build/release/portcullis demo
