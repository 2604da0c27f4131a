#!/usr/bin/env bash
# Builds the OSU micro-benchmarks 7.4 (point-to-point and neighbourhood, with CUDA) from their public sources
# into a git-ignored folder, to run unchanged against halox's MPI interposer on the GPU
# machine (scripts/device/interposer.sh). Their code never enters the project.
#   scripts/osu-build.sh SOURCE_DIR   (an unpacked osu-micro-benchmarks-7.4; built in place)
set -euo pipefail
src=${1:?usage: osu-build.sh SOURCE_DIR}
cd "$src"
chmod +x configure config.guess config.sub install-sh missing depcomp compile 2>/dev/null || true
# CUDA 13 changed cudaMemPrefetchAsync (a location and flags); OSU 7.4 predates it.
sed -i 's/CUDA_CHECK(cudaMemPrefetchAsync(buf, length, devid, um_stream));/{ struct cudaMemLocation where_ = {cudaMemLocationTypeDevice, devid}; CUDA_CHECK(cudaMemPrefetchAsync(buf, length, where_, 0, um_stream)); }/' c/util/osu_util_mpi.c
./configure CC=mpicc CXX=mpicxx --enable-cuda --with-cuda="${CUDA_HOME:-/usr/local/cuda}" > configure.log 2>&1
make -j"$(nproc)" -C c/mpi/pt2pt/standard > make.log 2>&1
make -j"$(nproc)" -C c/mpi/pt2pt/persistent >> make.log 2>&1
make -j"$(nproc)" -C c/mpi/collective/neighborhood >> make.log 2>&1
echo "built: $src/c/mpi/pt2pt/{standard,persistent} $src/c/mpi/collective/neighborhood"
