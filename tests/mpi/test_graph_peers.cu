// GridExchange captured in a CUDA graph between processes (HALOX_TEST_TRANSPORT): the
// GPU-initiated transports replay 10,000 times, each replay with new data set and every cell
// checked on the device; the others (staged, pipelined, nvshmem-stream, the host proxy) are
// refused at capture time naming themselves and the transports that can, and capturable()
// said so before.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "../common/graph_kernels.cuh"
#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "halox/plan.hpp"

using namespace halox;
using namespace halox::testing;

namespace {

TransportKind test_transport() {
  const char* env = std::getenv("HALOX_TEST_TRANSPORT");
  return env ? parse_transport(env) : TransportKind::staged;
}

bool should_capture(TransportKind kind) {
  if (std::getenv("HALOX_HOST_PROXY") != nullptr) return false;  // the proxy waits on the host
  switch (kind) {
    case TransportKind::ipc_pulse:
    case TransportKind::ipc_fused:
    case TransportKind::nvshmem_pulse:
    case TransportKind::nvshmem_fused: return true;
    default: return false;
  }
}

TEST(GraphPeers, ReplaysOrARefusalNamingTheTransport) {
  const TransportKind kind = test_transport();
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Topology grid = Topology::from_mpi(MPI_COMM_WORLD, {size, 1, 1});
  const auto at = grid.coords();
  const std::array<long long, 3> interior = {7, 5, 6};
  const int halo = 2;
  ExchangeOptions options;
  options.transport = kind;
  GridExchange exchange(grid,
                        build_grid_plan(grid, {interior[0], interior[1], interior[2]}, halo,
                                        Datatype::of<double>().commit()),
                        options);
  const long long cells =
      (interior[0] + 2 * halo) * (interior[1] + 2 * halo) * (interior[2] + 2 * halo);
  double* field = nullptr;
  ASSERT_EQ(cudaMalloc(&field, cells * sizeof(double)), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<void*> fields = {field};  // (a bare array would pick the void* overload)
  exchange.exchange_async(fields, stream);    // the set-up, outside the capture
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const bool expected = should_capture(kind);
  EXPECT_EQ(exchange.capturable(), expected) << to_string(kind);
  const std::vector<GraphRank> ranks = {
      {field, {at[0] * interior[0], 0, 0}, {interior[0], interior[1], interior[2]}}};
  const GraphGrid g{{interior[0] * size, interior[1], interior[2]}, halo};
  constexpr int replays = 10000;
  std::string refused;
  ReplayCount count;
  try {
    count = replay_checked(
        ranks, g, stream, cudaStreamCaptureModeGlobal, replays,
        [&](cudaStream_t s) { exchange.exchange_async(fields, s); }, [&] { exchange.check(); });
  } catch (const Error& e) {
    refused = e.what();
  }
  if (expected) {
    EXPECT_EQ(refused, "");
    EXPECT_EQ(count.replays, static_cast<unsigned long long>(replays));
    EXPECT_EQ(count.wrong, 0u) << "cells wrong over " << replays << " replays, rank "
                               << grid.rank();
  } else {
    const std::string name = exchange.transport_name(field);
    EXPECT_NE(refused.find("(" + name + ") cannot be captured"), std::string::npos) << refused;
    EXPECT_NE(
        refused.find("Capturable: ipc-pulse, ipc-fused, nvshmem-pulse, nvshmem-fused, local-pulse"),
        std::string::npos)
        << refused;
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the refused capture left no sticky error
  }
  MPI_Barrier(MPI_COMM_WORLD);
  cudaFree(field);
  cudaStreamDestroy(stream);
}

}  // namespace
