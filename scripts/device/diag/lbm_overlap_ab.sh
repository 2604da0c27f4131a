#!/usr/bin/env bash
# A change of halox-lbm's overlap variant, A/B in one run (after check.sh built build/gpu from
# the change): the baseline is a whole earlier tree in a carried, git-ignored folder
# (`git archive <sha> | tar -x -C .ab-base`), its halox-lbm built into /tmp/halox-base.
# Baseline and change alternated twice, each time the multiphase 128x256x256 lattice (200
# steps) on one rank (the reference), on 8 local ranks (overlap, local-fused) and on 2
# processes under MPS (overlap, ipc-fused), each at halox-lbm's default rank grid. Prints
# per run MLUPS and % of the one-rank run of the same round; JSON per run in OUTDIR.
#   scripts/device/diag/lbm_overlap_ab.sh OUTDIR [BASELINE_FOLDER]
# HALOX_LBM_MODELS (default multiphase; "multiphase bgk" runs both, BGK on 256^3),
# HALOX_LBM_AB_ROUNDS (default 2), HALOX_LBM_AB_PROCS=0 (skips the 2-process runs, for a change
# of the 8-rank path alone).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_overlap_ab.sh OUTDIR [BASELINE_FOLDER]}
tree=${2:-.ab-base}
mkdir -p "$out"
build_baseline "$tree" "$out" halox-lbm || exit 1
base=/tmp/halox-base
models=${HALOX_LBM_MODELS:-multiphase}
start_mps
rounds=${HALOX_LBM_AB_ROUNDS:-2}
for round in $(seq "$rounds"); do
  for model in $models; do
    grid=$([ "$model" = multiphase ] && echo 128x256x256 || echo 256x256x256)
    for variant in base change; do
      exe=$([ $variant = base ] && echo "$base/build/apps/lbm/halox-lbm" || echo "$lbm")
      args=(--model "$model" --grid "$grid" --steps 200 --device gpu)
      name=$model-$variant-$round
      # One process without MPS (its streams would share the server's hardware queues).
      stop_mps
      timeout 120 "$exe" "${args[@]}" --json "$out/r1-$name.json" > "$out/r1-$name.txt" 2>&1
      timeout 120 "$exe" "${args[@]}" --rank-count 8 --comm overlap --transport local-fused \
        --json "$out/r8-$name.json" > "$out/r8-$name.txt" 2>&1
      start_mps
      [ "${HALOX_LBM_AB_PROCS:-1}" = 0 ] && continue
      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 120 mpirun -n 2 --oversubscribe --bind-to none \
        "$exe" "${args[@]}" --comm overlap --transport ipc-fused \
        --json "$out/np2-$name.json" > "$out/np2-$name.txt" 2>&1
    done
  done
done
stop_mps
python3 - "$out" "$rounds" $models <<'PY'
import json, sys, os
out, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def mlups(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))["mlups"]
    except Exception as e:
        if not name.startswith("np2") or os.path.exists(os.path.join(out, name + ".txt")):
            print(f"{name}: {e}")
        return None
print(f"{'model':11s} {'round':6s} {'build':7s} {'1 rank':>9s} {'8 ranks':>9s} {'%':>6s} {'2 procs':>9s} {'%':>6s}")
for model in models:
    for rnd in range(1, rounds + 1):
        for v in ("base", "change"):
            r1, r8, np2 = (mlups(f"{k}-{model}-{v}-{rnd}") for k in ("r1", "r8", "np2"))
            pct = lambda x: f"{100 * x / r1:6.1f}" if x and r1 else "     -"
            fmt = lambda x: f"{x:9.0f}" if x else "        -"
            print(f"{model:11s} {rnd:<6d} {v:7s} {fmt(r1)} {fmt(r8)} {pct(r8)} {fmt(np2)} {pct(np2)}")
PY
