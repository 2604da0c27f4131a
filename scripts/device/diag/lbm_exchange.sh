#!/usr/bin/env bash
# Where the 2-process multiphase LBM step goes (after check.sh built build/gpu): two ranks
# on one GPU under MPS, 128^3 cells each, the GPU-initiated grid transports with and without
# overlap; f and g moved by one exchange or one each (also 8 ranks in one process); and one
# traced run (ipc-fused) whose device events show each exchange's phases.
#   scripts/device/diag/lbm_exchange.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_exchange.sh OUTDIR}
mkdir -p "$out"
start_mps
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
# f and g moved by one exchange (the default) against one each, A/B/A/B in one run.
for transport in ipc-fused nvshmem-fused staged; do
  for fg in fields separate fields separate; do
    echo "== multiphase, datatype, $transport, --fg-exchange $fg"
    run --steps 400 --comm datatype --transport $transport --fg-exchange $fg \
      --json "$out/lbm-fg-$fg-$transport.json" 2>&1 | grep -E "MLUPS;|exchange"
  done
done
for fg in fields separate fields separate; do
  echo "== multiphase, 8 ranks in one process, local-fused, --fg-exchange $fg"
  timeout 90 mpirun -n 1 --bind-to none $lbm --grid 256x256x256 --ranks 2x2x2 --device gpu \
    --transport local-fused --comm datatype --steps 100 --fg-exchange $fg \
    --json "$out/lbm-fg-$fg-local8.json" 2>&1 | grep -E "MLUPS;|exchange"
done
echo "== traced: multiphase, datatype, ipc-fused, 20 steps"
run --steps 20 --comm datatype --transport ipc-fused --trace "$out/trace-lbm-ipc-fused.json" 2>&1 \
  | grep -E "MLUPS;"
scripts/trace-summary "$out/trace-lbm-ipc-fused.json"
stop_mps
