// The memory system's rate for one sector per word (halox-bench pack's header line, and the
// diagnostic scripts/device/diag/face_probe.cu): one 4-byte word every `stride` words, `n` of
// them, packed; 4 per thread with the loads first, as an x face of long rows reads.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

__global__ void strided_words_kernel(const float* __restrict__ a, float* __restrict__ out,
                                     std::size_t n, std::size_t stride) {
  const std::size_t per = (n + 3) / 4;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < per;
       i += std::size_t(gridDim.x) * blockDim.x) {
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k * per < n) v[k] = a[(i + k * per) * stride];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k * per < n) out[i + k * per] = v[k];
  }
}
