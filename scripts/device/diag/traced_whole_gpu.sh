#!/usr/bin/env bash
# A mended bug's reproduction: halox-lbm traced (HALOX_TRACE=1) through ipc-fused on 2 processes
# under MPS without an MPS thread percentage timed out on its second exchange with the per-op
# grid kernel, whose every block had to be resident (H200, 2026-12-03; docs/gpu-initiated.md).
# The one grid kernel (tile tickets) needs one resident block per process, and every case here
# passes. Prints rc and the first time-out of each case; HALOX_GRID_BLOCKS counts the launch's
# blocks; the last case runs the library alone traced (test_halo's grid tests).
#   scripts/device/diag/traced_whole_gpu.sh OUTDIR   (builds halox-lbm into build/gpu)
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/diag/common.sh
out=${1:?usage: traced_whole_gpu.sh OUTDIR}
mkdir -p "$out"
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_ENABLE_CUDA=ON \
  -DHALOX_WARNINGS_AS_ERRORS=OFF > "$out/configure.log" 2>&1 &&
  cmake --build build/gpu -j "$(nproc)" --target halox-lbm test_halo > "$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; exit 1; }
start_mps
case_run() {  # NAME ENV...
  local name=$1
  shift
  env "$@" timeout 20 mpirun -n 2 --oversubscribe --bind-to none "$lbm" --grid 24x20x18 \
    --ranks 2x1x1 --init spinodal --steps 100 --device gpu --transport ipc-fused \
    > "$out/$name.txt" 2>&1
  printf "%-20s rc=%-3s %s\n" "$name" $? "$(grep -o -e 'timed out.*waiting for rank [01] ([a-z ]*' \
    -e 'HALOX_GRID_BLOCKS=.*' "$out/$name.txt" | head -1)"
  sleep 2  # MPS refuses new clients for a moment after an aborted one
}
case_run traced HALOX_TRACE=1
# HALOX_GRID_BLOCKS above what fits is refused with the fit in the message: the sizing's count.
case_run traced-fit HALOX_TRACE=1 HALOX_GRID_BLOCKS=999
case_run untraced-fit HALOX_GRID_BLOCKS=999
# Where it starts to fail: 4 ops x 33 blocks is the H200's 132 SMs.
for b in 32 33 34 40; do case_run traced-b$b HALOX_TRACE=1 HALOX_GRID_BLOCKS=$b; done
case_run untraced
# The library alone (no halox-lbm spans on the stream): test_halo's grid tests, traced.
HALOX_TRACE=1 HALOX_TEST_TRANSPORT=ipc-fused timeout 40 mpirun -n 2 --oversubscribe --bind-to none \
  build/gpu/tests/mpi/test_halo --gtest_filter='GridHalo.*' > "$out/test_halo-traced.txt" 2>&1
printf "%-20s rc=%-3s %s\n" test_halo-traced $? "$(grep -m1 -o 'timed out.*waiting for rank [01] ([a-z ]*' "$out/test_halo-traced.txt")"
stop_mps
