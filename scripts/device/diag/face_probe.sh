#!/usr/bin/env bash
# Builds face_probe.cu against build/gpu (after check.sh built it) and runs it twice: the pack
# shapes issue 29 still misses (the D3Q19 subset, the 512^3 x face, the bandwidth-sized y face)
# by pack_async and by hand-written kernels that each try one idea.
#   scripts/device/diag/face_probe.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../../.."
source scripts/device/diag/common.sh
out=${1:?usage: face_probe.sh OUTDIR}
mkdir -p "$out"
build_probe scripts/device/diag/face_probe.cu /tmp/face_probe || exit 1
for r in 1 2; do timeout 120 /tmp/face_probe | tee "$out/probe-$r.txt"; done
