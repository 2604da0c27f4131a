#!/usr/bin/env bash
# The LBM communication variants side by side (issue 29, the seed's Fig. 10): for BGK and
# multiphase, one rank (the reference), then 8 ranks in one process and 2 processes under
# MPS, each with default (hand-written pack + host copies + MPI), contig (the hand-written
# pack moved by a halox transport), datatype, overlap, GPU-initiated (the fused grid
# kernel) and GPU-initiated + overlap. Prints per case MLUPS, the time per step normalised
# to default, the share of one rank's MLUPS and the exchange's share of the step; JSON per
# run in OUTDIR (and all of them in OUTDIR/runs.tgz), a PNG per model and rank set.
#   scripts/device/diag/lbm_variants.sh OUTDIR
# HALOX_LBM_GRID (default 256x256x256; multiphase runs half of it in x), HALOX_LBM_STEPS
# (default 300), HALOX_LBM_DEVICE (default gpu; cpu for a smoke test of the script with a
# small grid), HALOX_LBM (the halox-lbm to run; default build/gpu's), HALOX_LBM_MULTIPHASE
# (more arguments of the multiphase runs, e.g. "--radius 4" for a small grid),
# HALOX_LBM_RANKS8 / HALOX_LBM_RANKS2 (the rank grids of the 8-rank and 2-process runs;
# default: halox-lbm's own choice, 1x2x4 and 1x1x2 for a cube; the earlier tables used
# 2x2x2 and 2x1x1), HALOX_LBM_VARIANTS (the variants run; default all six). The runs of one
# process (1 rank, 8 ranks) run without MPS, the 2-process runs under it.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: lbm_variants.sh OUTDIR}
mkdir -p "$out"
grid=${HALOX_LBM_GRID:-256x256x256}
steps=${HALOX_LBM_STEPS:-300}
device=${HALOX_LBM_DEVICE:-gpu}
lbm=${HALOX_LBM:-$lbm}
read -r gx gy gz <<< "${grid//x/ }"
run() {  # name procs args...
  local name=$1 procs=$2; shift 2
  local cmd=("$lbm" --device "$device" --steps "$steps" --json "$out/$name.json" "$@")
  if [ "$procs" -gt 1 ]; then
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / procs)) timeout 300 mpirun -n "$procs" \
      --oversubscribe --bind-to none "${cmd[@]}" > "$out/$name.txt" 2>&1
  else
    timeout 300 "${cmd[@]}" > "$out/$name.txt" 2>&1
  fi || echo "$name: FAILED (rc $?): $(tail -2 "$out/$name.txt")"
}
want() { [[ " ${HALOX_LBM_VARIANTS:-default contig datatype overlap gpu-initiated gpu-initiated-overlap} " == *" $1 "* ]]; }
# One process first, without MPS: an MPS client's streams share the server's pool of
# hardware queues, and under it the 8-rank multiphase overlap ran 9 points of one rank below
# the same binary's run without it in another script of the same call (80.0% against
# 89.0%); then 2 processes under MPS, which two processes on the one GPU need.
for where in one mps; do
  [ "$where" = mps ] && [ "$device" = gpu ] && start_mps
  for model in bgk multiphase; do
    size=$grid
    common=(--model "$model")
    if [ "$model" = multiphase ]; then
      size=$((gx / 2))x${gy}x${gz}
      read -r -a extra <<< "${HALOX_LBM_MULTIPHASE:-}"
      common+=("${extra[@]}")
    fi
    common+=(--grid "$size")
    if [ "$where" = one ]; then
      run "$model-r1" 1 "${common[@]}" --ranks 1x1x1
      # 8 ranks in this process: the local transports (host copies between blocks for default).
      r8=(--rank-count 8)
      [ -n "${HALOX_LBM_RANKS8:-}" ] && r8=(--ranks "$HALOX_LBM_RANKS8")
      for v in default contig datatype overlap; do
        want $v && run "$model-r8-$v" 1 "${common[@]}" "${r8[@]}" --comm $v --transport local-pulse
      done
      want gpu-initiated && run "$model-r8-gpu-initiated" 1 "${common[@]}" "${r8[@]}" --comm datatype --transport local-fused
      want gpu-initiated-overlap && run "$model-r8-gpu-initiated-overlap" 1 "${common[@]}" "${r8[@]}" --comm overlap --transport local-fused
    else
      fused=ipc-fused
      [ "$device" = cpu ] && fused=host
      r2=()
      [ -n "${HALOX_LBM_RANKS2:-}" ] && r2=(--ranks "$HALOX_LBM_RANKS2")
      for v in default contig datatype overlap; do
        want $v && run "$model-np2-$v" 2 "${common[@]}" "${r2[@]}" --comm $v
      done
      want gpu-initiated && run "$model-np2-gpu-initiated" 2 "${common[@]}" "${r2[@]}" --comm datatype --transport "$fused"
      want gpu-initiated-overlap && run "$model-np2-gpu-initiated-overlap" 2 "${common[@]}" "${r2[@]}" --comm overlap --transport "$fused"
    fi
  done
done
[ "$device" = gpu ] && stop_mps
# A picture per model and rank set (the seed's Fig. 10): one rank, then each variant's MLUPS.
for model in bgk multiphase; do
  for set in r8 np2; do
    files=()
    for v in r1 $set-default $set-contig $set-datatype $set-overlap $set-gpu-initiated \
      $set-gpu-initiated-overlap; do
      [ -f "$out/$model-$v.json" ] && files+=("$out/$model-$v.json")
    done
    [ ${#files[@]} -gt 1 ] || continue
    scripts/plot "${files[@]}" -o "$out/$model-$set.png" \
      --title "halox-lbm $model: one rank, then the variants ($set)" > /dev/null ||
      echo "plot of $model $set failed"
  done
done
(cd "$out" && tar czf runs.tgz $(ls ./*.json 2>/dev/null))
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except (OSError, ValueError):
        return None
variants = ["default", "contig", "datatype", "overlap", "gpu-initiated", "gpu-initiated-overlap"]
for model in ("bgk", "multiphase"):
    one = load(f"{model}-r1")
    if one is None:
        print(f"{model}: no one-rank run"); continue
    print(f"\n{model}, {one['grid']}, 1 rank: {one['mlups']:.0f} MLUPS")
    for ranks in ("r8", "np2"):
        base = load(f"{model}-{ranks}-default")
        grid = next((j["ranks"] for j in (load(f"{model}-{ranks}-{v}") for v in variants) if j),
                    "")
        print(f"  {ranks} ({grid})")
        print(f"{'':6s} {'variant':22s} {'transport':38s} {'MLUPS':>8s} "
              f"{'step/default':>12s} {'of 1 rank':>9s} {'exchange':>8s}")
        for v in variants:
            j = load(f"{model}-{ranks}-{v}")
            if j is None:
                print(f"{'':6s} {v:22s} (no result)"); continue
            norm = base["mlups"] / j["mlups"] if base and j["mlups"] > 0 else float("nan")
            share = (f"{100 * j['exchange_seconds'] / j['seconds']:.1f}%"
                     if j["variant"] != "overlap" and j["seconds"] > 0 else "-")
            print(f"{'':6s} {v:22s} {j['transport'][:38]:38s} {j['mlups']:8.1f} {norm:12.3f} "
                  f"{100 * j['mlups'] / one['mlups']:8.1f}% {share:>8s}")
PY
