#!/usr/bin/env bash
# Where the multiphase LBM's exchange time goes (after check.sh built build/gpu): Nsight
# Compute on the fused local grid kernel (8 ranks in one process, 128^3 each; clocks left
# alone) beside the update kernels, and a traced 2-process run (2x1x1: x faces only) whose
# exchanges trace-summary --kernels breaks into phases; then the rank grids that do and do
# not split x, untraced.
#   scripts/device/diag/lbm_faces.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_faces.sh OUTDIR}
mkdir -p "$out"
# Every kernel of two steps past the warm-up: per step 8 phi passes, 8 updates and two
# exchange kernels (f+g, then phi; told apart by their grid sizes).
ncu --clock-control none --cache-control none --launch-skip 72 --launch-count 36 --csv \
  --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread \
  $lbm --grid 256x256x256 --ranks 2x2x2 --transport local-fused --comm datatype --steps 20 \
  --device gpu > "$out/ncu-lbm-local8.csv" 2> "$out/ncu-lbm-local8.err"
ncu_summary "$out/ncu-lbm-local8.csv"
start_mps
for ranks in 2x1x1 1x1x2; do
  grid=$([ $ranks = 2x1x1 ] && echo 256x128x128 || echo 128x128x256)
  echo "== 2 processes, $ranks, ipc-fused, traced"
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 90 mpirun -n 2 --oversubscribe --bind-to none \
    $lbm --grid $grid --ranks $ranks --steps 100 --device gpu --comm datatype \
    --transport ipc-fused --trace "$out/trace-lbm-$ranks.json" 2>&1 | grep -E "MLUPS;|alone"
  scripts/trace-summary "$out/trace-lbm-$ranks.json" --kernels 40 | sed -n '/^last/,$p'
done
# Which axes are split: the same cells per rank on rank grids that do and do not cut x
# (halox-lbm's default, grid_rank_dims, avoids x faces), untraced.
for v in "2x2x2:256x256x256" "1x2x4:256x256x256"; do
  echo "== 8 ranks in one process, local-fused, --ranks ${v%%:*}"
  $lbm --grid ${v##*:} --ranks ${v%%:*} --transport local-fused --comm datatype --steps 100 \
    --device gpu --json "$out/lbm-local8-${v%%:*}.json" 2>&1 | grep -E "MLUPS;|alone"
done
for v in "2x1x1:256x128x128" "1x1x2:128x128x256"; do
  echo "== 2 processes, ipc-fused, --ranks ${v%%:*}"
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 90 mpirun -n 2 --oversubscribe --bind-to none \
    $lbm --grid ${v##*:} --ranks ${v%%:*} --steps 200 --device gpu --comm datatype \
    --transport ipc-fused --json "$out/lbm-np2-${v%%:*}.json" 2>&1 | grep -E "MLUPS;|alone"
done
stop_mps
