#!/usr/bin/env bash
# Builds face_words.cpp against build/gpu (after check.sh built it) and runs it on 2 ranks (MPS).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
b=build/gpu
c++ -std=c++20 -O2 -Iinclude -I$b/include -I/usr/local/cuda/include $(mpicxx --showme:compile) -c scripts/device/diag/face_words.cpp -o /tmp/facediag.o || exit 1
link=$(cd $b && ninja -t commands bench/halox-tune | tail -1)
link=${link//bench\/CMakeFiles\/halox-tune.dir\/halox_tune.cpp.o//tmp/facediag.o}
link=${link//-o bench\/halox-tune/-o /tmp/facediag}
(cd $b && eval "$link") || exit 1
start_mps
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 120 mpirun -n 2 --oversubscribe --bind-to none /tmp/facediag
stop_mps
