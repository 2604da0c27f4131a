// Diagnostic (scripts/device/diag/gather_probe.sh): the float3 gathers of `halox-bench pack`
// (sorted and random, 65,536 to 22M entries) by the bench's naive kernel, one thread per
// entry, halox's run kernel without a grid cap (plain and __ldg loads) and pack_async, each
// event-timed alone and 20 back to back, and the host time of one launch and of one call. It
// found the gathers' lost time (docs/PERFORMANCE.md); with an argument, one call of each for
// Nsight Compute.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>
#include "halox/datatype.hpp"
#include "halox/pack_gpu.hpp"
#include "../../../bench/naive_gather.cuh"
using namespace halox;
#define CK(x)                                                            \
  do {                                                                   \
    cudaError_t e = (x);                                                 \
    if (e != cudaSuccess) {                                              \
      std::printf("CUDA %s line %d\n", cudaGetErrorString(e), __LINE__); \
      return 1;                                                          \
    }                                                                    \
  } while (0)

__global__ void naive_one(const float* __restrict__ a, const long* __restrict__ idx,
                          float* __restrict__ out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const long j = idx[i];
    out[3 * i] = a[3 * j];
    out[3 * i + 1] = a[3 * j + 1];
    out[3 * i + 2] = a[3 * j + 2];
  }
}
// byte offsets, predicated words (halox's index_runs shape)
template <bool LDG>
__global__ void runs_pred(const long* __restrict__ off, const char* src, char* dst, unsigned first,
                          unsigned end, unsigned wpr) {
  const unsigned first_run = first / wpr, end_run = (end + wpr - 1) / wpr;
  for (unsigned run = first_run + blockIdx.x * blockDim.x + threadIdx.x; run < end_run;
       run += gridDim.x * blockDim.x) {
    const long mem = __ldg(off + run);
    const long packed = long(run) * 12;
    const unsigned g0 = run * wpr;
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < int(wpr) && g0 + k >= first && g0 + k < end)
        w[k] = LDG ? __ldg(reinterpret_cast<const unsigned*>(src + mem + 4 * k))
                   : *reinterpret_cast<const unsigned*>(src + mem + 4 * k);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < int(wpr) && g0 + k >= first && g0 + k < end)
        *reinterpret_cast<unsigned*>(dst + packed + 4 * k) = w[k];
  }
}
__global__ void empty() {}
// halox's gather kernel takes a descriptor of some 190 bytes by value: this one takes a
// parameter of that size, to see whether the launch's host time grows with it.
struct Wide {
  long words[24];
};
__global__ void empty_wide(Wide w) {
  if (w.words[0] == -1) asm volatile("trap;");
}

template <class F>
double med_us(cudaStream_t s, int reps, int inner, F f) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  f();
  cudaStreamSynchronize(s);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a, s);
    for (int i = 0; i < inner; ++i) f();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(1e3 * ms / inner);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
template <class F>
double host_us(cudaStream_t s, int reps, F f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    cudaStreamSynchronize(s);
    auto h0 = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  const bool prof = argc > 1;  // under ncu: each kernel a few times only
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int reps = prof ? 3 : 101;
  std::printf("%-22s %9s %9s %9s %9s %9s %9s | %9s %9s | %9s %9s\n", "shape", "naive", "naive1",
              "pred", "pred_ldg", "halox", "empty", "naive q20", "halox q20", "host lnch",
              "host pack");
  for (long entries : {65536L, 1048576L, 22369622L})
    for (bool sorted : {true, false}) {
      const long array = entries * 4;
      std::mt19937_64 rng(1234 + entries);
      std::vector<long> idx(array);
      std::iota(idx.begin(), idx.end(), 0L);
      std::shuffle(idx.begin(), idx.end(), rng);
      idx.resize(entries);
      if (sorted) std::sort(idx.begin(), idx.end());
      std::vector<std::int64_t> disps(idx.begin(), idx.end());
      for (auto& d : disps) d *= 12;
      std::vector<long> offs(disps.begin(), disps.end());
      const Datatype f3 = Datatype::contiguous(3, Datatype::of<float>()).commit();
      const Datatype type = Datatype::hindexed_block(1, disps, f3).commit();
      float *a, *out;
      long *didx, *doff;
      CK(cudaMalloc(&a, array * 12));
      CK(cudaMalloc(&out, entries * 12));
      CK(cudaMalloc(&didx, entries * 8));
      CK(cudaMalloc(&doff, entries * 8));
      CK(cudaMemset(a, 1, array * 12));
      CK(cudaMemcpy(didx, idx.data(), entries * 8, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(doff, offs.data(), entries * 8, cudaMemcpyHostToDevice));
      const int grid = sms * 8;
      const unsigned words = unsigned(entries * 3);
      auto naive = [&] { naive_gather_kernel<<<grid, 256, 0, s>>>(a, didx, out, entries); };
      auto one = [&] {
        naive_one<<<unsigned((entries + 255) / 256), 256, 0, s>>>(a, didx, out, unsigned(entries));
      };
      auto pred = [&] {
        runs_pred<false><<<unsigned((entries + 255) / 256), 256, 0, s>>>(doff, (const char*)a,
                                                                         (char*)out, 0u, words, 3u);
      };
      auto ldg = [&] {
        runs_pred<true><<<unsigned((entries + 255) / 256), 256, 0, s>>>(doff, (const char*)a,
                                                                        (char*)out, 0u, words, 3u);
      };
      auto hx = [&] { pack_async(a, 1, type, out, s); };
      auto em = [&] { empty<<<1, 32, 0, s>>>(); };
      if (prof) {
        naive();
        one();
        pred();
        ldg();
        hx();
        CK(cudaStreamSynchronize(s));
        cudaFree(a);
        cudaFree(out);
        cudaFree(didx);
        cudaFree(doff);
        continue;
      }
      char name[64];
      std::snprintf(name, sizeof name, "%ld %s", entries, sorted ? "sorted" : "random");
      std::printf("%-22s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f | %9.2f %9.2f | %9.2f %9.2f\n", name,
                  med_us(s, reps, 1, naive), med_us(s, reps, 1, one), med_us(s, reps, 1, pred),
                  med_us(s, reps, 1, ldg), med_us(s, reps, 1, hx), med_us(s, reps, 1, em),
                  med_us(s, reps, 20, naive), med_us(s, reps, 20, hx), host_us(s, reps, naive),
                  host_us(s, reps, hx));
      if (entries == 65536 && sorted) {
        // The host time of one call, 1001 times each, interleaved so that drift hits all alike.
        Wide wide{};
        long n = entries;
        void* args[] = {&a, &didx, &out, &n};
        auto by_api = [&] {
          cudaLaunchKernel(reinterpret_cast<const void*>(naive_gather_kernel), dim3(grid),
                           dim3(256), args, 0, s);
        };
        // The driver's launch, which the runtime's wraps: found through the runtime (no link to
        // libcuda), the kernel's CUfunction by its host symbol.
        PFN_cuLaunchKernel_v4000 cu_launch = nullptr;
        cudaDriverEntryPointQueryResult found{};
        CK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", reinterpret_cast<void**>(&cu_launch),
                                            12000, cudaEnableDefault, &found));
        cudaFunction_t fn = nullptr;
        CK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(naive_gather_kernel)));
        CUresult driver_rc = CUDA_SUCCESS;
        auto by_driver = [&] {
          const CUresult rc = cu_launch(reinterpret_cast<CUfunction>(fn), unsigned(grid), 1, 1, 256,
                                        1, 1, 0, reinterpret_cast<CUstream>(s), args, nullptr);
          if (rc != CUDA_SUCCESS) driver_rc = rc;
        };
        // The driver's launch does the naive kernel's work: its output equals the runtime's.
        CK(cudaMemset(out, 0xFF, entries * 12));
        naive();
        std::vector<float> want(entries * 3), got(entries * 3);
        CK(cudaMemcpy(want.data(), out, entries * 12, cudaMemcpyDeviceToHost));
        CK(cudaMemset(out, 0xFF, entries * 12));
        by_driver();
        CK(cudaMemcpy(got.data(), out, entries * 12, cudaMemcpyDeviceToHost));
        std::printf(
            "  the driver's launch: result %d, output %s the runtime's\n", int(driver_rc),
            std::memcmp(want.data(), got.data(), entries * 12) == 0 ? "equals" : "DIFFERS from");
        auto wide_launch = [&] { empty_wide<<<256, 256, 0, s>>>(wide); };
        auto small_launch = [&] { empty<<<256, 256, 0, s>>>(); };
        std::vector<double> t[6];
        for (int r = 0; r < 1001; ++r) {
          t[0].push_back(host_us(s, 1, naive));
          t[1].push_back(host_us(s, 1, by_api));
          t[2].push_back(host_us(s, 1, small_launch));
          t[3].push_back(host_us(s, 1, wide_launch));
          t[4].push_back(host_us(s, 1, hx));
          t[5].push_back(host_us(s, 1, by_driver));
        }
        const char* what[6] = {"naive <<<>>>",      "naive cudaLaunchKernel",
                               "empty, 0 B params", "empty, 192 B params",
                               "pack_async",        "naive cuLaunchKernel"};
        for (int k = 0; k < 6; ++k) {
          std::sort(t[k].begin(), t[k].end());
          std::printf("  host time of one call, %-24s median %.2f us, 10th pct %.2f, 90th %.2f\n",
                      what[k], t[k][500], t[k][100], t[k][900]);
        }
      }
      CK(cudaStreamSynchronize(s));
      CK(cudaGetLastError());
      cudaFree(a);
      cudaFree(out);
      cudaFree(didx);
      cudaFree(doff);
    }
  return 0;
}
