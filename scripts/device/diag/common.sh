# Sourced by the diagnostics in this folder, from the repository root (after check.sh built
# build/gpu): the GPU machine's environment (never NVLink multicast; MPI as root; MPS, which
# two processes on the one GPU need) and the programs' paths.
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/halox-mps CUDA_MPS_LOG_DIRECTORY=/tmp/halox-mps-log
# NVSHMEM from the image's Python package: its lib/ holds the bootstrap plugins loaded by name.
nvshmem=$(python3 -c 'import nvidia.nvshmem as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[ -n "$nvshmem" ] && export NVSHMEM_HOME=$nvshmem LD_LIBRARY_PATH=$nvshmem/lib:${LD_LIBRARY_PATH:-}
# A baseline tree (a carried, git-ignored folder) copied to DEST with the carried .deps.
copy_baseline() { rm -rf "$2" && cp -r "$1" "$2" && cp -r .deps "$2/.deps"; }
# The baseline tree TREE (a carried folder) copied to /tmp/halox-base and TARGETS built there
# (Release, CUDA, no tests); its logs in OUT.
build_baseline() {  # TREE OUT TARGETS...
  local tree=$1 out=$2 base=/tmp/halox-base
  shift 2
  [ -d "$tree" ] || { echo "no $tree folder with the baseline tree"; return 1; }
  copy_baseline "$tree" "$base"
  cmake -S "$base" -B "$base/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_ENABLE_CUDA=ON \
    -DHALOX_WARNINGS_AS_ERRORS=OFF -DHALOX_BUILD_TESTS=OFF > "$out/base-configure.log" 2>&1 &&
    cmake --build "$base/build" -j "$(nproc)" --target "$@" > "$out/base-build.log" 2>&1 ||
    { echo "baseline build FAILED"; tail -20 "$out/base-build.log"; return 1; }
}
# A standalone probe SRC (.cu) built against build/gpu's libhalox into BIN: compiled with the
# bench's headers in reach, linked as halox-tune is.
build_probe() {  # SRC BIN
  local b=build/gpu
  nvcc -O3 -std=c++20 -arch=sm_90 -Iinclude -I$b/include -I.deps/nlohmann_json/include \
    -c "$1" -o "$2.o" || return 1
  local link
  link=$(cd $b && ninja -t commands bench/halox-tune | tail -1)
  link=${link//bench\/CMakeFiles\/halox-tune.dir\/halox_tune.cpp.o/$2.o}
  link=${link//-o bench\/halox-tune/-o $2}
  (cd $b && eval "$link")
}
bench=build/gpu/bench/halox-bench
lbm=build/gpu/apps/lbm/halox-lbm
start_mps() {
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d 2>/dev/null
}
stop_mps() { echo quit | nvidia-cuda-mps-control 2>/dev/null; }
# The GPU-initiated rows of `halox-bench halo --app md` (stdin), the columns an A/B compares:
# transport, atoms per rank, forward, reverse, queued, launch, q/launch, pairs, p/launch.
halo_columns() {
  grep -E "^(ipc|nvshmem|local)[- ]" | awk '{printf "%-14s %7s fwd %6s rev %6s queued %6s launch %5s q/l %5s pairs %6s p/l %5s\n", $1, $2, $4, $5, $13, $14, $15, $16, $17}'
}
# Per kernel (name with its template arguments, and grid size: halox-lbm's two exchanges
# differ in it) and metric of Nsight Compute --csv files: how many, median, least, most.
ncu_summary() {
  python3 - "$@" <<'PY'
import csv, sys, collections, statistics, re
for f in sys.argv[1:]:
    rows = [r for r in csv.reader(open(f)) if len(r) > 10]
    if not rows: print(f, "no rows"); continue
    head, rows = rows[0], rows[1:]
    k, g = head.index("Kernel Name"), head.index("Grid Size")
    m, v = head.index("Metric Name"), head.index("Metric Value")
    d = collections.defaultdict(list)
    for r in rows:
        name = re.sub(r"(void |halox::|detail::|lbm::|fused_particle::|<unnamed>::)", "",
                      r[k].split("(")[0])
        d[(f"{name} grid {r[g]}", r[m])].append(float(r[v].replace(",", "")))
    for key, vals in sorted(d.items()):
        print(f"{key[0]:72s} {key[1]:52s} n={len(vals):3d} median={statistics.median(vals):10.1f} "
              f"min={min(vals):10.1f} max={max(vals):10.1f}")
PY
}
