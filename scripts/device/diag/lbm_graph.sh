#!/usr/bin/env bash
# halox-lbm with and without --graph (issue 57), the same binary in the same run, alternated
# twice (best of two): multiphase on 1 rank, on 8 ranks in one process (local-fused, datatype
# and overlap) and on 2 processes (ipc-fused, MPS); each on a small grid, where launches and
# host calls weigh, and on a large one. Prints MLUPS without and with, and their ratio.
#   scripts/device/diag/lbm_graph.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_graph.sh OUTDIR}
mkdir -p "$out"
steps=${HALOX_LBM_STEPS:-300}
run() {  # name procs args...
  local name=$1 procs=$2; shift 2
  local cmd=("$lbm" --device gpu --init spinodal --steps "$steps" --json "$out/$name.json" "$@")
  if [ "$procs" -gt 1 ]; then
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 120 mpirun -n 2 --oversubscribe --bind-to none \
      "${cmd[@]}" > "$out/$name.txt" 2>&1
  else
    timeout 120 "${cmd[@]}" > "$out/$name.txt" 2>&1
  fi || echo "$name: FAILED (rc $?): $(tail -2 "$out/$name.txt")"
}
# name:procs:grid:args (commas for spaces)
cases="one-small:1:64x64x64:--comm,datatype one-large:1:128x256x256:--comm,datatype
local8-small:1:64x64x64:--ranks,2x2x2,--transport,local-fused,--comm,datatype
local8-small-overlap:1:64x64x64:--ranks,2x2x2,--transport,local-fused,--comm,overlap
local8-large:1:128x256x256:--ranks,2x2x2,--transport,local-fused,--comm,datatype
local8-large-overlap:1:128x256x256:--ranks,2x2x2,--transport,local-fused,--comm,overlap
np2-small:2:64x32x32:--ranks,2x1x1,--transport,ipc-fused,--comm,datatype
np2-large:2:256x128x128:--ranks,2x1x1,--transport,ipc-fused,--comm,datatype"
for where in one mps; do
  [ $where = mps ] && start_mps
  for round in 1 2; do
    for c in $cases; do
      IFS=: read -r name procs grid args <<< "$c"
      if [ $where = one ] && [ "$procs" -gt 1 ]; then continue; fi
      if [ $where = mps ] && [ "$procs" -eq 1 ]; then continue; fi
      for graph in plain graph; do
        extra=()
        [ $graph = graph ] && extra=(--graph)
        run "$name-$graph-$round" "$procs" --grid "$grid" ${args//,/ } "${extra[@]}"
      done
    done
  done
done
stop_mps
python3 - "$out" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
names = sorted({os.path.basename(f).rsplit("-", 2)[0] for f in glob.glob(os.path.join(out, "*-plain-*.json"))})
rows = []
print(f"{'case':24s} {'MLUPS':>10s} {'--graph':>10s} {'ratio':>7s}  {'us/step':>9s} {'--graph':>9s}")
for n in names:
    best = {}
    for g in ("plain", "graph"):
        got = []
        for f in glob.glob(os.path.join(out, f"{n}-{g}-*.json")):
            try:
                got.append(json.load(open(f))["mlups"])
            except Exception as e:
                print(f"{f}: {e}")
        if got:
            best[g] = max(got)
    if len(best) == 2:
        j = json.load(open(glob.glob(os.path.join(out, f"{n}-plain-*.json"))[0]))
        cells = j["grid"][0] * j["grid"][1] * j["grid"][2] if isinstance(j.get("grid"), list) else None
        us = lambda m: cells / m if cells else float("nan")
        rows.append({"case": n, "mlups": best["plain"], "mlups_graph": best["graph"],
                     "ratio": best["graph"] / best["plain"]})
        print(f"{n:24s} {best['plain']:10.1f} {best['graph']:10.1f} {best['graph'] / best['plain']:7.3f}"
              f"  {us(best['plain']):9.1f} {us(best['graph']):9.1f}")
json.dump(rows, open(os.path.join(out, "lbm_graph.json"), "w"), indent=1)
PY
