#!/usr/bin/env bash
# Issue 30: whether NCCL gives this machine symmetric memory (its device API needs it), and
# nccl-device's particle tests, one process on the one GPU: plain, with NCCL_CUMEM_ENABLE=1
# (NCCL's own detection of CUDA VMM with GPUDirect RDMA overridden), and under MPS. NCCL's
# INIT log lines on symmetric memory and cuMem are kept. After check.sh built build/gpu.
#   scripts/device/diag/nccl_device_symmetric.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: nccl_device_symmetric.sh OUTDIR}
mkdir -p "$out"
run() {  # name ENV...
  local name=$1; shift
  env "$@" HALOX_TEST_TRANSPORT=nccl-device NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,ALLOC \
    timeout 120 mpirun -n 1 --oversubscribe build/gpu/tests/mpi/test_halo \
    --gtest_filter='ParticleHalo.*:GridHalo.NcclDevice*' > "$out/$name.log" 2>&1
  echo "== $name: rc=$? $(grep -c '  OK ' "$out/$name.log") passed, $(grep -c 'FAILED  \]' "$out/$name.log") failed lines"
  grep -i "symmetric\|cumem\|halox: nccl-device\|illegal" "$out/$name.log" | sort | uniq -c | head -8
}
python3 - <<'PY'
import cupy
d = cupy.cuda.runtime
for name, attr in (("VMM", 102), ("GPUDirect RDMA with VMM", 110)):
    try:
        print(f"device attribute {name}: {d.deviceGetAttribute(attr, 0)}")
    except Exception as e:
        print(f"device attribute {name}: {e}")
PY
run plain
run cumem NCCL_CUMEM_ENABLE=1
start_mps
run mps
stop_mps
