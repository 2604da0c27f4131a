// Event timing shared by the GPU benchmarks: the median over `reps` batches of `inner` calls
// of f, per call, after one warm-up batch, on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <functional>
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

// The median host time of f followed by cudaStreamSynchronize(stream), over `reps` calls: a
// synchronous call's latency, as MPI_Pack's caller sees it.
template <class F>
double median_sync_us(cudaStream_t stream, int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto h0 = std::chrono::steady_clock::now();
    f();
    BENCH_CUDA(cudaStreamSynchronize(stream));
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count());
  }
  return median(t);
}

// The medians of several callables timed alternately, one call each per round and each round
// starting at the next callable, so that a drift of the host's or the GPU's state over the
// run (clocks, a launch-bound loop's cadence) falls on all of them alike. Timed one after the
// other, halox-bench's 65,536-entry gathers, measured first, lost 0.3-1.0 us to the naive kernel
// measured last, where the gather probe's alternated timing of the same call had them ahead.
inline std::vector<double> median_event_us_alternated(
    cudaStream_t stream, int reps, const std::vector<std::function<void()>>& fs) {
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (const auto& f : fs) f();  // warm-up
  std::vector<std::vector<double>> t(fs.size());
  for (int r = 0; r < reps; ++r) {
    for (std::size_t k = 0; k < fs.size(); ++k) {
      const std::size_t which = (static_cast<std::size_t>(r) + k) % fs.size();
      BENCH_CUDA(cudaEventRecord(a, stream));
      fs[which]();
      BENCH_CUDA(cudaEventRecord(b, stream));
      BENCH_CUDA(cudaEventSynchronize(b));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
      t[which].push_back(1e3 * ms);
    }
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::vector<double> medians;
  for (auto& one : t) medians.push_back(median(one));
  return medians;
}

}  // namespace halox::bench
