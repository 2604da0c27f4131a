#!/usr/bin/env bash
# Builds proxy_roundtrip.cpp against a build tree (default build/gpu, after check.sh built it)
# and runs it on 2 ranks twice: the host proxy's round trip against MPI_Sendrecv, no GPU.
#   scripts/device/diag/proxy_roundtrip.sh OUTDIR [BUILD]
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: proxy_roundtrip.sh OUTDIR [BUILD]}
b=${2:-build/gpu}
mkdir -p "$out"
mpicxx -O2 -std=c++20 -Iinclude -I$b/include -c scripts/device/diag/proxy_roundtrip.cpp \
  -o /tmp/proxy_roundtrip.o || exit 1
link=$(cd $b && ninja -t commands bench/halox-tune | tail -1)
link=${link//bench\/CMakeFiles\/halox-tune.dir\/halox_tune.cpp.o//tmp/proxy_roundtrip.o}
link=${link//-o bench\/halox-tune/-o /tmp/proxy_roundtrip}
(cd $b && eval "$link") || exit 1
for r in 1 2; do
  timeout 120 mpirun -n 2 --oversubscribe --bind-to none /tmp/proxy_roundtrip | tee "$out/proxy-roundtrip-$r.txt"
done
