// Kernels of the hammer tests (tests/gpu/test_gpu_halo.cu: ranks in one process;
// tests/mpi/test_peer_hammer.cu: processes): every exchange gets new data, set and checked
// on the device, so thousands of exchanges stay queued and each item of each is checked.
// In a CUDA graph the step comes from the device: `step` plus *replay (count_replay counts).
#pragma once

#include <cuda_runtime.h>

namespace halox::testing {

// Home coordinates = start + step * 0.5 (exact in double); halo poisoned with NaN.
__device__ inline long long step_of(long long step, const long long* replay) {
  return replay != nullptr ? step + *replay : step;
}
__global__ void count_replay(long long* replay) {
  ++*replay;
}

__global__ void set_step(double* x, const double* start, long long home, long long total,
                         long long step, const long long* replay = nullptr) {
  step = step_of(step, replay);
  for (long long k = blockIdx.x * blockDim.x + threadIdx.x; k < 3 * total;
       k += gridDim.x * blockDim.x) {
    x[k] = k < 3 * home ? start[k] + 0.5 * step : nan("");
  }
}
__global__ void check_step(const double* x, const double* start, long long total, long long step,
                           unsigned long long* wrong, const long long* replay = nullptr) {
  step = step_of(step, replay);
  for (long long k = blockIdx.x * blockDim.x + threadIdx.x; k < 3 * total;
       k += gridDim.x * blockDim.x) {
    if (!(fabs(x[k] - (start[k] + 0.5 * step)) <= 1e-9 * (1 + fabs(start[k]))))
      atomicAdd(wrong, 1ull);
  }
}
__global__ void set_forces(double* f, long long total, long long step,
                           const long long* replay = nullptr) {
  step = step_of(step, replay);
  for (long long k = blockIdx.x * blockDim.x + threadIdx.x; k < 3 * total;
       k += gridDim.x * blockDim.x) {
    f[k] = 1.0 + (step % 7);
  }
}
__global__ void check_forces(const double* f, const int* copies, long long home, long long step,
                             unsigned long long* wrong, const long long* replay = nullptr) {
  step = step_of(step, replay);
  for (long long k = blockIdx.x * blockDim.x + threadIdx.x; k < 3 * home;
       k += gridDim.x * blockDim.x) {
    if (f[k] != copies[k / 3] * (1.0 + (step % 7))) atomicAdd(wrong, 1ull);
  }
}

}  // namespace halox::testing
