#!/usr/bin/env bash
# The local engine's fused grid kernel in halox-lbm (8 ranks in one process, 256^3), on the
# rank grids that do (2x2x2) and do not (1x2x4, the default) cut x: every kernel of a few
# steps timed by Nsight Compute (which runs them one at a time), then the exchange kernels'
# speed-of-light, memory and warp-stall sections (clocks left alone). HALOX_LBM_COMM
# (default datatype): the variant; overlap times its slab kernels alone (issue 29: on the
# trace the 2x2x2 shells, 19% of the cells, took 393 us by themselves, a quarter of the
# full-row rate; a slab kernel slow alone is the kernel's fault, one fast alone loses its
# time to the schedule). After check.sh built build/gpu.
#   scripts/device/diag/lbm_local_kernel.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_local_kernel.sh OUTDIR}
mkdir -p "$out"
comm=${HALOX_LBM_COMM:-datatype}
for ranks in 1x2x4 2x2x2; do
  # Kernels per step: datatype 8 updates and the exchange (launch-skip 72 and launch-count
  # 36: 8 steps skipped, 4 timed); overlap 8 inner updates, the exchange and each block's
  # shell slabs (6 on 2x2x2, 4 on 1x2x4): 10 steps skipped, 2 timed.
  skip=72 count=36
  if [ "$comm" = overlap ]; then
    per_step=$([ "$ranks" = 2x2x2 ] && echo 57 || echo 41)
    skip=$((10 * per_step)) count=$((2 * per_step))
  fi
  echo "== $ranks, $comm: every kernel of a few steps"
  ncu --clock-control none --cache-control none --launch-skip $skip --launch-count $count --csv \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,launch__grid_size,launch__block_size \
    $lbm --grid 256x256x256 --ranks $ranks --transport local-fused \
    --comm "$comm" --steps 14 --device gpu > "$out/ncu-$ranks.csv" 2> "$out/ncu-$ranks.err"
  ncu_summary "$out/ncu-$ranks.csv"
  echo "== $ranks: the exchange kernels in detail"
  ncu --clock-control none --cache-control none -k regex:grid_kernel --launch-skip 20 \
    --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats \
    $lbm --grid 256x256x256 --ranks $ranks --transport local-fused --comm "$comm" --steps 14 \
    --device gpu > "$out/ncu-detail-$ranks.txt" 2>&1
  grep -vE "^==PROF==|^ +-+ " "$out/ncu-detail-$ranks.txt" | grep -E "grid_kernel|Duration|Throughput|Stall|Warp Cycles|Achieved|Registers|Hit Rate|Mem Busy|Max Bandwidth|Waves|Theoretical Occ|Block Limit|Issued" | head -80
done
for ranks in 1x2x4 2x2x2; do
  echo "== $ranks, $comm: 100 steps, untraced"
  $lbm --grid 256x256x256 --ranks $ranks --transport local-fused --comm "$comm" --steps 100 \
    --device gpu --json "$out/lbm-local8-$ranks.json" 2>&1 | grep -E "MLUPS;|alone"
done
