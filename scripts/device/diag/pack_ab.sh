#!/usr/bin/env bash
# A change of the GPU pack's host path or kernels, A/B in one run (after check.sh built
# build/gpu from the change): the baseline is a whole earlier tree in a carried, git-ignored
# folder (`git archive <sha> | tar -x -C .ab-pack`), built into /tmp/halox-base. The quick
# `halox-bench pack --device gpu` (halo-sized faces, the D3Q19 subset, 65,536 and 1M gathers
# beside the naive kernel of the same run; HALOX_PACK_AB_FULL=1: every shape, the
# bandwidth-sized ones too), baseline and change alternated HALOX_PACK_AB_ROUNDS times (3),
# outside MPS.
#   scripts/device/diag/pack_ab.sh OUTDIR [BASELINE_FOLDER]
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: pack_ab.sh OUTDIR [BASELINE_FOLDER]}
tree=${2:-.ab-pack}
mkdir -p "$out"
build_baseline "$tree" "$out" halox-bench || exit 1
base=/tmp/halox-base
for round in $(seq "${HALOX_PACK_AB_ROUNDS:-3}"); do
  for variant in base change; do
    b=$([ $variant = base ] && echo "$base/build/bench/halox-bench" || echo "$bench")
    echo "== round $round, $variant"
    timeout 120 $b pack --device gpu $([ "${HALOX_PACK_AB_FULL:-0}" = 1 ] || echo --quick) --json "$out/pack-$variant-$round.json" \
      > "$out/pack-$variant-$round.txt" 2>&1
    grep -E "^(ceilings|gather|d3q19|x-face w1 256|y-face w1 16384)" "$out/pack-$variant-$round.txt"
  done
done
# Per shape: the change's and the baseline's median over the rounds (us), and the naive
# kernel's median in the change's runs.
python3 - "$out" <<'PY'
import json, sys, glob, statistics
out = sys.argv[1]
def rows(variant):
    by = {}
    for f in sorted(glob.glob(f"{out}/pack-{variant}-*.json")):
        for r in json.load(open(f)).get("rows", []):
            by.setdefault(r["shape"], []).append(r)
    return by
base, change = rows("base"), rows("change")
print(f"{'shape':40s} {'change us':>10s} {'base us':>10s} {'ratio':>6s} {'naive us':>9s} "
      f"{'sync chg':>9s} {'sync base':>9s}")
for shape, rs in change.items():
    med = lambda rr, k: statistics.median(r[k] for r in rr)
    b = base.get(shape, rs)
    print(f"{shape:40s} {med(rs, 'time_us'):10.2f} {med(b, 'time_us'):10.2f} "
          f"{med(rs, 'time_us') / med(b, 'time_us'):6.3f} {med(rs, 'naive_us'):9.2f} "
          f"{med(rs, 'sync_latency_us'):9.2f} {med(b, 'sync_latency_us'):9.2f}")
PY
