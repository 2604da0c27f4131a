#!/usr/bin/env bash
# Where a queued exchange's time goes (after check.sh built build/gpu): the fused kernels'
# own GPU time (Nsight Compute, clocks left alone) for the 8-rank local engine, and an empty
# kernel's, to set against the queued exchange and launch that halox-bench times.
#   scripts/device/diag/launch_gap.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: launch_gap.sh OUTDIR}
mkdir -p "$out"
# --clock-control none: never lock the GPU's clocks; --cache-control none: the kernels run
# on warm caches, as when queued. One run per kernel, past the warm-up launches.
local8="halo-local --ranks 2x2x2 --in-launch direct --kernels all_pulses"
for k in empty_kernel:1000 forward_kernel:500 reverse_kernel:500; do
  ncu --clock-control none --cache-control none -k "regex:${k%%:*}" --launch-skip ${k##*:} -c 20 \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread --csv \
    $bench $local8 > "$out/ncu-${k%%:*}.csv" 2> "$out/ncu-${k%%:*}.err"
done
ncu_summary "$out"/ncu-*.csv
