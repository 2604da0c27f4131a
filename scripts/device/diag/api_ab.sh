#!/usr/bin/env bash
# A change of the exchange API or its plumbing, A/B in one run: the change built into
# build/gpu (by check.sh, its targets only) while the baseline, a whole earlier tree in a
# carried, git-ignored folder (`git archive <sha> | tar -x -C .ab-api`), is built beside it
# into /tmp/halox-base. Baseline and change
# alternated twice, each time: 8 local ranks' MD halo (halox-bench halo-local 2x2x2, 32,000
# atoms, the one-kernel engine), the 2-process fused MD halo (ipc-fused, MPS), halox-lbm BGK
# 256^3 on one rank and on 8 local ranks (local-fused), multiphase on 2 processes (ipc-fused).
#   scripts/device/diag/api_ab.sh OUTDIR [BASELINE_FOLDER]
# HALOX_AB_ROUNDS (default 2): alternations; HALOX_AB_CASES (default all: local8 np2 bgk1 bgk8
# mp2): which figures, e.g. "local8" alone with 6 rounds to settle a noisy one.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: api_ab.sh OUTDIR [BASELINE_FOLDER]}
tree=${2:-.ab-api}
mkdir -p "$out"
HALOX_CHECK_PARTS=none HALOX_CHECK_TARGETS="halox-bench halox-lbm" \
  scripts/device/check.sh "$out/change-build" > "$out/change-build.log" 2>&1 &
change_build=$!
build_baseline "$tree" "$out" halox-bench halox-lbm || exit 1
wait $change_build || { echo "the change's build FAILED"; tail -20 "$out/change-build.log"; exit 1; }
echo "both built after ${SECONDS}s"
base=/tmp/halox-base
start_mps
mpi2() { CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 120 mpirun -n 2 --oversubscribe --bind-to none "$@"; }
cases=" ${HALOX_AB_CASES:-local8 np2 bgk1 bgk8 mp2} "
want() { [[ "$cases" == *" $1 "* ]]; }
for round in $(seq 1 "${HALOX_AB_ROUNDS:-2}"); do
  for variant in base change; do
    root=$([ $variant = base ] && echo "$base/build" || echo build/gpu)
    echo "== round $round, $variant"
    want local8 && timeout 120 $root/bench/halox-bench halo-local --ranks 2x2x2 --atoms 32000 \
      --kernels all_pulses --in-launch direct --json "$out/local8-$variant-$round.json" 2>&1 |
      grep -E "^2x2x2"
    want np2 && mpi2 $root/bench/halox-bench halo --app md --device gpu --quick \
      --transports ipc-fused --json "$out/np2-$variant-$round.json" 2>&1 | halo_columns
    want bgk1 && timeout 120 $root/apps/lbm/halox-lbm --model bgk --grid 256x256x256 --steps 200 \
      --device gpu --json "$out/bgk1-$variant-$round.json" 2>&1 | grep -E "MLUPS;" |
      sed 's/^/bgk 1 rank: /'
    want bgk8 && timeout 120 $root/apps/lbm/halox-lbm --model bgk --grid 256x256x256 --ranks 2x2x2 \
      --transport local-fused --steps 100 --device gpu --json "$out/bgk8-$variant-$round.json" \
      2>&1 | grep -E "MLUPS;" | sed 's/^/bgk 8 local: /'
    want mp2 && mpi2 $root/apps/lbm/halox-lbm --grid 256x128x128 --ranks 2x1x1 --steps 200 \
      --device gpu --comm datatype --transport ipc-fused --json "$out/mp2-$variant-$round.json" \
      2>&1 | grep -E "MLUPS;" | sed 's/^/multiphase 2 processes: /'
  done
done
stop_mps
# One line per figure: the baseline's and the change's best of two, and their ratio.
python3 - "$out" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
def best(prefix, pick, lower_is_better):
    vals, spread = {}, {}
    for variant in ("base", "change"):
        got = []
        for f in sorted(glob.glob(os.path.join(out, f"{prefix}-{variant}-*.json"))):
            try:
                got.append(pick(json.load(open(f))))
            except Exception as e:
                print(f"{f}: {e}")
        if got:
            vals[variant] = min(got) if lower_is_better else max(got)
            spread[variant] = f"{min(got):.2f}-{max(got):.2f}"
    if len(vals) == 2:
        ratio = vals["change"] / vals["base"]
        print(f"{prefix:8s} base {vals['base']:10.2f} change {vals['change']:10.2f} "
              f"change/base {ratio:.3f} ({'lower' if lower_is_better else 'higher'} is better; "
              f"runs: base {spread['base']}, change {spread['change']})")
step_us = lambda j: [r for r in j["rows"]][0]["step_us"]
halo_us = lambda j: [r for r in j["rows"] if r.get("transport") == "ipc-fused"][0]["halo_us"]  # 2,000 atoms per rank
mlups = lambda j: j["mlups"]
best("local8", step_us, True)
best("np2", halo_us, True)
for p in ("bgk1", "bgk8", "mp2"):
    best(p, mlups, False)
PY
