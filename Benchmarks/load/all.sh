#!/usr/bin/env bash
# One command for the rows of issue #37, each beside its anchors, in one run:
#   http1  run.sh          plain HTTP/1.1 keep-alive          nginx, HAProxy
#   https  run.sh --tls    HTTPS keep-alive, HTTP/1.1         nginx, HAProxy
#   h2     h2.sh           h2 over TLS, h2c                   h2o, nginx, HAProxy
#                          h2 + RS256 Bearer (one token)      HAProxy passing the same header through
#   tls    tls.sh          full and resumed handshakes/s      h2o, nginx, HAProxy
#   auth   auth.sh         RS256 Bearer over HTTP/1.1,        HAProxy jwt_verify
#                          1 token and 10,000 tokens
# Each script runs in turn with its own servers and anchors (and, with --baseline, rows
# for another portcullis binary, interleaved); each one's full output is kept, and at
# the end one Markdown table puts every row beside its best anchor of the same run, with
# the targets of #37. Exits non-zero only when a script could not measure (a missed
# target is a result, not a failure). Every script is bounded and additionally stopped
# by `timeout`; everything started is killed on exit (also on Ctrl-C). See README.md.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: Benchmarks/load/all.sh [options]
  --baseline BIN          rows for another portcullis binary (e.g. main's build) in every script
  --rounds N              rounds per script (default: each script's own, 3)
  --duration S            seconds per measured run (default: each script's own, 10; tls.sh 8)
  --warmup S              unmeasured run per row (run.sh, h2.sh, auth.sh; default 2; 0 = none)
  --only SECTION[,...]    http1, https, h2, tls, auth (default all, in that order)
  --keep DIR              keep each script's output, its summary and its work directory in DIR
Environment: PORTCULLIS_BIN (default .build/release/portcullis).
Exit status: 0 when every script measured every row, 3 when some script did not
(the summary is printed all the same), 2 on a usage error.
USAGE
}

SECTIONS="http1,https,h2,tls,auth"
ONLY="$SECTIONS"; BASELINE_BIN=""; ROUNDS=""; DURATION=""; WARMUP=""; KEEP=""
INVOCATION="$0 $*"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --baseline) BASELINE_BIN="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --keep) KEEP="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for n in "$ROUNDS" "$DURATION" "$WARMUP"; do
    [[ -z "$n" || "$n" =~ ^[0-9]+$ ]] || { echo "error: '$n' is not a whole number" >&2; exit 2; }
done
[[ -z "$ROUNDS" || "$ROUNDS" -ge 1 ]] && [[ -z "$DURATION" || "$DURATION" -ge 1 ]] \
    || { echo "error: rounds and duration must be >= 1" >&2; exit 2; }
for s in ${ONLY//,/ }; do
    [[ ",$SECTIONS," == *",$s,"* ]] || { echo "error: unknown section '$s' in --only (sections: $SECTIONS)" >&2; exit 2; }
done
[[ -z "$BASELINE_BIN" || -x "$BASELINE_BIN" ]] || { echo "error: --baseline $BASELINE_BIN is not an executable" >&2; exit 2; }
[[ -z "$BASELINE_BIN" ]] || BASELINE_BIN="$(realpath "$BASELINE_BIN")"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../.." && pwd)"
export PORTCULLIS_BIN="${PORTCULLIS_BIN:-$REPO_ROOT/.build/release/portcullis}"
if [[ ! -x "$PORTCULLIS_BIN" ]]; then
    echo "error: $PORTCULLIS_BIN not found; build it with:" >&2
    echo "  cd $REPO_ROOT && swift build -c release --product portcullis" >&2
    exit 1
fi

if [[ -n "$KEEP" ]]; then
    OUT="$(realpath -m "$KEEP")"; mkdir -p "$OUT"
else
    OUT="$(mktemp -d /tmp/portcullis-all.XXXXXX)"
fi

# The script running now (its `timeout`, which passes a signal on to the script's whole
# process group) and the tail that shows its progress.
CHILD=""; TAIL=""
cleanup() {
    local rc=$?
    if [[ -n "$CHILD" ]]; then
        kill -TERM "$CHILD" 2>/dev/null || true
        wait "$CHILD" 2>/dev/null || true
    fi
    if [[ -n "$TAIL" ]]; then kill -TERM "$TAIL" 2>/dev/null || true; wait "$TAIL" 2>/dev/null || true; fi
    [[ -n "$KEEP" ]] || rm -rf "$OUT"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Hard stop per script, far above what it needs (the largest, h2.sh, has up to 13 rows):
# 300 s + 16 x (rounds x (duration + 10) + warm-up + 10), with the scripts' defaults.
LIMIT=$(( 300 + 16 * (${ROUNDS:-3} * (${DURATION:-10} + 10) + ${WARMUP:-2} + 10) ))

COMMON=()
[[ -n "$ROUNDS" ]] && COMMON+=(--rounds "$ROUNDS")
[[ -n "$DURATION" ]] && COMMON+=(--duration "$DURATION")
[[ -n "$BASELINE_BIN" ]] && COMMON+=(--baseline "$BASELINE_BIN")
WARM=(); [[ -n "$WARMUP" ]] && WARM=(--warmup "$WARMUP")

# section_command SECTION -> the script and its arguments, one per line
section_command() {
    case "$1" in
        http1) printf '%s\n' "$HERE/run.sh" --only nginx,haproxy,portcullis "${WARM[@]}" ;;
        https) printf '%s\n' "$HERE/run.sh" --tls --only nginx,haproxy,portcullis "${WARM[@]}" ;;
        h2)    printf '%s\n' "$HERE/h2.sh" "${WARM[@]}" ;;
        tls)   printf '%s\n' "$HERE/tls.sh" ;;
        auth)  printf '%s\n' "$HERE/auth.sh" --only haproxy1,haproxyN,portcullis1,portcullisN "${WARM[@]}" ;;
    esac
}

echo "# Portcullis against its anchors (issue #37)"
echo
echo "- invocation: \`$INVOCATION\`"
echo "- portcullis: $PORTCULLIS_BIN (binary built $(date -u -r "$PORTCULLIS_BIN" +%Y-%m-%dT%H:%MZ); repo HEAD now $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$( [[ -n "$(git -C "$REPO_ROOT" status --porcelain -- Sources Package.swift 2>/dev/null)" ]] && echo ', working tree has uncommitted Sources changes'))"
[[ -n "$BASELINE_BIN" ]] && echo "- portcullis baseline: $BASELINE_BIN (binary built $(date -u -r "$BASELINE_BIN" +%Y-%m-%dT%H:%MZ))"
echo "- machine: nproc=$(nproc), kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "- each script is stopped after ${LIMIT} s at the latest"
[[ -n "$KEEP" ]] && echo "- outputs kept in $OUT"
echo

declare -A RC
RAN=()
for sec in ${SECTIONS//,/ }; do
    [[ ",$ONLY," == *",$sec,"* ]] || continue
    mapfile -t cmd < <(section_command "$sec")
    cmd+=("${COMMON[@]}" --summary "$OUT/$sec.summary.jsonl")
    [[ -n "$KEEP" ]] && cmd+=(--keep "$OUT/$sec")
    : > "$OUT/$sec.summary.jsonl"; : > "$OUT/$sec.err"
    echo "== $sec: ${cmd[*]#$HERE/}" >&2
    timeout -k 30 "$LIMIT" "${cmd[@]}" > "$OUT/$sec.md" 2> "$OUT/$sec.err" &
    CHILD=$!
    tail -n +1 --pid="$CHILD" -f "$OUT/$sec.err" >&2 &
    TAIL=$!
    rc=0; wait "$CHILD" || rc=$?
    CHILD=""
    wait "$TAIL" 2>/dev/null || true; TAIL=""
    RC[$sec]=$rc; RAN+=("$sec=$rc")
    echo "## $sec: \`${cmd[*]#$HERE/}\`"
    echo
    if (( rc == 124 || rc == 137 )); then
        echo "(stopped after ${LIMIT} s)"
    elif (( rc != 0 )); then
        echo "(exited $rc; its stderr ends with:)"
        echo
        tail -5 "$OUT/$sec.err" | sed 's/^/    /'
    fi
    cat "$OUT/$sec.md"
    echo
done

echo "# Summary"
echo
python3 "$HERE/harness.py" alltable "$OUT" "${RAN[@]}" ${BASELINE_BIN:+--baseline}
echo
failed=0
for item in "${RAN[@]}"; do
    sec="${item%%=*}"
    if (( RC[$sec] != 0 )); then
        failed=1
        echo "- $sec: the script exited ${RC[$sec]}$( (( RC[$sec] == 124 || RC[$sec] == 137 )) && echo " (stopped after ${LIMIT} s)"); see its output above"
    fi
done
[[ -n "$KEEP" ]] && echo "- each script's output: $OUT/SECTION.md (progress and errors: SECTION.err), its rows as JSON lines: SECTION.summary.jsonl, its work directory: SECTION/"
(( failed == 0 )) || exit 3
exit 0
