#!/usr/bin/env bash
# Where the 2-process multiphase LBM step goes (after check.sh built build/gpu): two ranks
# on one GPU under MPS, 128^3 cells each, the GPU-initiated grid transports with and without
# overlap, and one traced run (ipc-fused) whose device events show each exchange's phases.
#   scripts/device/diag/lbm_exchange.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: lbm_exchange.sh OUTDIR}
mkdir -p "$out"
lbm=build/gpu/apps/lbm/halox-lbm
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/halox-mps CUDA_MPS_LOG_DIRECTORY=/tmp/halox-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
run() {
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 90 mpirun -n 2 --oversubscribe --bind-to none \
    $lbm --grid 256x128x128 --ranks 2x1x1 --device gpu "$@"
}
for v in "datatype ipc-fused" "overlap ipc-fused" "datatype nvshmem-fused" \
         "overlap nvshmem-fused" "datatype staged" "overlap staged"; do
  set -- $v
  echo "== multiphase, --comm $1 --transport $2"
  run --steps 200 --comm $1 --transport $2 --json "$out/lbm-$1-$2.json" 2>&1 \
    | grep -E "MLUPS;|exchange|bound"
done
# The fused grid kernel's blocks per op: 128 (the default) against 32.
for blocks in default 32 default 32; do
  echo "== multiphase, datatype, ipc-fused, blocks per op: $blocks"
  if [ $blocks = default ]; then unset HALOX_GRID_BLOCKS; else export HALOX_GRID_BLOCKS=$blocks; fi
  run --steps 400 --comm datatype --transport ipc-fused 2>&1 | grep -E "MLUPS;"
done
unset HALOX_GRID_BLOCKS
echo "== traced: multiphase, datatype, ipc-fused, 20 steps"
run --steps 20 --comm datatype --transport ipc-fused --trace "$out/trace-lbm-ipc-fused.json" 2>&1 \
  | grep -E "MLUPS;"
scripts/trace-summary "$out/trace-lbm-ipc-fused.json"
echo quit | nvidia-cuda-mps-control
