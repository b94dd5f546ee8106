#!/usr/bin/env bash
# Chaos harness wrapper: runs Benchmarks/chaos/chaos.py against a Portcullis binary that is already built.
#   bash Benchmarks/chaos/run.sh [--binary PATH] [--seconds N] [--seed S] [--soak] [any other chaos.py flag]
#   bash Benchmarks/chaos/run.sh --state [--binary PATH] [--seconds N] [--seed S] [--topology redis|sentinel|cluster]
#     (the state checker, state.py: acknowledged revocations, logouts and sign-outs kept on every instance)
# Default binary: .build/release/portcullis (or $PORTCULLIS_BIN). Builds nothing. Exit status: chaos.py's
# (0 all checks passed, 1 a check failed, 2 setup error, 3 watchdog, 130 interrupted).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
binary="${PORTCULLIS_BIN:-$root/.build/release/portcullis}"
python=/usr/bin/python3
args=()
script=chaos.py

while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary="${2:?--binary needs a path}"; shift 2 ;;
        --binary=*) binary="${1#--binary=}"; shift ;;
        --state) script=state.py; shift ;;
        -h|--help) exec "$python" "$here/$script" --help ;;
        *) args+=("$1"); shift ;;
    esac
done

if [ ! -x "$python" ]; then
    echo "run.sh: $python is missing (Debian's python3 with python3-h2 and python3-cryptography)" >&2
    exit 2
fi
if ! "$python" -c 'import h2, cryptography, jwt' 2>/dev/null; then
    echo "run.sh: $python lacks h2, cryptography or jwt: apt-get install python3-h2 python3-cryptography python3-jwt" >&2
    exit 2
fi
if [ "$script" = state.py ] && ! command -v redis-server >/dev/null; then
    echo "run.sh: the state checker needs redis-server (apt-get install redis-server)" >&2
    exit 2
fi
if ! command -v openssl >/dev/null; then
    echo "run.sh: openssl is missing (apt-get install openssl)" >&2
    exit 2
fi
if [ ! -x "$binary" ]; then
    echo "run.sh: no gateway binary at $binary" >&2
    echo "run.sh: build it first (swift build -c release --product portcullis) or pass --binary PATH" >&2
    exit 2
fi

exec "$python" "$here/$script" --binary "$binary" ${args[@]+"${args[@]}"}
