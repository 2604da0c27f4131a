#!/usr/bin/env bash
# Issue 29: the GPU pack kernels' grid cap (HALOX_PACK_WAVES, waves of the blocks the GPU
# holds at once; 4 by default) against the naive one-thread-per-element kernel of the same
# run, alternated twice: the sorted 1M gather lost to it with 4 waves while the naive kernel
# runs one wave of threads that loop. Per cap: every gather and halo-sized x face, its time,
# the naive kernel's and their ratio, its multiple of the floor. After check.sh built build/gpu.
#   scripts/device/diag/pack_waves.sh OUTDIR
# HALOX_PACK_WAVES_LIST (default "1 2 4 8").
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: pack_waves.sh OUTDIR}
mkdir -p "$out"
for round in 1 2; do
  for waves in ${HALOX_PACK_WAVES_LIST:-1 2 4 8}; do
    HALOX_PACK_WAVES=$waves timeout 200 $bench pack --device gpu --json "$out/pack-w$waves-$round.json" \
      > "$out/pack-w$waves-$round.txt" 2>&1 || { echo "waves $waves failed: $(tail -2 "$out/pack-w$waves-$round.txt")"; continue; }
  done
done
python3 - "$out" ${HALOX_PACK_WAVES_LIST:-1 2 4 8} <<'PY'
import json, os, sys
out, waves = sys.argv[1], sys.argv[2:]
def rows(w, r):
    try:
        j = json.load(open(os.path.join(out, f"pack-w{w}-{r}.json")))
    except (OSError, ValueError):
        return {}
    return {x["shape"]: x for x in j["rows"]}
runs = {w: [rows(w, r) for r in (1, 2)] for w in waves}
first = next((t[0] for t in runs.values() if t[0]), {})
shapes = [s for s, x in first.items() if x["kind"] == "gather" or
          (x["family"] == "halo" and ("x-face" in s or x["kind"] == "d3q19"))]
print(f"{'shape':40s} " + " ".join(f"{'w' + w + ' us':>9s} {'/naive':>7s} {'x floor':>7s}" for w in waves))
for s in shapes:
    cells = []
    for w in waves:
        got = [t[s] for t in runs[w] if s in t]
        if not got:
            cells.append(f"{'-':>9s} {'-':>7s} {'-':>7s}"); continue
        best = min(got, key=lambda x: x["time_us"])
        naive = min(x["naive_us"] for x in got)
        ratio = f"{best['time_us'] / naive:7.3f}" if naive > 0 else f"{'-':>7s}"
        cells.append(f"{best['time_us']:9.2f} {ratio} {best['x_floor']:7.2f}")
    print(f"{s:40s} " + " ".join(cells))
PY
