#!/usr/bin/env bash
# Issue 29: the overlap variant's shell updates alone. On the trace (lbm_overlap_trace.sh)
# the 2x2x2 shells, 19% of the cells in slabs, took 393 us when they ran by themselves, about
# a quarter of the full-row rate. Nsight Compute serialises kernels, so each slab kernel is
# timed alone here: every kernel of two overlap steps, 8 ranks in one process, 256^3 BGK,
# on 2x2x2 (x slabs a sector wide) and 1x2x4 (whole rows only), per kernel and grid size
# (the slabs differ in it): time, DRAM bytes and throughput, block size. Per cell, a slab
# kernel that is slow alone is the kernel's fault; one that is fast alone loses its time to
# the schedule. After check.sh built build/gpu.
#   scripts/device/diag/lbm_shell_kernels.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_shell_kernels.sh OUTDIR}
mkdir -p "$out"
for ranks in 2x2x2 1x2x4; do
  # Per step: 8 inner updates, the exchange, 8 blocks' shells (6 slabs each on 2x2x2, 4 on
  # 1x2x4): skip 10 steps, take 2.
  per_step=$([ "$ranks" = 2x2x2 ] && echo 57 || echo 41)
  echo "== $ranks overlap: every kernel of two steps (Nsight Compute, one at a time)"
  ncu --clock-control none --cache-control none --launch-skip $((10 * per_step)) \
    --launch-count $((2 * per_step)) --csv \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,launch__grid_size,launch__block_size \
    "$lbm" --model bgk --grid 256x256x256 --ranks "$ranks" --transport local-fused \
    --comm overlap --steps 14 --device gpu > "$out/ncu-$ranks.csv" 2> "$out/ncu-$ranks.err"
  ncu_summary "$out/ncu-$ranks.csv"
done
