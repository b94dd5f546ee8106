#!/usr/bin/env bash
# Installs what Portcullis needs on Debian 12 (run as root, or with sudo available):
# the C libraries it links, and the real peers its tests and benchmarks drive.
set -euo pipefail
packages=(pkg-config libssl-dev libnghttp2-dev libhiredis-dev zlib1g-dev python3 python3-venv python3-jwt python3-cryptography python3-h2 curl wrk redis-server nginx-light haproxy nghttp2-client openssl)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts these services on install; Portcullis' tests start their own on free loopback ports.
  for s in nginx haproxy redis-server; do $SUDO systemctl stop "$s" >/dev/null 2>&1 || $SUDO service "$s" stop >/dev/null 2>&1 || true; done
fi
