#!/usr/bin/env bash
# A change to the GPU-initiated particle exchange, A/B in one run (after check.sh built
# build/gpu from the change): the baseline is this tree with the files under .ab/ (or the
# folder named second, .ab-something) put back (the same paths; carry it), built into
# /tmp/halox-base-<folder>. halox-bench halo, baseline and change alternated twice, for two
# processes on the one GPU under MPS (ipc-fused, nvshmem-fused) and 8 ranks in one process
# (local). HALOX_AB_LBM=1 adds the grid kernel's figure: the 2-process multiphase LBM step
# (ipc-fused, nvshmem-fused), baseline and change alternated twice.
#   scripts/device/diag/particle_ab.sh OUTDIR [BASELINE_FOLDER]
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: particle_ab.sh OUTDIR [BASELINE_FOLDER]}
files=${2:-.ab}
mkdir -p "$out"
[ -d "$files" ] || { echo "particle_ab.sh: no $files folder with the baseline's files"; exit 1; }
base=/tmp/halox-base-$(basename "$files")
rm -rf "$base" && mkdir -p "$base"
tar --exclude=./build --exclude=./.git --exclude='./.ab*' -cf - . | tar -xf - -C "$base"
cp -r "$files/." "$base/"
cmake -S "$base" -B "$base/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_ENABLE_CUDA=ON \
  -DHALOX_WARNINGS_AS_ERRORS=OFF > "$out/base-configure.log" 2>&1 &&
  cmake --build "$base/build" -j "$(nproc)" --target halox-bench \
    $([ "${HALOX_AB_LBM:-0}" = 1 ] && echo halox-lbm) > "$out/base-build.log" 2>&1 ||
  { echo "baseline build FAILED"; tail -20 "$out/base-build.log"; exit 1; }
start_mps
for round in 1 2; do
  for variant in base change; do
    b=$([ $variant = base ] && echo "$base/build/bench/halox-bench" || echo "$bench")
    echo "== round $round, $variant"
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 120 mpirun -n 2 --oversubscribe --bind-to none \
      $b halo --app md --device gpu --quick --transports ipc-fused,nvshmem-fused \
      --json "$out/np2-$variant-$round.json" 2>&1 | halo_columns
    timeout 120 mpirun -n 1 --bind-to none $b halo --app md --device gpu --quick \
      --transports local-fused --json "$out/local8-$variant-$round.json" 2>&1 | halo_columns
  done
done
if [ "${HALOX_AB_LBM:-0}" = 1 ]; then
  for round in 1 2; do
    for variant in base change; do
      l=$([ $variant = base ] && echo "$base/build/apps/lbm/halox-lbm" || echo "$lbm")
      for transport in ipc-fused nvshmem-fused; do
        echo "== lbm round $round, $variant, $transport"
        CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 90 mpirun -n 2 --oversubscribe --bind-to none \
          $l --grid 256x128x128 --ranks 2x1x1 --device gpu --steps 200 --comm datatype \
          --transport $transport --json "$out/lbm-$transport-$variant-$round.json" 2>&1 |
          grep -E "MLUPS;|exchange"
      done
    done
  done
fi
stop_mps
