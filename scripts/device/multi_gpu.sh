#!/usr/bin/env bash
# The multi-GPU suite (issue 8), for the nvidia-h200-x2/-x4/-x8 kinds: one rank per GPU (no
# MPS). Builds if scripts/device/check.sh has not. Writes logs and JSON to OUTDIR and, always
# (sections after HALOX_MULTI_SECONDS, default 420, are skipped), the archive OUTDIR.tgz.
# HALOX_MULTI_PARTS picks sections (default all: info tests pingpong local variants scaling
# diagnose);
# HALOX_MULTI_TESTS is a ctest -R filter for the tests section.
#   scripts/device/multi_gpu.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: multi_gpu.sh OUTDIR}
mkdir -p "$out"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0   # never NVLink multicast
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deadline=${HALOX_MULTI_SECONDS:-420}
log() { echo "== $*" | tee -a "$out/summary.txt"; }
parts=" ${HALOX_MULTI_PARTS:-info tests pingpong local variants scaling diagnose} "
in_time() {
  [[ "$parts" == *" ${1%% *} "* ]] || return 1
  if [ "$SECONDS" -ge "$deadline" ]; then log "skipped $1: ${SECONDS}s used of ${deadline}s"; return 1; fi
}
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
commit=${HALOX_COMMIT:-unknown}
log "machine: $gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F), commit $commit"
nvidia-smi topo -m > "$out/topo.txt" 2>&1
nvshmem=$(python3 -c 'import nvidia.nvshmem as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[ -n "$nvshmem" ] && export NVSHMEM_HOME=$nvshmem LD_LIBRARY_PATH=$nvshmem/lib:${LD_LIBRARY_PATH:-}
if [ ! -x build/gpu/apps/halox-info ]; then
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_ENABLE_CUDA=ON \
    -DHALOX_WARNINGS_AS_ERRORS=OFF > "$out/configure.log" 2>&1
  cmake --build build/gpu -j "$(nproc)" > "$out/build.log" 2>&1 || { log "build FAILED"; tail -40 "$out/build.log"; exit 1; }
fi
mpi() { local np=$1; shift; timeout 120 mpirun -n "$np" --oversubscribe --bind-to none "$@"; }
lbm=build/gpu/apps/lbm/halox-lbm

in_time info && { log "halox-info ($gpus ranks)"
  mpi "$gpus" build/gpu/apps/halox-info --json "$out/info.json" 2>&1 | tee "$out/info.txt"; }
in_time tests && { log "tests: gpu and multigpu labels (one rank per GPU, no MPS)"
  (cd build/gpu && ctest -L 'gpu|multigpu' -R "${HALOX_MULTI_TESTS:-.}" --output-on-failure -V \
    --timeout 120) > "$out/tests.log" 2>&1
  grep -h "tests passed\|Failed\|FAILED\|Total Test" "$out/tests.log" | tee -a "$out/summary.txt"; }
in_time pingpong && { log "pingpong between GPU 0 and GPU 1, every transport"
  mpi 2 build/gpu/bench/halox-bench pingpong --transports host,staged,pipelined,nccl,ipc-pulse,ipc-fused \
    --json "$out/pingpong.json" 2>&1 | tee "$out/pingpong.txt"
  mpi 2 build/gpu/bench/halox-bench pingpong --transports nvshmem-stream,nvshmem-pulse,nvshmem-fused \
    --json "$out/pingpong-nvshmem.json" 2>&1 | tee "$out/pingpong-nvshmem.txt"; }
in_time local && for g in 1 $gpus; do
  log "local engine: 8 and 27 ranks in one process over $g GPU(s)"
  build/gpu/bench/halox-bench halo-local --gpus $g --json "$out/halo-local-gpus$g.json" 2>&1 |
    tee "$out/halo-local-gpus$g.txt"
done
in_time variants && for v in "--comm default" "--comm contig --transport staged" \
    "--comm datatype --transport staged" "--comm overlap --transport staged" \
    "--comm datatype --transport ipc-fused" "--comm datatype --transport nvshmem-fused" \
    "--comm datatype --transport nvshmem-stream" "--comm overlap --transport nvshmem-stream" \
    "--comm datatype --transport nccl" "--comm overlap --transport nccl"; do
  name=$(echo "$v" | sed 's/--comm //; s/ --transport /-/')
  log "LBM multiphase variant $name, 2 GPUs, 128^3 per GPU"
  mpi 2 $lbm --grid 256x128x128 --ranks 2x1x1 --steps 100 --device gpu $v \
    --json "$out/lbm-variant-$name.json" 2>&1 | grep -E "MLUPS;" | tee -a "$out/summary.txt"
done
for np in 1 2 4 8; do
  [ "$np" -gt "$gpus" ] && break
  in_time "scaling np$np" || break
  log "MD halo, strong scaling (200,000 atoms in all), $np GPU(s)"
  mpi "$np" build/gpu/bench/halox-bench halo --app md --device gpu --atoms-per-rank $((200000 / np)) \
    --steps 100 --transports staged,pipelined,ipc-fused,nccl --json "$out/halo-md-np$np.json" \
    2>&1 | tee "$out/halo-md-np$np.txt"
  mpi "$np" build/gpu/bench/halox-bench halo --app md --device gpu --atoms-per-rank $((200000 / np)) \
    --steps 100 --transports nvshmem-stream,nvshmem-fused --json "$out/halo-md-nvshmem-np$np.json" \
    2>&1 | tee "$out/halo-md-nvshmem-np$np.txt"
  for t in staged nvshmem-stream nccl ipc-fused; do
    log "LBM BGK 256^3 strong scaling, $np GPU(s), datatype over $t"
    mpi "$np" $lbm --model bgk --grid 256x256x256 --steps 200 --device gpu --transport $t \
      --json "$out/lbm-strong-$t-np$np.json" 2>&1 | grep -E "halox-lbm:|MLUPS;|bound" | tee -a "$out/summary.txt"
    log "LBM BGK weak scaling (256^3 per GPU), $np GPU(s), datatype over $t"
    mpi "$np" $lbm --model bgk --grid $((256 * np))x256x256 --ranks ${np}x1x1 --steps 200 --device gpu \
      --transport $t --json "$out/lbm-weak-$t-np$np.json" 2>&1 | grep -E "MLUPS;|bound" | tee -a "$out/summary.txt"
  done
done
# Two things seen and not understood (docs/PERFORMANCE.md): nccl's LBM exchange with nothing
# to send, and ipc-fused's slow reverse next to nvshmem-fused's. Traces (and an nsys summary
# where nsys exists) of each, against the transport that behaves.
in_time diagnose && {
  log "diagnostics: LBM BGK 128^3 on 1 rank, staged vs nccl (traced)"
  for t in staged nccl; do
    mpi 1 $lbm --model bgk --grid 128x128x128 --steps 50 --device gpu --transport $t \
      --trace "$out/trace-lbm-$t.json" 2>&1 | grep -E "MLUPS;" | tee -a "$out/summary.txt"
  done
  if command -v nsys > /dev/null; then
    timeout 120 nsys profile -o "$out/lbm-nccl" --stats=true -t cuda,nvtx,osrt --force-overwrite true \
      $lbm --model bgk --grid 128x128x128 --steps 50 --device gpu --transport nccl > "$out/nsys-lbm-nccl.txt" 2>&1
    rm -f "$out"/*.nsys-rep "$out"/*.sqlite
    log "nsys summary of the nccl run: nsys-lbm-nccl.txt"
  fi
  log "diagnostics: MD halo on 2 GPUs, ipc-fused vs nvshmem-fused (traced)"
  for t in ipc-fused nvshmem-fused; do
    mpi 2 build/gpu/bench/halox-bench halo --app md --device gpu --atoms-per-rank 100000 --steps 50 \
      --transports $t --trace "$out/trace-md-$t.json" 2>&1 | grep -E "^$t" | tee -a "$out/summary.txt"
  done
}
log "done after ${SECONDS}s"
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && echo "archive: $out.tgz"
