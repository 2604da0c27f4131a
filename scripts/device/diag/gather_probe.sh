#!/usr/bin/env bash
# Builds gather_probe.cu against build/gpu (after check.sh built it) and runs it twice, then
# once under Nsight Compute (duration, DRAM and L2 traffic, grid, registers per kernel).
#   scripts/device/diag/gather_probe.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: gather_probe.sh OUTDIR}
mkdir -p "$out"
build_probe scripts/device/diag/gather_probe.cu /tmp/gather_probe || exit 1
for r in 1 2; do timeout 120 /tmp/gather_probe | tee "$out/probe-$r.txt"; done
timeout 200 ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,launch__registers_per_thread,launch__grid_size \
  /tmp/gather_probe profile > "$out/ncu.csv" 2> "$out/ncu.err" && ncu_summary "$out/ncu.csv"
