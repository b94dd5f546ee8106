#!/bin/sh
# Builds RedisDriver.swift against the release objects (as linked into
# StoreBenchmarks) and runs it against a redis-server on a free 127.0.0.1 port,
# with redis-benchmark (-c 1, -P 1 and -P 16) on the same server in the same run;
# with "perf", also context switches, syscalls and CPU per GET (perf stat, strace -c).
#
#   PORTCULLIS_BENCHMARKS=1 swift build -c release --product StoreBenchmarks
#   Benchmarks/StoreBenchmarks/Profile/redis-profile.sh [rounds] [perf]
#
# COMPARE=/path/to/another/RedisDriver (e.g. one built from an earlier commit)
# runs it interleaved with this one, labelled "other", so both see the same noise.
set -eu
cd "$(dirname "$0")/../../.."
ROUNDS=${1:-20000}
OUT=/tmp/portcullis-redis
mkdir -p $OUT
R=.build/release
swiftc -O -module-name RedisDriver Benchmarks/StoreBenchmarks/Profile/RedisDriver.swift \
    -I $R/Modules -Xcc -fmodule-map-file=$R/CPortcullisSystem.build/module.modulemap \
    -Xcc -fmodule-map-file=Sources/CHiredis/module.modulemap \
    $(grep -E '/(Portcullis(Store|Redis|IO|Core)|CPortcullisSystem)\.build/' $R/StoreBenchmarks.product/Objects.LinkFileList) \
    -lhiredis -o $OUT/RedisDriver 2>&1 | grep -v warning || true
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port $PORT --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --pidfile $OUT/redis.pid --logfile $OUT/redis.log --dir $OUT
trap 'kill $(cat $OUT/redis.pid)' EXIT
sleep 0.3
DRIVERS="this=$OUT/RedisDriver${COMPARE:+ other=$COMPARE}"
rb() { timeout 60 redis-benchmark -p $PORT -c 1 -P $1 -t get -n $2 -q | tr '\r' '\n' | grep "requests per second"; }
for mode in thread loop thread16 loop16; do
    for d in $DRIVERS; do echo "${d%%=*} $(timeout 60 ${d#*=} 127.0.0.1:$PORT $mode $ROUNDS)"; done
done
echo "redis-benchmark -c 1 -P 1:  $(rb 1 $ROUNDS)"
echo "redis-benchmark -c 1 -P 16: $(rb 16 $((ROUNDS * 16)))"
if [ "${2:-}" = perf ]; then
    for mode in thread loop thread16 loop16; do
        n=$ROUNDS; case $mode in *16) n=$((ROUNDS * 16));; esac
        for d in $DRIVERS; do
            timeout 120 perf stat -e context-switches,task-clock -x, -o $OUT/perf.txt ${d#*=} 127.0.0.1:$PORT $mode $ROUNDS > /dev/null
            timeout 120 strace -f -c -o $OUT/strace.${d%%=*}.$mode.txt ${d#*=} 127.0.0.1:$PORT $mode $ROUNDS > /dev/null
            cs=$(awk -F, '/context-switches/ { print $1 }' $OUT/perf.txt)
            cpu=$(awk -F, '/task-clock/ { print $1 }' $OUT/perf.txt)
            sc=$(awk '/ total$/ { print $4 }' $OUT/strace.${d%%=*}.$mode.txt)
            send=$(awk '/ sendto$/ { print $4 }' $OUT/strace.${d%%=*}.$mode.txt)
            echo "${d%%=*} $mode: per GET $(echo "scale=2; $cs / $n" | bc) context switches, $(echo "scale=2; $sc / $n" | bc) syscalls ($(echo "scale=2; ${send:-0} / $n" | bc) sendto), $(echo "scale=1; $cpu * 1000 / $n" | bc) µs CPU"
        done
    done
    timeout 120 perf stat -e context-switches,task-clock -x, -o $OUT/perf.txt redis-benchmark -p $PORT -c 1 -P 1 -t get -n $ROUNDS -q > /dev/null
    echo "redis-benchmark -c 1 -P 1: per GET $(awk -F, -v n=$ROUNDS '/context-switches/ { printf "%.2f", $1 / n }' $OUT/perf.txt) context switches, $(awk -F, -v n=$ROUNDS '/task-clock/ { printf "%.1f", $1 * 1000 / n }' $OUT/perf.txt) µs CPU"
fi
