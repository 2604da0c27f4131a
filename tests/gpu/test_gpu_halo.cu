// The local engine (every rank in one process on the one GPU): fused per-pulse and
// all-pulse kernels against brute-force references, 8 and 27 ranks, float and double; a
// hammer of 10,000 exchanges with changing data checked item by item on the device; a
// stalled rank that must become a time-out error naming it, not a hang.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../common/particle_world.hpp"
#include "../common/seed.hpp"
#include "halox/gpu_halo.hpp"

using namespace halox;
using namespace halox::testing;

namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

struct HaloCase {
  Topology topology;
  World world;
  double cutoff;
  std::vector<std::vector<int>> ids;     // home ids per rank
  std::vector<std::vector<double>> xyz;  // all local coordinates per rank (plan's view)
  std::vector<ParticlePlan> plans;
};

HaloCase make_setup(std::array<int, 3> dims, double cutoff, std::uint64_t seed, int atoms) {
  HaloCase s{Topology(dims, {true, true, true}, 0), make_world(seed, atoms), cutoff, {}, {}, {}};
  const int n = s.topology.size();
  s.ids.resize(n);
  s.xyz.resize(n);
  for (int r = 0; r < n; ++r) home_of(s.world, s.topology, r, s.ids[r], s.xyz[r]);
  s.plans = build_local_particle_plans(s.topology, s.world.box, cutoff, s.xyz);
  return s;
}

template <class Real>
std::vector<Real*> upload(const std::vector<std::vector<double>>& host) {
  std::vector<Real*> out;
  for (const auto& h : host) {
    std::vector<Real> converted(h.begin(), h.end());
    Real* d = nullptr;
    cudaMalloc(&d, std::max<std::size_t>(1, converted.size()) * sizeof(Real));
    cudaMemcpy(d, converted.data(), converted.size() * sizeof(Real), cudaMemcpyHostToDevice);
    out.push_back(d);
  }
  return out;
}

template <class Real>
std::vector<double> download(const Real* d, std::size_t n) {
  std::vector<Real> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(Real), cudaMemcpyDeviceToHost);
  return std::vector<double>(h.begin(), h.end());
}

template <class Real>
void check_local(std::array<int, 3> dims, double cutoff, FusedKernels kernels, std::uint64_t seed) {
  HaloCase s = make_setup(dims, cutoff, seed, 3000);
  const int n = s.topology.size();
  const std::string where = s.topology.describe() + " cutoff " + std::to_string(cutoff) +
                            (kernels == FusedKernels::all_pulses ? " all_pulses" : " per_pulse") +
                            (sizeof(Real) == 4 ? " float" : " double");
  LocalParticleExchange exchange(s.topology, s.plans,
                                 sizeof(Real) == 4 ? BasicKind::float32 : BasicKind::float64,
                                 {kernels, 5.0, true, -1});
  // Forward: home coordinates in, halo poisoned; after the exchange all equal the plan's view.
  std::vector<std::vector<double>> start(n);
  for (int r = 0; r < n; ++r) {
    start[r] = s.xyz[r];
    for (std::size_t k = 3 * s.plans[r].home_count; k < start[r].size(); ++k) start[r][k] = -777.0;
  }
  std::vector<Real*> x = upload<Real>(start);
  std::vector<void*> xp(x.begin(), x.end());
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  for (int repeat = 0; repeat < 3; ++repeat) exchange.forward(xp, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  exchange.check();
  const double tol = sizeof(Real) == 4 ? 1e-5 : 0.0;
  for (int r = 0; r < n; ++r) {
    const auto got = download(x[r], s.xyz[r].size());
    for (std::size_t k = 0; k < got.size(); ++k) {
      ASSERT_NEAR(got[k], s.xyz[r][k], tol * (1 + std::abs(s.xyz[r][k])))
          << where << " rank " << r << " value " << k;
    }
  }
  // Reverse: each copy of particle i carries (1, 2, 3) * (i + 1); each home atom ends with
  // that times its number of copies over all ranks.
  const auto id_of = image_ids(s.world);
  std::vector<std::vector<double>> forces(n);
  for (int r = 0; r < n; ++r) {
    for (std::size_t k = 0; k < s.xyz[r].size() / 3; ++k) {
      const int id = id_of.at({s.xyz[r][3 * k], s.xyz[r][3 * k + 1], s.xyz[r][3 * k + 2]});
      for (int a = 0; a < 3; ++a) forces[r].push_back((a + 1) * (id + 1.0));
    }
  }
  std::vector<Real*> f = upload<Real>(forces);
  exchange.reverse(std::vector<void*>(f.begin(), f.end()), stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  exchange.check();
  for (int r = 0; r < n; ++r) {
    const auto got = download(f[r], 3 * s.plans[r].home_count);
    for (std::size_t h = 0; h < s.ids[r].size(); ++h) {
      int copies = 0;
      for (int q = 0; q < n; ++q)
        copies += images_in(s.world, domain_of(s.topology, s.world.box, q), cutoff, s.ids[r][h]);
      for (int a = 0; a < 3; ++a) {
        const double want = copies * (a + 1) * (s.ids[r][h] + 1.0);
        ASSERT_NEAR(got[3 * h + a], want, sizeof(Real) == 4 ? 1e-6 * want : 0.0)
            << where << " rank " << r;
      }
    }
  }
  for (auto* p : x) cudaFree(p);
  for (auto* p : f) cudaFree(p);
  cudaStreamDestroy(stream);
}

TEST(LocalEngine, EightRanksOneAndTwoPulses) {
  const auto seed = test_seed("LocalEngine.Eight");
  for (auto kernels : {FusedKernels::per_pulse, FusedKernels::all_pulses}) {
    check_local<double>({2, 2, 2}, 2.4, kernels, seed);
    check_local<float>({2, 2, 2}, 2.4, kernels, seed + 1);
    check_local<double>({4, 2, 1}, 2.6, kernels, seed + 2);  // two pulses along x
  }
}

TEST(LocalEngine, TwentySevenRanks) {
  const auto seed = test_seed("LocalEngine.TwentySeven");
  for (auto kernels : {FusedKernels::per_pulse, FusedKernels::all_pulses}) {
    check_local<double>({3, 3, 3}, 2.4, kernels, seed);      // 1 pulse per axis
    check_local<double>({3, 3, 3}, 3.5, kernels, seed + 1);  // 2 pulses per axis
  }
}

// --- hammer -------------------------------------------------------------------------------

// Home coordinates = start + step * 0.5 (exact in double); halo poisoned with NaN.
__global__ void set_step(double* x, const double* start, long long home, long long total,
                         long long step) {
  for (long long k = blockIdx.x * blockDim.x + threadIdx.x; k < 3 * total;
       k += gridDim.x * blockDim.x) {
    x[k] = k < 3 * home ? start[k] + 0.5 * step : nan("");
  }
}
__global__ void check_step(const double* x, const double* start, long long total, long long step,
                           unsigned long long* wrong) {
  for (long long k = blockIdx.x * blockDim.x + threadIdx.x; k < 3 * total;
       k += gridDim.x * blockDim.x) {
    if (!(fabs(x[k] - (start[k] + 0.5 * step)) <= 1e-9 * (1 + fabs(start[k]))))
      atomicAdd(wrong, 1ull);
  }
}
__global__ void set_forces(double* f, long long total, long long step) {
  for (long long k = blockIdx.x * blockDim.x + threadIdx.x; k < 3 * total;
       k += gridDim.x * blockDim.x) {
    f[k] = 1.0 + (step % 7);
  }
}
__global__ void check_forces(const double* f, const int* copies, long long home, long long step,
                             unsigned long long* wrong) {
  for (long long k = blockIdx.x * blockDim.x + threadIdx.x; k < 3 * home;
       k += gridDim.x * blockDim.x) {
    if (f[k] != copies[k / 3] * (1.0 + (step % 7))) atomicAdd(wrong, 1ull);
  }
}

TEST(LocalEngine, TenThousandExchangesCheckedItemByItem) {
  const auto seed = test_seed("LocalEngine.Hammer");
  HaloCase s = make_setup({2, 2, 2}, 2.4, seed, 2000);
  const int n = s.topology.size();
  LocalParticleExchange exchange(s.topology, s.plans, BasicKind::float64);
  std::vector<double*> start = upload<double>(s.xyz), x = upload<double>(s.xyz),
                       f = upload<double>(s.xyz);
  std::vector<std::vector<double>> copies_host(n);
  std::vector<int*> copies(n);
  for (int r = 0; r < n; ++r) {
    std::vector<int> c;
    for (int id : s.ids[r]) {
      int k = 0;
      for (int q = 0; q < n; ++q)
        k += images_in(s.world, domain_of(s.topology, s.world.box, q), s.cutoff, id);
      c.push_back(k);
    }
    cudaMalloc(&copies[r], std::max<std::size_t>(1, c.size()) * sizeof(int));
    cudaMemcpy(copies[r], c.data(), c.size() * sizeof(int), cudaMemcpyHostToDevice);
  }
  unsigned long long* wrong = nullptr;
  CUDA_OK(cudaMalloc(&wrong, 2 * sizeof(unsigned long long)));
  CUDA_OK(cudaMemset(wrong, 0, 2 * sizeof(unsigned long long)));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  const std::vector<void*> xp(x.begin(), x.end()), fp(f.begin(), f.end());
  const long long steps = halox::testing::env_count("HALOX_HAMMER_STEPS", 10000);
  for (long long step = 1; step <= steps; ++step) {
    for (int r = 0; r < n; ++r) {
      set_step<<<64, 256, 0, stream>>>(x[r], start[r], s.plans[r].home_count,
                                       s.plans[r].total_count, step);
      set_forces<<<64, 256, 0, stream>>>(f[r], s.plans[r].total_count, step);
    }
    exchange.forward(xp, stream);
    exchange.reverse(fp, stream);
    for (int r = 0; r < n; ++r) {
      check_step<<<64, 256, 0, stream>>>(x[r], start[r], s.plans[r].total_count, step, wrong);
      check_forces<<<64, 256, 0, stream>>>(f[r], copies[r], s.plans[r].home_count, step, wrong + 1);
    }
    if (step % 1000 == 0) CUDA_OK(cudaStreamSynchronize(stream));
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  exchange.check();
  unsigned long long bad[2];
  CUDA_OK(cudaMemcpy(bad, wrong, sizeof bad, cudaMemcpyDeviceToHost));
  EXPECT_EQ(bad[0], 0u) << "wrong coordinates over " << steps << " exchanges";
  EXPECT_EQ(bad[1], 0u) << "wrong forces over " << steps << " exchanges";
  std::printf("GPU: %lld forward + reverse exchanges of 8 local ranks, every item checked\n",
              steps);
}

TEST(LocalEngine, AStalledRankBecomesAnErrorNamingIt) {
  const auto seed = test_seed("LocalEngine.Stall");
  HaloCase s = make_setup({2, 2, 2}, 2.4, seed, 2000);
  // The self-test catches it at set-up...
  try {
    LocalParticleExchange broken(s.topology, s.plans, BasicKind::float64,
                                 {FusedKernels::all_pulses, 0.2, true, 3});
    ADD_FAILURE() << "no error";
  } catch (const HaloTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("self-test"), std::string::npos) << e.what();
  }
  // ...and without it, the first exchange times out instead of hanging.
  LocalParticleExchange exchange(s.topology, s.plans, BasicKind::float64,
                                 {FusedKernels::all_pulses, 0.2, false, 3});
  std::vector<double*> x = upload<double>(s.xyz);
  exchange.forward(std::vector<void*>(x.begin(), x.end()), nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  try {
    exchange.check();
    ADD_FAILURE() << "no error";
  } catch (const HaloTimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("timed out"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 3"), std::string::npos) << m;
    EXPECT_NE(m.find("pulse"), std::string::npos) << m;
    std::printf("GPU: stalled rank reported: %s\n", m.c_str());
  }
}

}  // namespace
