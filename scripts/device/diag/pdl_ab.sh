#!/usr/bin/env bash
# Programmatic dependent launch of the fused particle kernels, A/B in one run (after
# check.sh built build/gpu): halox-bench halo with HALOX_PDL=0 (plain launches) and 1,
# alternated twice, for two processes on the one GPU under MPS (ipc-fused, nvshmem-fused)
# and 8 ranks in one process, then halo-local; then the grid kernels through halox-lbm.
#   scripts/device/diag/pdl_ab.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: pdl_ab.sh OUTDIR}
mkdir -p "$out"
start_mps
for round in 1 2; do
  for pdl in 0 1; do
    echo "== round $round, HALOX_PDL=$pdl"
    HALOX_PDL=$pdl CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 120 mpirun -n 2 --oversubscribe \
      --bind-to none -x HALOX_PDL $bench halo --app md --device gpu --quick \
      --transports ipc-fused,nvshmem-fused --json "$out/np2-pdl$pdl-$round.json" 2>&1 | halo_columns
    HALOX_PDL=$pdl timeout 120 mpirun -n 1 --bind-to none -x HALOX_PDL $bench halo --app md \
      --device gpu --quick --transports local-fused --json "$out/local8-pdl$pdl-$round.json" 2>&1 | halo_columns
  done
done
for pdl in 0 1; do
  echo "== halo-local, HALOX_PDL=$pdl"
  HALOX_PDL=$pdl $bench halo-local --ranks 2x2x2 --json "$out/halo-local-pdl$pdl.json" 2>&1 \
    | grep -E "all_pulses"
done
# The grid kernels: the multiphase LBM, 8 ranks in one process (local-fused) and two
# processes (ipc-fused), 128^3 cells per rank, A/B/A/B.
for round in 1 2; do
  for pdl in 0 1; do
    echo "== LBM round $round, HALOX_PDL=$pdl"
    HALOX_PDL=$pdl $lbm --grid 256x256x256 --ranks 2x2x2 --transport local-fused --comm datatype \
      --steps 100 --device gpu --json "$out/lbm-local8-pdl$pdl-$round.json" 2>&1 | grep -E "MLUPS;"
    HALOX_PDL=$pdl CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 60 mpirun -n 2 --oversubscribe \
      --bind-to none -x HALOX_PDL $lbm --grid 256x128x128 --ranks 2x1x1 --steps 200 --device gpu \
      --comm datatype --transport ipc-fused --json "$out/lbm-np2-pdl$pdl-$round.json" 2>&1 \
      | grep -E "MLUPS;"
  done
done
stop_mps
