#!/usr/bin/env bash
# Issue 29: where the overlap variant's time goes. halox-lbm, 8 ranks in one process,
# local-fused, datatype and overlap, traced (--trace: the exchange kernel's records and the
# update kernels' stream spans); prints the last traced step as a timeline: per span name
# (over the ranks) and per exchange (its kernel's first and last record), begin and end in
# us from the step's first event. After check.sh built build/gpu. HALOX_LBM_GRID (default
# 256x256x256; multiphase: half in x), HALOX_LBM_DEVICE (gpu; cpu for a smoke test with a
# small grid), HALOX_LBM, HALOX_LBM_MULTIPHASE (as lbm_overlap_blocks.sh).
#   scripts/device/diag/lbm_overlap_trace.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_overlap_trace.sh OUTDIR}
mkdir -p "$out"
lbm=${HALOX_LBM:-$lbm}
device=${HALOX_LBM_DEVICE:-gpu}
read -r gx gy gz <<< "$(echo "${HALOX_LBM_GRID:-256x256x256}" | tr x ' ')"
for model in bgk multiphase; do
  grid=${gx}x${gy}x${gz}
  extra=()
  if [ "$model" = multiphase ]; then
    grid=$((gx / 2))x${gy}x${gz}
    read -r -a extra <<< "${HALOX_LBM_MULTIPHASE:-}"
  fi
  for comm in datatype overlap; do
    name=$model-$comm
    "$lbm" --model "$model" --grid "$grid" --steps 40 --device "$device" --ranks 2x2x2 \
      --transport local-fused --comm "$comm" "${extra[@]}" --trace "$out/$name.trace.json" \
      --json "$out/$name.json" > "$out/$name.txt" 2>&1 || { echo "$name failed"; tail -5 "$out/$name.txt"; continue; }
    echo "== $name: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["mlups"])' "$out/$name.json") MLUPS (traced)"
    python3 - "$out/$name.trace.json" <<'PY'
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev
          if e.get("ph") == "M" and e["name"] == "thread_name"}
groups = collections.defaultdict(list)  # (label, counter) -> [(begin, end, rank)]
for e in ev:
    if e.get("ph") != "X": continue
    track = tracks.get((e["pid"], e["tid"]), "")
    if not track.startswith("gpu "): continue
    a = e.get("args", {})
    label = ("exchange " + a.get("object", "")) if ("grid op" in track or "pulse" in track) else e["name"]
    groups[(label, a.get("exchange", -1))].append((e["ts"], e["ts"] + e["dur"], e["pid"]))
rows = sorted(((min(b for b, _, _ in v), max(x for _, x, _ in v), k[0], len({r for _, _, r in v}))
               for k, v in groups.items()))
# The last step: from the last exchange of the first exchange object seen.
firsts = [r for r in rows if r[2].startswith("exchange")]
if not firsts: print("no exchange records"); sys.exit()
first_obj = firsts[0][2]
starts = [r[0] for r in rows if r[2] == first_obj]
t0 = starts[-2] if len(starts) > 1 else starts[-1]
t0 = min([r[0] for r in rows if r[1] > t0 and r[0] < t0] + [t0])
print(f"{'span':24s} {'ranks':>5s} {'begin us':>9s} {'end us':>9s} {'length':>8s}")
for b, x, label, ranks in rows:
    if x < t0: continue
    print(f"{label:24s} {ranks:5d} {b - t0:9.1f} {x - t0:9.1f} {x - b:8.1f}")
PY
  done
done
