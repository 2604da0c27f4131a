#!/usr/bin/env bash
# The grid kernel's tile size (HALOX_GRID_TILE_WORDS), measured on halox-lbm with 8
# ranks in one process, 256^3, on the rank grids without (1x2x4, the default) and with
# (2x2x2) x faces: untraced MLUPS and the exchange's share, and the two exchange kernels'
# times under Nsight Compute (clocks left alone). After check.sh built build/gpu.
#   scripts/device/diag/lbm_tile_words.sh OUTDIR [WORDS ...]
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_tile_words.sh OUTDIR [WORDS ...]}
shift
sizes=${*:-1024 2048 4096}
mkdir -p "$out"
for ranks in 1x2x4 2x2x2; do
  for words in $sizes; do
    echo "== $ranks, HALOX_GRID_TILE_WORDS=$words"
    HALOX_GRID_TILE_WORDS=$words $lbm --grid 256x256x256 --ranks $ranks --transport local-fused \
      --comm datatype --steps 100 --device gpu --json "$out/lbm-$ranks-$words.json" 2>&1 |
      grep -E "MLUPS;"
    HALOX_GRID_TILE_WORDS=$words ncu --clock-control none --cache-control none \
      -k regex:grid_kernel --launch-skip 10 --launch-count 4 --csv \
      --metrics gpu__time_duration.sum,launch__grid_size $lbm --grid 256x256x256 --ranks $ranks \
      --transport local-fused --comm datatype --steps 8 --device gpu \
      > "$out/ncu-$ranks-$words.csv" 2> "$out/ncu-$ranks-$words.err"
    ncu_summary "$out/ncu-$ranks-$words.csv" | grep duration
  done
done
