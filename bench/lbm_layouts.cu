// halox-lbm-layouts: the D3Q19 BGK update on one GPU over field layouts, block shapes and
// kernel forms, against the copy ceiling measured in the same run. It is how halox-lbm's row
// padding was chosen (docs/PERFORMANCE.md): "v0" is the app's own cell function
// (apps/lbm/lattice.hpp) on the app's old layout (rows of nx + 2), "aligned pad P" pads rows
// to P floats with x = 1 on a P * 4-byte boundary, "copy38" moves the same 38 streams with no
// shift and no arithmetic (the layout's own ceiling).
//   halox-lbm-layouts [N]      N^3 interior cells (default 256)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "apps/common/cli.hpp"
#include "apps/lbm/lattice.hpp"
using namespace halox::lbm;
#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                    \
      halox::apps::print_once(std::string("halox-lbm-layouts: CUDA error: ") + \
                              cudaGetErrorString(e) + " (" #x ")");            \
      exit(3);                                                                 \
    }                                                                          \
  } while (0)

// V0: the app's kernel exactly.
struct Box3 {
  int lo[3], n[3];
};
__global__ void __launch_bounds__(256) v0(Fields<float> F, Box3 b, float omega) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= b.n[0] || j >= b.n[1]) return;
  bgk_cell<float>(F, i + b.lo[0], j + b.lo[1], blockIdx.z + b.lo[2], omega);
}

// Generic layout: element (q, x, y, z) at base + q*plane + off + (z*sy + y)*sx + x, 32-bit.
struct Lay {
  int sx, sy, off;
  int plane;
  int nx, ny, nz;
};
template <bool STCS, bool LDG>
__device__ __forceinline__ void bgk32(const float* __restrict__ f, float* __restrict__ fn,
                                      const Lay L, int x, int y, int z, float omega) {
  const int c = L.off + (z * L.sy + y) * L.sx + x;
  float fq[Q];
  float rho = 0, jx = 0, jy = 0, jz = 0;
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    const float* p = f + q * L.plane + c - ex(q) - ey(q) * L.sx - ez(q) * L.sx * L.sy;
    fq[q] = LDG ? __ldg(p) : *p;
    rho += fq[q];
    jx += fq[q] * ex(q);
    jy += fq[q] * ey(q);
    jz += fq[q] * ez(q);
  }
  const float ux = jx / rho, uy = jy / rho, uz = jz / rho;
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    const float v = fq[q] - omega * (fq[q] - equilibrium<float>(q, rho, ux, uy, uz));
    if (STCS)
      __stcs(fn + q * L.plane + c, v);
    else
      fn[q * L.plane + c] = v;
  }
}
template <bool STCS, bool LDG>
__global__ void __launch_bounds__(512) v32(const float* f, float* fn, Lay L, float omega) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x + 1;
  const int y = blockIdx.y * blockDim.y + threadIdx.y + 1;
  if (x > L.nx || y > L.ny) return;
  bgk32<STCS, LDG>(f, fn, L, x, y, blockIdx.z + 1, omega);
}
// several z per thread (ILP across cells)
template <int NZ>
__global__ void __launch_bounds__(256) v32z(const float* f, float* fn, Lay L, float omega) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x + 1;
  const int y = blockIdx.y * blockDim.y + threadIdx.y + 1;
  if (x > L.nx || y > L.ny) return;
#pragma unroll
  for (int k = 0; k < NZ; ++k) bgk32<false, true>(f, fn, L, x, y, blockIdx.z * NZ + k + 1, omega);
}
// pure 38-stream copy, same layout, no shift: the layout's own ceiling
__global__ void __launch_bounds__(256) copy38(const float* f, float* fn, Lay L) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x + 1;
  const int y = blockIdx.y * blockDim.y + threadIdx.y + 1;
  if (x > L.nx || y > L.ny) return;
  const int c = L.off + ((blockIdx.z + 1) * L.sy + y) * L.sx + x;
  float v[Q];
#pragma unroll
  for (int q = 0; q < Q; ++q) v[q] = __ldg(f + q * L.plane + c);
#pragma unroll
  for (int q = 0; q < Q; ++q) fn[q * L.plane + c] = v[q];
}
__global__ void copy4(const float4* a, float4* b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    b[i] = a[i];
}

int main(int argc, char** argv) {
  int n = 256;
  try {
    halox::apps::CommandLine line("halox-lbm-layouts",
                                  "The LBM field layouts behind halox-lbm's padded rows, timed "
                                  "on this GPU (N^3 cells).");
    line.count("--n", n, "cells per axis", 8, 600);
    line.parse(argc, argv);
  } catch (const halox::Error& e) {
    halox::apps::print_once(e.what());
    return 2;
  }
  const int reps = 20;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto timeit = [&](auto&& launch) {
    launch();
    launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int r = 0; r < reps; ++r) {
      CK(cudaEventRecord(e0));
      launch();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[reps / 2] * 1e-3;
  };
  const double cells = (double)n * n * n;
  // copy ceiling
  size_t bytes = size_t(1) << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  double tm = timeit([&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
  double tk = timeit([&] { copy4<<<132 * 16, 256>>>((float4*)a, (float4*)b, bytes / 16); });
  const double ceil = 2.0 * bytes / tm / 1e9;
  printf("copy ceiling: memcpy %.0f GB/s, float4 kernel %.0f GB/s; BGK bound %.0f MLUPS (152 B)\n",
         ceil, 2.0 * bytes / tk / 1e9, ceil * 1e9 / 152 / 1e6);
  CK(cudaFree(a));
  CK(cudaFree(b));
  auto report = [&](const char* name, double t) {
    const double mlups = cells / t / 1e6;
    printf("%-44s %8.3f ms  %8.0f MLUPS  %5.1f%% of bound\n", name, t * 1e3, mlups,
           100.0 * mlups * 152 / (ceil * 1e3));
  };
  // V0 app layout
  {
    Fields<float> F;
    F.nx = F.ny = F.nz = n;
    F.pitch = n + 2;  // rows of nx + 2: the layout before the padding
    size_t pb = F.plane() * sizeof(float) * Q;
    CK(cudaMalloc(&F.f, pb));
    CK(cudaMalloc(&F.f_next, pb));
    std::vector<float> h(pb / 4);
    srand(1);
    for (auto& v : h) v = 0.05f + 0.001f * (rand() % 100);
    CK(cudaMemcpy(F.f, h.data(), pb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(F.f_next, h.data(), pb, cudaMemcpyHostToDevice));
    Box3 bx{{1, 1, 1}, {n, n, n}};
    for (int bxs : {128, 256}) {
      dim3 block(bxs, 256 / bxs), grid((n + bxs - 1) / bxs, (n + block.y - 1) / block.y, n);
      char nm[64];
      snprintf(nm, 64, "v0 app kernel, block %dx%d", block.x, block.y);
      report(nm, timeit([&] { v0<<<grid, block>>>(F, bx, 1.25f); }));
    }
    // same layout via 32-bit path
    Lay L{n + 2, n + 2, 0, (int)F.plane(), n, n, n};
    for (int bxs : {64, 128, 256})
      for (int by : {1, 2, 4}) {
        if (bxs * by > 512) continue;
        dim3 block(bxs, by), grid((n + bxs - 1) / bxs, (n + by - 1) / by, n);
        char nm[64];
        snprintf(nm, 64, "v32 app layout, block %dx%d", bxs, by);
        report(nm, timeit([&] { v32<false, true><<<grid, block>>>(F.f, F.f_next, L, 1.25f); }));
      }
    dim3 block(256, 1), grid(n / 256 ? n / 256 : 1, n, n);
    report("copy38 app layout (no shift)",
           timeit([&] { copy38<<<grid, block>>>(F.f, F.f_next, L); }));
    CK(cudaFree(F.f));
    CK(cudaFree(F.f_next));
  }
  // aligned layouts: pitch rounded to 32 floats, x=1 at a 128 B boundary
  for (int pad : {32, 8}) {
    const int sx = (n + 2 + pad - 1) / pad * pad + (pad == 32 ? 0 : 0);
    Lay L{sx, n + 2, pad - 1, 0, n, n, n};
    long long plane = (long long)L.off + (long long)sx * (n + 2) * (n + 2);
    plane = (plane + 31) / 32 * 32;
    L.plane = (int)plane;
    float *f, *fn;
    size_t pb = plane * 4 * Q;
    CK(cudaMalloc(&f, pb));
    CK(cudaMalloc(&fn, pb));
    std::vector<float> h(pb / 4);
    srand(1);
    for (auto& v : h) v = 0.05f + 0.001f * (rand() % 100);
    CK(cudaMemcpy(f, h.data(), pb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(fn, h.data(), pb, cudaMemcpyHostToDevice));
    for (int bxs : {64, 128, 256})
      for (int by : {1, 2}) {
        dim3 block(bxs, by), grid((n + bxs - 1) / bxs, (n + by - 1) / by, n);
        char nm[64];
        snprintf(nm, 64, "aligned pad %d pitch %d, block %dx%d", pad, sx, bxs, by);
        report(nm, timeit([&] { v32<false, true><<<grid, block>>>(f, fn, L, 1.25f); }));
      }
    dim3 block(128, 1), grid((n + 127) / 128, n, n);
    report("  same, stcs stores, 128x1",
           timeit([&] { v32<true, true><<<grid, block>>>(f, fn, L, 1.25f); }));
    report("  same, plain loads, 128x1",
           timeit([&] { v32<false, false><<<grid, block>>>(f, fn, L, 1.25f); }));
    dim3 g2((n + 127) / 128, n, n / 2), g4((n + 127) / 128, n, n / 4);
    report("  same, 2 z per thread, 128x1",
           timeit([&] { v32z<2><<<g2, block>>>(f, fn, L, 1.25f); }));
    report("  same, 4 z per thread, 128x1",
           timeit([&] { v32z<4><<<g4, block>>>(f, fn, L, 1.25f); }));
    report("  copy38 (no shift)", timeit([&] { copy38<<<grid, block>>>(f, fn, L); }));
    CK(cudaFree(f));
    CK(cudaFree(fn));
  }
  return 0;
}
