// Study: the multiphase fused stream-collide pass over kernel forms (scratch, not shipped).
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "apps/lbm/lattice.hpp"
using namespace halox::lbm;
#define CK(x)                                                     \
  do {                                                            \
    cudaError_t e = (x);                                          \
    if (e != cudaSuccess) {                                       \
      printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); \
      exit(1);                                                    \
    }                                                             \
  } while (0)

// ORDER 0: app order (phi stencil, pull f, collide f, g). 1: pull f first, then the phi stencil.
// 2: pull f and g first. 3: app order, but g collided before f (g loads right after pull f).
template <int ORDER_IN, bool SMEM, int BX, int BY>
__device__ __forceinline__ void sc(const Fields<float>& F, int x, int y, int z, const Params& p,
                                   const float* tile) {
  constexpr int ORDER = ORDER_IN % 10;
  constexpr bool LDGPHI = ORDER_IN / 10 == 1, STCS = ORDER_IN / 10 == 2;
  const Stencil s = stencil(F, x, y, z);
  const long long c = s.c, plane = F.plane();
  float fq[Q], rho, jx, jy, jz, gq[QG];
  if (ORDER == 1 || ORDER == 2) pull_f(F, s, fq, rho, jx, jy, jz);
  if (ORDER == 2) {
#pragma unroll
    for (int q = 0; q < QG; ++q) gq[q] = read_only(&F.g[q * plane + s.at(-ex(q), -ey(q), -ez(q))]);
  }
  float phi, gx = 0, gy = 0, gz = 0, lap = 0;
  auto phin = [&](int sx, int sy, int sz) {
    if constexpr (SMEM) {
      return tile[((1 + sz) * (BY + 2) + 1 + threadIdx.y + sy) * (BX + 2) + 1 + threadIdx.x + sx];
    } else {
      return LDGPHI ? __ldg(&F.phi[s.at(sx, sy, sz)]) : F.phi[s.at(sx, sy, sz)];
    }
  };
  phi = phin(0, 0, 0);
#pragma unroll
  for (int q = 1; q < Q; ++q) {
    const float n = phin(ex(q), ey(q), ez(q));
    const float w = weight19<float>(q);
    gx += w * ex(q) * n;
    gy += w * ey(q) * n;
    gz += w * ez(q) * n;
    lap += w * (n - phi);
  }
  gx *= 3.f;
  gy *= 3.f;
  gz *= 3.f;
  lap *= 6.f;
  const float mu = float(p.A) * (phi * phi * phi - phi) - float(p.kappa) * lap;
  const float Fx = mu * gx, Fy = mu * gy, Fz = mu * gz;
  if (ORDER == 0 || ORDER == 3) pull_f(F, s, fq, rho, jx, jy, jz);
  const float ux = (jx + 0.5f * Fx) / rho, uy = (jy + 0.5f * Fy) / rho, uz = (jz + 0.5f * Fz) / rho;
  const float omega = 1.f / float(p.tau), pre = 1.f - 0.5f * omega;
  const float omega_g = 1.f / float(p.tau_g);
  auto do_g = [&] {
    float rest = phi;
#pragma unroll
    for (int q = 1; q < QG; ++q) {
      const float eq =
          0.5f * (float(p.mobility) * mu + phi * (ex(q) * ux + ey(q) * uy + ez(q) * uz));
      rest -= eq;
      const float g =
          ORDER == 2 ? gq[q] : read_only(&F.g[q * plane + s.at(-ex(q), -ey(q), -ez(q))]);
      if (STCS)
        __stcs(&F.g_next[q * plane + c], g - omega_g * (g - eq));
      else
        F.g_next[q * plane + c] = g - omega_g * (g - eq);
    }
    const float g0 = ORDER == 2 ? gq[0] : read_only(&F.g[c]);
    F.g_next[c] = g0 - omega_g * (g0 - rest);
  };
  if (ORDER == 3) do_g();
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    const float eu = ex(q) * ux + ey(q) * uy + ez(q) * uz;
    const float force = weight19<float>(q) * ((3.f * (ex(q) - ux) + 9.f * eu * ex(q)) * Fx +
                                              (3.f * (ey(q) - uy) + 9.f * eu * ey(q)) * Fy +
                                              (3.f * (ez(q) - uz) + 9.f * eu * ez(q)) * Fz);
    const float v = fq[q] - omega * (fq[q] - equilibrium<float>(q, rho, ux, uy, uz)) + pre * force;
    if (STCS)
      __stcs(&F.f_next[q * plane + c], v);
    else
      F.f_next[q * plane + c] = v;
  }
  if (ORDER != 3) do_g();
}

template <int ORDER, int MINB, bool SMEM, int BX, int BY>
__global__ void __launch_bounds__(256, MINB) kern(Fields<float> F, Params p) {
  __shared__ float tile[SMEM ? 3 * (BY + 2) * (BX + 2) : 1];
  const int x = blockIdx.x * BX + threadIdx.x + 1, y = blockIdx.y * BY + threadIdx.y + 1,
            z = blockIdx.z + 1;
  if constexpr (SMEM) {
    const int x0 = blockIdx.x * BX, y0 = blockIdx.y * BY;  // tile origin (halo coordinates)
    for (int i = threadIdx.y * BX + threadIdx.x; i < 3 * (BY + 2) * (BX + 2); i += BX * BY) {
      const int tx = i % (BX + 2), r = i / (BX + 2), ty = r % (BY + 2), tz = r / (BY + 2);
      tile[i] = F.phi[F.at(x0 + tx, y0 + ty, z - 1 + tz)];
    }
    __syncthreads();
  }
  if (x > F.nx || y > F.ny) return;
  sc<ORDER, SMEM, BX, BY>(F, x, y, z, p, tile);
}
template <int MINB>
__global__ void __launch_bounds__(256, MINB) app(Fields<float> F, Params p) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x + 1,
            y = blockIdx.y * blockDim.y + threadIdx.y + 1;
  if (x > F.nx || y > F.ny) return;
  stream_collide_cell<float>(F, x, y, blockIdx.z + 1, p);
}
__global__ void phik(Fields<float> F) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x + 1,
            y = blockIdx.y * blockDim.y + threadIdx.y + 1;
  if (x > F.nx || y > F.ny) return;
  phi_cell<float>(F, x, y, blockIdx.z + 1);
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 256;
  const int reps = 20;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto timeit = [&](auto&& launch) {
    launch();
    launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int r = 0; r < reps; ++r) {
      cudaEventRecord(e0);
      launch();
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[reps / 2] * 1e-3;
  };
  size_t bytes = size_t(1) << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  double tm = timeit([&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); });
  const double ceil = 2.0 * bytes / tm / 1e9;
  CK(cudaFree(a));
  CK(cudaFree(b));
  Fields<float> F;
  F.nx = F.ny = F.nz = n;
  const bool wrap = argc > 2 && atoi(argv[2]);
  for (int a = 0; a < 3; ++a) F.wrap[a] = wrap;
  F.pitch = (n + 2 + 7) / 8 * 8;
  const long long plane = F.plane();
  std::vector<void*> raws;
  auto alloc = [&](float*& p, long long elems) {
    void* r;
    CK(cudaMalloc(&r, (elems + 8) * 4));
    raws.push_back(r);
    p = (float*)r + 7;
  };
  alloc(F.f, Q * plane);
  alloc(F.f_next, Q * plane);
  alloc(F.g, QG * plane);
  alloc(F.g_next, QG * plane);
  alloc(F.phi, plane);
  {
    std::vector<float> h(Q * plane);
    srand(1);
    for (auto& v : h) v = 0.04f + 0.0005f * (rand() % 100);
    CK(cudaMemcpy(F.f, h.data(), Q * plane * 4, cudaMemcpyHostToDevice));
    for (long long i = 0; i < QG * plane; ++i) h[i] = 0.1f * ((rand() % 200) - 100) / 100.f;
    CK(cudaMemcpy(F.g, h.data(), QG * plane * 4, cudaMemcpyHostToDevice));
  }
  Params p;
  const double cells = double(n) * n * n;
  dim3 blk(256, 1), grd(n / 256 ? (n + 255) / 256 : 1, n, n);
  phik<<<grd, blk>>>(F);
  double tphi = timeit([&] { phik<<<grd, blk>>>(F); });
  printf(
      "copy ceiling %.0f GB/s; multiphase bound (244 B) %.0f MLUPS; phi pass %.1f us (%.1f%% of "
      "ceiling for 32 B)\n",
      ceil, ceil * 1e3 / 244, tphi * 1e6, 100.0 * 32 * cells / tphi / 1e9 / ceil);
  std::vector<float> ref(Q * plane), got(Q * plane);
  auto check = [&]() {
    CK(cudaMemcpy(got.data(), F.f_next, Q * plane * 4, cudaMemcpyDeviceToHost));
    double m = 0;
    for (int z = 1; z <= n; ++z)
      for (int y = 1; y <= n; y += 7)
        for (int x = 1; x <= n; ++x)
          for (int q = 0; q < Q; q += 3) {
            long long i = q * plane + F.at(x, y, z);
            m = std::max(m, (double)fabsf(got[i] - ref[i]));
          }
    return m;
  };
  auto report = [&](const char* name, double t) {
    const double step = t + tphi, mlups = cells / step / 1e6;
    printf(
        "%-40s pass %7.1f us (%5.1f%% of ceiling for 212 B) step %6.0f MLUPS %5.1f%% of bound  "
        "maxdiff %.2g\n",
        name, t * 1e6, 100.0 * 212 * cells / t / 1e9 / ceil, mlups,
        100.0 * mlups * 244 / (ceil * 1e3), check());
    CK(cudaMemset(F.f_next, 0xff, Q * plane * 4));
  };
  app<4><<<grd, blk>>>(F, p);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(ref.data(), F.f_next, Q * plane * 4, cudaMemcpyDeviceToHost));
#define APP(M) report("app, minBlocks " #M, timeit([&] { app<M><<<grd, blk>>>(F, p); }));
  APP(2)
  APP(3) APP(4) APP(5) APP(6)
#define K(O, M, S, BX, BY)                                            \
  {                                                                   \
    dim3 b2(BX, BY), g2(n / BX, n / BY, n);                           \
    report("order " #O " minB " #M " smem " #S " " #BX "x" #BY,       \
           timeit([&] { kern<O, M, S, BX, BY><<<g2, b2>>>(F, p); })); \
  }
      for (int rep = 0; rep < 2; ++rep) {
    APP(3)
    APP(4) K(0, 3, false, 256, 1) K(2, 3, false, 256, 1) K(12, 3, false, 256, 1)
        K(22, 3, false, 256, 1) K(10, 3, false, 256, 1) K(3, 3, false, 256, 1)
            K(13, 3, false, 256, 1)
  }
  return 0;
}
