#!/usr/bin/env bash
# Where a queued exchange's time goes (after check.sh built build/gpu): the fused kernels'
# own GPU time (Nsight Compute, clocks left alone) for the 8-rank local engine, and an empty
# kernel's, to set against the queued exchange and launch that halox-bench times.
#   scripts/device/diag/launch_gap.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: launch_gap.sh OUTDIR}
mkdir -p "$out"
bench=build/gpu/bench/halox-bench
# --clock-control none: never lock the GPU's clocks; --cache-control none: the kernels run
# on warm caches, as when queued. One run per kernel, past the warm-up launches.
local8="halo-local --ranks 2x2x2 --in-launch direct --kernels all_pulses"
for k in empty_kernel:1000 forward_kernel:500 reverse_kernel:500; do
  ncu --clock-control none --cache-control none -k "regex:${k%%:*}" --launch-skip ${k##*:} -c 20 \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread --csv \
    $bench $local8 > "$out/ncu-${k%%:*}.csv" 2> "$out/ncu-${k%%:*}.err"
done
python3 - "$out"/ncu-*.csv <<'PY'
import csv, sys, collections, statistics
for f in sys.argv[1:]:
    rows = [r for r in csv.reader(open(f)) if len(r) > 10]
    if not rows: print(f, "no rows"); continue
    head = rows[0]; rows = rows[1:]
    k = head.index("Kernel Name"); m = head.index("Metric Name"); v = head.index("Metric Value")
    d = collections.defaultdict(list)
    for r in rows:
        d[(r[k].split("(")[0][:40], r[m])].append(float(r[v].replace(",", "")))
    for key, vals in sorted(d.items()):
        print(f"{key[0]:40s} {key[1]:32s} n={len(vals):3d} median={statistics.median(vals):10.1f} min={min(vals):10.1f} max={max(vals):10.1f}")
PY
