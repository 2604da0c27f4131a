// Grid and particle halos on real MPI ranks, checked against independent references: the
// grid halo against the global field's analytic values, the particle halo against a
// brute-force search over every periodic image of a random global particle set.
//
// HALOX_TEST_TRANSPORT=staged|pipelined|mpi-direct runs the same checks on device memory
// (the GPU machine does); the default is host.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../common/grid_field.hpp"
#include "../common/particle_world.hpp"
#include "../common/seed.hpp"
#include "../../src/common/mpi_wait.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "halox/plan.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>
#endif

using namespace halox;
using halox::testing::home_of;
using halox::testing::image_ids;
using halox::testing::images_in;
using halox::testing::make_world;
using halox::testing::World;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

TransportKind test_transport() {
  const char* env = std::getenv("HALOX_TEST_TRANSPORT");
  return env ? parse_transport(env) : TransportKind::host;
}

// nccl-device moves particles only for now; its refusal of grids is tested on its own.
#define SKIP_UNLESS_THE_TRANSPORT_MOVES_GRIDS()       \
  if (test_transport() == TransportKind::nccl_device) \
  GTEST_SKIP() << "nccl-device moves particles only"

// NCCL gives a one-rank communicator no symmetric memory (it has no peer to reach), so on
// one rank nccl-device can only refuse, which Transports.NcclDeviceThatCannotRunIsRefused...
// checks; it moves particles from two ranks on two GPUs.
bool nccl_device_alone() {
  return test_transport() == TransportKind::nccl_device && world_size() == 1;
}

// Runs `exchange(ptr, stream)` on a copy of `data` in the memory the transport moves, and
// copies the result back.
template <class T, class F>
void run_on(std::vector<T>& data, F&& exchange) {
  if (test_transport() == TransportKind::host) {
    exchange(static_cast<void*>(data.data()), nullptr);
    return;
  }
#if HALOX_HAS_CUDA
  void* dev = nullptr;
  const std::size_t bytes = data.size() * sizeof(T);
  ASSERT_EQ(cudaMalloc(&dev, bytes), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, data.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  exchange(dev, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(data.data(), dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaStreamDestroy(stream);
  cudaFree(dev);
#else
  FAIL() << "device transports need a CUDA build";
#endif
}

// Every rank-grid shape for the current number of ranks.
std::vector<std::array<int, 3>> grid_shapes() {
  const int n = world_size();
  std::vector<std::array<int, 3>> shapes;
  for (int x = 1; x <= n; ++x) {
    for (int y = 1; x * y <= n; ++y) {
      if (n % (x * y) == 0) shapes.push_back({x, y, n / (x * y)});
    }
  }
  return shapes;
}

// --- grid -------------------------------------------------------------------------------

using halox::testing::expected_cell;
using halox::testing::global_value;

// A rank's array of a grid field: its interior filled with the global field (plus `shift`,
// to tell fields apart), everything else poisoned.
struct GridField {
  GridPlan plan;
  int components = 1;
  double shift = 0;
  std::vector<double> data;
  static constexpr double kPoison = -12345.0;

  GridField(const Topology& topology, std::array<std::int64_t, 3> interior, int halo,
            int components_, std::array<std::int64_t, 3> padding, double shift_ = 0)
      : components(components_), shift(shift_) {
    const Datatype element = Datatype::contiguous(components, Datatype::of<double>()).commit();
    std::array<std::int64_t, 3> allocated{};
    for (int a = 0; a < 3; ++a) allocated[a] = interior[a] + 2 * halo + padding[a];
    plan = build_grid_plan(topology, interior, halo, element, allocated);
    const auto e = plan.extent;
    const auto c = topology.coords();
    data.assign(static_cast<std::size_t>(e[0] * e[1] * e[2] * components), kPoison);
    for (std::int64_t z = halo; z < interior[2] + halo; ++z)
      for (std::int64_t y = halo; y < interior[1] + halo; ++y)
        for (std::int64_t x = halo; x < interior[0] + halo; ++x)
          for (int k = 0; k < components; ++k)
            at(x, y, z, k) =
                shift + global_value(c[0] * interior[0] + x - halo, c[1] * interior[1] + y - halo,
                                     c[2] * interior[2] + z - halo, k);
  }
  double& at(std::int64_t x, std::int64_t y, std::int64_t z, int k) {
    const auto e = plan.extent;
    return data[static_cast<std::size_t>(((z * e[1] + y) * e[0] + x) * components + k)];
  }
  // Cells that differ from the global field (every halo cell filled, padding untouched);
  // the first few are reported.
  std::int64_t wrong_cells(const Topology& topology) {
    const auto e = plan.extent;
    const auto c = topology.coords();
    const auto interior = plan.interior;
    const auto dims = topology.dims();
    std::array<std::int64_t, 3> global{}, offset{};
    for (int a = 0; a < 3; ++a) {
      global[a] = interior[a] * dims[a];
      offset[a] = c[a] * interior[a];
    }
    std::int64_t wrong = 0;
    for (std::int64_t z = 0; z < e[2]; ++z)
      for (std::int64_t y = 0; y < e[1]; ++y)
        for (std::int64_t x = 0; x < e[0]; ++x)
          for (int k = 0; k < components; ++k) {
            double want = expected_cell({x, y, z}, offset, interior, plan.halo, global,
                                        topology.periodic(), k, kPoison);
            if (want != kPoison) want += shift;
            if (at(x, y, z, k) != want && ++wrong <= 5) {
              ADD_FAILURE() << "rank " << topology.rank() << " cell (" << x << "," << y << "," << z
                            << ") component " << k << ": " << at(x, y, z, k) << " != " << want;
            }
          }
    return wrong;
  }
};

// `padding`: cells allocated beyond interior + 2 * halo per axis (padded rows and planes),
// which must stay untouched.
void check_grid(std::array<int, 3> dims, std::array<bool, 3> periodic,
                std::array<std::int64_t, 3> interior, int halo, int components,
                std::array<std::int64_t, 3> padding = {}) {
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, dims, periodic);
  GridField field(topology, interior, halo, components, padding);
  GridExchange exchange(topology, field.plan, ExchangeOptions{test_transport(), 4096});
  for (int repeat = 0; repeat < 2; ++repeat) {
    run_on(field.data, [&](void* p, GpuStream s) { exchange.exchange_async(p, s); });
  }
  EXPECT_EQ(field.wrong_cells(topology), 0) << topology.describe() << " halo " << halo;
  EXPECT_EQ(exchange.stats().exchanges, 2);
}

// Several fields in one call (GHEX's exchange(f, g)): two fields of different element size
// and padding, and a third like the first, every halo cell of each against the global field
// (each field shifted by its own constant, so a face landing in the wrong field shows).
TEST(GridHalo, SeveralFieldsInOneCall) {
  SKIP_UNLESS_THE_TRANSPORT_MOVES_GRIDS();
  for (const auto& dims : grid_shapes()) {
    Topology topology = Topology::from_mpi(MPI_COMM_WORLD, dims, {true, true, true});
    std::vector<GridField> fields;
    fields.emplace_back(topology, std::array<std::int64_t, 3>{5, 4, 3}, 1, 2,
                        std::array<std::int64_t, 3>{1, 0, 0}, 0.0);
    fields.emplace_back(topology, std::array<std::int64_t, 3>{5, 4, 3}, 1, 1,
                        std::array<std::int64_t, 3>{0, 2, 1}, 0.5);
    fields.emplace_back(topology, std::array<std::int64_t, 3>{5, 4, 3}, 1, 2,
                        std::array<std::int64_t, 3>{1, 0, 0}, 0.125);
    std::vector<GridPlan> plans;
    for (const GridField& f : fields) plans.push_back(f.plan);
    GridExchange exchange(Ranks::mpi(topology), plans, ExchangeOptions{test_transport(), 4096});
    ASSERT_EQ(exchange.fields(), 3);
    std::vector<void*> arrays;
    for (GridField& f : fields) arrays.push_back(f.data.data());
    const bool device = test_transport() != TransportKind::host;
#if HALOX_HAS_CUDA
    if (device) {
      for (std::size_t i = 0; i < fields.size(); ++i) {
        const std::size_t bytes = fields[i].data.size() * sizeof(double);
        ASSERT_EQ(cudaMalloc(&arrays[i], bytes), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(arrays[i], fields[i].data.data(), bytes, cudaMemcpyHostToDevice),
                  cudaSuccess);
      }
    }
#else
    ASSERT_FALSE(device) << "device transports need a CUDA build";
#endif
    for (int repeat = 0; repeat < 2; ++repeat) exchange.exchange(arrays);
    const std::string transport = exchange.transport_name(arrays[0]);
    EXPECT_THROW(exchange.exchange(arrays[0]), Error);  // one array for three fields
#if HALOX_HAS_CUDA
    if (device) {
      for (std::size_t i = 0; i < fields.size(); ++i) {
        ASSERT_EQ(cudaMemcpy(fields[i].data.data(), arrays[i],
                             fields[i].data.size() * sizeof(double), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        cudaFree(arrays[i]);
      }
    }
#endif
    for (std::size_t i = 0; i < fields.size(); ++i) {
      EXPECT_EQ(fields[i].wrong_cells(topology), 0)
          << topology.describe() << " field " << i << " over " << transport;
    }
    EXPECT_EQ(exchange.stats().exchanges, 2);
  }
}

// Two exchanges on one Topology, each driven by a thread of its own at the same time (host
// fields): each exchange has its own communicator, so neither takes the other's messages.
// Before, with the same tags on the same communicator, halo cells were swapped between them.
TEST(GridHalo, TwoExchangesOnOneTopologyInTwoThreads) {
  if (test_transport() != TransportKind::host) GTEST_SKIP() << "host fields";
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) GTEST_SKIP() << "MPI without MPI_THREAD_MULTIPLE";
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD);
  const std::array<std::int64_t, 3> interior{6, 5, 4};
  GridField a(topology, interior, 1, 1, {0, 0, 0}, 0.0);
  GridField b(topology, interior, 1, 1, {0, 0, 0}, 0.5);  // other values: a swap shows
  GridExchange first(topology, a.plan), second(topology, b.plan);
  auto drive = [](GridExchange& exchange, GridField& field) {
    for (int i = 0; i < 200; ++i) exchange.exchange(field.data.data());
  };
  std::thread one(drive, std::ref(first), std::ref(a));
  std::thread two(drive, std::ref(second), std::ref(b));
  one.join();
  two.join();
  EXPECT_EQ(a.wrong_cells(topology), 0);
  EXPECT_EQ(b.wrong_cells(topology), 0);
}

// One exchange called from two threads at once: rank 0 calls it from two threads while the
// other ranks hold back, so neither call can finish before the other starts. Exactly one is
// refused, naming the misuse; the other completes once the ranks go on, its halo right.
TEST(GridHalo, OneExchangeFromTwoThreadsAtOnceIsRefused) {
  if (test_transport() != TransportKind::host) GTEST_SKIP() << "host fields";
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) GTEST_SKIP() << "MPI without MPI_THREAD_MULTIPLE";
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD);
  GridField field(topology, {6, 5, 4}, 1, 1, {0, 0, 0}, 0.0);
  GridExchange exchange(topology, field.plan);
  MPI_Comm go;
  MPI_Comm_dup(MPI_COMM_WORLD, &go);
  if (world_rank() == 0) {
    std::atomic<int> refused{0};
    std::string message;
    std::mutex message_mutex;
    auto call = [&] {
      try {
        exchange.exchange(field.data.data());
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(message_mutex);
        message = e.what();
        ++refused;
      }
    };
    std::thread one(call), two(call);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (refused.load() == 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int peer = 1; peer < world_size(); ++peer) MPI_Send(nullptr, 0, MPI_BYTE, peer, 0, go);
    one.join();
    two.join();
    EXPECT_EQ(refused.load(), 1);
    EXPECT_NE(message.find("called from two threads at once"), std::string::npos) << message;
  } else {
    MPI_Recv(nullptr, 0, MPI_BYTE, 0, 0, go, MPI_STATUS_IGNORE);
    exchange.exchange(field.data.data());
  }
  MPI_Comm_free(&go);
  EXPECT_EQ(field.wrong_cells(topology), 0);
  EXPECT_EQ(exchange.stats().exchanges, 1);
}

// Every transport moves grid halos, the GPU-initiated ones with one fused kernel for all stages.
TEST(GridHalo, EveryRankGridShapePeriodic) {
  SKIP_UNLESS_THE_TRANSPORT_MOVES_GRIDS();
  for (auto dims : grid_shapes()) check_grid(dims, {true, true, true}, {6, 5, 4}, 2, 3);
}

TEST(GridHalo, PaddedRowsAndPlanes) {
  SKIP_UNLESS_THE_TRANSPORT_MOVES_GRIDS();
  for (auto dims : grid_shapes()) check_grid(dims, {true, true, true}, {5, 4, 3}, 1, 2, {3, 1, 2});
}

TEST(GridHalo, NonPeriodicEdgesStayUntouched) {
  SKIP_UNLESS_THE_TRANSPORT_MOVES_GRIDS();
  for (auto dims : grid_shapes()) check_grid(dims, {false, true, false}, {4, 4, 5}, 1, 1);
}

TEST(GridHalo, MismatchedPlansAreCaughtWhenBuilt) {
  SKIP_UNLESS_THE_TRANSPORT_MOVES_GRIDS();
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, {world_size(), 1, 1});
  // Rank 1 has one more cell along y: its x faces do not match its neighbours'.
  const std::int64_t ny = world_rank() == 1 ? 7 : 6;
  try {
    build_grid_plan(topology, {4, ny, 4}, 1, Datatype::of<float>().commit());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("pulse"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
  }
}

// Ranks that build their topologies differently are told collectively, before any
// point-to-point message (which would otherwise wait for a peer that never sends).
TEST(GridHalo, RanksThatDisagreeOnTheRankGridAreToldNotHung) {
  SKIP_UNLESS_THE_TRANSPORT_MOVES_GRIDS();
  if (world_size() != 2) GTEST_SKIP() << "needs two ranks";
  const std::array<int, 3> dims =
      world_rank() == 0 ? std::array<int, 3>{1, 1, 2} : std::array<int, 3>{1, 2, 1};
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, dims);
  EXPECT_THROW(build_grid_plan(topology, {4, 4, 4}, 1, Datatype::of<float>().commit()), Error);
  std::vector<double> xyz = {0.1, 0.1, 0.1};
  EXPECT_THROW(migrate_particles(topology, Box{{4.0, 4.0, 4.0}}, xyz, 3), Error);
  EXPECT_THROW(build_particle_plan(topology, Box{{4.0, 4.0, 4.0}}, 1.0, xyz), Error);
  // Alike in shape but not in periodicity.
  Topology periodic =
      Topology::from_mpi(MPI_COMM_WORLD, {2, 1, 1}, {world_rank() == 0, true, true});
  EXPECT_THROW(build_grid_plan(periodic, {4, 4, 4}, 1, Datatype::of<float>().commit()), Error);
}

// An exchange whose plans differ between ranks (built without validation) raises a clear
// error on both ranks of the mismatched link, instead of a short halo on one and an abort in
// MPI_ERR_TRUNCATE on the other.
TEST(GridHalo, ExchangesCheckReceivedSizesAgainstThePlan) {
  SKIP_UNLESS_THE_TRANSPORT_MOVES_GRIDS();
  if (world_size() != 2) GTEST_SKIP() << "needs two ranks";
  const TransportKind t = test_transport();
  if (t != TransportKind::host && t != TransportKind::staged && t != TransportKind::pipelined &&
      t != TransportKind::mpi_direct) {
    GTEST_SKIP() << "the MPI-based transports check message sizes on the host";
  }
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, {2, 1, 1});
  const std::int64_t ny = world_rank() == 1 ? 7 : 6;  // rank 1's x faces are larger
  GridPlan plan = make_grid_plan(topology, {4, ny, 4}, 1, Datatype::of<double>().commit());
  const auto e = plan.extent;
  std::vector<double> field(static_cast<std::size_t>(e[0] * e[1] * e[2]), 1.0);
  GridExchange exchange(topology, plan, ExchangeOptions{t, 4096});
  try {
    run_on(field, [&](void* p, GpuStream s) { exchange.exchange_async(p, s); });
    ADD_FAILURE() << "no error on rank " << world_rank();
  } catch (const Error& error) {
    const std::string m = error.what();
    EXPECT_NE(m.find("plans differ"), std::string::npos) << m;
    EXPECT_NE(m.find("from rank " + std::to_string(1 - world_rank())), std::string::npos) << m;
  }
}

// nccl-device refuses a grid exchange at its first exchange of device memory, naming what
// to choose instead.
TEST(GridHalo, NcclDeviceRefusesGridsNamingTheAlternatives) {
  if (test_transport() != TransportKind::nccl_device) GTEST_SKIP() << "nccl-device only";
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, {0, 0, 0}, {true, true, true});
  GridField field(topology, {4, 4, 4}, 1, 1, {0, 0, 0});
  GridExchange exchange(topology, field.plan, ExchangeOptions{test_transport(), 4096});
  try {
    run_on(field.data, [&](void* p, GpuStream s) { exchange.exchange_async(p, s); });
    ADD_FAILURE() << "nccl-device moved a grid";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("particles only"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ipc-fused"), std::string::npos) << e.what();
  }
}

// halox talks on its own duplicate of the communicator: a user's wildcard receive posted on
// the communicator before a plan is built and exchanges run gets only the user's message.
TEST(GridHalo, UserWildcardReceiveGetsOnlyTheUsersMessage) {
  SKIP_UNLESS_THE_TRANSPORT_MOVES_GRIDS();
  const int rank = world_rank(), size = world_size();
  std::array<long long, 2> got = {-1, -1};
  MPI_Request user;
  ASSERT_EQ(
      MPI_Irecv(got.data(), 2, MPI_LONG_LONG, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &user),
      MPI_SUCCESS);
  {
    Topology topology = Topology::from_mpi(MPI_COMM_WORLD, {size, 1, 1});
    const Datatype element = Datatype::of<double>().commit();
    GridPlan plan = build_grid_plan(topology, {4, 3, 2}, 1, element);
    const auto e = plan.extent;
    std::vector<double> field(static_cast<std::size_t>(e[0] * e[1] * e[2]), 1.0 + rank);
    GridExchange exchange(topology, plan, ExchangeOptions{test_transport(), 4096});
    for (int i = 0; i < 3; ++i) {
      run_on(field, [&](void* p, GpuStream s) { exchange.exchange_async(p, s); });
    }
    int done = 0;
    ASSERT_EQ(MPI_Test(&user, &done, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_FALSE(done) << "the user's wildcard receive matched one of halox's messages";
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every rank has tested before any user message is sent
  // Now the user's own message, from the next rank, with a tag halox also uses.
  const std::array<long long, 2> mine = {4242, rank};
  ASSERT_EQ(MPI_Send(mine.data(), 2, MPI_LONG_LONG, (rank + size - 1) % size, 500, MPI_COMM_WORLD),
            MPI_SUCCESS);
  MPI_Status status;
  ASSERT_EQ(MPI_Wait(&user, &status), MPI_SUCCESS);
  EXPECT_EQ(got[0], 4242);
  EXPECT_EQ(got[1], (rank + 1) % size);
  EXPECT_EQ(status.MPI_TAG, 500);
}

// --- particles ----------------------------------------------------------------------------

void check_particles(std::array<int, 3> dims, double cutoff, std::uint64_t seed) {
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, dims);
  const World w = make_world(seed, 900);
  const Domain mine = domain_of(topology, w.box, topology.rank());
  std::vector<double> xyz;
  std::vector<int> home_ids;
  const int n = w.size();
  home_of(w, topology, topology.rank(), home_ids, xyz);
  ParticlePlan plan = build_particle_plan(topology, w.box, cutoff, xyz);
  const std::string where = topology.describe() + " cutoff " + std::to_string(cutoff);

  // 1. The local set is exactly the images of all particles in [lo, hi + cutoff).
  std::vector<std::array<double, 3>> want, got;
  for (int i = 0; i < n; ++i) images_in(w, mine, cutoff, i, &want);
  for (std::int64_t i = 0; i < plan.total_count; ++i)
    got.push_back({xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]});
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  ASSERT_EQ(got.size(), want.size()) << where;
  for (std::size_t k = 0; k < got.size(); ++k) {
    for (int a = 0; a < 3; ++a) ASSERT_NEAR(got[k][a], want[k][a], 1e-12) << where;
  }
  for (const auto& p : plan.pulses) {
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(p.send_index.size()); ++k) {
      EXPECT_EQ(p.send_index[k] >= plan.home_count, k >= p.first_forwarded) << where;
    }
  }

  // 2. Forward moves the same coordinates the plan saw (float and double), poisoned halo.
  for (int repeat = 0; repeat < 2; ++repeat) {
    std::vector<double> x(xyz.size(), -777.0);
    std::copy(xyz.begin(), xyz.begin() + 3 * plan.home_count, x.begin());
    ParticleExchange exchange(topology, plan, BasicKind::float64, {test_transport(), 96});
    run_on(x, [&](void* p, GpuStream s) { exchange.forward_async(p, s); });
    EXPECT_EQ(x, xyz) << where;
    std::vector<float> xf(xyz.size(), -777.0f), ref(xyz.size());
    for (std::size_t k = 0; k < xyz.size(); ++k) {
      if (k < static_cast<std::size_t>(3 * plan.home_count)) xf[k] = static_cast<float>(xyz[k]);
      ref[k] = static_cast<float>(xyz[k]);
    }
    ParticleExchange exchange_f(topology, plan, BasicKind::float32, {test_transport(), 96});
    run_on(xf, [&](void* p, GpuStream s) { exchange_f.forward_async(p, s); });
    for (std::size_t k = 0; k < xyz.size(); ++k)
      ASSERT_NEAR(xf[k], ref[k], 2e-5 * std::abs(ref[k]) + 1e-6);
  }

  // 3. Reverse: every copy of atom i carries force (1, 2, 3) * (i + 1); after the reverse
  // exchange each home atom holds that times the number of copies over all ranks.
  const auto id_of = image_ids(w);
  std::vector<double> f(xyz.size());
  for (std::int64_t k = 0; k < plan.total_count; ++k) {
    auto found = id_of.find({xyz[3 * k], xyz[3 * k + 1], xyz[3 * k + 2]});
    ASSERT_NE(found, id_of.end());
    for (int a = 0; a < 3; ++a) f[3 * k + a] = (a + 1) * (found->second + 1.0);
  }
  ParticleExchange exchange(topology, plan, BasicKind::float64, {test_transport(), 96});
  run_on(f, [&](void* p, GpuStream s) { exchange.reverse_async(p, s); });
  for (std::size_t h = 0; h < home_ids.size(); ++h) {
    int copies = 0;
    for (int r = 0; r < topology.size(); ++r) {
      copies += images_in(w, domain_of(topology, w.box, r), cutoff, home_ids[h]);
    }
    for (int a = 0; a < 3; ++a) {
      ASSERT_EQ(f[3 * h + a], copies * (a + 1) * (home_ids[h] + 1.0))
          << where << " atom " << home_ids[h];
    }
  }

  // 4. Pair ownership: over all ranks, every pair within the cutoff is owned exactly once.
  long long owned = 0, expected = 0;
  for (std::int64_t i = 0; i < plan.total_count; ++i)
    for (std::int64_t j = i + 1; j < plan.total_count; ++j) {
      double r2 = 0;
      for (int a = 0; a < 3; ++a)
        r2 += (xyz[3 * i + a] - xyz[3 * j + a]) * (xyz[3 * i + a] - xyz[3 * j + a]);
      if (r2 < cutoff * cutoff && plan.owns_pair(&xyz[3 * i], &xyz[3 * j])) ++owned;
      // The home-axes masks (what a float code decides ownership by) own the same pairs.
      const bool by_masks =
          ParticlePlan::owns_pair(plan.home_axes(&xyz[3 * i]), plan.home_axes(&xyz[3 * j]));
      if (r2 < cutoff * cutoff && by_masks != plan.owns_pair(&xyz[3 * i], &xyz[3 * j])) {
        ADD_FAILURE() << where << ": the masks and the coordinates disagree on pair " << i << ", "
                      << j;
      }
    }
  long long total = 0;
  MPI_Allreduce(&owned, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      double r2 = 0;
      for (int a = 0; a < 3; ++a) {
        double d = w.xyz[3 * i + a] - w.xyz[3 * j + a];
        d -= w.box.length[a] * std::round(d / w.box.length[a]);
        r2 += d * d;
      }
      if (r2 < cutoff * cutoff) ++expected;
    }
  EXPECT_EQ(total, expected) << where;
}

TEST(ParticleHalo, EveryRankGridShapeOneAndTwoPulses) {
  if (nccl_device_alone()) GTEST_SKIP() << "nccl-device needs two ranks (symmetric memory)";
  const std::uint64_t seed = halox::testing::test_seed("ParticleHalo", 0);
  for (auto dims : grid_shapes()) {
    check_particles(dims, 2.6, seed);  // 2 or more pulses along axes split 4 or more ways
    check_particles(dims, 1.2, seed + 1);
  }
}

// The local engine's builders (every rank of the grid in one process) against the MPI ones:
// after every atom moved by up to 0.6 (across domain faces and the periodic box), this rank's
// migrated atoms, then its plan and local coordinates, are identical, order included.
TEST(ParticleHalo, LocalMigrationAndPlansEqualTheMpiOnes) {
  const std::uint64_t seed = halox::testing::test_seed("ParticleHalo.Local", 0);
  for (auto dims : grid_shapes()) {
    Topology topology = Topology::from_mpi(MPI_COMM_WORLD, dims);
    const World w = make_world(seed, 900);
    const std::string where = topology.describe();
    std::mt19937_64 rng(seed + 1);
    std::vector<double> moved(w.xyz);
    for (double& v : moved) v += std::uniform_real_distribution<double>(-0.6, 0.6)(rng);
    // Each rank's atoms before the move, as (x, y, z, id), with the moved positions.
    std::vector<std::vector<double>> all(topology.size());
    for (int r = 0; r < topology.size(); ++r) {
      std::vector<int> ids;
      std::vector<double> xyz;
      home_of(w, topology, r, ids, xyz);
      for (int id : ids) {
        all[r].insert(all[r].end(), &moved[3 * id], &moved[3 * id + 3]);
        all[r].push_back(id);
      }
    }
    // The same calls over both kinds of Ranks: this process's one rank over MPI, every rank
    // of the grid in this process.
    const Ranks over_mpi = Ranks::mpi(topology), in_process = Ranks::local(topology);
    std::vector<std::vector<double>> mine = {all[topology.rank()]};
    migrate_particles(over_mpi, w.box, mine, 4);
    migrate_particles(in_process, w.box, all, 4);
    ASSERT_EQ(mine.front(), all[topology.rank()]) << where << ": migrated atoms";

    std::vector<std::vector<double>> xyz(topology.size());
    for (int r = 0; r < topology.size(); ++r) {
      for (std::size_t i = 0; i < all[r].size(); i += 4) {
        xyz[r].insert(xyz[r].end(), &all[r][i], &all[r][i + 3]);
      }
    }
    std::vector<std::vector<double>> my_xyz = {xyz[topology.rank()]};
    const ParticlePlan plan = build_particle_plans(over_mpi, w.box, 2.6, my_xyz).at(0);
    const std::vector<ParticlePlan> plans = build_particle_plans(in_process, w.box, 2.6, xyz);
    const ParticlePlan& local = plans.at(static_cast<std::size_t>(topology.rank()));
    ASSERT_EQ(my_xyz.front(), xyz[topology.rank()]) << where << ": local coordinates";
    ASSERT_EQ(plan.home_count, local.home_count) << where;
    ASSERT_EQ(plan.total_count, local.total_count) << where;
    ASSERT_EQ(plan.pulses.size(), local.pulses.size()) << where;
    for (std::size_t p = 0; p < plan.pulses.size(); ++p) {
      EXPECT_EQ(plan.pulses[p].send_index, local.pulses[p].send_index) << where << " pulse " << p;
      EXPECT_EQ(plan.pulses[p].recv_offset, local.pulses[p].recv_offset) << where;
      EXPECT_EQ(plan.pulses[p].shift, local.pulses[p].shift) << where;
    }
  }
}

// Particles over blocks on the GPU (HALOX_TEST_TRANSPORT set, a GPU there): device copies of
// the coordinates `x` and forces `f` forward and reverse through the test's transport, each
// then equal, byte for byte, to the host exchange's `x_after` and `f_after` (the forces on
// the home items). The kinds that
// take one rank per process are refused, naming what blocks take.
void expect_block_particles_on_device(const Ranks& ranks, const std::vector<ParticlePlan>& plans,
                                      const std::vector<std::vector<double>>& x,
                                      const std::vector<std::vector<double>>& f,
                                      const std::vector<std::vector<double>>& x_after,
                                      const std::vector<std::vector<double>>& f_after,
                                      const std::string& where) {
#if HALOX_HAS_CUDA
  const TransportKind kind = test_transport();
  if (kind == TransportKind::host || kind == TransportKind::nccl || visible_gpus() == 0) return;
  if (!transport_available(kind)) return;  // e.g. mpi-direct on an MPI that is not CUDA-aware
  auto upload = [](const std::vector<std::vector<double>>& arrays) {
    std::vector<void*> device(arrays.size(), nullptr);
    for (std::size_t i = 0; i < arrays.size(); ++i) {
      EXPECT_EQ(cudaMalloc(&device[i], arrays[i].size() * 8 + 8), cudaSuccess);
      EXPECT_EQ(
          cudaMemcpy(device[i], arrays[i].data(), arrays[i].size() * 8, cudaMemcpyHostToDevice),
          cudaSuccess);
    }
    return device;
  };
  std::vector<void*> dx = upload(x), df = upload(f);
  // The particle kernels over blocks (ipc-*, nvshmem-pulse/fused), but not with the host
  // proxy forced onto every neighbour (HALOX_HOST_PROXY=1), which serves one rank per process.
  const char* proxy = std::getenv("HALOX_HOST_PROXY");
  const bool proxy_forced = proxy != nullptr && std::string(proxy) == "1" && ranks.count() > 1;
  const bool kernels = gpu_initiated(kind) && kind != TransportKind::nccl_device && !proxy_forced;
  const bool taken = kind == TransportKind::staged || kind == TransportKind::mpi_direct ||
                     kind == TransportKind::automatic || kernels;
  try {
    ParticleExchange exchange(ranks, plans, BasicKind::float64, ExchangeOptions{kind});
    exchange.forward(dx);
    exchange.reverse(df);
    EXPECT_TRUE(taken) << where << ": " << to_string(kind) << " was not refused";
    for (std::size_t i = 0; i < dx.size(); ++i) {
      // The reverse's halo items are transport-dependent (ParticleExchange::reverse_async):
      // the home items are compared.
      const std::size_t homes = 3 * static_cast<std::size_t>(plans[i].home_count);
      for (const auto& [device, want, what, n] :
           {std::tuple{dx[i], &x_after[i], "forward", x_after[i].size()},
            std::tuple{df[i], &f_after[i], "reverse", homes}}) {
        std::vector<double> back(want->size());
        ASSERT_EQ(cudaMemcpy(back.data(), device, back.size() * 8, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        back.resize(n);
        EXPECT_EQ(back, std::vector<double>(want->begin(), want->begin() + n))
            << where << ": rank " << ranks.rank(static_cast<int>(i)) << " " << what << " through "
            << to_string(kind);
      }
    }
  } catch (const Error& e) {
    EXPECT_FALSE(taken) << where << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("over Ranks::blocks"), std::string::npos) << e.what();
  }
  for (void* p : dx) cudaFree(p);
  for (void* p : df) cudaFree(p);
#else
  (void)ranks, (void)plans, (void)x, (void)f, (void)x_after, (void)f_after, (void)where;
#endif
}

// Particles over blocks of ranks per process (Ranks::blocks): random process grids and
// blocks; the migration, the plans and the host exchange's forward (coordinates) and reverse
// (forces, random) of this process's ranks equal, byte for byte, those of the same grid held
// whole by this process (Ranks::local, its own builders and CPU path); with
// HALOX_TEST_TRANSPORT on a GPU, the same arrays on the device through that transport.
TEST(ParticleHalo, BlocksOfRanksPerProcessEqualOneProcessHoldingTheWholeGrid) {
  const std::uint64_t seed = halox::testing::test_seed("ParticleHalo.Blocks", 0);
  std::mt19937_64 rng(seed);
  for (auto dims : grid_shapes()) {
    std::array<int, 3> block{};
    for (int a = 0; a < 3; ++a) block[a] = std::uniform_int_distribution<int>(1, 2)(rng);
    const Ranks ranks = Ranks::blocks(Topology::from_mpi(MPI_COMM_WORLD, dims), block);
    const Topology& grid = ranks.topology();
    const Ranks whole = Ranks::local(grid);
    const World w = make_world(seed, 900);
    const std::string where = "grid " + grid.describe() + ", block " + std::to_string(block[0]) +
                              "x" + std::to_string(block[1]) + "x" + std::to_string(block[2]) +
                              ", seed " + std::to_string(seed);
    // Atoms move by less than a domain's width (a migration moves them one domain at most).
    double step = 0.6;
    for (int a = 0; a < 3; ++a) step = std::min(step, 0.9 * w.box.length[a] / grid.dims()[a]);
    std::vector<double> moved(w.xyz);
    for (double& v : moved) v += std::uniform_real_distribution<double>(-step, step)(rng);
    std::vector<std::vector<double>> all(static_cast<std::size_t>(grid.size()));
    for (int r = 0; r < grid.size(); ++r) {
      std::vector<int> ids;
      std::vector<double> xyz;
      home_of(w, grid, r, ids, xyz);
      for (int id : ids) {
        all[r].insert(all[r].end(), &moved[3 * id], &moved[3 * id + 3]);
        all[r].push_back(id);
      }
    }
    std::vector<std::vector<double>> mine;
    for (int i = 0; i < ranks.count(); ++i) mine.push_back(all[ranks.rank(i)]);
    migrate_particles(ranks, w.box, mine, 4);
    migrate_particles(whole, w.box, all, 4);
    for (int i = 0; i < ranks.count(); ++i)
      ASSERT_EQ(mine[i], all[ranks.rank(i)]) << where << ": rank " << ranks.rank(i) << "'s atoms";

    std::vector<std::vector<double>> xyz(all.size()), my_xyz;
    for (std::size_t r = 0; r < all.size(); ++r) {
      for (std::size_t i = 0; i < all[r].size(); i += 4)
        xyz[r].insert(xyz[r].end(), &all[r][i], &all[r][i + 3]);
    }
    for (int i = 0; i < ranks.count(); ++i) my_xyz.push_back(xyz[ranks.rank(i)]);
    const std::vector<ParticlePlan> plans = build_particle_plans(ranks, w.box, 2.6, my_xyz);
    const std::vector<ParticlePlan> every = build_particle_plans(whole, w.box, 2.6, xyz);
    ASSERT_EQ(plans.size(), static_cast<std::size_t>(ranks.count())) << where;
    for (int i = 0; i < ranks.count(); ++i) {
      const ParticlePlan &a = plans[i], &b = every[ranks.rank(i)];
      ASSERT_EQ(my_xyz[i], xyz[ranks.rank(i)]) << where << ": local coordinates";
      ASSERT_EQ(a.home_count, b.home_count) << where;
      ASSERT_EQ(a.total_count, b.total_count) << where;
      ASSERT_EQ(a.pulses.size(), b.pulses.size()) << where;
      for (std::size_t p = 0; p < a.pulses.size(); ++p) {
        EXPECT_EQ(a.pulses[p].send_index, b.pulses[p].send_index) << where << " pulse " << p;
        EXPECT_EQ(a.pulses[p].recv_offset, b.pulses[p].recv_offset) << where;
        EXPECT_EQ(a.pulses[p].shift, b.pulses[p].shift) << where;
      }
    }
    // Forward: the home coordinates in, the halos poisoned; reverse: random forces on every
    // item, multiples of 1/64 so that every sum of them is exact: the GPU kernels add a
    // home atom's copies in another order than the host exchange (the H200 run at 4cbeabd
    // differed in the last bit), and the comparison stays byte for byte. Both exchanges see
    // the same values.
    std::vector<std::vector<double>> x(all.size()), f(all.size());
    for (std::size_t r = 0; r < all.size(); ++r) {
      x[r].assign(xyz[r].size(), -777.0);
      std::copy(xyz[r].begin(), xyz[r].begin() + 3 * every[r].home_count, x[r].begin());
      std::mt19937_64 forces(seed ^ (r * 0x9E3779B97F4A7C15ull));
      for (std::size_t k = 0; k < xyz[r].size(); ++k)
        f[r].push_back(std::uniform_int_distribution<int>(-4096, 4096)(forces) / 64.0);
    }
    std::vector<std::vector<double>> my_x, my_f;
    for (int i = 0; i < ranks.count(); ++i) {
      my_x.push_back(x[ranks.rank(i)]);
      my_f.push_back(f[ranks.rank(i)]);
    }
    auto pointers = [](std::vector<std::vector<double>>& arrays) {
      std::vector<void*> out;
      for (auto& a : arrays) out.push_back(a.data());
      return out;
    };
    const std::vector<std::vector<double>> x_before = my_x, f_before = my_f;
    ParticleExchange blocks(ranks, plans, BasicKind::float64),
        reference(whole, every, BasicKind::float64);
    blocks.forward(pointers(my_x));
    blocks.reverse(pointers(my_f));
    reference.forward(pointers(x));
    reference.reverse(pointers(f));
    for (int i = 0; i < ranks.count(); ++i) {
      EXPECT_EQ(my_x[i], x[ranks.rank(i)]) << where << ": rank " << ranks.rank(i) << " forward";
      EXPECT_EQ(my_f[i], f[ranks.rank(i)]) << where << ": rank " << ranks.rank(i) << " reverse";
    }
    expect_block_particles_on_device(ranks, plans, x_before, f_before, my_x, my_f, where);
  }
}

// build_grid_plans over MPI (this rank's plan, validated with its neighbours) and in one
// process (every rank's): the same plan for this rank, on lattices that the grid does not
// divide evenly; a process with one rank refuses several coordinate sets.
TEST(GridHalo, PlansOverBothKindsOfRanksAgree) {
  const std::uint64_t seed = halox::testing::test_seed("GridHalo.PlansOverRanks", 0);
  std::mt19937_64 rng(seed);
  const Datatype element = Datatype::of<double>().commit();
  for (auto dims : grid_shapes()) {
    const Topology topology = Topology::from_mpi(MPI_COMM_WORLD, dims);
    std::array<std::int64_t, 3> global{};
    for (int a = 0; a < 3; ++a)
      global[a] = topology.dims()[a] * 2 + std::uniform_int_distribution<int>(0, 5)(rng);
    const std::vector<GridPlan> mine = build_grid_plans(Ranks::mpi(topology), global, 1, element);
    const std::vector<GridPlan> all = build_grid_plans(Ranks::local(topology), global, 1, element);
    ASSERT_EQ(mine.size(), 1u);
    ASSERT_EQ(all.size(), static_cast<std::size_t>(topology.size()));
    const GridPlan& a = mine.front();
    const GridPlan& b = all[static_cast<std::size_t>(topology.rank())];
    const std::string where = topology.describe() + ", global " + std::to_string(global[0]) + "x" +
                              std::to_string(global[1]) + "x" + std::to_string(global[2]);
    EXPECT_EQ(a.interior, subdomain_of(topology, global).interior) << where;
    EXPECT_EQ(a.interior, b.interior) << where;
    EXPECT_EQ(a.extent, b.extent) << where;
    ASSERT_EQ(a.pulses.size(), b.pulses.size()) << where;
    for (std::size_t p = 0; p < a.pulses.size(); ++p) {
      const GridPulse &x = a.pulses[p], &y = b.pulses[p];
      EXPECT_EQ(x.header.send_rank, y.header.send_rank) << where << " pulse " << p;
      EXPECT_EQ(x.header.recv_rank, y.header.recv_rank) << where << " pulse " << p;
      EXPECT_EQ(x.header.send_size, y.header.send_size) << where << " pulse " << p;
      EXPECT_EQ(x.send_type.true_lb(), y.send_type.true_lb()) << where << " pulse " << p;
      EXPECT_EQ(x.recv_type.true_lb(), y.recv_type.true_lb()) << where << " pulse " << p;
      EXPECT_EQ(x.recv_type.size(), y.recv_type.size()) << where << " pulse " << p;
    }
  }
  const Topology topology = Topology::from_mpi(MPI_COMM_WORLD);
  std::vector<std::vector<double>> two(2);
  EXPECT_THROW(build_particle_plans(Ranks::mpi(topology), Box{}, 0.1, two), Error);
}

#if HALOX_HAS_CUDA
// One exchange of device copies of `before` over blocks through `kind`, twice; each array
// then equal to `after`'s, or the kind refused naming what blocks take.
void expect_blocks_moved(const Ranks& ranks, TransportKind kind, const std::vector<GridPlan>& plans,
                         const std::vector<std::vector<double>>& before,
                         const std::vector<void*>& after, const std::string& where) {
  std::vector<void*> device(before.size(), nullptr);
  for (std::size_t i = 0; i < before.size(); ++i) {
    ASSERT_EQ(cudaMalloc(&device[i], before[i].size() * 8), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(device[i], before[i].data(), before[i].size() * 8, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  // The host proxy (forced onto every neighbour by HALOX_HOST_PROXY=1, the ipc-fused-proxy
  // run) serves one rank per process too: the grid kernel over blocks of several ranks
  // refuses it (blocks of one rank are one rank per process: served).
  const char* proxy = std::getenv("HALOX_HOST_PROXY");
  const bool proxy_forced = proxy != nullptr && std::string(proxy) == "1" && gpu_initiated(kind) &&
                            kind != TransportKind::nccl_device && ranks.count() > 1;
  const bool one_rank_only = kind == TransportKind::pipelined ||
                             kind == TransportKind::nvshmem_stream ||
                             kind == TransportKind::nccl_device || proxy_forced;
  try {
    GridExchange exchange(ranks, plans, ExchangeOptions{kind});
    for (int repeat = 0; repeat < 2; ++repeat) exchange.exchange(device);
    EXPECT_FALSE(one_rank_only) << where << ": " << to_string(kind) << " was not refused";
    if (kind == TransportKind::automatic)  // every process on this node: the grid kernel
      EXPECT_EQ(exchange.transport_name(device[0]), "ipc-fused") << where;
    for (std::size_t i = 0; i < before.size(); ++i) {
      std::vector<double> back(before[i].size());
      ASSERT_EQ(cudaMemcpy(back.data(), device[i], back.size() * 8, cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_EQ(std::memcmp(back.data(), after[i], back.size() * 8), 0)
          << where << ": array " << i << " through " << to_string(kind);
    }
  } catch (const Error& e) {
    EXPECT_TRUE(one_rank_only) << where << ": " << e.what();
    if (kind != TransportKind::nccl_device)  // which moves no grids at all
      EXPECT_NE(std::string(e.what()).find("over Ranks::blocks"), std::string::npos) << e.what();
  }
  for (void* p : device) cudaFree(p);
}
#endif

// Ranks::blocks on the GPU (HALOX_TEST_TRANSPORT set, a GPU there): `before` uploaded, two
// exchanges through the test's transport, each array then equal, byte for byte, to the host
// exchange's result in `after`, with the fields as given and three times over (one grid
// kernel instance per field). The kinds that take one rank per process are refused, naming
// what blocks take.
void expect_blocks_on_device(const Ranks& ranks, const std::vector<GridPlan>& plans,
                             const std::vector<std::vector<double>>& before,
                             const std::vector<void*>& after, const std::string& where) {
#if HALOX_HAS_CUDA
  const TransportKind kind = test_transport();
  if (kind == TransportKind::host || kind == TransportKind::nccl || visible_gpus() == 0) return;
  // The fields as given, then three times over: more fields than one launch of the grid
  // kernel takes (the exchange then runs one instance per field).
  for (int copies : {1, 3}) {
    std::vector<GridPlan> plans_n;
    std::vector<std::vector<double>> before_n;
    std::vector<void*> after_n;
    for (int c = 0; c < copies; ++c) {
      plans_n.insert(plans_n.end(), plans.begin(), plans.end());
      before_n.insert(before_n.end(), before.begin(), before.end());
      after_n.insert(after_n.end(), after.begin(), after.end());
    }
    expect_blocks_moved(
        ranks, kind, plans_n, before_n, after_n,
        where + ", " + std::to_string(plans_n.size() / static_cast<std::size_t>(ranks.count())) +
            " fields");
  }
#else
  (void)ranks, (void)plans, (void)before, (void)after, (void)where;
#endif
}

// Several ranks per process (Ranks::blocks): random process grids, blocks and periodicity,
// uneven lattices, two fields; every rank's arrays after the exchange equal, byte for byte,
// those of the same grid held whole by this process (Ranks::local, its own CPU path), the
// halos poisoned first; with HALOX_TEST_TRANSPORT on a GPU, the same arrays on the device
// through that transport (the grid kernel's copy faces within a process and pack and unpack
// faces between them, in one launch), twice. Processes that disagree on the lattice are told,
// all of them.
TEST(GridHalo, BlocksOfRanksPerProcessEqualOneProcessHoldingTheWholeGrid) {
  const std::uint64_t seed = halox::testing::test_seed("GridHalo.Blocks", 0);
  std::mt19937_64 rng(seed);
  const Datatype element = Datatype::of<double>().commit();
  for (auto dims : grid_shapes()) {
    for (int round = 0; round < 3; ++round) {
      std::array<int, 3> block{}, global_ranks{};
      std::array<bool, 3> periodic{};
      std::array<std::int64_t, 3> global{};
      for (int a = 0; a < 3; ++a) {
        block[a] = std::uniform_int_distribution<int>(1, 2)(rng);
        periodic[a] = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
        global_ranks[a] = dims[a] * block[a];
        global[a] = global_ranks[a] * 2 + std::uniform_int_distribution<int>(0, 5)(rng);
      }
      const Topology processes = Topology::from_mpi(MPI_COMM_WORLD, dims, periodic);
      const Ranks ranks = Ranks::blocks(processes, block);
      const Topology& grid = ranks.topology();
      const std::string where = "processes " + processes.describe() + ", block " +
                                std::to_string(block[0]) + "x" + std::to_string(block[1]) + "x" +
                                std::to_string(block[2]) + ", global " + std::to_string(global[0]) +
                                "x" + std::to_string(global[1]) + "x" + std::to_string(global[2]) +
                                ", seed " + std::to_string(seed);
      ASSERT_EQ(grid.dims(), global_ranks) << where;
      const std::vector<GridPlan> mine = build_grid_plans(ranks, global, 1, element);
      const std::vector<GridPlan> whole = build_grid_plans(Ranks::local(grid), global, 1, element);
      ASSERT_EQ(mine.size(), static_cast<std::size_t>(ranks.count())) << where;
      // Every grid rank held by exactly one process, at the index it says.
      for (int i = 0; i < ranks.count(); ++i) {
        EXPECT_EQ(ranks.process_of(ranks.rank(i)), processes.rank()) << where;
        EXPECT_EQ(ranks.index_in_process(ranks.rank(i)), i) << where;
      }
      // Two fields: the arrays of every rank, interiors random, halos poisoned.
      const int fields = 2, n = grid.size();
      std::vector<std::vector<double>> arrays(static_cast<std::size_t>(fields * n));
      for (int f = 0; f < fields; ++f) {
        for (int r = 0; r < n; ++r) {
          const GridPlan& plan = whole[static_cast<std::size_t>(r)];
          std::vector<double>& a = arrays[static_cast<std::size_t>(f * n + r)];
          a.resize(static_cast<std::size_t>(plan.extent[0] * plan.extent[1] * plan.extent[2]));
          std::mt19937_64 cells(seed ^
                                (static_cast<std::uint64_t>(f * n + r) * 0x9E3779B97F4A7C15ull));
          for (double& v : a) v = std::uniform_real_distribution<double>(-1, 1)(cells);
        }
      }
      // The halos poisoned, differently in the two runs: a cell that one run writes and the
      // other does not differs, and one that neither writes (an open edge) keeps each poison.
      constexpr double kPoisonBlocks = -1e300, kPoisonWhole = 1e300;
      std::vector<std::vector<double>> reference = arrays;
      for (int f = 0; f < fields; ++f) {
        for (int r = 0; r < n; ++r) {
          const GridPlan& plan = whole[static_cast<std::size_t>(r)];
          const auto& e = plan.extent;
          const auto k = static_cast<std::size_t>(f * n + r);
          for (std::int64_t z = 0; z < e[2]; ++z)
            for (std::int64_t y = 0; y < e[1]; ++y)
              for (std::int64_t x = 0; x < e[0]; ++x) {
                const std::int64_t c[3] = {x, y, z};
                bool interior = true;
                for (int a = 0; a < 3; ++a)
                  interior = interior && c[a] >= plan.halo && c[a] < plan.halo + plan.interior[a];
                if (interior) continue;
                const auto at = static_cast<std::size_t>((z * e[1] + y) * e[0] + x);
                arrays[k][at] = kPoisonBlocks;
                reference[k][at] = kPoisonWhole;
              }
        }
      }
      std::vector<GridPlan> whole_plans, my_plans;
      std::vector<void*> whole_fields, my_fields;
      std::vector<std::vector<double>> before;  // my ranks' arrays, for the device's run
      for (int f = 0; f < fields; ++f) {
        for (int r = 0; r < n; ++r) {
          whole_plans.push_back(whole[static_cast<std::size_t>(r)]);
          whole_fields.push_back(reference[static_cast<std::size_t>(f * n + r)].data());
        }
        for (int i = 0; i < ranks.count(); ++i) {
          my_plans.push_back(mine[static_cast<std::size_t>(i)]);
          my_fields.push_back(arrays[static_cast<std::size_t>(f * n + ranks.rank(i))].data());
          before.push_back(arrays[static_cast<std::size_t>(f * n + ranks.rank(i))]);
        }
      }
      GridExchange(Ranks::local(grid), whole_plans).exchange(whole_fields);
      GridExchange exchange(ranks, my_plans);
      for (int repeat = 0; repeat < 2; ++repeat) exchange.exchange(my_fields);
      for (int f = 0; f < fields; ++f) {
        for (int i = 0; i < ranks.count(); ++i) {
          const auto k = static_cast<std::size_t>(f * n + ranks.rank(i));
          for (std::size_t c = 0; c < arrays[k].size(); ++c) {
            const double want = reference[k][c] == kPoisonWhole ? kPoisonBlocks : reference[k][c];
            ASSERT_EQ(arrays[k][c], want)
                << where << ": field " << f << ", rank " << ranks.rank(i) << ", cell " << c;
          }
        }
      }
      EXPECT_EQ(exchange.transport_name(my_fields[0]), "host");
      expect_blocks_on_device(ranks, my_plans, before, my_fields, where);
      if (ranks.count() >= 2) {  // plans given to the wrong ranks: an error, never a run
        std::vector<GridPlan> swapped = my_plans;
        std::swap(swapped[0], swapped[1]);
        EXPECT_THROW(GridExchange(ranks, swapped).exchange(my_fields), Error) << where;
      }
    }
  }
  const Topology processes = Topology::from_mpi(MPI_COMM_WORLD);
  const Ranks ranks = Ranks::blocks(processes, {2, 1, 1});
  std::vector<std::vector<double>> one(1), two(2);
  // Particles over blocks: a cutoff beyond half the box, on every process alike, and one
  // coordinate set for two ranks, refused.
  EXPECT_THROW(build_particle_plans(ranks, Box{{4, 4, 4}}, 3.0, two), Error);
  EXPECT_THROW(build_particle_plans(ranks, Box{{4, 4, 4}}, 1.0, one), Error);
  EXPECT_THROW(Ranks::blocks(processes, {0, 1, 1}), Error);
  if (world_size() > 1) {
    try {
      build_grid_plans(ranks, {16, 8, world_rank() == 1 ? 9 : 8}, 1, element);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("disagree on the global lattice"), std::string::npos)
          << e.what();
    }
  }
}

TEST(ParticleHalo, RanksThatDisagreeOnTheCutoffAreCaughtNotHung) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, {world_size(), 1, 1});
  std::vector<double> xyz;
  try {
    build_particle_plan(topology, Box{{10, 10, 10}}, world_rank() == 1 ? 1.2 : 2.6, xyz);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("disagree on the cutoff"), std::string::npos) << e.what();
  }
}

// The GPU-initiated transports across processes: rank 1 stops exchanging (as if it had
// stalled); rank 0's device-side waits run out of time, and its next exchange throws an
// error that names both ranks, for particles and for grids, instead of hanging. With
// HALOX_NVSHMEM_PUTS=1 the waits are those of the put-with-signal path. nvshmem-stream's
// stream waits are halox's bounded wait kernels: the same. Exchanges queued behind the first
// that times out give up at once.
TEST(Transports, AStalledRankBecomesAnErrorNamingItNotAHang) {
  const TransportKind t = test_transport();
  if (t != TransportKind::ipc_pulse && t != TransportKind::ipc_fused &&
      t != TransportKind::nvshmem_pulse && t != TransportKind::nvshmem_fused &&
      t != TransportKind::nvshmem_stream) {
    GTEST_SKIP() << "transports whose waits are on the device";
  }
  if (world_size() != 2) GTEST_SKIP() << "two ranks";
#if HALOX_HAS_CUDA
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, {2, 1, 1});
  const World w = make_world(halox::testing::test_seed("Transports.Stall", 0), 900);
  std::vector<double> xyz;
  std::vector<int> ids;
  home_of(w, topology, topology.rank(), ids, xyz);
  const ParticlePlan particles = build_particle_plan(topology, w.box, 2.6, xyz);
  const GridPlan grid = build_grid_plan(topology, {8, 6, 4}, 1, Datatype::of<float>().commit());
  ExchangeOptions options{t};
  options.timeout_seconds = 0.3;
  ParticleExchange particle_exchange(topology, particles, BasicKind::float64, options);
  GridExchange grid_exchange(topology, grid, options);
  void* x = nullptr;
  void* field = nullptr;
  const std::size_t field_bytes = 10 * 8 * 6 * sizeof(float);
  ASSERT_EQ(cudaMalloc(&x, xyz.size() * sizeof(double)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&field, field_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(x, xyz.data(), xyz.size() * sizeof(double), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemset(field, 1, field_bytes), cudaSuccess);
  // Both ranks once: the plans set up and self-tested.
  particle_exchange.forward_async(x, nullptr);
  grid_exchange.exchange_async(field, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  std::string particle_error, grid_error;
  if (world_rank() == 0) {
    // Several exchanges queued before the host looks, as an application's steps are: the
    // first wait to time out ends every wait queued behind it (one time-out in all, not one
    // per queued kernel; 20 x 0.3 s before the mend).
    constexpr int kQueued = 10;
    const auto start = std::chrono::steady_clock::now();
    try {
      for (int k = 0; k < kQueued; ++k) {
        particle_exchange.forward_async(x, nullptr);
        grid_exchange.exchange_async(field, nullptr);
      }
    } catch (const HaloTimeoutError&) {  // the host may see the first time-out already
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the kernels gave up, no hang
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(waited, 2.0) << 2 * kQueued << " queued exchanges took " << waited
                           << " s to give up after a 0.3 s time-out";
    try {
      particle_exchange.forward_async(x, nullptr);
    } catch (const HaloTimeoutError& e) {
      particle_error = e.what();
    }
    try {
      grid_exchange.exchange_async(field, nullptr);
    } catch (const HaloTimeoutError& e) {
      grid_error = e.what();
    }
    for (const std::string& m : {particle_error, grid_error}) {
      EXPECT_NE(m.find("rank 0 timed out"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    }
    std::printf("GPU: stalled rank reported (particles): %s\nGPU: (grids): %s\n",
                particle_error.c_str(), grid_error.c_str());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  cudaFree(x);
  cudaFree(field);
#endif
}

// Two ranks: rank 0 enters `collective` alone and must time out with `expected` in the
// error; then rank 1 enters it, matching the call rank 0 left in flight.
template <class Collective>
void expect_alone_times_out(MPI_Comm comm, const Collective& collective,
                            const std::string& expected) {
  if (world_rank() == 0) {
    try {
      collective();
      ADD_FAILURE() << "the collective ended without rank 1";
    } catch (const HaloTimeoutError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(expected), std::string::npos) << m;
    }
    MPI_Send(nullptr, 0, MPI_BYTE, 1, 0, comm);  // now rank 1 may come
  } else {
    MPI_Recv(nullptr, 0, MPI_BYTE, 0, 0, comm, MPI_STATUS_IGNORE);
    EXPECT_NO_THROW(collective());  // matches rank 0's
  }
}

// A collective that one rank does not join in time ends on the others in an error naming
// the step, not a hang (halox's set-up collectives before NVSHMEM's unbounded barriers).
TEST(Collectives, ABoundedBarrierEndsWhenARankStaysAway) {
  if (world_size() != 2) GTEST_SKIP() << "two ranks";
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const detail::WaitContext context{world_rank(), "test", 0.3};
  expect_alone_times_out(
      comm, [&] { detail::bounded_barrier(comm, context, "the test's set-up"); },
      "rank 0 timed out after 0.3 s in the test's set-up");
  if (world_rank() == 1) EXPECT_EQ(detail::bounded_max(comm, 7, context, "a maximum"), 7);
  if (world_rank() == 0) EXPECT_EQ(detail::bounded_max(comm, 3, context, "a maximum"), 7);
  MPI_Comm_free(&comm);
}

// The set-ups' agreement on an error, bounded as their barriers are: a rank's error reaches
// every rank with its text; a rank that stays away ends the others' wait in a named time-out.
TEST(Collectives, ABoundedAgreementTellsEveryRankOrEndsInTime) {
  if (world_size() != 2) GTEST_SKIP() << "two ranks";
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const detail::WaitContext context{world_rank(), "test", 0.3};
  const detail::CollectiveWait wait = detail::bounded_wait(comm, context, "the test's verdict");
  EXPECT_NO_THROW(detail::raise_if_any(comm, "", wait));
  try {
    detail::raise_if_any(comm, world_rank() == 1 ? "rank 1's plan is wrong" : "", wait);
    ADD_FAILURE() << "no rank raised";
  } catch (const HaloTimeoutError& e) {
    ADD_FAILURE() << "timed out: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              world_rank() == 1 ? "rank 1's plan is wrong" : "rank 1: rank 1's plan is wrong");
  }
  expect_alone_times_out(
      comm, [&] { detail::raise_if_any(comm, "", wait); },
      "rank 0 timed out after 0.3 s in the test's verdict");
  EXPECT_EQ(detail::bounded_max(comm, world_rank() + 5, context, "a maximum"), 6);
  MPI_Comm_free(&comm);
}

TEST(ParticleHalo, BadCutoffIsRefusedOnEveryRank) {
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD);
  std::vector<double> xyz;
  EXPECT_THROW(build_particle_plan(topology, Box{{10, 10, 3}}, 2.0, xyz), Error);
  EXPECT_THROW(build_particle_plan(topology, Box{{10, 10, 10}}, -1.0, xyz), Error);
}

}  // namespace

#if HALOX_HAS_CUDA
namespace {
// nccl-device that cannot run here is refused on every rank, naming why and what to use
// instead: without symmetric memory, or with an NCCL library other than the one whose
// device-API headers halox was built with. It once read NCCL's window record, host memory
// there, and left the process with an illegal-address error.
TEST(Transports, NcclDeviceThatCannotRunIsRefusedNotACrash) {
  if (!nccl_device_alone()) GTEST_SKIP() << "nccl-device on one rank";
  try {
    check_particles({1, 1, 1}, 2.6, halox::testing::test_seed("NcclDeviceAlone", 0));
    ADD_FAILURE() << "nccl-device ran on one rank";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("no symmetric memory") != std::string::npos ||
                m.find("must be the same") != std::string::npos)
        << m;
    EXPECT_NE(m.find("nccl-device"), std::string::npos) << m;
    std::printf("GPU: nccl-device refused: %s\n", m.c_str());
  }
  // The process stays usable.
  void* probe = nullptr;
  EXPECT_EQ(cudaMalloc(&probe, 64), cudaSuccess);
  EXPECT_EQ(cudaFree(probe), cudaSuccess);
}

TEST(Transports, MpiDirectIsRefusedUnlessMpiIsCudaAware) {
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU";
  std::string why;
  if (transport_available(TransportKind::mpi_direct, &why)) GTEST_SKIP() << "MPI is CUDA-aware";
  EXPECT_NE(why.find("CUDA-aware"), std::string::npos) << why;
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD);
  GridPlan plan = build_grid_plan(topology, {4, 4, 4}, 1, Datatype::of<float>().commit());
  GridExchange exchange(topology, plan, {TransportKind::mpi_direct, 0});
  void* field = nullptr;
  ASSERT_EQ(cudaMalloc(&field, 6 * 6 * 6 * 4), cudaSuccess);
  try {
    exchange.exchange(field);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA-aware"), std::string::npos) << e.what();
  }
  cudaFree(field);
}
}  // namespace
#endif
