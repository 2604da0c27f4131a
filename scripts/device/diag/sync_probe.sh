#!/usr/bin/env bash
# Builds sync_probe.cu (standalone) and runs it under each context scheduling flag, without
# MPS: where a synchronous pack's time goes (issue 29's 1/3-of-TEMPI goal).
#   scripts/device/diag/sync_probe.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: sync_probe.sh OUTDIR}
mkdir -p "$out"
nvcc -O3 -std=c++20 -arch=sm_90 scripts/device/diag/sync_probe.cu -lcuda -o /tmp/sync_probe || exit 1
stop_mps
for mode in auto spin yield auto; do timeout 60 /tmp/sync_probe $mode | tee -a "$out/sync-probe.txt"; done
