#!/usr/bin/env bash
# The README's test command: installs what is missing, builds halox (with CUDA when nvcc is
# present), runs every CPU test (unit and MPI with real ranks), checks the formatting and
# runs the datatype fuzzer briefly. GPU tests run on the GPU machine: scripts/device/check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

jobs=$(nproc)
echo "== format check"
./scripts/format.sh --check

echo "== build (Release, warnings are errors)"
cmake -S . -B build/test -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_WARNINGS_AS_ERRORS=ON
cmake --build build/test -j "$jobs"

# A CPU-only Debug build links everything the optimiser would otherwise drop (a call into
# CUDA-only code once linked in Release only); its libhalox is the shared one, installed and
# consumed after the tests (find_package, FetchContent, pkg-config).
echo "== build (cpu preset, Debug, shared libhalox)"
cmake --preset cpu -B build/cpu-debug -DCMAKE_BUILD_TYPE=Debug -DHALOX_WARNINGS_AS_ERRORS=ON \
  -DHALOX_BUILD_SHARED=ON -DHALOX_BUILD_TESTS=OFF >/dev/null  # tests: the Release build
cmake --build build/cpu-debug -j "$jobs"

# CUDA without MPI (ranks of one process): the library alone, so that no MPI header slips
# into a CUDA source again.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "== build (CUDA without MPI, the library)"
  cmake -S . -B build/cuda-nompi -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_ENABLE_CUDA=ON \
    -DHALOX_ENABLE_MPI=OFF -DHALOX_WARNINGS_AS_ERRORS=ON -DHALOX_BUILD_TESTS=OFF \
    -DHALOX_BUILD_BENCHMARKS=OFF -DHALOX_BUILD_APPS=OFF >/dev/null
  cmake --build build/cuda-nompi -j "$jobs" --target halox
fi

echo "== tests"
(cd build/test && ctest --output-on-failure -j "$jobs" -LE gpu)

echo "== the shared libhalox installed: its programs, the examples by find_package and pkg-config"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 cmake -DBUILD_DIR="$PWD/build/cpu-debug" \
  -DSOURCE_DIR="$PWD" -DMPIEXEC="$(command -v mpirun)" -DCXX="$(command -v c++)" \
  -P tests/consumer/run_examples.cmake

# The datatype engine, the MPI import and the interposer under AddressSanitizer and
# UndefinedBehaviorSanitizer (signed overflow near 2^62 was found this way, not by the tests'
# results): their tests again, on real ranks, halting at the first report.
echo "== sanitizers (ASan + UBSan): datatypes, the MPI import, libhalox_mpi"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build/sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHALOX_ENABLE_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" \
  -DHALOX_BUILD_APPS=OFF -DHALOX_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build/sanitize -j "$jobs" --target test_datatype test_datatype_vs_mpi test_mpi_interposer \
  test_mpi_neighbor
(cd build/sanitize && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$jobs" -R "^(unit\.datatype|mpi\.test_datatype_vs_mpi\.np2|mpi\.test_mpi_(interposer|neighbor)\.np2)$")

# The Python module as a user installs it (pip install .; the CPU library here, the CUDA
# build would double CI's time), its tests on 4 real MPI ranks.
echo "== python: pip install ., then mpirun -n 4 python3 -m pytest python/tests"
# Without build isolation where the build tools are here: the build then sees jax and
# builds halox.jax (setup.sh installs them); else pip's isolated build, without halox.jax.
isolation=()
python3 -c 'import jax, nanobind, scikit_build_core' >/dev/null 2>&1 && isolation=(--no-build-isolation)
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q "${isolation[@]}" . \
  -Ccmake.define.HALOX_ENABLE_CUDA=OFF -Cbuild-dir=build/pip
set +e
(cd build && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 4 --oversubscribe \
  python3 -m pytest -q -p no:cacheprovider ../python/tests)
rc=$?
set -e
[ $rc -eq 5 ] && { echo "python: pytest collected no tests"; exit 1; }
[ $rc -ne 0 ] && { echo "python: tests failed (rc $rc)"; exit 1; }
# The Python example as its docstring runs it: its check against the exact solution, and
# --help printed once under mpirun.
echo "== python example: mpirun -n 4 python3 examples/python/heat3d.py"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 4 --oversubscribe \
  python3 examples/python/heat3d.py --cells 20 --steps 30
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 4 --oversubscribe \
  python3 examples/python/particles.py --steps 5
if python3 -c 'import halox, sys; sys.exit(not halox._halox.has_jax_ffi)'; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 4 --oversubscribe \
    python3 examples/python/heat3d_jax.py --cells 20 --steps 30
else
  echo "python example: halox.jax not built (no jax when the module was built): heat3d_jax.py skipped"
fi
# The Python call-cost benchmark, briefly (its figures are the GPU machine's to take).
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 2 --oversubscribe \
  python3 bench/python_calls.py --cells 12 --calls 20 --repeats 1
helps=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 2 --oversubscribe \
  python3 examples/python/heat3d.py --help | grep -c "^usage")
[ "$helps" = 1 ] || { echo "python example: --help printed $helps times under mpirun"; exit 1; }

echo "== fuzz (libFuzzer, ${HALOX_FUZZ_SECONDS:-20} s)"
cmake -S . -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHALOX_ENABLE_CUDA=OFF -DHALOX_ENABLE_MPI=OFF -DHALOX_BUILD_TESTS=OFF \
  -DHALOX_BUILD_BENCHMARKS=OFF -DHALOX_BUILD_APPS=OFF -DHALOX_BUILD_FUZZERS=ON >/dev/null
cmake --build build/fuzz -j "$jobs" --target halox-fuzz-datatype
mkdir -p build/fuzz/corpus
./build/fuzz/tests/fuzz/halox-fuzz-datatype -max_total_time="${HALOX_FUZZ_SECONDS:-20}" \
  -rss_limit_mb=4096 -print_final_stats=1 build/fuzz/corpus 2>&1 | tail -n 3

echo "== all tests passed"
