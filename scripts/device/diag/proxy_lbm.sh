#!/usr/bin/env bash
# The host proxy's rate (the grid kernel's path to a neighbour it cannot reach from the GPU),
# with every link proxied on one GPU (HALOX_HOST_PROXY=1): halox-lbm on 2 processes under MPS
# at its default 64^3 lattice, 100 steps, multiphase and BGK, against staged and ipc-fused's
# direct stores in the same run, alternated twice. MLUPS per run; logs in OUTDIR.
#   scripts/device/diag/proxy_lbm.sh OUTDIR   (after check.sh built build/gpu)
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/diag/common.sh
out=${1:?usage: proxy_lbm.sh OUTDIR}
mkdir -p "$out"
start_mps
run() {  # NAME MODEL TRANSPORT ENV...
  local name=$1 model=$2 transport=$3
  shift 3
  env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 "$@" timeout 120 mpirun -n 2 --oversubscribe \
    --bind-to none "$lbm" --model "$model" --steps 100 --device gpu --transport "$transport" \
    > "$out/$name.txt" 2>&1
  printf "%-28s rc=%-3s %s\n" "$name" $? "$(grep -o '[0-9.]* MLUPS;' "$out/$name.txt" | head -1)"
}
for round in 1 2; do
  for model in multiphase bgk; do
    run "$model-staged-$round" "$model" staged
    run "$model-direct-$round" "$model" ipc-fused
    run "$model-proxied-$round" "$model" ipc-fused HALOX_HOST_PROXY=1
  done
done
stop_mps
