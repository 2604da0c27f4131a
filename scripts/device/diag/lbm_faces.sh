#!/usr/bin/env bash
# Where the multiphase LBM's exchange time goes (after check.sh built build/gpu): Nsight
# Compute on the fused local grid kernel (8 ranks in one process, 128^3 each; clocks left
# alone) beside the update kernels, and a traced 2-process run (2x1x1: x faces only) whose
# exchanges trace-summary --kernels breaks into phases.
#   scripts/device/diag/lbm_faces.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: lbm_faces.sh OUTDIR}
mkdir -p "$out"
lbm=build/gpu/apps/lbm/halox-lbm
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ncu --clock-control none --cache-control none --launch-skip 40 --launch-count 12 --csv \
  --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread \
  $lbm --grid 256x256x256 --ranks 2x2x2 --transport local-fused --comm datatype --steps 20 \
  --device gpu > "$out/ncu-lbm-local8.csv" 2> "$out/ncu-lbm-local8.err"
python3 - "$out/ncu-lbm-local8.csv" <<'PY'
import csv, sys, collections, statistics
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
k, m, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
d = collections.defaultdict(list)
for r in rows:
    d[(r[k].split("(")[0][:48], r[m])].append(float(r[v].replace(",", "")))
for key, vals in sorted(d.items()):
    print(f"{key[0]:48s} {key[1]:52s} n={len(vals):3d} median={statistics.median(vals):10.1f}")
PY
export CUDA_MPS_PIPE_DIRECTORY=/tmp/halox-mps CUDA_MPS_LOG_DIRECTORY=/tmp/halox-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d 2>/dev/null
for ranks in 2x1x1 1x1x2; do
  grid=$([ $ranks = 2x1x1 ] && echo 256x128x128 || echo 128x128x256)
  echo "== 2 processes, $ranks, ipc-fused, traced"
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 90 mpirun -n 2 --oversubscribe --bind-to none \
    $lbm --grid $grid --ranks $ranks --steps 100 --device gpu --comm datatype \
    --transport ipc-fused --trace "$out/trace-lbm-$ranks.json" 2>&1 | grep -E "MLUPS;|alone"
  scripts/trace-summary "$out/trace-lbm-$ranks.json" --kernels 40 | sed -n '/^last/,$p'
done
echo quit | nvidia-cuda-mps-control 2>/dev/null
