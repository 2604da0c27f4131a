// What `auto` picks, every branch, the cross-node ones included (one node here, so no MPI
// run can reach them): direct stores on one node up to the measured copy-engine crossover,
// NVSHMEM's fused kernel (put-with-signal to other nodes) or its stream puts past it, and
// without NVSHMEM staged or pipelined by the measured pipelining crossover (not ipc-fused
// with its host proxy for the other nodes' links, which measured slower than staged).
#include <gtest/gtest.h>

#include <string>

#include "../../src/exchange/auto_choice.hpp"

using halox::TransportKind;
using halox::detail::choose_transport;

namespace {

constexpr std::int64_t kMiB = 1 << 20;
constexpr std::int64_t kNotMeasured = -1;

bool says(const std::string& why, const std::string& what) {
  return why.find(what) != std::string::npos;
}

}  // namespace

TEST(AutoChoice, OneNodeStoresDirectlyUpToTheMeasuredCrossover) {
  auto c = choose_transport(true, true, 64 * 1024, kNotMeasured, kMiB, true);
  EXPECT_EQ(c.kind, TransportKind::ipc_fused);
  EXPECT_TRUE(says(c.why, "not measured")) << c.why;
  EXPECT_TRUE(says(c.why, "every pulse")) << c.why;
  c = choose_transport(true, true, 2 * kMiB, 4 * kMiB, kMiB, false);
  EXPECT_EQ(c.kind, TransportKind::ipc_fused);
  EXPECT_TRUE(says(c.why, "every face of every stage")) << c.why;
  EXPECT_TRUE(says(c.why, "2097152 bytes < the measured crossover of 4194304")) << c.why;
  // From the crossover on, NVSHMEM's copy-engine puts, where NVSHMEM is built in.
  c = choose_transport(true, true, 4 * kMiB, 4 * kMiB, kMiB, true);
  EXPECT_EQ(c.kind, TransportKind::nvshmem_stream);
  EXPECT_TRUE(says(c.why, ">= the measured crossover")) << c.why;
  EXPECT_EQ(choose_transport(true, false, 8 * kMiB, 4 * kMiB, kMiB, true).kind,
            TransportKind::ipc_fused);
}

TEST(AutoChoice, OtherNodesGetPutWithSignalFromTheFusedKernel) {
  auto c = choose_transport(false, true, 64 * 1024, kNotMeasured, kMiB, true);
  EXPECT_EQ(c.kind, TransportKind::nvshmem_fused);
  EXPECT_TRUE(says(c.why, "put-with-signal")) << c.why;
  EXPECT_EQ(choose_transport(false, true, 3 * kMiB, 4 * kMiB, kMiB, false).kind,
            TransportKind::nvshmem_fused);
  c = choose_transport(false, true, 16 * kMiB, 4 * kMiB, kMiB, false);
  EXPECT_EQ(c.kind, TransportKind::nvshmem_stream);
  EXPECT_TRUE(says(c.why, "on the stream")) << c.why;
}

TEST(AutoChoice, WithoutNvshmemOtherNodesAreStagedOrPipelinedBySize) {
  auto c = choose_transport(false, false, kMiB - 1, kNotMeasured, kMiB, true);
  EXPECT_EQ(c.kind, TransportKind::staged);
  EXPECT_TRUE(says(c.why, "1048575 bytes < the measured pipelining crossover of 1048576")) << c.why;
  c = choose_transport(false, false, kMiB, 4 * kMiB, kMiB, true);
  EXPECT_EQ(c.kind, TransportKind::pipelined);
  EXPECT_TRUE(says(c.why, ">=")) << c.why;
  EXPECT_EQ(choose_transport(false, false, 64 * 1024, kNotMeasured, kMiB, false).kind,
            TransportKind::staged);  // grids too
}
