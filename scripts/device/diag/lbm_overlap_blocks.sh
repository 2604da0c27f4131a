#!/usr/bin/env bash
# Issue 29's hypothesis for the overlap variant's loss: the local grid kernel, launched over
# every block the GPU holds, takes the SMs the inner update beside it needs (its blocks spin
# on the faces they forward). halox-lbm, 8 ranks in one process, 256^3 (multiphase: half in
# x), local-fused: one rank for reference, datatype, then overlap with the exchange kernel
# capped at each HALOX_LOCAL_BLOCKS; MLUPS, the share of one rank's, the exchange's share.
# After check.sh built build/gpu. HALOX_LBM_GRID (default 256x256x256), HALOX_LBM_DEVICE
# (default gpu; cpu for a smoke test of the script with a small grid), HALOX_LBM (the
# halox-lbm to run), HALOX_LBM_MULTIPHASE (more arguments of the multiphase runs, e.g.
# "--radius 3" for a small grid).
#   scripts/device/diag/lbm_overlap_blocks.sh OUTDIR [BLOCKS ...]
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_overlap_blocks.sh OUTDIR [BLOCKS ...]}
shift
caps=${*:-66 132 264 528}
mkdir -p "$out"
lbm=${HALOX_LBM:-$lbm}
device=${HALOX_LBM_DEVICE:-gpu}
read -r gx gy gz <<< "$(echo "${HALOX_LBM_GRID:-256x256x256}" | tr x ' ')"
mlups() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["mlups"])' "$1"; }
for model in bgk multiphase; do
  grid=${gx}x${gy}x${gz}
  extra=()
  if [ "$model" = multiphase ]; then
    grid=$((gx / 2))x${gy}x${gz}
    read -r -a extra <<< "${HALOX_LBM_MULTIPHASE:-}"
  fi
  run() {  # name ENV args... (ENV: VAR=value, or "" for none)
    local name=$1 setting=$2; shift 2
    env ${setting:+"$setting"} "$lbm" "$@" "${extra[@]}" --model "$model" --grid "$grid" --steps 200 --device "$device" \
      --json "$out/$model-$name.json" > "$out/$model-$name.txt" 2>&1
  }
  run one "" --ranks 1x1x1
  run datatype "" --ranks 2x2x2 --transport local-fused --comm datatype
  run overlap "" --ranks 2x2x2 --transport local-fused --comm overlap
  for cap in $caps; do
    run "overlap-$cap" HALOX_LOCAL_BLOCKS="$cap" --ranks 2x2x2 --transport local-fused \
      --comm overlap
  done
  one=$(mlups "$out/$model-one.json")
  for f in "$out/$model"-*.json; do
    name=$(basename "$f" .json)
    python3 - "$f" "$one" "$name" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); one = float(sys.argv[2])
# overlap runs are timed as one span: no exchange share of their own
share = (f", exchange {100 * j['exchange_seconds'] / j['seconds']:.1f}% of the step"
         if j["variant"] == "datatype" and j["seconds"] > 0 else "")
print(f"{sys.argv[3]:28s} {j['mlups']:10.1f} MLUPS {100 * j['mlups'] / one:6.1f}% of one rank{share}")
PY
  done
done
