#include <cuda_runtime.h>

namespace halox::detail {

namespace {
__global__ void read_clock(unsigned long long* out) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  *out = t;
}
}  // namespace

unsigned long long device_clock_ns() {
  unsigned long long* d = nullptr;
  unsigned long long h = 0;
  if (cudaMalloc(&d, sizeof h) != cudaSuccess) return 0;
  read_clock<<<1, 1>>>(d);
  cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  return h;
}

}  // namespace halox::detail
