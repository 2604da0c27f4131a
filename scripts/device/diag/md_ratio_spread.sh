#!/usr/bin/env bash
# How much the 2-process MD exchange's ratio to one empty launch moves from run to run (after
# check.sh built build/gpu): halox-bench halo --app md --quick, ipc-fused and nvshmem-fused, two
# processes on the one GPU under MPS, RUNS times (default 6); then the least and most of each
# ratio over all runs (q/l: one direction queued; p/l: forward + reverse alternating).
#   scripts/device/diag/md_ratio_spread.sh OUTDIR [RUNS]
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: md_ratio_spread.sh OUTDIR [RUNS]}
runs=${2:-6}
mkdir -p "$out"
start_mps
for run in $(seq "$runs"); do
  echo "== run $run of $runs"
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 120 mpirun -n 2 --oversubscribe --bind-to none \
    $bench halo --app md --device gpu --quick --transports ipc-fused,nvshmem-fused \
    --json "$out/np2-$run.json" 2>&1 | halo_columns | tee -a "$out/columns.txt"
done
stop_mps
echo "== spread over $runs runs (least / most)"
awk '{ key = $1 " " $2
       for (i = 3; i < NF; i += 2) if ($i == "queued" || $i == "launch" || $i == "q/l" ||
                                       $i == "pairs" || $i == "p/l") {
         name = key " " $i; v = $(i + 1)
         if (!(name in lo) || v < lo[name]) lo[name] = v
         if (!(name in hi) || v > hi[name]) hi[name] = v }
     }
     END { for (n in lo) printf "%-32s %6.2f %6.2f\n", n, lo[n], hi[n] }' "$out/columns.txt" | sort
