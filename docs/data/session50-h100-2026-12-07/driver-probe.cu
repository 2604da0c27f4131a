// Cost of the driver queries the interposer makes per call (host 8 B goal, issue 55).
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
__global__ void copy_flag(const unsigned long long* src, volatile unsigned long long* dst,
                          volatile unsigned* flag, unsigned epoch) {
  *dst = *src;
  __threadfence_system();
  *flag = epoch;
}
template <class F>
double ns(F f, int n = 1000000) {
  auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count() / n;
}
int main() {
  cuInit(0);
  CUdevice dev;
  cuDeviceGet(&dev, 0);
  std::vector<char> host(4 << 20);
  void* h = host.data();
  CUcontext c;
  unsigned fl;
  int act;
  CUmemorytype mt;
  printf("no context: cuCtxGetCurrent %.1f ns\n", ns([&] { cuCtxGetCurrent(&c); }));
  printf("no context: cuDevicePrimaryCtxGetState %.1f ns\n",
         ns([&] { cuDevicePrimaryCtxGetState(dev, &fl, &act); }));
  printf("no context: cuPointerGetAttribute(host) %.1f ns\n",
         ns([&] { cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)h); }));
  cudaFree(0);
  void* d;
  cudaMalloc(&d, 1 << 20);
  printf("context: cuCtxGetCurrent %.1f ns\n", ns([&] { cuCtxGetCurrent(&c); }));
  printf("context: cuPointerGetAttribute(host) %.1f ns\n",
         ns([&] { cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)h); }));
  printf("context: cuPointerGetAttribute(device) %.1f ns\n",
         ns([&] { cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)d); }));
  CUpointer_attribute at[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED};
  int managed;
  void* vals[2] = {&mt, &managed};
  printf("context: cuPointerGetAttributes(device, 2) %.1f ns\n",
         ns([&] { cuPointerGetAttributes(2, at, vals, (CUdeviceptr)d); }));
  printf("context: cuPointerGetAttributes(host, 2) %.1f ns\n",
         ns([&] { cuPointerGetAttributes(2, at, vals, (CUdeviceptr)h); }));
  // 8 B copies: the staged path's floor.
  void* pin;
  cudaMallocHost(&pin, 4096);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  printf("cudaMemcpy D2H 8 B pinned %.2f us\n",
         ns([&] { cudaMemcpy(pin, d, 8, cudaMemcpyDeviceToHost); }, 20000) / 1e3);
  printf("cudaMemcpy H2D 8 B pinned %.2f us\n",
         ns([&] { cudaMemcpy(d, pin, 8, cudaMemcpyHostToDevice); }, 20000) / 1e3);
  printf("cudaMemcpyAsync+sync D2H 8 B %.2f us\n", ns(
                                                       [&] {
                                                         cudaMemcpyAsync(pin, d, 8,
                                                                         cudaMemcpyDeviceToHost, s);
                                                         cudaStreamSynchronize(s);
                                                       },
                                                       20000) /
                                                       1e3);
  printf("cudaMemcpyAsync+sync H2D 8 B %.2f us\n", ns(
                                                       [&] {
                                                         cudaMemcpyAsync(d, pin, 8,
                                                                         cudaMemcpyHostToDevice, s);
                                                         cudaStreamSynchronize(s);
                                                       },
                                                       20000) /
                                                       1e3);
  printf("cudaMemcpyAsync+query-spin D2H 8 B %.2f us\n",
         ns(
             [&] {
               cudaMemcpyAsync(pin, d, 8, cudaMemcpyDeviceToHost, s);
               while (cudaStreamQuery(s) == cudaErrorNotReady) {
               }
             },
             20000) /
             1e3);
  printf("cudaMemcpy H2D 8 B pageable %.2f us\n",
         ns([&] { cudaMemcpy(d, h, 8, cudaMemcpyHostToDevice); }, 20000) / 1e3);
  printf("cudaMemcpy D2H 8 B pageable %.2f us\n",
         ns([&] { cudaMemcpy(h, d, 8, cudaMemcpyDeviceToHost); }, 20000) / 1e3);
  // A kernel moves the 8 B and raises a flag in mapped host memory; the host spins on the flag.
  unsigned* flag;
  cudaHostAlloc(&flag, 64, cudaHostAllocMapped);
  *flag = 0;
  unsigned* dflag;
  cudaHostGetDevicePointer(&dflag, flag, 0);
  unsigned long long* dpin;
  cudaHostGetDevicePointer(&dpin, pin, 0);
  unsigned epoch = 0;
  printf("kernel+flag D2H 8 B %.2f us\n", ns(
                                              [&] {
                                                ++epoch;
                                                copy_flag<<<1, 1, 0, s>>>((unsigned long long*)d,
                                                                          dpin, dflag, epoch);
                                                while (*(volatile unsigned*)flag != epoch) {
                                                }
                                              },
                                              20000) /
                                              1e3);
  printf("kernel+flag H2D 8 B %.2f us\n", ns(
                                              [&] {
                                                ++epoch;
                                                copy_flag<<<1, 1, 0, s>>>(
                                                    dpin, (unsigned long long*)d, dflag, epoch);
                                                while (*(volatile unsigned*)flag != epoch) {
                                                }
                                              },
                                              20000) /
                                              1e3);
  cudaStream_t blocking;
  cudaStreamCreate(&blocking);
  printf("kernel+flag D2H 8 B, blocking stream %.2f us\n",
         ns(
             [&] {
               ++epoch;
               copy_flag<<<1, 1, 0, blocking>>>((unsigned long long*)d, dpin, dflag, epoch);
               while (*(volatile unsigned*)flag != epoch) {
               }
             },
             20000) /
             1e3);
  printf("cudaMemcpyAsync+query-spin D2H 8 B, blocking stream %.2f us\n",
         ns(
             [&] {
               cudaMemcpyAsync(pin, d, 8, cudaMemcpyDeviceToHost, blocking);
               while (cudaStreamQuery(blocking) == cudaErrorNotReady) {
               }
             },
             20000) /
             1e3);
  printf("cudaMemcpyAsync+sync D2H 8 B, blocking stream %.2f us\n",
         ns(
             [&] {
               cudaMemcpyAsync(pin, d, 8, cudaMemcpyDeviceToHost, blocking);
               cudaStreamSynchronize(blocking);
             },
             20000) /
             1e3);
  printf("check: %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
