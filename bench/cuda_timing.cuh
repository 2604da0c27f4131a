// Event timing shared by the GPU benchmarks: the median over `reps` batches of `inner` calls
// of f, per call, after one warm-up batch, on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "../apps/common/cuda_check.hpp"
#include "report.hpp"

#define BENCH_CUDA(call) HALOX_APP_CUDA("halox-bench: ", call)

namespace halox::bench {

template <class F>
double median_event_us(cudaStream_t stream, int reps, int inner, F&& f) {
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < inner; ++i) f();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    BENCH_CUDA(cudaEventRecord(a, stream));
    for (int i = 0; i < inner; ++i) f();
    BENCH_CUDA(cudaEventRecord(b, stream));
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1e3 * ms / inner);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

}  // namespace halox::bench
