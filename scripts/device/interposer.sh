#!/usr/bin/env bash
# libhalox_mpi on the GPU machine: an unchanged MPI program (the OSU micro-benchmarks 7.4,
# built with --enable-cuda by scripts/osu-build.sh into a git-ignored folder and carried)
# moving device memory through Open MPI (not CUDA-aware) with the interposer preloaded,
# validation on (-c); the same program on host memory with and without it; and Open MPI
# given a device pointer without it (the floor: it faults). 2 processes on the one GPU.
#   scripts/device/interposer.sh BUILD_DIR OSU_DIR OUTDIR
set -uo pipefail
build=${1:?usage: interposer.sh BUILD_DIR OSU_DIR OUTDIR} osu=${2:?} out=${3:?}
mkdir -p "$out"
lib=$(cd "$build/src" && pwd)/libhalox_mpi.so
pt=$osu/c/mpi/pt2pt
summary=$out/summary.txt
run() {  # NAME PRELOAD(0/1) PROGRAM ARGS...
  local name=$1 preload=$2 program=$3
  shift 3
  local env=()
  [ "$preload" = 1 ] && env=(-x LD_PRELOAD="$lib")
  [ -n "${REPORT:-}" ] && env+=(-x HALOX_MPI_REPORT=1)  # the interposer's paths, at the end
  [ -n "${IPC_OFF:-}" ] && env+=(-x HALOX_MPI_IPC=0)     # as between nodes: staged or chunked
  timeout 90 mpiexec -n "${NP:-2}" --oversubscribe "${env[@]}" "$program" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  local failed
  failed=$(grep -ciE "fail|error" "$out/$name.txt")
  echo "== $name: rc=$rc, lines mentioning failure or error: $failed" | tee -a "$summary"
  grep -E "^(1|8|262144|4194304) " "$out/$name.txt" | tee -a "$summary"
}
[ -f "$lib" ] || { echo "== no $lib" | tee -a "$summary"; exit 1; }
# Two processes on the one GPU time-slice it without MPS (D D 8 B: 153 us instead of 13-14,
# session 54): check.sh starts the daemon before; run alone, this script starts and stops it
# (the machine's environment and the MPS helpers of diag/common.sh).
source "$(dirname "$0")/diag/common.sh"
if ! pgrep -x nvidia-cuda-mps-control > /dev/null; then
  start_mps && trap stop_mps EXIT && echo "== MPS started for this run (none was running)" | tee -a "$summary"
fi
# Host memory: the interposer passes it through.
run latency-host-plain 0 "$pt/standard/osu_latency" -m 1:4096
run latency-host-interposed 1 "$pt/standard/osu_latency" -m 1:4096
# Host receives of a note's size or more are checked for notes: their bandwidth, both ways.
run bw-host-plain 0 "$pt/standard/osu_bw" -m 1:4194304
run bw-host-interposed 1 "$pt/standard/osu_bw" -m 1:4194304
# Device memory, both sides and mixed, contiguous and vector, validated.
# OSU takes its options before the buffer kinds (SRC DST come last, or it prints its usage).
run latency-DD 1 "$pt/standard/osu_latency" -c -i 300 -x 30 -d cuda D D
run latency-DH 1 "$pt/standard/osu_latency" -c -i 300 -x 30 -m 1:262144 -d cuda D H
run latency-HD 1 "$pt/standard/osu_latency" -c -i 300 -x 30 -m 1:262144 -d cuda H D
run bw-DD 1 "$pt/standard/osu_bw" -c -i 30 -x 5 -d cuda D D
run bibw-DD 1 "$pt/standard/osu_bibw" -c -i 30 -x 5 -d cuda D D
run latency-persistent-DD 1 "$pt/persistent/osu_latency_persistent" -c -i 300 -x 30 -d cuda D D
# OSU refuses validation of derived types ("Derived data type does not support validation"):
# these rows are figures; the bytes of derived types on device memory are checked by
# gpu.test_mpi_interposer against the MPI library's own result.
run latency-DD-vect 1 "$pt/standard/osu_latency" -i 300 -x 30 -D vect:24:2 -d cuda D D
# An indexed type from a file (OSU's -D indx: "displacement,block length" per line, in bytes):
# 64 blocks of 24 bytes every 32 (OSU takes at most 100; it builds the type from all lines
# but the last).
indexed=$out/indexed-ddt.txt
{ echo "# displacement,block length"; for k in $(seq 0 64); do echo "$((k * 32)),24"; done; } > "$indexed"
run latency-DD-indx 1 "$pt/standard/osu_latency" -i 300 -x 30 -D "indx:$indexed" -d cuda D D
REPORT=1 run bw-DD-vect 1 "$pt/standard/osu_bw" -i 30 -x 5 -D vect:24:2 -d cuda D D
grep -A12 "halox_mpi report" "$out/bw-DD-vect.txt" | tee -a "$summary"
run bw-DD-contiguous-same-run 1 "$pt/standard/osu_bw" -i 30 -x 5 -d cuda D D
# IPC off, as between nodes (issue 55's pipeline goals against the hand-staged path below:
# 256 KiB latency at most 0.6x; 4 MiB bandwidth, whose 3x is above MPI's host bandwidth).
IPC_OFF=1 REPORT=1 run latency-DD-ipc-off 1 "$pt/standard/osu_latency" -c -i 100 -x 10 -m 8:4194304 -d cuda D D
IPC_OFF=1 run bw-DD-ipc-off 1 "$pt/standard/osu_bw" -c -i 20 -x 5 -m 8:4194304 -d cuda D D
# HALOX_CHUNK_SWEEP=1: the chunked pipeline's chunk size (IPC off), one tuning file per size
# ("default": none, the built-in sizes), chunked from 128 KiB, unvalidated (session 51's sweep).
if [ "${HALOX_CHUNK_SWEEP:-0}" = 1 ]; then
  for chunk in default 65536 262144 1048576; do
    tuning=$out/no-tuning.json
    if [ $chunk != default ]; then
      tuning=$out/tuning-$chunk.json
      echo "{\"chunk_bytes\": $chunk, \"pipelined_from_bytes\": 131072}" > "$tuning"
    fi
    for program in osu_latency osu_bw; do
      timeout 40 mpiexec -n 2 --oversubscribe -x LD_PRELOAD="$lib" -x HALOX_MPI_IPC=0 \
        -x HALOX_TUNING_FILE="$tuning" "$pt/standard/$program" -m 131072:4194304 -i 50 -x 5 \
        -d cuda D D 2>&1 | grep -E "^[0-9]+ " | sed "s/^/chunk $chunk, $program: /" | tee -a "$summary"
    done
  done
fi
# MPI's neighbourhood collectives: OSU 7.4's ten benchmarks take no -d ("Accelerators not yet
# supported for neighborhood benchmarks" in its util/osu_util_mpi.c), so they run on host
# buffers through the interposer's neighbourhood code, validated, on 4 processes (on 2, OSU
# refuses its radius-1 grid); device buffers are checked by gpu.test_mpi_neighbor.
nb=$osu/c/mpi/collective/neighborhood
for b in neighbor_allgather neighbor_allgatherv neighbor_alltoall neighbor_alltoallv neighbor_alltoallw \
         ineighbor_allgather ineighbor_allgatherv ineighbor_alltoall ineighbor_alltoallv ineighbor_alltoallw; do
  [ -x "$nb/osu_$b" ] && NP=4 run "osu_$b-host" 1 "$nb/osu_$b" -c -m 1:1048576 -i 50 -x 5
done
# Without validation: the figures (OSU's -c adds a check kernel and copies to every iteration).
run latency-DD-novalidate 1 "$pt/standard/osu_latency" -d cuda D D
run bw-DD-novalidate 1 "$pt/standard/osu_bw" -d cuda D D
# The ceiling the device bandwidth is held against: one process's cudaMemcpy device to device
# of 4 MiB (bytes copied per second), measured now.
python3 - <<'PY' 2>&1 | tee -a "$summary"
import cupy as cp
n = 4 << 20
a, b = cp.empty(n, cp.uint8), cp.empty(n, cp.uint8)
start, stop = cp.cuda.Event(), cp.cuda.Event()
for _ in range(10): cp.cuda.runtime.memcpy(b.data.ptr, a.data.ptr, n, 3)
start.record()
for _ in range(200): cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, n, 3, 0)
stop.record(); stop.synchronize()
us = cp.cuda.get_elapsed_time(start, stop) * 1e3 / 200
print(f"== ceiling: cudaMemcpy device to device, 4 MiB, one process: {us:.2f} us, {n / us / 1e3:.1f} GB/s")
PY
# The floor: Open MPI given device pointers without the interposer.
run latency-DD-without-interposer 0 "$pt/standard/osu_latency" -m 8:8 -i 10 -x 2 -d cuda D D
# The hand-written staged path measured now (cudaMemcpy to pinned host memory, MPI,
# cudaMemcpy back: the seed's Default), the figure each device row above is held against.
timeout 180 mpiexec -n 2 --oversubscribe "$build/bench/halox-bench" pingpong --transports staged \
  --json "$out/hand-staged.json" > "$out/hand-staged.txt" 2>&1
echo "== hand-staged reference (halox-bench pingpong, reference columns): rc=$?" | tee -a "$summary"
grep -E "^ *(1|8|262144|4194304) " "$out/hand-staged.txt" | tee -a "$summary"
# halox-lbm's seed variants written with plain MPI calls, on device memory under the
# interposer, 2 processes, beside default (hand-written copies to the host + MPI) and one
# rank on the whole grid (the issue's goals: mpi-datatype >= 2x default).
# HALOX_INTERPOSER_LBM=0 ends here (a call short of device time).
[ "${HALOX_INTERPOSER_LBM:-1}" = 1 ] || exit 0
lbm=$build/apps/lbm/halox-lbm
lbm_case=(--model multiphase --grid 256x256x128 --steps 200 --device gpu)
"$lbm" "${lbm_case[@]}" --json "$out/lbm-one-rank.json" 2>&1 | grep -E "MLUPS;|halox-lbm:" | sed 's/^/one rank: /' | tee -a "$summary"
for comm in default mpi-contig mpi-datatype mpi-overlap mpi-neighbor mpi-neighbor-overlap; do
  timeout 180 mpiexec -n 2 --oversubscribe -x LD_PRELOAD="$lib" "$lbm" "${lbm_case[@]}" \
    --ranks 1x1x2 --comm "$comm" --json "$out/lbm-$comm.json" 2>&1 | grep -E "MLUPS;|halox-lbm:" \
    | sed "s/^/2 processes, --comm $comm: /" | tee -a "$summary"
done
# halox's own exchange of the same faces (GridExchange, ipc-fused, and overlap): the figure
# mpi-neighbor(-overlap) is held against (issue 56: at least 90% of it).
for comm in datatype overlap; do
  timeout 180 mpiexec -n 2 --oversubscribe "$lbm" "${lbm_case[@]}" --ranks 1x1x2 --comm "$comm" \
    --transport ipc-fused --json "$out/lbm-halox-$comm.json" 2>&1 | grep -E "MLUPS;|halox-lbm:" \
    | sed "s/^/2 processes, halox --comm $comm ipc-fused: /" | tee -a "$summary"
done
