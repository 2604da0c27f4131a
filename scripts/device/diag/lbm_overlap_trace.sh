#!/usr/bin/env bash
# Issue 29: where the overlap variant's time goes. halox-lbm, 8 ranks in one process,
# local-fused: datatype and overlap on the rank grids 2x2x2, 1x2x4 and 1x1x8 (x split or
# not: the overlap's shell of x slabs, a sector wide, or only whole rows), MLUPS against one
# rank's; then runs traced (--trace: the updates' and exchanges' stream spans), the last
# steps as a timeline (scripts/trace-summary --spans). After check.sh built build/gpu. Runs
# without MPS (check.sh stops it).
# HALOX_LBM_GRID (default 256x256x256; multiphase: half in x), HALOX_LBM_DEVICE (gpu; cpu for
# a smoke test with a small grid), HALOX_LBM (the halox-lbm to run), HALOX_LBM_MULTIPHASE
# (more arguments of the multiphase runs, e.g. "--radius 3" for a small grid),
# HALOX_LBM_RANKS (the rank grids), HALOX_LBM_TRACED (the traced runs, BGK's by default,
# e.g. "overlap-2x2x2", "overlap-conn32-2x2x2", "multiphase:overlap-1x2x4"),
# HALOX_LBM_BLOCKS (overlap runs more with the exchange kernel capped at each of these
# HALOX_GRID_BLOCKS, e.g. "66 132 264 528"; none by default), HALOX_LBM_CONNECTIONS (datatype and overlap runs more with each of these
# CUDA_DEVICE_MAX_CONNECTIONS, e.g. 32: the hardware queues the 16 streams of 8 blocks map
# onto, 8 by default, so that a main stream's exchange or shells may wait behind another
# block's inner update in a shared queue; none by default).
#   scripts/device/diag/lbm_overlap_trace.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_overlap_trace.sh OUTDIR}
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
  run() {  # name args... (the case's knobs from its name: -blocksN, -connN)
    local name=$1 knobs=()
    shift
    [[ "$name" =~ -blocks([0-9]+) ]] && knobs+=("HALOX_GRID_BLOCKS=${BASH_REMATCH[1]}")
    [[ "$name" =~ -conn([0-9]+) ]] && knobs+=("CUDA_DEVICE_MAX_CONNECTIONS=${BASH_REMATCH[1]}")
    env "${knobs[@]}" "$lbm" --model "$model" --grid "$grid" --device "$device" "${extra[@]}" "$@" \
      --json "$out/$model-$name.json" > "$out/$model-$name.txt" 2>&1 ||
      { echo "$model-$name failed"; tail -5 "$out/$model-$name.txt"; return 1; }
  }
  run one --ranks 1x1x1 --steps 200 || continue
  one=$(mlups "$out/$model-one.json")
  for ranks in ${HALOX_LBM_RANKS:-2x2x2 1x2x4 1x1x8}; do
    cases=(datatype overlap)
    for cap in ${HALOX_LBM_BLOCKS:-}; do cases+=("overlap-blocks$cap"); done
    for n in ${HALOX_LBM_CONNECTIONS:-}; do cases+=("datatype-conn$n" "overlap-conn$n"); done
    for case in "${cases[@]}"; do
      run "$case-$ranks" --ranks "$ranks" --transport local-fused --comm "${case%%-*}" \
        --steps 200 || continue
      python3 - "$out/$model-$case-$ranks.json" "$one" "$model $case $ranks" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); one = float(sys.argv[2])
share = (f", exchange {100 * j['exchange_seconds'] / j['seconds']:.1f}% of the step"
         if j["variant"] == "datatype" and j["seconds"] > 0 else "")
print(f"{sys.argv[3]:32s} {j['mlups']:10.1f} MLUPS {100 * j['mlups'] / one:6.1f}% of one rank ({one:.1f}){share}")
PY
    done
  done
  for traced in ${HALOX_LBM_TRACED:-datatype-2x2x2 overlap-2x2x2 overlap-1x2x4}; do
    # "multiphase:overlap-1x2x4" traces the multiphase model; a name alone, BGK.
    if [[ "$traced" == *:* ]]; then
      [ "${traced%%:*}" = "$model" ] || continue
      traced=${traced#*:}
    else
      [ "$model" = bgk ] || continue
    fi
    ranks=${traced##*-}
    run "$traced-traced" --ranks "$ranks" --transport local-fused --comm "${traced%%-*}" --steps 40 \
      --trace "$out/$model-$traced.trace.json" || continue
    echo "== $model $traced, traced: $(mlups "$out/$model-$traced-traced.json") MLUPS; the last steps:"
    scripts/trace-summary "$out/$model-$traced.trace.json" --spans 3 | sed -n '/stream spans/,$p'
  done
done
