#!/usr/bin/env bash
# The host proxy's rate (the fused kernels' path to a neighbour they cannot reach from the
# GPU), with every link proxied on one GPU (HALOX_HOST_PROXY=1), 2 processes under MPS,
# against staged and ipc-fused's direct stores in the same run, alternated twice:
#  - grids: halox-lbm at its default 64^3 lattice, 100 steps, multiphase and BGK (MLUPS);
#  - particles: halox-bench halo --app md --quick (the halo rows: forward, reverse, pairs).
# Logs in OUTDIR.
#   scripts/device/diag/proxy_rate.sh OUTDIR   (after check.sh built build/gpu)
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/diag/common.sh
out=${1:?usage: proxy_rate.sh OUTDIR}
mkdir -p "$out"
start_mps
two() { env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 "$@"; }
lbm_run() {  # NAME MODEL TRANSPORT ENV...
  local name=$1 model=$2 transport=$3
  shift 3
  two "$@" timeout 120 mpirun -n 2 --oversubscribe --bind-to none "$lbm" --model "$model" \
    --steps 100 --device gpu --transport "$transport" > "$out/$name.txt" 2>&1
  printf "%-28s rc=%-3s %s\n" "$name" $? "$(grep -o '[0-9.]* MLUPS;' "$out/$name.txt" | head -1)"
}
md_run() {  # NAME TRANSPORTS ENV...
  local name=$1 transports=$2
  shift 2
  two "$@" timeout 120 mpirun -n 2 --oversubscribe --bind-to none "$bench" halo --app md \
    --device gpu --quick --transports "$transports" --json "$out/$name.json" > "$out/$name.txt" 2>&1
  echo "$name rc=$?"
  grep -E "^(staged|ipc)" "$out/$name.txt"
}
for round in 1 2; do
  for model in multiphase bgk; do
    lbm_run "$model-staged-$round" "$model" staged
    lbm_run "$model-direct-$round" "$model" ipc-fused
    lbm_run "$model-proxied-$round" "$model" ipc-fused HALOX_HOST_PROXY=1
  done
  md_run "md-staged-direct-$round" staged,ipc-fused
  md_run "md-proxied-$round" ipc-fused HALOX_HOST_PROXY=1
done
stop_mps
