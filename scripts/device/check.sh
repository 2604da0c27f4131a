#!/usr/bin/env bash
# The GPU-machine suite, in one run: configure and build halox with the CUDA, NCCL and
# NVSHMEM found there, run the gpu-labelled tests, compute-sanitizer, and the GPU benchmarks;
# logs and JSON go to OUTDIR. Needs .deps/googletest (carried; see docs/gpu-workflow.md).
#   scripts/device/check.sh OUTDIR [--quick]
# HALOX_CHECK_PARTS picks sections (default: all of: sanitizer tests python interposer examples pack
# local notrace info tune pingpong lbm md puts); HALOX_CHECK_SECONDS (default 480) is the time after which remaining
# sections are skipped, so that the results are always packed before the device's limit;
# HALOX_CHECK_TESTS and HALOX_CHECK_EXCLUDE are ctest -R and -E filters for the tests section;
# HALOX_CHECK_TARGETS builds those targets only (default: all).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: check.sh OUTDIR [--quick]}
quick=${2:-}
mkdir -p "$out"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0   # never NVLink multicast on this machine
log() { echo "== $*" | tee -a "$out/summary.txt"; }
parts=" ${HALOX_CHECK_PARTS:-sanitizer tests python interposer examples pack local notrace info tune pingpong lbm md puts} "
deadline=${HALOX_CHECK_SECONDS:-480}
want() {
  [[ "$parts" == *" $1 "* ]] || return 1
  if [ "$SECONDS" -ge "$deadline" ]; then log "skipped $1: ${SECONDS}s used of ${deadline}s"; return 1; fi
}

# The tree copied to the device machine carries a stale .git (git rev-parse there names an
# older commit), so the commit is only what the caller says.
commit=${HALOX_COMMIT:-"not given (pass HALOX_COMMIT=<sha>)"}
log "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader), $(date -u +%F), commit $commit"
nvshmem=$(python3 -c 'import nvidia.nvshmem as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[ -n "$nvshmem" ] && export NVSHMEM_HOME=$nvshmem LD_LIBRARY_PATH=$nvshmem/lib:${LD_LIBRARY_PATH:-}
# The Python module too where nanobind is there (the python part runs its tests on GPU arrays).
python_module=OFF
python3 -c 'import nanobind' 2>/dev/null && python_module=ON
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_ENABLE_CUDA=ON \
  -DHALOX_BUILD_PYTHON=$python_module -DHALOX_WARNINGS_AS_ERRORS=OFF > "$out/configure.log" 2>&1 || { log "configure FAILED"; tail -30 "$out/configure.log"; exit 1; }
grep "halox:" "$out/configure.log" | tee -a "$out/summary.txt"
# HALOX_CHECK_TARGETS: build only these targets (e.g. "_halox" for the python part alone).
cmake --build build/gpu -j "$(nproc)" ${HALOX_CHECK_TARGETS:+--target $HALOX_CHECK_TARGETS} \
  > "$out/build.log" 2>&1 || { log "build FAILED"; tail -40 "$out/build.log"; exit 1; }
log "build ok"

want sanitizer && for tool in memcheck racecheck; do
  HALOX_GPU_PROPERTY_COUNT=200 compute-sanitizer --tool $tool --error-exitcode 9 \
    build/gpu/tests/gpu/test_pack_gpu > "$out/sanitizer-$tool.log" 2>&1
  log "compute-sanitizer $tool: rc=$? ($(grep -c 'ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0 hazards' "$out/sanitizer-$tool.log") clean summaries) $(grep 'SUMMARY' "$out/sanitizer-$tool.log" | tail -1)"
done
# The halo kernels, in one process (the local engine; the sanitizer does not follow MPI ranks
# under MPS): the particle kernels direct and staged in launch, kept and replaced blocks; the
# grid kernel, plain and traced, through the LBM's 8 ranks on the one GPU.
want sanitizer && for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 build/gpu/tests/gpu/test_gpu_halo \
    --gtest_filter='LocalEngine.EightRanksOneAndTwoPulses:LocalEngine.NewPlansKeepOrReplaceTheBlocks' \
    > "$out/sanitizer-halo-$tool.log" 2>&1
  log "compute-sanitizer $tool, particle halo kernels: rc=$? $(grep 'SUMMARY' "$out/sanitizer-halo-$tool.log" | tail -1)"
  for trace in 0 1; do
    HALOX_TRACE=$trace OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 build/gpu/apps/lbm/halox-lbm \
      --device gpu --transport local-fused --comm datatype --ranks 2x2x2 --grid 24x20x18 \
      --init spinodal --steps 3 > "$out/sanitizer-grid-$tool-trace$trace.log" 2>&1
    log "compute-sanitizer $tool, grid kernel (HALOX_TRACE=$trace): rc=$? $(grep 'SUMMARY' "$out/sanitizer-grid-$tool-trace$trace.log" | tail -1)"
  done
done

# The pack benchmark is one process: it runs as a user's process does, before MPS starts
# (until 2026-12-03 it ran under MPS; that day its bandwidth-sized y face took 155.8 us there,
# and the same call 138-139 us in face_probe.sh, run after MPS had stopped).
want pack && log "benchmark: halox-bench pack --device gpu $quick" &&
build/gpu/bench/halox-bench pack --device gpu $quick --json "$out/pack-gpu.json" 2>&1 | tee "$out/pack-gpu.txt"

# MPI runs: two processes share the one GPU (more than two per GPU fail there), under MPS:
# without it the two contexts time-slice the GPU and every hand-over costs hundreds of us.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/halox-mps CUDA_MPS_LOG_DIRECTORY=/tmp/halox-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && log "MPS started" || log "MPS did not start"

want tests && {
log "gpu tests"
(cd build/gpu && ctest -L '^gpu$' -R "${HALOX_CHECK_TESTS:-.}" -E "${HALOX_CHECK_EXCLUDE:-^$}" --output-on-failure -V --timeout 150) > "$out/gpu-tests.log" 2>&1
rc=$?; grep -h "seed\|GPU:\|tests passed\|FAILED" "$out/gpu-tests.log" | tee -a "$out/summary.txt"
[ $rc -eq 0 ] && log "gpu tests PASSED" || log "gpu tests FAILED"
}

# The Python module's tests on 1 and 2 processes: NumPy, and the GPU arrays of CuPy, PyTorch
# and JAX (local ranks among them).
want python && {
if [ "$python_module" = ON ]; then
  for np in 1 2; do
    (cd build/gpu && PYTHONPATH=$PWD/python timeout 300 mpirun -n $np --oversubscribe \
      python3 -m pytest -q -rs -p no:cacheprovider ../../python/tests) > "$out/python-tests-np$np.log" 2>&1
    rc=$?
    tail -15 "$out/python-tests-np$np.log" >> "$out/summary.txt"
    [ $rc -eq 0 ] && log "python tests, $np processes: PASSED" || log "python tests, $np processes: FAILED (rc $rc)"
  done
  (cd build/gpu && PYTHONPATH=$PWD/python timeout 120 mpirun -n 2 --oversubscribe \
    python3 ../../examples/python/heat3d.py --device gpu) 2>&1 | tee -a "$out/summary.txt"
  (cd build/gpu && PYTHONPATH=$PWD/python timeout 120 mpirun -n 2 --oversubscribe \
    python3 ../../examples/python/heat3d_jax.py --device gpu) 2>&1 | tee -a "$out/summary.txt"
  # Python's cost per call beside C++'s, the same exchange: queued calls and halo per step.
  (cd build/gpu && PYTHONPATH=$PWD/python timeout 180 mpirun -n 2 --oversubscribe \
    python3 ../../bench/python_calls.py --device gpu --json "$out/python-calls.json") 2>&1 |
    tee -a "$out/summary.txt"
else
  log "skipped python: no nanobind in this Python"
fi
}

# The MPI interposer: its tests on cudaMalloc'd memory are in the gpu tests above; here the
# OSU micro-benchmarks, unchanged, under it (built by scripts/osu-build.sh, carried in .osu/).
want interposer && {
if [ -x .osu/src/c/mpi/pt2pt/standard/osu_latency ]; then
  log "the MPI interposer under the OSU micro-benchmarks (2 ranks)"
  scripts/device/interposer.sh build/gpu .osu/src "$out/interposer"
  cat "$out/interposer/summary.txt" >> "$out/summary.txt"
else
  log "skipped interposer: no .osu/src (scripts/osu-build.sh, then carry .osu)"
fi
}

# The examples against this build's install (CUDA, NCCL, NVSHMEM in it), as CI does on the CPU.
want examples && {
(cd build/gpu && ctest -R '^mpi.examples$' --output-on-failure -V --timeout 600) > "$out/examples.log" 2>&1
rc=$?; grep -h "ok\|failed" "$out/examples.log" | grep -v "^[0-9]*: --" | tail -20 >> "$out/summary.txt"
[ $rc -eq 0 ] && log "examples PASSED" || log "examples FAILED"
}

want local && log "benchmark: halox-bench halo-local (ranks in one process)" &&
build/gpu/bench/halox-bench halo-local --json "$out/halo-local.json" --trace "$out/trace-local.json" \
  2>&1 | tee "$out/halo-local.txt"
want notrace && log "tracing compiled out: the same benchmark from a build with HALOX_ENABLE_TRACING=OFF" &&
cmake -S . -B build/gpu-notrace -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_ENABLE_TRACING=OFF \
  -DHALOX_BUILD_TESTS=OFF > "$out/configure-notrace.log" 2>&1 &&
  cmake --build build/gpu-notrace -j "$(nproc)" --target halox-bench > "$out/build-notrace.log" 2>&1 &&
  build/gpu-notrace/bench/halox-bench halo-local --ranks 2x2x2 --json "$out/halo-local-notrace.json" \
    2>&1 | tee "$out/halo-local-notrace.txt"

# NVSHMEM with two PEs on one GPU starts only when each MPS client is limited to half of it.
# --bind-to none: NVSHMEM's proxy thread must not share the one core MPI binds a rank to.
mpi() { local np=$1; shift; CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 150 mpirun -n "$np" --oversubscribe --bind-to none "$@"; }
export HALOX_TUNING_FILE="$out/tuning.json"
want info && log "halox-info (2 ranks)" &&
mpi 2 build/gpu/apps/halox-info --json "$out/info.json" 2>&1 | tee "$out/info.txt"
want tune && log "halox-tune (2 ranks)" &&
mpi 2 build/gpu/bench/halox-tune 2>&1 | tee "$out/tune.txt"

want pingpong && {
log "benchmark: halox-bench pingpong (2 ranks)"
mpi 2 build/gpu/bench/halox-bench pingpong --json "$out/pingpong.json" 2>&1 | tee "$out/pingpong.txt"
log "benchmark: halox-bench pingpong, NVSHMEM transports (own run)"
mpi 2 build/gpu/bench/halox-bench pingpong --transports nvshmem-stream,nvshmem-fused \
  --json "$out/pingpong-nvshmem.json" 2>&1 | tee "$out/pingpong-nvshmem.txt"
}

want lbm && {
log "halox-lbm: D3Q19 BGK and multiphase throughput on one GPU (one rank; periodic axes wrapped by the update)"
# 1000 steps: the multiphase step is ~2% slower over 1000 steps than over 200 (clocks steady,
# cause not established; docs/PERFORMANCE.md), so the figure is the sustained one.
build/gpu/apps/lbm/halox-lbm --model bgk --grid 256x256x256 --steps 1000 --device gpu \
  --json "$out/lbm-bgk.json" 2>&1 | tee "$out/lbm-bgk.txt"
build/gpu/apps/lbm/halox-lbm --model multiphase --grid 256x256x256 --steps 1000 --device gpu \
  --json "$out/lbm-multiphase.json" 2>&1 | tee "$out/lbm-multiphase.txt"
for model in bgk multiphase; do
  # The self-halo exchanged instead of wrapped (a message to oneself per face), for comparison.
  for v in "--comm datatype --transport staged --self-halo exchange" \
           "--comm datatype --transport ipc-fused --self-halo exchange" \
           "--comm overlap --transport staged --self-halo exchange" \
           "--comm overlap --transport ipc-fused --self-halo exchange"; do
    name=$(echo "$v" | sed 's/--comm //; s/ --transport /-/; s/ --self-halo exchange/-self-exchange/')
    build/gpu/apps/lbm/halox-lbm --model $model --grid 256x256x256 --steps 200 --device gpu $v \
      --json "$out/lbm-$model-$name.json" 2>&1 | grep -E "MLUPS;|of it|halox-lbm:" | tee -a "$out/lbm-one-gpu.txt"
  done
done
build/gpu/apps/lbm/halox-lbm --init spinodal --grid 256x256x64 --steps 3000 --device gpu \
  --report 1000 --slice "$out/lbm-spinodal.pgm" 2>&1 | tail -3
log "halox-lbm: 8 ranks in one process on the one GPU (--transport local-pulse and local-fused), 128^3 per rank"
for model in bgk multiphase; do
  # name:comm:transport; "fused" is the GPU-initiated kernel for every face of every rank.
  for v in default:default:local-pulse contig:contig:local-pulse datatype:datatype:local-pulse \
           overlap:overlap:local-pulse fused:datatype:local-fused fused-overlap:overlap:local-fused; do
    IFS=: read -r name comm transport <<< "$v"
    build/gpu/apps/lbm/halox-lbm --model $model --grid 256x256x256 --ranks 2x2x2 --transport $transport \
      --comm $comm --steps 100 --device gpu --json "$out/lbm-$model-local8-$name.json" 2>&1 \
      | grep -E "MLUPS;|of it|alone|halox-lbm:" | tee -a "$out/lbm-local.txt"
  done
done
log "halox-lbm variants: 2 ranks on the one GPU, 128^3 per rank"
# nvshmem-stream last and with a short leash: at this size it did not finish in 715408e's run.
for v in "--comm default" "--comm contig --transport staged" "--comm datatype --transport staged" \
         "--comm overlap --transport staged" "--comm datatype --transport ipc-fused" \
         "--comm datatype --transport nvshmem-fused" "--comm datatype --transport nvshmem-stream"; do
  name=$(echo "$v" | sed 's/--comm //; s/ --transport /-/')
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 60 mpirun -n 2 --oversubscribe --bind-to none \
    build/gpu/apps/lbm/halox-lbm --grid 256x128x128 --ranks 2x1x1 --steps 100 --device gpu $v \
    --json "$out/lbm-variant-$name.json" 2>&1 | grep -E "MLUPS;|halox-lbm:" | tee -a "$out/lbm-variants.txt"
done
# The same 8 ranks of 128^3 three ways: one process (local-fused), and 2 processes of a
# 2x2x1 block each (Ranks::blocks: one grid kernel per process, ipc-fused; and staged).
log "halox-lbm multiphase, 8 ranks of 128^3: 1 process vs 2 processes x 2x2x1 ranks (--blocks)"
for v in "--transport ipc-fused" "--transport staged"; do
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 90 mpirun -n 2 --oversubscribe --bind-to none \
    build/gpu/apps/lbm/halox-lbm --grid 256x256x256 --ranks 1x1x2 --blocks 2x2x1 --steps 100 \
    --device gpu --comm overlap $v --json "$out/lbm-blocks-${v##* }.json" 2>&1 \
    | grep -E "MLUPS;|halox-lbm:" | tee -a "$out/lbm-blocks.txt"
done
build/gpu/apps/lbm/halox-lbm --grid 256x256x256 --ranks 2x2x2 --steps 100 --device gpu \
  --comm overlap --transport local-fused 2>&1 | grep -E "MLUPS;|halox-lbm:" | tee -a "$out/lbm-blocks.txt"
}

want md && for np in 1 2; do
  log "halox-md on the GPU, $np rank(s)"
  mpi $np build/gpu/apps/md/halox-md --device gpu --cells 20 --steps 500 --thermo 100 \
    --json "$out/md-gpu-np$np.json" 2>&1 | tee "$out/md-gpu-np$np.txt"
  log "benchmark: halox-bench halo --app md, $np rank(s) $quick"
  mpi $np build/gpu/bench/halox-bench halo --app md --device gpu $quick \
    --json "$out/halo-md-gpu-np$np.json" 2>&1 | tee "$out/halo-md-gpu-np$np.txt"
  log "benchmark: halox-bench halo --app md, NVSHMEM transports (own run), $np rank(s) $quick"
  mpi $np build/gpu/bench/halox-bench halo --app md --device gpu $quick \
    --transports staged,nvshmem-stream,nvshmem-pulse,nvshmem-fused \
    --json "$out/halo-md-nvshmem-np$np.json" 2>&1 | tee "$out/halo-md-nvshmem-np$np.txt"
done
want md && {
  # 8 ranks sharing the GPU in one process, the issue's 32,000-atom setting, whole steps.
  log "halox-md on the GPU, 8 ranks in one process (--transport local-fused)"
  # (a whole GPU: not the 50% share the two-process runs take)
  timeout 150 mpirun -n 1 --bind-to none build/gpu/apps/md/halox-md --device gpu --transport local-fused \
    --ranks 2x2x2 --cells 20 \
    --steps 500 --thermo 100 --json "$out/md-gpu-local8.json" 2>&1 | tee "$out/md-gpu-local8.txt"
  log "benchmark: halox-bench halo --app md, local-fused (8 ranks in one process) $quick"
  timeout 150 mpirun -n 1 --bind-to none build/gpu/bench/halox-bench halo --app md --device gpu \
    $quick --transports local-fused --json "$out/halo-md-local8.json" 2>&1 | tee "$out/halo-md-local8.txt"
}
want puts && {
  # The fused kernels' put-with-signal path (a peer nvshmem_ptr cannot map, as on another
  # node), forced onto every peer of these one-GPU runs with HALOX_NVSHMEM_PUTS=1.
  puts="env HALOX_NVSHMEM_PUTS=1"
  log "put-with-signal path: halox-bench halo --app md, 2 ranks $quick"
  mpi 2 $puts build/gpu/bench/halox-bench halo --app md --device gpu $quick \
    --transports staged,nvshmem-pulse,nvshmem-fused --json "$out/halo-md-puts-np2.json" 2>&1 \
    | tee "$out/halo-md-puts-np2.txt"
  log "put-with-signal path: halox-md, 2 ranks (energies as in the host run)"
  mpi 2 $puts build/gpu/apps/md/halox-md --device gpu --transport nvshmem-fused --cells 20 \
    --steps 500 --thermo 100 --json "$out/md-puts-np2.json" 2>&1 | tee "$out/md-puts-np2.txt"
  log "put-with-signal path: halox-bench pingpong, 2 ranks"
  mpi 2 $puts build/gpu/bench/halox-bench pingpong --transports nvshmem-fused \
    --json "$out/pingpong-puts.json" 2>&1 | tee "$out/pingpong-puts.txt"
  log "put-with-signal path: halox-lbm multiphase, 2 ranks, 128^3 each"
  mpi 2 $puts build/gpu/apps/lbm/halox-lbm --grid 256x128x128 --ranks 2x1x1 --steps 100 \
    --device gpu --comm datatype --transport nvshmem-fused --json "$out/lbm-variant-puts.json" 2>&1 \
    | grep -E "MLUPS;|halox-lbm:" | tee "$out/lbm-puts.txt"
}
echo quit | nvidia-cuda-mps-control 2>/dev/null
log "done"
# One archive: the device tool brings back only a few files per run.
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && echo "archive: $out.tgz"
