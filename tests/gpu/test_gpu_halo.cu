// The local engine (every rank in one process, on one GPU or spread over every visible GPU):
// fused per-pulse and all-pulse kernels against brute-force references, 8 and 27 ranks,
// float and double; a hammer of 10,000 exchanges with changing data checked item by item on
// the device; a stalled rank that must become a time-out error naming it, not a hang; stream
// spans of the event log around a kernel of known length.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../common/hammer_kernels.cuh"
#include "../common/particle_world.hpp"
#include "../common/seed.hpp"
#include "halox/device.hpp"
#include "halox/exchange.hpp"
#include "halox/trace.hpp"

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

// Rank r's array on GPU device_of[r] (the current GPU when device_of is empty).
template <class Real>
std::vector<Real*> upload(const std::vector<std::vector<double>>& host,
                          const std::vector<int>& device_of = {}) {
  std::vector<Real*> out;
  for (std::size_t r = 0; r < host.size(); ++r) {
    const auto& h = host[r];
    if (!device_of.empty()) cudaSetDevice(device_of[r]);
    std::vector<Real> converted(h.begin(), h.end());
    Real* d = nullptr;
    cudaMalloc(&d, std::max<std::size_t>(1, converted.size()) * sizeof(Real));
    cudaMemcpy(d, converted.data(), converted.size() * sizeof(Real), cudaMemcpyHostToDevice);
    out.push_back(d);
  }
  if (!device_of.empty()) cudaSetDevice(0);
  return out;
}

// One stream per GPU the exchange uses, in its devices() order.
struct Streams {
  explicit Streams(const std::vector<int>& devices) {
    for (int d : devices) {
      cudaSetDevice(d);
      cudaStream_t s = nullptr;
      cudaStreamCreate(&s);
      streams.push_back(s);
    }
    cudaSetDevice(0);
  }
  ~Streams() {
    for (auto s : streams) cudaStreamDestroy(s);
  }
  void synchronize() const {
    for (auto s : streams) cudaStreamSynchronize(s);
  }
  std::vector<GpuStream> streams;
};

template <class Real>
std::vector<double> download(const Real* d, std::size_t n) {
  std::vector<Real> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(Real), cudaMemcpyDeviceToHost);
  return std::vector<double>(h.begin(), h.end());
}

template <class Real>
void verify_exchange(ParticleExchange& exchange, const HaloCase& s, const Streams& streams,
                     const std::vector<int>& device_of, const std::string& where);

// gpus > 0: the ranks spread over that many GPUs (one stream each), else all on GPU 0.
// direct: ExchangeOptions::testing.direct_in_launch (false: every pulse through staging).
template <class Real>
void check_local(std::array<int, 3> dims, double cutoff, TransportKind kernels, std::uint64_t seed,
                 int gpus = 0, bool direct = true) {
  HaloCase s = make_setup(dims, cutoff, seed, 3000);
  const int n = s.topology.size();
  const std::string where = s.topology.describe() + " cutoff " + std::to_string(cutoff) + " " +
                            to_string(kernels) + (sizeof(Real) == 4 ? " float" : " double") +
                            " on " + std::to_string(std::max(gpus, 1)) + " GPU(s)" +
                            (direct ? "" : ", staged in launch");
  const std::vector<int> device_of =
      gpus > 0 ? Ranks::spread_over_gpus(n, gpus) : std::vector<int>{};
  ExchangeOptions options;
  options.transport = kernels;
  options.testing.direct_in_launch = direct;
  ParticleExchange exchange(Ranks::local(s.topology, device_of), s.plans,
                            sizeof(Real) == 4 ? BasicKind::float32 : BasicKind::float64, options);
  const Streams streams(exchange.devices());
  verify_exchange<Real>(exchange, s, streams, device_of, where);
}

// One forward (three times) and one reverse of case s through `exchange`, whose plans are
// s's, every item checked against the plan's view and the copy counts.
template <class Real>
void verify_exchange(ParticleExchange& exchange, const HaloCase& s, const Streams& streams,
                     const std::vector<int>& device_of, const std::string& where) {
  const int n = s.topology.size();
  const double cutoff = s.cutoff;
  // Forward: home coordinates in, halo poisoned; after the exchange all equal the plan's view.
  std::vector<std::vector<double>> start(n);
  for (int r = 0; r < n; ++r) {
    start[r] = s.xyz[r];
    for (std::size_t k = 3 * s.plans[r].home_count; k < start[r].size(); ++k) start[r][k] = -777.0;
  }
  std::vector<Real*> x = upload<Real>(start, device_of);
  std::vector<void*> xp(x.begin(), x.end());
  for (int repeat = 0; repeat < 3; ++repeat) exchange.forward_async(xp, streams.streams);
  streams.synchronize();
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
  std::vector<Real*> f = upload<Real>(forces, device_of);
  exchange.reverse_async(std::vector<void*>(f.begin(), f.end()), streams.streams);
  streams.synchronize();
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
}

// Both ways between ranks of one launch: direct stores into the peers' arrays, and staging
// with a signal and a wait per pulse.
TEST(LocalEngine, EightRanksOneAndTwoPulses) {
  const auto seed = test_seed("LocalEngine.Eight");
  for (bool direct : {true, false}) {
    for (auto kernels : {TransportKind::local_pulse, TransportKind::local_fused}) {
      check_local<double>({2, 2, 2}, 2.4, kernels, seed, 0, direct);
      check_local<float>({2, 2, 2}, 2.4, kernels, seed + 1, 0, direct);
      check_local<double>({4, 2, 1}, 2.6, kernels, seed + 2, 0, direct);  // two pulses along x
      // Pulses from a rank to itself (periodic axes of one rank): what they deliver is
      // forwarded (and its forces summed) without waiting for their signals.
      check_local<float>({2, 1, 1}, 2.4, kernels, seed + 3, 0, direct);
      check_local<double>({1, 1, 1}, 2.4, kernels, seed + 4, 0, direct);
    }
  }
}

// New plans after a neighbour search: a smaller halo keeps the blocks (signals and counters
// run on, no self-test with the same neighbours), the first plan again fits them, a larger
// halo takes new blocks; every exchange after each change is checked item by item.
TEST(LocalEngine, NewPlansKeepOrReplaceTheBlocks) {
  const auto seed = test_seed("LocalEngine.NewPlans");
  const HaloCase first = make_setup({2, 2, 2}, 2.4, seed, 3000);
  HaloCase smaller = first, larger = first;
  smaller.cutoff = 2.2;
  smaller.xyz = first.xyz;
  for (int r = 0; r < first.topology.size(); ++r) {
    smaller.xyz[r].resize(3 * first.plans[r].home_count);  // home atoms only
  }
  larger.xyz = smaller.xyz;
  larger.cutoff = 2.8;
  smaller.plans =
      build_local_particle_plans(smaller.topology, smaller.world.box, smaller.cutoff, smaller.xyz);
  larger.plans =
      build_local_particle_plans(larger.topology, larger.world.box, larger.cutoff, larger.xyz);
  ParticleExchange exchange(Ranks::local(first.topology), first.plans, BasicKind::float64);
  const Streams streams(exchange.devices());
  verify_exchange<double>(exchange, first, streams, {}, "first plan");
  exchange.set_plans(smaller.plans);
  verify_exchange<double>(exchange, smaller, streams, {}, "smaller halo (blocks kept)");
  exchange.set_plans(first.plans);
  verify_exchange<double>(exchange, first, streams, {}, "first plan again (blocks kept)");
  exchange.set_plans(larger.plans);
  verify_exchange<double>(exchange, larger, streams, {}, "larger halo (new blocks)");
  std::printf("GPU: new plans kept or replaced the blocks, every exchange checked\n");
}

TEST(LocalEngine, TwentySevenRanks) {
  const auto seed = test_seed("LocalEngine.TwentySeven");
  for (bool direct : {true, false}) {
    for (auto kernels : {TransportKind::local_pulse, TransportKind::local_fused}) {
      check_local<double>({3, 3, 3}, 2.4, kernels, seed, 0, direct);      // 1 pulse per axis
      check_local<double>({3, 3, 3}, 3.5, kernels, seed + 1, 0, direct);  // 2 pulses per axis
    }
  }
}

// --- hammer -------------------------------------------------------------------------------

// `steps` forward + reverse exchanges of 8 ranks (or `dims`) on `gpus` GPUs, every item of
// every exchange checked on the device: data must be visible before its signal. `graph`
// (one GPU): one step captured in a CUDA graph in `mode` after one outside (its set-up), then
// replayed `steps` times, the step's data set from a device counter; the host only calls
// check() between replays.
void hammer(std::uint64_t seed, int gpus, long long steps, bool direct = true, bool graph = false,
            std::array<int, 3> dims = {2, 2, 2},
            cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
  HaloCase s = make_setup(dims, 2.4, seed, 2000 * (dims[0] * dims[1] * dims[2]) / 8);
  const int n = s.topology.size();
  const std::vector<int> device_of = Ranks::spread_over_gpus(n, gpus);
  ExchangeOptions options;
  options.transport = TransportKind::local_fused;
  options.testing.direct_in_launch = direct;
  ParticleExchange exchange(Ranks::local(s.topology, device_of), s.plans, BasicKind::float64,
                            options);
  const std::vector<int> devices = exchange.devices();
  const Streams streams(devices);
  std::vector<double*> start = upload<double>(s.xyz, device_of),
                       x = upload<double>(s.xyz, device_of), f = upload<double>(s.xyz, device_of);
  std::vector<int*> copies(n);
  std::vector<unsigned long long*> wrong(n);
  for (int r = 0; r < n; ++r) {
    std::vector<int> c;
    for (int id : s.ids[r]) {
      int k = 0;
      for (int q = 0; q < n; ++q)
        k += images_in(s.world, domain_of(s.topology, s.world.box, q), s.cutoff, id);
      c.push_back(k);
    }
    CUDA_OK(cudaSetDevice(device_of[r]));
    cudaMalloc(&copies[r], std::max<std::size_t>(1, c.size()) * sizeof(int));
    cudaMemcpy(copies[r], c.data(), c.size() * sizeof(int), cudaMemcpyHostToDevice);
    CUDA_OK(cudaMalloc(&wrong[r], 2 * sizeof(unsigned long long)));
    CUDA_OK(cudaMemset(wrong[r], 0, 2 * sizeof(unsigned long long)));
  }
  // Rank r's kernels go on the stream of its GPU.
  std::vector<cudaStream_t> stream_of(n);
  for (int r = 0; r < n; ++r) {
    const auto at = std::find(devices.begin(), devices.end(), device_of[r]);
    stream_of[r] = streams.streams[at - devices.begin()];
  }
  const std::vector<void*> xp(x.begin(), x.end()), fp(f.begin(), f.end());
  auto one_step = [&](long long step, const long long* replay) {
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(device_of[r]));
      set_step<<<64, 256, 0, stream_of[r]>>>(x[r], start[r], s.plans[r].home_count,
                                             s.plans[r].total_count, step, replay);
      set_forces<<<64, 256, 0, stream_of[r]>>>(f[r], s.plans[r].total_count, step, replay);
    }
    exchange.forward_async(xp, streams.streams);
    exchange.reverse_async(fp, streams.streams);
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(device_of[r]));
      check_step<<<64, 256, 0, stream_of[r]>>>(x[r], start[r], s.plans[r].total_count, step,
                                               wrong[r], replay);
      check_forces<<<64, 256, 0, stream_of[r]>>>(f[r], copies[r], s.plans[r].home_count, step,
                                                 wrong[r] + 1, replay);
    }
  };
  if (graph) {
    ASSERT_EQ(gpus, 1);
    ASSERT_TRUE(exchange.capturable());
    const cudaStream_t stream = streams.streams[0];
    long long* replay = nullptr;
    CUDA_OK(cudaMalloc(&replay, sizeof(long long)));
    CUDA_OK(cudaMemset(replay, 0, sizeof(long long)));
    one_step(1, nullptr);  // the set-up, outside the capture
    cudaGraph_t captured = nullptr;
    CUDA_OK(cudaStreamBeginCapture(stream, mode));
    one_step(2, replay);  // replay k moves step 2 + k
    count_replay<<<1, 1, 0, stream>>>(replay);
    CUDA_OK(cudaStreamEndCapture(stream, &captured));
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaGraphInstantiate(&exec, captured, 0));
    for (long long k = 1; k <= steps; ++k) {
      CUDA_OK(cudaGraphLaunch(exec, stream));
      if (k % 1000 == 0) {
        streams.synchronize();
        exchange.check();  // the application's check between replays
      }
    }
    streams.synchronize();
    long long replays = 0;
    CUDA_OK(cudaMemcpy(&replays, replay, sizeof replays, cudaMemcpyDeviceToHost));
    EXPECT_EQ(replays, steps);
    one_step(steps + 2, nullptr);  // a call outside the graph after its replays
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(captured);
    cudaFree(replay);
  } else {
    for (long long step = 1; step <= steps; ++step) {
      one_step(step, nullptr);
      if (step % 1000 == 0) streams.synchronize();
    }
  }
  streams.synchronize();
  CUDA_OK(cudaSetDevice(0));
  exchange.check();
  unsigned long long bad[2] = {0, 0};
  for (int r = 0; r < n; ++r) {
    unsigned long long b[2];
    CUDA_OK(cudaMemcpy(b, wrong[r], sizeof b, cudaMemcpyDeviceToHost));
    bad[0] += b[0];
    bad[1] += b[1];
  }
  EXPECT_EQ(bad[0], 0u) << "wrong coordinates over " << steps << " exchanges on " << gpus
                        << " GPU(s)";
  EXPECT_EQ(bad[1], 0u) << "wrong forces over " << steps << " exchanges on " << gpus << " GPU(s)";
  std::printf(
      "GPU: %lld forward + reverse exchanges of %d local ranks on %d GPU(s) (%s in launch%s), "
      "every item checked\n",
      steps, n, gpus, direct ? "direct" : "staged", graph ? ", replays of a CUDA graph" : "");
  for (auto* p : start) cudaFree(p);
  for (auto* p : x) cudaFree(p);
  for (auto* p : f) cudaFree(p);
  for (auto* p : copies) cudaFree(p);
  for (auto* p : wrong) cudaFree(p);
}

TEST(LocalEngine, TenThousandExchangesCheckedItemByItem) {
  const auto seed = test_seed("LocalEngine.Hammer");
  const long long steps = halox::testing::env_count("HALOX_HAMMER_STEPS", 10000);
  hammer(seed, 1, steps);
  hammer(seed + 1, 1, steps / 5, false);
}

// CUDA graphs: forward + reverse captured once and replayed 10,000 times, 8 and 27 ranks,
// direct and staged in launch, each capture mode.
TEST(LocalEngine, TenThousandReplaysOfACapturedStep) {
  const auto seed = test_seed("LocalEngine.Graph");
  const long long steps = halox::testing::env_count("HALOX_HAMMER_STEPS", 10000);
  hammer(seed, 1, steps, true, true);
  hammer(seed + 1, 1, steps, false, true, {2, 2, 2}, cudaStreamCaptureModeThreadLocal);
  hammer(seed + 2, 1, steps, true, true, {3, 3, 3}, cudaStreamCaptureModeRelaxed);
}

// A graph replayed after a new plan moves nothing and says so through check(); the next
// plan clears it, and a graph captured again replays right.
TEST(LocalEngine, AGraphOfAnEarlierPlanIsRefusedThenCapturedAgain) {
  const auto seed = test_seed("LocalEngine.GraphReplan");
  HaloCase first = make_setup({2, 2, 2}, 2.4, seed, 2000);
  ExchangeOptions options;
  options.transport = TransportKind::local_fused;
  ParticleExchange exchange(Ranks::local(first.topology), first.plans, BasicKind::float64, options);
  std::vector<double*> x = upload<double>(first.xyz);
  const std::vector<void*> xp(x.begin(), x.end());
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  exchange.forward_async(xp, stream);  // the set-up
  cudaGraph_t captured = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  exchange.forward_async(xp, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &captured));
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, captured, 0));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  exchange.check();
  HaloCase second = make_setup({2, 2, 2}, 2.4, seed + 1, 3000);
  exchange.set_plans(second.plans);
  std::vector<double*> y = upload<double>(second.xyz);
  const std::vector<void*> yp(y.begin(), y.end());
  exchange.forward_async(yp, stream);      // the new plan is installed by its first exchange
  CUDA_OK(cudaGraphLaunch(exec, stream));  // the first plan's graph
  CUDA_OK(cudaStreamSynchronize(stream));
  std::string what;
  try {
    exchange.check();
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("a CUDA graph captured on plan 1 was replayed after the exchange moved to "
                      "plan 2"),
            std::string::npos)
      << what;
  // The second plan again (its exchanges checked by hammer's kind of kernels elsewhere): a
  // graph of it replays.
  exchange.set_plans(second.plans);
  exchange.forward_async(yp, stream);
  cudaGraph_t again = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  exchange.forward_async(yp, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &again));
  cudaGraphExec_t exec_again = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec_again, again, 0));
  // The halos poisoned, then filled by the replays alone: against the plan's own coordinates
  // (the builder's halo positions).
  for (std::size_t r = 0; r < y.size(); ++r) {
    std::vector<double> poisoned = second.xyz[r];
    std::fill(poisoned.begin() + 3 * second.plans[r].home_count, poisoned.end(), std::nan(""));
    CUDA_OK(cudaMemcpy(y[r], poisoned.data(), poisoned.size() * sizeof(double),
                       cudaMemcpyHostToDevice));
  }
  for (int k = 0; k < 100; ++k) CUDA_OK(cudaGraphLaunch(exec_again, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_NO_THROW(exchange.check());
  for (std::size_t r = 0; r < y.size(); ++r) {
    std::vector<double> got(second.xyz[r].size());
    CUDA_OK(cudaMemcpy(got.data(), y[r], got.size() * sizeof(double), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (std::size_t k = 0; k < got.size(); ++k) {
      wrong += !(std::fabs(got[k] - second.xyz[r][k]) <= 1e-9 * (1 + std::fabs(got[k])));
    }
    EXPECT_EQ(wrong, 0) << "rank " << r << " of " << got.size() / 3 << " items";
  }
  for (cudaGraphExec_t e : {exec, exec_again}) cudaGraphExecDestroy(e);
  for (cudaGraph_t g : {captured, again}) cudaGraphDestroy(g);
  for (auto* p : x) cudaFree(p);
  for (auto* p : y) cudaFree(p);
  cudaStreamDestroy(stream);
}

// Every visible GPU driven from this process (one GPU: the explicit-device path on it).
TEST(LocalEngine, RanksSpreadOverEveryGpu) {
  const auto seed = test_seed("LocalEngine.AllGpus");
  const int gpus = halox::visible_gpus();
  std::printf("GPU: local engine over %d GPU(s)\n", gpus);
  for (auto kernels : {TransportKind::local_pulse, TransportKind::local_fused}) {
    check_local<double>({2, 2, 2}, 2.4, kernels, seed, gpus);
    check_local<float>({4, 2, 1}, 2.6, kernels, seed + 1, gpus);  // two pulses along x
    check_local<double>({3, 3, 3}, 3.5, kernels, seed + 2, gpus);
  }
  hammer(seed + 3, gpus, halox::testing::env_count("HALOX_HAMMER_STEPS", 10000) / 5);
}

TEST(LocalEngine, AStalledRankBecomesAnErrorNamingIt) {
  const auto seed = test_seed("LocalEngine.Stall");
  HaloCase s = make_setup({2, 2, 2}, 2.4, seed, 2000);
  std::vector<double*> x = upload<double>(s.xyz);
  const std::vector<void*> xp(x.begin(), x.end());
  ExchangeOptions options;
  options.transport = TransportKind::local_fused;
  options.timeout_seconds = 0.2;
  options.testing.stall_rank = 3;
  // The self-test catches it at the first exchange, before any item moves...
  try {
    ParticleExchange broken(Ranks::local(s.topology), s.plans, BasicKind::float64, options);
    broken.forward_async(xp, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const HaloTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("self-test"), std::string::npos) << e.what();
  }
  // ...and without it, the first exchange times out instead of hanging. (With direct stores
  // no rank of a launch waits for another: it could not stall apart from the others. So
  // the pulses go through staging, as with a peer in another process.)
  options.self_test = false;
  options.testing.direct_in_launch = false;
  ParticleExchange exchange(Ranks::local(s.topology), s.plans, BasicKind::float64, options);
  exchange.forward_async(xp, nullptr);
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

__global__ void spin_for(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// A stream span covers the work queued between its ends, on the device clock: a kernel that
// spins for 300 us on one stream gives a span of at least that, named and on its rank's
// track, counted per name and rank; nothing is recorded while recording is off.
TEST(Trace, StreamSpansTimeTheWorkBetweenThem) {
  cudaStream_t a = nullptr, b = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  trace::enable();
  trace::clear();
  for (int k = 0; k < 2; ++k) {
    trace::stream_span_begin("spin", 3, a);
    spin_for<<<1, 1, 0, a>>>(300000);
    trace::stream_span_end("spin", 3, a);
  }
  trace::stream_span_begin("idle", 5, b);
  trace::stream_span_end("idle", 5, b);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<trace::Event> spins, idles;
  for (const trace::Event& e : trace::collect()) {
    if (e.name == "spin") spins.push_back(e);
    if (e.name == "idle") idles.push_back(e);
  }
  ASSERT_EQ(spins.size(), 2u);
  for (std::size_t k = 0; k < spins.size(); ++k) {
    const trace::Event& e = spins[k];
    EXPECT_EQ(e.rank, 3);
    EXPECT_EQ(e.track, "gpu spin");
    EXPECT_EQ(e.exchange, static_cast<std::int64_t>(k));
    const double us = 1e-3 * static_cast<double>(e.end_ns - e.begin_ns);
    EXPECT_GE(us, 300.0);
    EXPECT_LT(us, 100000.0);
    std::printf("GPU: stream span %zu of a 300 us kernel: %.1f us\n", k, us);
  }
  EXPECT_LE(spins[0].end_ns, spins[1].begin_ns);  // one stream: in order
  ASSERT_EQ(idles.size(), 1u);
  EXPECT_EQ(idles[0].rank, 5);
  EXPECT_LT(idles[0].end_ns - idles[0].begin_ns, 300000);
  trace::clear();
  trace::disable();
  trace::stream_span_begin("spin", 3, a);
  trace::stream_span_end("spin", 3, a);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(trace::collect().empty());
  CUDA_OK(cudaStreamDestroy(a));
  CUDA_OK(cudaStreamDestroy(b));
}

}  // namespace
