// GridExchange over Ranks::local: every rank of a grid in one process, halos against the global
// field (periodic wrap), with uneven splits, several halo widths, padded arrays, non-periodic edges
// left untouched, and fields of several planes of which a face moves some (as halox-lbm's
// populations); in host memory, and on the GPU when there is one.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <cstdint>
#include <vector>

#include "../common/grid_field.hpp"
#include "halox/config.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#include "halox/exchange.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>
#endif

using namespace halox;
using halox::testing::expected_cell;
using halox::testing::global_value;

namespace {

bool have_gpu() {
  return visible_gpus() > 0;
}

// A field of `count` planes one after the other (structure of arrays), each plane an array
// of cells; the exchange moves the planes listed in `moved` (a struct type over them, one
// canonical piece each unless their spacing lets pieces merge), the others keep their halos.
struct Planes {
  int count = 1;
  std::vector<int> moved = {0};
};

// A face type `face` of one plane, taken in each of the planes `moved` (`plane_bytes` apart).
Datatype over_planes(const Datatype& face, const std::vector<int>& moved,
                     std::int64_t plane_bytes) {
  std::vector<std::int64_t> blocks(moved.size(), 1), displacements;
  for (int q : moved) displacements.push_back(q * plane_bytes);
  return Datatype::struct_(blocks, displacements, std::vector<Datatype>(moved.size(), face))
      .commit();
}

// Rank sizes along each axis: `base` cells, the first `extra` coordinates one more.
void check(std::array<int, 3> dims, std::array<bool, 3> periodic, std::array<int, 3> base,
           std::array<int, 3> extra, int halo, int components, std::array<int, 3> padding,
           bool device, bool fused, const Planes& planes = {}, int copies = 1) {
  const Topology shape(dims, periodic, 0);
  const int ranks = shape.size();
  auto size_at = [&](int a, int c) { return base[a] + (c < extra[a] ? 1 : 0); };
  auto offset_at = [&](int a, int c) {
    std::int64_t o = 0;
    for (int i = 0; i < c; ++i) o += size_at(a, i);
    return o;
  };
  std::array<std::int64_t, 3> global{};
  for (int a = 0; a < 3; ++a) global[a] = offset_at(a, dims[a]);
  std::vector<std::array<std::int64_t, 3>> interior(ranks), allocated(ranks);
  for (int r = 0; r < ranks; ++r) {
    const auto c = shape.coords_of(r);
    for (int a = 0; a < 3; ++a) {
      interior[r][a] = size_at(a, c[a]);
      allocated[r][a] = interior[r][a] + 2 * halo + padding[a];
    }
  }
  const Datatype element = Datatype::contiguous(components, Datatype::of<double>()).commit();
  ExchangeOptions options;
  options.transport = fused ? TransportKind::local_fused : TransportKind::local_pulse;
  std::vector<GridPlan> plans = make_local_grid_plans(shape, interior, halo, element, allocated);
  auto plane_elements = [&](int r) {
    const auto& e = allocated[r];
    return static_cast<std::size_t>(e[0] * e[1] * e[2] * components);
  };
  if (planes.moved != std::vector<int>{0}) {
    for (int r = 0; r < ranks; ++r) {
      const std::int64_t plane_bytes =
          static_cast<std::int64_t>(plane_elements(r) * sizeof(double));
      const auto moved = static_cast<std::int64_t>(planes.moved.size());
      plans[r].field_bytes = (std::ranges::max(planes.moved) + 1) * plane_bytes;
      for (GridPulse& pulse : plans[r].pulses) {
        pulse.send_type = over_planes(pulse.send_type, planes.moved, plane_bytes);
        pulse.recv_type = over_planes(pulse.recv_type, planes.moved, plane_bytes);
        pulse.header.send_size *= moved;
        pulse.header.recv_size *= moved;
      }
    }
  }
  // copies > 1: that many fields of these plans in one call (field i of rank r at
  // i * ranks + r), field i's values shifted by i / 2.
  std::vector<GridPlan> all_plans;
  for (int i = 0; i < copies; ++i) all_plans.insert(all_plans.end(), plans.begin(), plans.end());
  GridExchange exchange(Ranks::local(shape), all_plans, options);
  EXPECT_EQ(exchange.fields(), copies);
  const double poison = -12345.0;
  const int arrays = copies * ranks;
  std::vector<std::vector<double>> fields(arrays);
  // Component k of plane q: the global field's component q * components + k.
  for (int i = 0; i < arrays; ++i) {
    const int r = i % ranks;
    const double shift = 0.5 * (i / ranks);
    const auto& e = allocated[r];
    const auto c = shape.coords_of(r);
    fields[i].assign(plane_elements(r) * planes.count, poison);
    for (int q = 0; q < planes.count; ++q)
      for (std::int64_t z = halo; z < interior[r][2] + halo; ++z)
        for (std::int64_t y = halo; y < interior[r][1] + halo; ++y)
          for (std::int64_t x = halo; x < interior[r][0] + halo; ++x)
            for (int k = 0; k < components; ++k)
              fields[i][q * plane_elements(r) +
                        static_cast<std::size_t>(((z * e[1] + y) * e[0] + x) * components + k)] =
                  shift + global_value(offset_at(0, c[0]) + x - halo, offset_at(1, c[1]) + y - halo,
                                       offset_at(2, c[2]) + z - halo, q * components + k);
  }
  std::vector<void*> pointers(arrays);
#if HALOX_HAS_CUDA
  std::vector<void*> on_gpu(arrays, nullptr);
#endif
  if (device) {
#if HALOX_HAS_CUDA
    for (int i = 0; i < arrays; ++i) {
      const std::size_t bytes = fields[i].size() * sizeof(double);
      ASSERT_EQ(cudaMalloc(&on_gpu[i], bytes), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(on_gpu[i], fields[i].data(), bytes, cudaMemcpyHostToDevice),
                cudaSuccess);
      pointers[i] = on_gpu[i];
    }
#endif
  } else {
    for (int i = 0; i < arrays; ++i) pointers[i] = fields[i].data();
  }
  for (int repeat = 0; repeat < 2; ++repeat) exchange.exchange(pointers);
  if (device) {
    // local-fused: one launch while the kernel takes every array (64), else one per field.
    const int launches = !fused ? exchange.faces_per_exchange() : arrays <= 64 ? 1 : copies;
    EXPECT_EQ(exchange.launches_per_exchange(), launches);
  }
#if HALOX_HAS_CUDA
  if (device) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int i = 0; i < arrays; ++i) {
      ASSERT_EQ(cudaMemcpy(fields[i].data(), on_gpu[i], fields[i].size() * sizeof(double),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      cudaFree(on_gpu[i]);
    }
  }
#endif
  std::int64_t wrong = 0;
  for (int i = 0; i < arrays; ++i) {
    const int r = i % ranks;
    const double shift = 0.5 * (i / ranks);
    const auto& e = allocated[r];
    const auto c = shape.coords_of(r);
    for (int q = 0; q < planes.count; ++q) {
      const bool moved =
          std::find(planes.moved.begin(), planes.moved.end(), q) != planes.moved.end();
      for (std::int64_t z = 0; z < e[2]; ++z)
        for (std::int64_t y = 0; y < e[1]; ++y)
          for (std::int64_t x = 0; x < e[0]; ++x) {
            const std::array<std::int64_t, 3> offset = {offset_at(0, c[0]), offset_at(1, c[1]),
                                                        offset_at(2, c[2])};
            const bool inside = x >= halo && x < interior[r][0] + halo && y >= halo &&
                                y < interior[r][1] + halo && z >= halo && z < interior[r][2] + halo;
            for (int k = 0; k < components; ++k) {
              // A plane the exchange does not move keeps its poisoned halo.
              double want = moved || inside
                                ? expected_cell({x, y, z}, offset, interior[r], halo, global,
                                                periodic, q * components + k, poison)
                                : poison;
              if (want != poison) want += shift;
              const double got =
                  fields[i][q * plane_elements(r) +
                            static_cast<std::size_t>(((z * e[1] + y) * e[0] + x) * components + k)];
              if (got != want && ++wrong <= 5) {
                ADD_FAILURE() << "field " << i / ranks << " rank " << r << " plane " << q
                              << " cell (" << x << "," << y << "," << z << ") component " << k
                              << ": " << got << " != " << want;
              }
            }
          }
    }
  }
  EXPECT_EQ(wrong, 0) << shape.describe() << " halo " << halo
                      << (device ? (fused ? " (GPU, fused)" : " (GPU, a kernel per face)")
                                 : " (host)");
}

// 20 planes of kManyPlanes at gaps 1, 2, ..., 19.
constexpr int kManyPlanes = 191;
std::vector<int> many_planes() {
  std::vector<int> planes = {0};
  for (int gap = 1; gap < 20; ++gap) planes.push_back(planes.back() + gap);
  return planes;
}

void every_case(bool device, bool fused = false) {
  // 8 and 27 ranks, as the local engine's users run them; uneven splits; one rank along an
  // axis (a rank its own neighbour); halo 2; padded rows and planes; non-periodic edges.
  check({2, 2, 2}, {true, true, true}, {4, 3, 3}, {0, 0, 0}, 1, 1, {0, 0, 0}, device, fused);
  check({3, 3, 3}, {true, true, true}, {3, 3, 2}, {1, 2, 0}, 1, 2, {3, 1, 0}, device, fused);
  check({2, 1, 3}, {true, true, false}, {5, 4, 2}, {1, 0, 1}, 2, 1, {0, 2, 1}, device, fused);
  check({1, 1, 1}, {true, true, true}, {4, 4, 4}, {0, 0, 0}, 1, 3, {5, 0, 0}, device, fused);
  check({4, 2, 1}, {false, true, true}, {2, 3, 4}, {2, 1, 0}, 1, 1, {0, 0, 0}, device, fused);
  // Planes: 5 of 8, and 20 of 191 at gaps that grow by one (canonical pieces merge
  // in pairs at most, so 10 remain): faces of up to 8 pieces, which the fused kernel reads
  // from shared memory, and of more, which it reads in place.
  check({2, 2, 2}, {true, true, true}, {4, 3, 3}, {0, 1, 0}, 1, 1, {1, 0, 0}, device, fused,
        {8, {1, 2, 4, 5, 7}});
  check({2, 1, 2}, {true, true, true}, {3, 3, 3}, {0, 0, 1}, 1, 1, {0, 0, 0}, device, fused,
        {kManyPlanes, many_planes()});
  // Several fields in one call (three of 5-of-8 planes, on an uneven grid).
  check({3, 2, 1}, {true, true, true}, {3, 3, 4}, {1, 0, 0}, 1, 1, {1, 0, 0}, device, fused,
        {8, {1, 2, 4, 5, 7}}, 3);
  // More arrays than one fused launch takes (27 ranks x 3 fields): one launch per field.
  check({3, 3, 3}, {true, true, true}, {3, 3, 2}, {1, 2, 0}, 1, 1, {0, 1, 0}, device, fused,
        {8, {1, 2, 4, 5, 7}}, 3);
}

// The plane cases above give the fused kernel faces of up to 8 canonical pieces (read from
// shared memory) and of more (read in place), as they are meant to.
TEST(LocalGrid, PlaneCasesCoverFewAndManyPieces) {
  const Datatype element = Datatype::of<double>().commit();
  const Topology shape({2, 2, 2}, {true, true, true}, 0);
  const GridPlan plan = make_grid_plan(shape, {4, 4, 4}, 1, element);
  auto pieces = [&](const std::vector<int>& moved, std::int64_t plane_bytes) {
    std::size_t most = 0;
    for (const GridPulse& pulse : plan.pulses) {
      most = std::max(most,
                      over_planes(pulse.send_type, moved, plane_bytes).canonical().pieces.size());
    }
    return most;
  };
  const std::int64_t plane_bytes = 6 * 6 * 6 * sizeof(double);
  const std::size_t few = pieces({1, 2, 4, 5, 7}, plane_bytes);
  EXPECT_GT(few, 1u);
  EXPECT_LE(few, 8u);
  EXPECT_GT(pieces(many_planes(), plane_bytes), 8u);
}

}  // namespace

TEST(LocalGrid, HostMemoryEveryCase) {
  every_case(false);
}

TEST(LocalGrid, DeviceMemoryEveryCase) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  every_case(true, false);
}

TEST(LocalGrid, DeviceMemoryEveryCaseFused) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  every_case(true, true);
}

#if HALOX_HAS_CUDA
namespace {
// A 2x2x2 grid whose rank 3 stalls (stall_rank): the error that exchanging its GPU arrays
// raises. Without the self-test the first exchange times out on the device and the second
// reports it; with it, the first exchange throws before any field moves.
std::string stalled_rank_error(bool self_test) {
  const Topology shape({2, 2, 2}, {true, true, true}, 0);
  const Datatype element = Datatype::of<float>().commit();
  std::vector<std::array<std::int64_t, 3>> interior(8, {8, 8, 8});
  ExchangeOptions options;
  options.transport = TransportKind::local_fused;
  options.timeout_seconds = 0.2;
  options.testing.stall_rank = 3;
  options.self_test = self_test;
  GridExchange exchange(Ranks::local(shape), make_local_grid_plans(shape, interior, 1, element),
                        options);
  std::vector<void*> fields(8);
  for (auto& p : fields) EXPECT_EQ(cudaMalloc(&p, 10 * 10 * 10 * sizeof(float)), cudaSuccess);
  std::string what;
  try {
    for (int k = 0; k < 2; ++k) {
      exchange.exchange(fields);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  } catch (const HaloTimeoutError& e) {
    what = e.what();
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (void* p : fields) cudaFree(p);
  return what;
}
}  // namespace
#endif

// The fused kernel's waits: the faces that forward a stalled rank's faces time out on the
// device, and the next exchange throws an error naming the ranks and the pulse.
TEST(LocalGrid, DeviceMemoryFusedStalledRankTimesOut) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
#if HALOX_HAS_CUDA
  const std::string what = stalled_rank_error(false);  // the self-test would catch it first
  std::printf("GPU: stalled rank reported: %s\n", what.c_str());
  EXPECT_NE(what.find("waiting for rank 3"), std::string::npos) << what;
  EXPECT_NE(what.find("pulse"), std::string::npos) << what;
#endif
}

// The self-test at the first exchange of GPU arrays names the rank that sends no probes.
TEST(LocalGrid, DeviceMemorySelfTestNamesAStalledRank) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
#if HALOX_HAS_CUDA
  const std::string what = stalled_rank_error(true);
  std::printf("GPU: self-test reported: %s\n", what.c_str());
  EXPECT_NE(what.find("self-test"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 3's probe"), std::string::npos) << what;
#endif
}

TEST(LocalGrid, MismatchedPlansAreRefusedWhenBuilt) {
  const Topology shape({2, 1, 1}, {true, true, true}, 0);
  const Datatype f = Datatype::of<float>().commit();
  // Rank 1 has one more cell along y: its x faces do not match rank 0's.
  std::vector<GridPlan> plans = {
      make_grid_plan(Topology({2, 1, 1}, {true, true, true}, 0), {4, 4, 4}, 1, f),
      make_grid_plan(Topology({2, 1, 1}, {true, true, true}, 1), {4, 5, 4}, 1, f)};
  EXPECT_THROW(GridExchange(Ranks::local(shape), plans), Error);
  EXPECT_THROW(make_local_grid_plans(shape, {{4, 4, 4}}, 1, f), Error);  // one interior for 2
  const std::vector<GridPlan> good = make_local_grid_plans(shape, {{4, 4, 4}, {4, 4, 4}}, 1, f);
  EXPECT_THROW(GridExchange(Ranks::local(shape), {good[0]}), Error);  // one plan for 2 ranks
  GridExchange ok(Ranks::local(shape), good);
  std::vector<float> a(6 * 6 * 6), b(6 * 6 * 6);
  EXPECT_THROW(ok.exchange(a.data()), Error);  // one field for 2 ranks
  const std::vector<void*> one = {a.data()};
  EXPECT_THROW(ok.exchange(one), Error);
  EXPECT_EQ(ok.faces_per_exchange(), 12);  // 6 pulses x 2 ranks
  EXPECT_EQ(ok.transport_name(a.data()), "host");
}

// Local ranks take local-pulse or local-fused ("auto" and the default mean local-fused); a
// transport that needs one rank per process is refused, naming it.
TEST(LocalGrid, TransportsOfOneRankPerProcessAreRefused) {
  const Topology shape({2, 1, 1}, {true, true, true}, 0);
  const std::vector<GridPlan> plans =
      make_local_grid_plans(shape, {{4, 4, 4}, {4, 4, 4}}, 1, Datatype::of<float>().commit());
  for (TransportKind kind : {TransportKind::staged, TransportKind::ipc_fused,
                             TransportKind::nvshmem_stream, TransportKind::nccl}) {
    ExchangeOptions options;
    options.transport = kind;
    try {
      GridExchange exchange(Ranks::local(shape), plans, options);
      ADD_FAILURE() << to_string(kind) << " was accepted for local ranks";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(to_string(kind)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Ranks::local"), std::string::npos) << e.what();
    }
  }
  for (TransportKind kind : {TransportKind::host, TransportKind::automatic,
                             TransportKind::local_pulse, TransportKind::local_fused}) {
    ExchangeOptions options;
    options.transport = kind;
    EXPECT_NO_THROW(GridExchange(Ranks::local(shape), plans, options)) << to_string(kind);
  }
  EXPECT_THROW(Ranks::local(shape, {0}), Error);  // one GPU for 2 ranks
}

// A grid plan whose header says another size than its type moves is refused when an exchange
// takes it, naming the rank and the pulse.
TEST(LocalGrid, CorruptedPlansAreRefusedNotFollowed) {
  const halox::Topology grid({2, 1, 1}, {true, true, true}, 0);
  std::vector<std::array<std::int64_t, 3>> interior(2, {6, 5, 4});
  std::vector<halox::GridPlan> plans =
      halox::make_local_grid_plans(grid, interior, 1, halox::Datatype::of<float>());
  {  // a null array is refused, not written through
    halox::GridExchange exchange(halox::Ranks::local(grid), plans);
    std::vector<void*> arrays(2, nullptr);
    EXPECT_THROW(exchange.exchange(arrays), halox::Error);
  }
  plans[1].pulses[0].header.send_size += 4;
  try {
    halox::GridExchange exchange(halox::Ranks::local(grid), plans);
    ADD_FAILURE() << "accepted a corrupted plan";
  } catch (const halox::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1's plan: pulse 0"), std::string::npos) << e.what();
  }
  // A send type that reaches past the array (a plan built for a larger one): refused with
  // the bytes it touches, not a heap overflow in the pack or the kernel.
  plans = halox::make_local_grid_plans(grid, interior, 1, halox::Datatype::of<float>());
  const std::vector<std::array<std::int64_t, 3>> larger(2, {6, 5, 9});
  plans[0].pulses[1].send_type =
      halox::make_local_grid_plans(grid, larger, 1, halox::Datatype::of<float>())[0]
          .pulses[1]
          .send_type;
  try {
    halox::GridExchange exchange(halox::Ranks::local(grid), plans);
    ADD_FAILURE() << "accepted a send type reaching past the field";
  } catch (const halox::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0's plan: pulse 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("of the field, which holds 1344"), std::string::npos)
        << e.what();
  }
  plans[0].pulses[1].send_type = plans[1].pulses[1].send_type;
  plans[0].field_bytes = -1;
  EXPECT_THROW(halox::GridExchange(halox::Ranks::local(grid), plans), halox::Error);
}

// Typed views: checked against the plans before any array is touched, and moving what the
// untyped call moves.
TEST(LocalGrid, TypedViewsAreCheckedAgainstThePlan) {
  const halox::Topology grid({2, 1, 1}, {true, true, true}, 0);
  const std::vector<std::array<std::int64_t, 3>> interior(2, {4, 3, 3});
  const halox::Datatype cell =
      halox::Datatype::contiguous(3, halox::Datatype::of<double>()).commit();
  const auto plans = halox::make_local_grid_plans(grid, interior, 1, cell);
  const auto& e = plans[0].extent;
  const std::size_t values = static_cast<std::size_t>(e[0] * e[1] * e[2] * 3);
  std::vector<std::vector<double>> typed(2), untyped(2);
  for (int r = 0; r < 2; ++r) {
    typed[r].resize(values);
    for (std::size_t i = 0; i < values; ++i) typed[r][i] = 1000.0 * r + static_cast<double>(i);
    untyped[r] = typed[r];
  }
  halox::GridExchange exchange(halox::Ranks::local(grid), plans);
  const std::vector<halox::FieldView<double>> views = {{typed[0].data(), 1}, {typed[1].data(), 1}};
  exchange.exchange(std::span<const halox::FieldView<double>>(views));
  std::vector<void*> arrays = {untyped[0].data(), untyped[1].data()};
  exchange.exchange(arrays);
  EXPECT_EQ(typed, untyped);
  EXPECT_NE(typed[0][0], 0.0);  // corner halo cells were written, not left at a fill value
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const halox::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  std::vector<float> floats(values);
  const std::vector<halox::FieldView<float>> wrong_type = {{floats.data(), 1}, {floats.data(), 1}};
  EXPECT_NE(message([&] {
              exchange.exchange(std::span<const halox::FieldView<float>>(wrong_type));
            }).find("the view of field 0 of rank 0 holds 4-byte values of another basic type"),
            std::string::npos);
  const std::vector<halox::FieldView<double>> wrong_halo = {{typed[0].data(), 1},
                                                            {typed[1].data(), 2}};
  EXPECT_NE(message([&] {
              exchange.exchange(std::span<const halox::FieldView<double>>(wrong_halo));
            }).find("the view of field 0 of rank 1 says halo width 2, its plan 1"),
            std::string::npos);
}

// CUDA graphs: the query says before; a capture before the set-up is refused with what to do;
// after one exchange outside, a captured exchange replays with the data of each replay.
TEST(LocalGrid, CapturesAreCheckedAndReplayTheirData) {
  const Topology shape({2, 1, 1}, {true, true, true}, 0);
  const Datatype element = Datatype::of<float>().commit();
  const std::vector<std::array<std::int64_t, 3>> interior(2, {4, 4, 4});
  GridExchange exchange(Ranks::local(shape), make_local_grid_plans(shape, interior, 1, element));
  // Local ranks default to local-pulse, whose device runs a graph can hold: CUDA builds only.
  EXPECT_EQ(exchange.capturable(), HALOX_HAS_CUDA != 0);
  if (!have_gpu()) GTEST_SKIP() << "no GPU: the query only";
#if HALOX_HAS_CUDA
  ExchangeOptions options;
  options.transport = TransportKind::local_fused;
  GridExchange fused(Ranks::local(shape), make_local_grid_plans(shape, interior, 1, element),
                     options);
  EXPECT_TRUE(fused.capturable());
  constexpr int side = 6, cells = side * side * side;
  std::vector<void*> fields(2);
  for (auto& p : fields) ASSERT_EQ(cudaMalloc(&p, cells * sizeof(float)), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto capture = [&](cudaGraph_t* graph) {
    std::string what;
    EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    try {
      fused.exchange_async(fields, stream);
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_EQ(cudaStreamEndCapture(stream, graph), cudaSuccess);
    return what;
  };
  cudaGraph_t graph = nullptr;
  const std::string what = capture(&graph);
  if (graph) cudaGraphDestroy(graph);
  EXPECT_NE(what.find("before its set-up"), std::string::npos) << what;
  EXPECT_NE(what.find("local-fused"), std::string::npos) << what;
  fused.exchange(fields);  // the set-up, outside the capture
  graph = nullptr;
  ASSERT_EQ(capture(&graph), "");
  cudaGraphExec_t replay = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&replay, graph, 0), cudaSuccess);
  std::vector<float> cells_of(cells);
  for (int round = 0; round < 5; ++round) {
    for (int r = 0; r < 2; ++r) {  // each rank all one value, new each replay
      std::fill(cells_of.begin(), cells_of.end(), 10.0f * (r + 1) + round);
      ASSERT_EQ(
          cudaMemcpy(fields[r], cells_of.data(), cells * sizeof(float), cudaMemcpyHostToDevice),
          cudaSuccess);
    }
    ASSERT_EQ(cudaGraphLaunch(replay, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    fused.check();
    ASSERT_EQ(cudaMemcpy(cells_of.data(), fields[0], cells * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    const int inside = (2 * side + 2) * side + 2;  // cell (2, 2, 2); x halos at x = 0 and 5
    EXPECT_EQ(cells_of[inside], 10.0f + round);
    EXPECT_EQ(cells_of[inside - 2], 20.0f + round) << "replay " << round;
    EXPECT_EQ(cells_of[inside + 3], 20.0f + round) << "replay " << round;
  }
  cudaGraphExecDestroy(replay);
  cudaGraphDestroy(graph);
  for (void* p : fields) cudaFree(p);
  cudaStreamDestroy(stream);
#endif
}
