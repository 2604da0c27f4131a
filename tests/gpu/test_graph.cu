// GridExchange captured in a CUDA graph (issue 57), every rank in one process: a graph of
// fill + exchange + check + count replayed 10,000 times, each replay with new data set and
// every cell of every rank checked on the device against the periodic global field; 8 and
// 27 ranks; local-fused and local-pulse; each capture mode. The host calls only check()
// between replays, as halox-lbm --graph does.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../common/graph_kernels.cuh"
#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "halox/plan.hpp"

using namespace halox;
using namespace halox::testing;

namespace {

struct GraphCase {
  std::array<int, 3> dims;
  TransportKind transport;
  cudaStreamCaptureMode mode;
};

std::string name_of(const ::testing::TestParamInfo<GraphCase>& info) {
  const GraphCase& c = info.param;
  std::string name = std::to_string(c.dims[0] * c.dims[1] * c.dims[2]) + "ranks_" +
                     to_string(c.transport) + "_mode" + std::to_string(int(c.mode));
  for (char& ch : name) ch = ch == '-' ? '_' : ch;
  return name;
}

class Replays : public ::testing::TestWithParam<GraphCase> {};

TEST_P(Replays, TenThousandCheckedOnTheDevice) {
  const GraphCase& c = GetParam();
  const Topology grid(c.dims, {true, true, true}, 0);
  const std::array<long long, 3> interior = {6, 5, 4};  // unequal axes: a swapped one shows
  const int halo = 1;
  std::vector<std::array<std::int64_t, 3>> interiors(grid.size(),
                                                     {interior[0], interior[1], interior[2]});
  ExchangeOptions options;
  options.transport = c.transport;
  GridExchange exchange(
      Ranks::local(grid),
      make_local_grid_plans(grid, interiors, halo, Datatype::of<double>().commit()), options);
  ASSERT_TRUE(exchange.capturable());
  GraphGrid g{{interior[0] * c.dims[0], interior[1] * c.dims[1], interior[2] * c.dims[2]}, halo};
  std::vector<GraphRank> ranks(grid.size());
  std::vector<void*> fields(grid.size());
  const long long cells = (interior[0] + 2) * (interior[1] + 2) * (interior[2] + 2);
  for (int r = 0; r < grid.size(); ++r) {
    const auto at = grid.coords_of(r);
    double* field = nullptr;
    ASSERT_EQ(cudaMalloc(&field, cells * sizeof(double)), cudaSuccess);
    ranks[r] = {field,
                {at[0] * interior[0], at[1] * interior[1], at[2] * interior[2]},
                {interior[0], interior[1], interior[2]}};
    fields[r] = field;
  }
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  exchange.exchange_async(fields, stream);  // the set-up, outside the capture
  constexpr int replays = 10000;
  const ReplayCount count = replay_checked(
      ranks, g, stream, c.mode, replays,
      [&](cudaStream_t s) { exchange.exchange_async(fields, s); }, [&] { exchange.check(); });
  EXPECT_EQ(count.replays, static_cast<unsigned long long>(replays));
  EXPECT_EQ(count.wrong, 0u) << "cells wrong over " << replays << " replays";
  // A call outside the graph afterwards still agrees with the replays' counters.
  exchange.exchange_async(fields, stream);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  exchange.check();
  for (void* p : fields) cudaFree(p);
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(
    LocalRanks, Replays,
    ::testing::Values(
        GraphCase{{2, 2, 2}, TransportKind::local_fused, cudaStreamCaptureModeGlobal},
        GraphCase{{2, 2, 2}, TransportKind::local_pulse, cudaStreamCaptureModeThreadLocal},
        GraphCase{{3, 3, 3}, TransportKind::local_fused, cudaStreamCaptureModeRelaxed},
        GraphCase{{3, 3, 3}, TransportKind::local_pulse, cudaStreamCaptureModeGlobal}),
    name_of);

}  // namespace
