#!/usr/bin/env bash
# Where a queued MD exchange's time goes, kernel by kernel (after check.sh built build/gpu):
# halox-bench halo traced with two processes on the one GPU under MPS (ipc-fused,
# nvshmem-fused), one process with one rank and one with 8 local ranks for comparison. The
# last case's trace ends with its queued exchanges, of one direction and then alternating;
# trace-summary --kernels shows for each pattern when each phase ended and the idle time
# between exchanges (ranks on one GPU share its clock).
#   scripts/device/diag/md_pair_trace.sh OUTDIR [ATOMS_PER_RANK]
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: md_pair_trace.sh OUTDIR [ATOMS_PER_RANK]}
atoms=${2:-2000}
mkdir -p "$out"
start_mps
run() {
  local np=$1 name=$2; shift 2
  echo "== $name"
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 120 mpirun -n "$np" --oversubscribe --bind-to none \
    $bench halo --app md --device gpu --atoms-per-rank "$atoms" --steps 50 \
    --trace "$out/trace-$name.json" --json "$out/halo-$name.json" "$@" 2>&1 | tail -3
  # halox-bench halo queues 100 exchanges of each direction, then 50 forward + reverse pairs.
  scripts/trace-summary "$out/trace-$name.json" --kernels 100 --skip 50 | sed -n '/^100 before/,$p'
  scripts/trace-summary "$out/trace-$name.json" --kernels 50 | sed -n '/^last/,$p'
}
run 2 np2-ipc-fused --transports ipc-fused
run 2 np2-nvshmem-fused --transports nvshmem-fused
run 1 np1-ipc-fused --transports ipc-fused
run 1 local8 --transports local-fused
stop_mps
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
