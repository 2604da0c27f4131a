#!/usr/bin/env bash
# f and g of the multiphase LBM as two fields of one exchange call (--fg-exchange fields, the
# default) against one exchange each (separate), alternated twice, after
# check.sh built build/gpu: 2 processes on the one GPU (ipc-fused, nvshmem-fused; MPS) and
# 8 ranks in one process (local-fused).
#   scripts/device/diag/lbm_fields.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_fields.sh OUTDIR}
mkdir -p "$out"
start_mps
for round in 1 2; do
  for fg in fields separate; do
    for transport in ipc-fused nvshmem-fused; do
      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 90 mpirun -n 2 --oversubscribe --bind-to none \
        $lbm --grid 256x128x128 --ranks 2x1x1 --steps 200 --device gpu --comm datatype \
        --transport $transport --fg-exchange $fg --json "$out/mp2-$transport-$fg-$round.json" 2>&1 |
        grep -E "MLUPS;" | sed "s/^/round $round, 2 processes, $transport, $fg: /"
    done
    timeout 90 $lbm --grid 256x256x256 --ranks 2x2x2 --steps 100 --device gpu --comm datatype \
      --transport local-fused --fg-exchange $fg --json "$out/mp8-$fg-$round.json" 2>&1 |
      grep -E "MLUPS;" | sed "s/^/round $round, 8 local ranks, local-fused, $fg: /"
  done
done
stop_mps
