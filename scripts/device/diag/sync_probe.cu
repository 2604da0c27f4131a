// Where a synchronous GPU pack's time goes (issue 29: 1 MiB synchronous packs over 1/3 of
// TEMPI's time): host clock around a launch and each way of learning that it finished, for an
// empty kernel and for the 512^3 float x face (one 4-byte element per 2 KiB row), median of
// 3000 after 300 warm-up. Ways: cudaStreamSynchronize; spinning on cudaStreamQuery; an event;
// a flag in mapped pinned host memory written by the kernel's last block, or by
// cuStreamWriteValue32 after it, the host spinning on it. Argument: spin | auto | yield (the
// context's scheduling flag). Standalone (no libhalox):
//   nvcc -O3 -std=c++20 -arch=sm_90 sync_probe.cu -lcuda -o sync_probe && ./sync_probe auto
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define CK(x)                                                                           \
  do {                                                                                  \
    if (auto e_ = (x); e_ != 0) {                                                       \
      std::fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, (int)e_); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

constexpr int kN = 512;

// One 4-byte element per row: the x face of a C-order 512^3 float array. When `flag` is set,
// the last block to finish writes `seq` there (system scope) for the host to see.
__global__ void x_face(const float* __restrict__ a, float* __restrict__ out, unsigned* ticket,
                       volatile unsigned* flag, unsigned seq) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kN * kN) out[i] = a[static_cast<long>(i) * kN];
  if (flag == nullptr) return;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(ticket, 1u) == gridDim.x - 1) {
      *ticket = 0;
      __threadfence_system();
      *flag = seq;
    }
  }
}

__global__ void empty(volatile unsigned* flag, unsigned seq) {
  if (flag != nullptr) {
    __threadfence_system();
    *flag = seq;
  }
}

static double median_us(int reps, const std::function<void()>& f) {
  for (int k = 0; k < 300; ++k) f();
  std::vector<double> t;
  for (int k = 0; k < reps; ++k) {
    const auto h0 = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

static void spin_until(volatile unsigned* flag, unsigned seq) {
  while (*flag != seq) {
  }
  std::atomic_thread_fence(std::memory_order_acquire);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "auto";
  unsigned flags = cudaDeviceScheduleAuto;
  if (!std::strcmp(mode, "spin")) flags = cudaDeviceScheduleSpin;
  if (!std::strcmp(mode, "yield")) flags = cudaDeviceScheduleYield;
  CK(cudaSetDeviceFlags(flags | cudaDeviceMapHost));
  CK(cudaFree(nullptr));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  unsigned* host_flag = nullptr;
  CK(cudaHostAlloc(&host_flag, 64, cudaHostAllocMapped));
  *host_flag = 0;
  unsigned* dev_flag = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_flag), host_flag, 0));
  volatile unsigned* hf = host_flag;
  unsigned* ticket = nullptr;
  CK(cudaMalloc(&ticket, 4));
  CK(cudaMemset(ticket, 0, 4));
  float *a = nullptr, *out = nullptr;
  CK(cudaMalloc(&a, sizeof(float) * kN * kN * kN));
  CK(cudaMalloc(&out, sizeof(float) * kN * kN));
  CK(cudaMemset(a, 0x3C, sizeof(float) * kN * kN * kN));
  const int reps = 3000;
  unsigned seq = 0;
  const int threads = 256, blocks = kN * kN / threads;

  std::printf("scheduling flag: %s\n", mode);
  std::printf("%-52s %9s\n", "case", "median us");
  auto row = [](const char* name, double us) { std::printf("%-52s %9.2f\n", name, us); };
  row("empty: launch only (host return)",
      median_us(reps, [&] { empty<<<1, 32, 0, s>>>(nullptr, 0); }));
  CK(cudaStreamSynchronize(s));
  row("empty: launch + cudaStreamSynchronize", median_us(reps, [&] {
        empty<<<1, 32, 0, s>>>(nullptr, 0);
        CK(cudaStreamSynchronize(s));
      }));
  row("empty: launch + spin on cudaStreamQuery", median_us(reps, [&] {
        empty<<<1, 32, 0, s>>>(nullptr, 0);
        while (cudaStreamQuery(s) == cudaErrorNotReady) {
        }
      }));
  row("empty: launch + event record + synchronize", median_us(reps, [&] {
        empty<<<1, 32, 0, s>>>(nullptr, 0);
        CK(cudaEventRecord(ev, s));
        CK(cudaEventSynchronize(ev));
      }));
  row("empty: launch writing a host flag + spin", median_us(reps, [&] {
        empty<<<1, 32, 0, s>>>(dev_flag, ++seq);
        spin_until(hf, seq);
      }));
  row("empty: launch + cuStreamWriteValue32 + spin", median_us(reps, [&] {
        empty<<<1, 32, 0, s>>>(nullptr, 0);
        CK(cuStreamWriteValue32(s, reinterpret_cast<CUdeviceptr>(dev_flag), ++seq, 0));
        spin_until(hf, seq);
      }));
  CK(cudaStreamSynchronize(s));
  row("x face 512^3 w1: launch + cudaStreamSynchronize", median_us(reps, [&] {
        x_face<<<blocks, threads, 0, s>>>(a, out, ticket, nullptr, 0);
        CK(cudaStreamSynchronize(s));
      }));
  row("x face 512^3 w1: last block writes a host flag + spin", median_us(reps, [&] {
        x_face<<<blocks, threads, 0, s>>>(a, out, ticket, dev_flag, ++seq);
        spin_until(hf, seq);
      }));
  row("x face 512^3 w1: cuStreamWriteValue32 + spin", median_us(reps, [&] {
        x_face<<<blocks, threads, 0, s>>>(a, out, ticket, nullptr, 0);
        CK(cuStreamWriteValue32(s, reinterpret_cast<CUdeviceptr>(dev_flag), ++seq, 0));
        spin_until(hf, seq);
      }));
  CK(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int k = 0; k < 200; ++k) {
    CK(cudaEventRecord(e0, s));
    x_face<<<blocks, threads, 0, s>>>(a, out, ticket, nullptr, 0);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float m = 0;
    CK(cudaEventElapsedTime(&m, e0, e1));
    ms.push_back(m);
  }
  std::sort(ms.begin(), ms.end());
  row("x face 512^3 w1: event-timed kernel", 1000.0 * ms[ms.size() / 2]);
  CK(cudaGetLastError());
  return 0;
}
