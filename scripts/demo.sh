#!/usr/bin/env bash
# The README's demo command: installs what is missing, builds halox, runs a halo exchange on
# 4 MPI ranks (checked cell by cell) and the CPU datatype pack benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build/demo -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_BUILD_TESTS=OFF >/dev/null
cmake --build build/demo -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo
mpirun -n 4 --oversubscribe build/demo/apps/halox-halo-demo --n 64 --steps 20
echo
build/demo/bench/halox-bench pack --device cpu --json build/demo/pack-cpu.json
