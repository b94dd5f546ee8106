#!/bin/sh
# Instructions per revocation check, counted by callgrind (steady on this shared
# VM, unlike wall-clock time). Links CheckDriver.swift against the release
# objects of PortcullisStore and its dependencies, runs it under callgrind with
# 0 and N checks collected only inside `runChecks`, and prints (Ir(N) - Ir(0)) / N,
# for allowed checks (jti + session + subject, all misses) and for a revoked jti.
#
#   PORTCULLIS_BENCHMARKS=1 swift build -c release --product StoreBenchmarks   # builds the objects
#   Benchmarks/StoreBenchmarks/Profile/callgrind-check.sh [N]                  # default N = 100000
#   callgrind_annotate /tmp/portcullis-check/cg.allowed.N.out                         # where the time goes
set -eu
cd "$(dirname "$0")/../../.."
N=${1:-100000}
OUT=/tmp/portcullis-check
mkdir -p $OUT
R=.build/release
# The objects of PortcullisStore and what it links (swift-atomics' object names hold spaces,
# quoted in the list: eval reads the quotes).
eval "set -- $(grep -E '/(Portcullis(Store|Redis|IO|Core|TLS)|CPortcullisSystem|Atomics|_AtomicsShims)\.build/' \
    $R/StoreBenchmarks.product/Objects.LinkFileList | tr '\n' ' ')"
swiftc -O -module-name CheckDriver Benchmarks/StoreBenchmarks/Profile/CheckDriver.swift \
    -I $R/Modules -Xcc -fmodule-map-file=$R/CPortcullisSystem.build/module.modulemap \
    -Xcc -fmodule-map-file=Sources/CHiredis/module.modulemap -Xcc -fmodule-map-file=Sources/COpenSSL/module.modulemap \
    -Xcc -fmodule-map-file=.build/checkouts/swift-atomics/Sources/_AtomicsShims/include/module.modulemap \
    "$@" -lhiredis -lssl -lcrypto -o $OUT/CheckDriver 2>&1 | grep -v warning || true
# valgrind 3.19 cannot read the DWARF 5 that swiftc emits: drop debug info, keep symbols.
objcopy --strip-debug $OUT/CheckDriver
ir() { callgrind_annotate $OUT/cg.$1.out 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'; }
for mode in allowed revoked; do
    for n in 0 $N; do
        valgrind --tool=callgrind --toggle-collect='*runChecks*' --callgrind-out-file=$OUT/cg.$mode.$n.out \
            $OUT/CheckDriver $n $mode > $OUT/cg.$mode.$n.log 2>&1
    done
    a=$(ir $mode.0); b=$(ir $mode.$N)
    echo "$mode: Ir inside runChecks: 0 checks $a, $N checks $b → $(( (b - a) / N )) instructions per check"
done
