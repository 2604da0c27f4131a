// What `auto` picks, every branch, the cross-node ones included (one node here, so no MPI
// run can reach them): direct stores on one node up to the measured copy-engine crossover,
// NVSHMEM's fused kernel (put-with-signal to other nodes) or its stream puts past it, and
// without NVSHMEM: grids and particles below the measured pipelining crossover through
// ipc-fused (its host proxy for the other nodes' links) where MPI allows the proxy's thread, else
// staged or pipelined by that crossover.
#include <gtest/gtest.h>

#include <string>

#include "../../src/exchange/auto_choice.hpp"

using halox::TransportKind;
using halox::detail::AutoInputs;
using halox::detail::choose_transport;

namespace {

constexpr std::int64_t kMiB = 1 << 20;
constexpr std::int64_t kNotMeasured = -1;

bool says(const std::string& why, const std::string& what) {
  return why.find(what) != std::string::npos;
}

// The rule's inputs in the order the tests read them; the proxy's thread allowed unless said.
halox::detail::AutoChoice choose(bool all_local, bool have_nvshmem, std::int64_t largest,
                                 std::int64_t direct_until, std::int64_t pipelined_from,
                                 bool particle, bool proxy_thread_allowed = true) {
  return choose_transport(AutoInputs{all_local, have_nvshmem, largest, direct_until, pipelined_from,
                                     particle, proxy_thread_allowed});
}

}  // namespace

TEST(AutoChoice, OneNodeStoresDirectlyUpToTheMeasuredCrossover) {
  auto c = choose(true, true, 64 * 1024, kNotMeasured, kMiB, true);
  EXPECT_EQ(c.kind, TransportKind::ipc_fused);
  EXPECT_TRUE(says(c.why, "not measured")) << c.why;
  EXPECT_TRUE(says(c.why, "every pulse")) << c.why;
  c = choose(true, true, 2 * kMiB, 4 * kMiB, kMiB, false);
  EXPECT_EQ(c.kind, TransportKind::ipc_fused);
  EXPECT_TRUE(says(c.why, "every face of every stage")) << c.why;
  EXPECT_TRUE(says(c.why, "2097152 bytes < the measured crossover of 4194304")) << c.why;
  // From the crossover on, NVSHMEM's copy-engine puts, where NVSHMEM is built in.
  c = choose(true, true, 4 * kMiB, 4 * kMiB, kMiB, true);
  EXPECT_EQ(c.kind, TransportKind::nvshmem_stream);
  EXPECT_TRUE(says(c.why, ">= the measured crossover")) << c.why;
  EXPECT_EQ(choose(true, false, 8 * kMiB, 4 * kMiB, kMiB, true).kind, TransportKind::ipc_fused);
}

TEST(AutoChoice, OtherNodesGetPutWithSignalFromTheFusedKernel) {
  auto c = choose(false, true, 64 * 1024, kNotMeasured, kMiB, true);
  EXPECT_EQ(c.kind, TransportKind::nvshmem_fused);
  EXPECT_TRUE(says(c.why, "put-with-signal")) << c.why;
  EXPECT_EQ(choose(false, true, 3 * kMiB, 4 * kMiB, kMiB, false).kind,
            TransportKind::nvshmem_fused);
  c = choose(false, true, 16 * kMiB, 4 * kMiB, kMiB, false);
  EXPECT_EQ(c.kind, TransportKind::nvshmem_stream);
  EXPECT_TRUE(says(c.why, "on the stream")) << c.why;
}

TEST(AutoChoice, WithoutNvshmemOrTheProxysThreadOtherNodesAreStagedOrPipelinedBySize) {
  auto c = choose(false, false, kMiB - 1, kNotMeasured, kMiB, true, false);
  EXPECT_EQ(c.kind, TransportKind::staged);
  EXPECT_TRUE(says(c.why, "1048575 bytes < the measured pipelining crossover of 1048576")) << c.why;
  c = choose(false, false, kMiB, 4 * kMiB, kMiB, true);
  EXPECT_EQ(c.kind, TransportKind::pipelined);
  EXPECT_TRUE(says(c.why, ">=")) << c.why;
  // Grids from the crossover on: pipelined (not measured against the proxy).
  EXPECT_EQ(choose(false, false, 2 * kMiB, kNotMeasured, kMiB, false).kind,
            TransportKind::pipelined);
}

TEST(AutoChoice, WithoutNvshmemGridsAndParticlesReachOtherNodesThroughTheHostProxyPerLink) {
  for (const bool particle : {false, true}) {
    auto c = choose(false, false, 64 * 1024, kNotMeasured, kMiB, particle);
    EXPECT_EQ(c.kind, TransportKind::ipc_fused) << particle;
    EXPECT_TRUE(says(c.why, "host proxy")) << c.why;
    EXPECT_TRUE(says(c.why, "direct stores to this node's peers")) << c.why;
    EXPECT_TRUE(says(c.why, "65536 bytes < the measured pipelining crossover of 1048576")) << c.why;
    // Without MPI_THREAD_MULTIPLE on every rank the proxy cannot call MPI: staged.
    c = choose(false, false, 64 * 1024, kNotMeasured, kMiB, particle, false);
    EXPECT_EQ(c.kind, TransportKind::staged) << particle;
  }
  auto c = choose(false, false, 64 * 1024, kNotMeasured, kMiB, false);
  // NVSHMEM's puts reach other nodes from the kernel itself: no proxy there.
  EXPECT_EQ(choose(false, true, 64 * 1024, kNotMeasured, kMiB, false).kind,
            TransportKind::nvshmem_fused);
  // On one node no link needs the proxy, with or without the thread.
  EXPECT_EQ(choose(true, false, 64 * 1024, kNotMeasured, kMiB, false, false).kind,
            TransportKind::ipc_fused);
}
