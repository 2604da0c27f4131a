// The GPU-initiated transports between processes (HALOX_TEST_TRANSPORT: ipc-*, nvshmem-*,
// with HALOX_NVSHMEM_PUTS=1 the put path), hammered: thousands of forward + reverse
// exchanges queued on the stream, alternating as a run's steps do with some of one direction
// in a row, each with new data set and checked on the device, every item of every exchange. The
// peers' kernels then overlap, and with programmatic dependent launch a kernel's blocks are
// scheduled before the one ahead of it ends, so what this catches is a staging area overwritten
// before its reader is done (the ready signals, the wait for the previous kernel) and data read
// before it is visible (release / acquire). And new plans, one far larger than the first:
// new blocks (and, for NVSHMEM, more symmetric heap than the first plan sized) mapped anew.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../common/hammer_kernels.cuh"
#include "../common/particle_world.hpp"
#include "../common/seed.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "halox/plan.hpp"

using namespace halox;
using namespace halox::testing;

namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

TransportKind test_transport() {
  const char* env = std::getenv("HALOX_TEST_TRANSPORT");
  return env ? parse_transport(env) : TransportKind::host;
}

// A world of `atoms` particles on the rank grid `dims`, this rank's plan, and what a
// reverse must leave in each home atom (its copies over all ranks).
struct HammerCase {
  Topology topology;
  double cutoff = 0;
  std::vector<double> xyz;  // home + halo, as the plan built them
  ParticlePlan plan;
  std::vector<int> copies;
  std::string where;
};

HammerCase make_case(std::array<int, 3> dims, double cutoff, std::uint64_t seed, int atoms) {
  HammerCase c{Topology::from_mpi(MPI_COMM_WORLD, dims), cutoff};
  const World w = make_world(seed, atoms);
  std::vector<int> ids;
  home_of(w, c.topology, c.topology.rank(), ids, c.xyz);
  c.plan = build_particle_plan(c.topology, w.box, cutoff, c.xyz);
  c.where = c.topology.describe() + " cutoff " + std::to_string(cutoff) + " (" +
            std::to_string(c.plan.pulses.size()) + " pulses, " +
            std::to_string(c.plan.total_count - c.plan.home_count) + " halo atoms)";
  for (int id : ids) {
    int k = 0;
    for (int q = 0; q < c.topology.size(); ++q)
      k += images_in(w, domain_of(c.topology, w.box, q), cutoff, id);
    c.copies.push_back(k);
  }
  return c;
}

// `steps` forward + reverse exchanges of the case's plan (the exchange has it), queued on
// `stream`, every item of every exchange checked on the device. `graph`: the step pattern
// of the first five steps (a second forward at step 3, a second reverse at step 5) captured
// in a CUDA graph after one step outside (its set-up), and replayed steps / 5 times, each
// replay's data from a device counter; the host calls only check() between replays.
void hammer_steps(ParticleExchange& exchange, const HammerCase& c, cudaStream_t stream,
                  long long steps, bool graph = false) {
  const long long home = c.plan.home_count, total = c.plan.total_count;
  double *start = nullptr, *x = nullptr, *f = nullptr;
  int* dev_copies = nullptr;
  unsigned long long* wrong = nullptr;
  const std::size_t bytes = std::max<std::size_t>(1, c.xyz.size()) * sizeof(double);
  CUDA_OK(cudaMalloc(&start, bytes));
  CUDA_OK(cudaMalloc(&x, bytes));
  CUDA_OK(cudaMalloc(&f, bytes));
  CUDA_OK(cudaMalloc(&dev_copies, std::max<std::size_t>(1, c.copies.size()) * sizeof(int)));
  CUDA_OK(cudaMalloc(&wrong, 2 * sizeof(unsigned long long)));
  CUDA_OK(cudaMemcpy(start, c.xyz.data(), c.xyz.size() * sizeof(double), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dev_copies, c.copies.data(), c.copies.size() * sizeof(int),
                     cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(wrong, 0, 2 * sizeof(unsigned long long)));
  // Alternating, a launch skips the wait for its peers' staging (the launch of the other
  // direction before it implies it is free); two of one direction in a row wait. Some steps
  // add a forward before theirs or a reverse after it, each with data of its own, so that
  // all four hand-overs (forward and reverse after either) are hammered.
  long long* replay = nullptr;  // graph: the device's count of replays
  auto forward = [&](long long value) {
    set_step<<<64, 256, 0, stream>>>(x, start, home, total, value, replay);
    exchange.forward_async(x, stream);
    check_step<<<64, 256, 0, stream>>>(x, start, total, value, wrong, replay);
  };
  auto reverse = [&](long long value) {
    set_forces<<<64, 256, 0, stream>>>(f, total, value, replay);
    exchange.reverse_async(f, stream);
    check_forces<<<64, 256, 0, stream>>>(f, dev_copies, home, value, wrong + 1, replay);
  };
  auto one_step = [&](long long step) {
    if (step % 3 == 0) forward(steps + step);
    forward(step);
    reverse(step);
    if (step % 5 == 0) reverse(step + 3);
  };
  if (graph) {
    ASSERT_TRUE(exchange.capturable()) << c.where;
    one_step(1);  // the set-up, outside the capture
    CUDA_OK(cudaMalloc(&replay, sizeof(long long)));
    CUDA_OK(cudaMemset(replay, 0, sizeof(long long)));
    cudaGraph_t captured = nullptr;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (long long step = 1; step <= 5; ++step) one_step(step);
    count_replay<<<1, 1, 0, stream>>>(replay);
    CUDA_OK(cudaStreamEndCapture(stream, &captured));
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaGraphInstantiate(&exec, captured, 0));
    for (long long k = 1; k <= steps / 5; ++k) {
      CUDA_OK(cudaGraphLaunch(exec, stream));
      if (k % 200 == 0) {
        CUDA_OK(cudaStreamSynchronize(stream));
        exchange.check();
      }
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    long long replays = 0;
    CUDA_OK(cudaMemcpy(&replays, replay, sizeof replays, cudaMemcpyDeviceToHost));
    EXPECT_EQ(replays, steps / 5);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(captured);
    cudaFree(replay);
    replay = nullptr;
  } else {
    for (long long step = 1; step <= steps; ++step) {
      one_step(step);
      if (step % 1000 == 0) CUDA_OK(cudaStreamSynchronize(stream));
    }
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  unsigned long long bad[2] = {0, 0};
  CUDA_OK(cudaMemcpy(bad, wrong, sizeof bad, cudaMemcpyDeviceToHost));
  EXPECT_EQ(bad[0], 0u) << c.where << ": wrong coordinates over " << steps << " exchanges";
  EXPECT_EQ(bad[1], 0u) << c.where << ": wrong forces over " << steps << " exchanges";
  // A device-side wait that timed out is raised by the next exchange.
  EXPECT_NO_THROW(exchange.forward_async(x, stream)) << c.where;
  CUDA_OK(cudaStreamSynchronize(stream));
  if (c.topology.rank() == 0) {
    std::printf("GPU: %lld forward + %lld reverse exchanges, %s, %s: every item checked\n",
                steps + steps / 3, steps + steps / 5, c.where.c_str(),
                to_string(test_transport()).c_str());
  }
  cudaFree(start);
  cudaFree(x);
  cudaFree(f);
  cudaFree(dev_copies);
  cudaFree(wrong);
}

void hammer(std::array<int, 3> dims, double cutoff, std::uint64_t seed, long long steps,
            bool graph = false) {
  const HammerCase c = make_case(dims, cutoff, seed, 2000);
  ParticleExchange exchange(c.topology, c.plan, BasicKind::float64, {test_transport(), 96});
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  hammer_steps(exchange, c, stream, steps, graph);
  cudaStreamDestroy(stream);
}

// CUDA graphs: the queued pattern above captured once, 2,000 replays of 5 steps (10,000
// forward + reverse pairs and 5,333 more exchanges), every item checked on the device.
TEST(PeerTransports, TenThousandStepsReplayedFromACapturedGraph) {
  if (!gpu_initiated(test_transport())) GTEST_SKIP() << "GPU-initiated transports only";
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU";
  const auto seed = test_seed("PeerTransports.Graph");
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  hammer({1, 1, size}, 2.4, seed, env_count("HALOX_HAMMER_STEPS", 10000), true);
}

TEST(PeerTransports, ThousandsOfQueuedExchangesCheckedItemByItem) {
  if (!gpu_initiated(test_transport())) GTEST_SKIP() << "GPU-initiated transports only";
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU";
  const auto seed = test_seed("PeerTransports.Hammer");
  const long long steps = env_count("HALOX_HAMMER_STEPS", 10000);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Split along z, then along x (the pulses to itself along the other axes come first).
  hammer({1, 1, size}, 2.4, seed, steps);
  hammer({size, 1, 1}, 3.0, seed + 1, steps / 5);
}

// New plans after neighbour searches, the second far larger than the first: its blocks
// outgrow what the first plan sized (NVSHMEM: the symmetric heap, sized from the first
// plan, at least 32 MiB), so the exchange takes new ones, and the peers' new mappings must
// serve every item; then the first plan again keeps them.
TEST(PeerTransports, APlanThatOutgrowsTheFirstGetsNewBlocks) {
  if (!gpu_initiated(test_transport())) GTEST_SKIP() << "GPU-initiated transports only";
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU";
  const auto seed = test_seed("PeerTransports.Outgrow");
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const HammerCase small = make_case({1, 1, size}, 2.4, seed, 2000);
  // About 750,000 halo atoms per rank: 18 MB each way, more than the 32 MiB heap in all.
  const HammerCase large = make_case({1, 1, size}, 2.4, seed + 1, 1000000);
  const long long halo_bytes =
      2 * 3 * sizeof(double) * (large.plan.total_count - large.plan.home_count);
  ASSERT_GT(halo_bytes, 32ll << 20) << large.where;
  ParticleExchange exchange(small.topology, small.plan, BasicKind::float64, {test_transport(), 96});
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  hammer_steps(exchange, small, stream, 50);
  exchange.set_plan(large.plan);
  hammer_steps(exchange, large, stream, 20);
  exchange.set_plan(small.plan);
  hammer_steps(exchange, small, stream, 50);
  cudaStreamDestroy(stream);
}

}  // namespace
