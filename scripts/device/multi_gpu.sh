#!/usr/bin/env bash
# The multi-GPU suite (issue 8), for the nvidia-h200-x2/-x4/-x8 kinds: one rank per GPU (no
# MPS), after scripts/device/check.sh's build. Writes logs and JSON to OUTDIR and OUTDIR.tgz.
#   scripts/device/multi_gpu.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: multi_gpu.sh OUTDIR}
mkdir -p "$out"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0   # never NVLink multicast
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log() { echo "== $*" | tee -a "$out/summary.txt"; }
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
commit=${HALOX_COMMIT:-unknown}
log "machine: $gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F), commit $commit"
nvshmem=$(python3 -c 'import nvidia.nvshmem as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[ -n "$nvshmem" ] && export NVSHMEM_HOME=$nvshmem LD_LIBRARY_PATH=$nvshmem/lib:${LD_LIBRARY_PATH:-}
if [ ! -x build/gpu/apps/halox-info ]; then
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_ENABLE_CUDA=ON > "$out/configure.log" 2>&1
  cmake --build build/gpu -j "$(nproc)" > "$out/build.log" 2>&1 || { log "build FAILED"; exit 1; }
fi
mpi() { local np=$1; shift; timeout 300 mpirun -n "$np" --oversubscribe --bind-to none "$@"; }
log "halox-info ($gpus ranks)"
mpi "$gpus" build/gpu/apps/halox-info --json "$out/info.json" 2>&1 | tee "$out/info.txt"
log "tests: gpu and multigpu labels (one rank per GPU)"
(cd build/gpu && ctest -L 'gpu|multigpu' --output-on-failure -V --timeout 300) > "$out/tests.log" 2>&1
grep -h "tests passed\|FAILED" "$out/tests.log" | tee -a "$out/summary.txt"
log "pingpong between GPU 0 and GPU 1, every transport"
mpi 2 build/gpu/bench/halox-bench pingpong --transports host,staged,pipelined,nccl,ipc-pulse,ipc-fused \
  --json "$out/pingpong.json" 2>&1 | tee "$out/pingpong.txt"
mpi 2 build/gpu/bench/halox-bench pingpong --transports nvshmem-stream,nvshmem-pulse,nvshmem-fused \
  --json "$out/pingpong-nvshmem.json" 2>&1 | tee "$out/pingpong-nvshmem.txt"
for np in 1 2 4 8; do
  [ "$np" -gt "$gpus" ] && break
  log "strong scaling, $np GPU(s)"
  mpi "$np" build/gpu/bench/halox-bench halo --app md --device gpu --atoms-per-rank $((200000 / np)) \
    --transports staged,ipc-fused,nccl --json "$out/halo-md-np$np.json" 2>&1 | tee "$out/halo-md-np$np.txt"
  mpi "$np" build/gpu/apps/lbm/halox-lbm --model bgk --grid 256x256x256 --steps 200 --device gpu \
    --json "$out/lbm-bgk-np$np.json" 2>&1 | grep -E "MLUPS;|bound" | tee -a "$out/lbm-scaling.txt"
done
log "done"
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && echo "archive: $out.tgz"
