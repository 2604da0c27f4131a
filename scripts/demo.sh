#!/usr/bin/env bash
# The README's demo command: installs what is missing, builds halox and runs the molecular
# dynamics mini-app on 4 MPI ranks (on the GPU when one is visible, else on the CPU), then a
# checked grid halo exchange and the CPU datatype pack benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build/demo -G Ninja -DCMAKE_BUILD_TYPE=Release -DHALOX_BUILD_TESTS=OFF >/dev/null
cmake --build build/demo -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo
mpirun -n 4 --oversubscribe build/demo/apps/md/halox-md --cells 12 --steps 200 --thermo 20 \
  --json build/demo/md.json
echo
mpirun -n 4 --oversubscribe build/demo/apps/halox-halo-demo --n 64 --steps 20
echo
build/demo/bench/halox-bench pack --device cpu --json build/demo/pack-cpu.json
