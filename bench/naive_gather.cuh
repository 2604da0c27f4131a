// The naive kernel that halox's index gathers are measured against (halox-bench pack, and the
// diagnostic scripts/device/diag/gather_probe.cu): a float3 gather by an index map, one
// entry per thread in a grid-stride loop.
#pragma once

#include <cuda_runtime.h>

__global__ void naive_gather_kernel(const float* __restrict__ a, const long* __restrict__ idx,
                                    float* __restrict__ out, long n) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x) {
    const long j = idx[i];
    out[3 * i] = a[3 * j];
    out[3 * i + 1] = a[3 * j + 1];
    out[3 * i + 2] = a[3 * j + 2];
  }
}
