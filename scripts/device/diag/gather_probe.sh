#!/usr/bin/env bash
# Builds gather_probe.cu against build/gpu (after check.sh built it) and runs it twice, then
# once under Nsight Compute (duration, DRAM and L2 traffic, grid, registers per kernel).
#   scripts/device/diag/gather_probe.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: gather_probe.sh OUTDIR}
mkdir -p "$out"
b=build/gpu
nvcc -O3 -std=c++20 -arch=sm_90 -Iinclude -I$b/include -c scripts/device/diag/gather_probe.cu -o /tmp/gather_probe.o || exit 1
link=$(cd $b && ninja -t commands bench/halox-tune | tail -1)
link=${link//bench\/CMakeFiles\/halox-tune.dir\/halox_tune.cpp.o//tmp/gather_probe.o}
link=${link//-o bench\/halox-tune/-o /tmp/gather_probe}
(cd $b && eval "$link") || exit 1
for r in 1 2; do timeout 120 /tmp/gather_probe | tee "$out/probe-$r.txt"; done
timeout 200 ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,launch__registers_per_thread,launch__grid_size \
  /tmp/gather_probe profile > "$out/ncu.csv" 2> "$out/ncu.err" && ncu_summary "$out/ncu.csv"
