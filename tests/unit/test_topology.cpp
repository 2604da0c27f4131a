#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "halox/error.hpp"
#include "halox/plan.hpp"
#include "halox/topology.hpp"

using namespace halox;

TEST(Topology, RankCoordinatesRoundTrip) {
  Topology t({3, 2, 4}, {true, false, true}, 5);
  EXPECT_EQ(t.size(), 24);
  for (int r = 0; r < t.size(); ++r) EXPECT_EQ(t.rank_of(t.coords_of(r)), r);
  EXPECT_EQ(t.coords_of(5), (std::array<int, 3>{2, 1, 0}));
}

TEST(Topology, NeighboursWrapOnlyOnPeriodicAxes) {
  Topology t({3, 2, 4}, {true, false, true}, 0);
  EXPECT_EQ(t.neighbor(X, -1), t.rank_of({2, 0, 0}));
  EXPECT_EQ(t.neighbor(Y, -1), -1);
  EXPECT_EQ(t.neighbor(Y, +1), t.rank_of({0, 1, 0}));
  EXPECT_EQ(t.neighbor(Z, -1), t.rank_of({0, 0, 3}));
  Topology one({1, 1, 1}, {true, true, true}, 0);
  EXPECT_EQ(one.neighbor(X, +1), 0);
}

TEST(Topology, BadInputIsRefused) {
  EXPECT_THROW(Topology({0, 1, 1}, {true, true, true}, 0), Error);
  EXPECT_THROW(Topology({2, 1, 1}, {true, true, true}, 2), Error);
  EXPECT_EQ(parse_dims("2x3"), (std::array<int, 3>{2, 3, 1}));
  EXPECT_EQ(parse_dims("4"), (std::array<int, 3>{4, 1, 1}));
  EXPECT_THROW(parse_dims("2x0x1"), Error);
  EXPECT_THROW(parse_dims("2xx1"), Error);
  EXPECT_THROW(parse_dims("1x1x1x1"), Error);
  // A lattice needs all three; values are decimal digits (no blank, sign or hex).
  EXPECT_THROW(parse_dims("16x16", 3), Error);
  EXPECT_EQ(parse_dims("16x16x8", 3), (std::array<int, 3>{16, 16, 8}));
  for (const char* bad : {" 2x2", "+2x2", "0x10", "2x 2", "2x2x", "", "99999999999"}) {
    EXPECT_THROW(parse_dims(bad), Error) << bad;
  }
  // The calls that took any number: a rank outside the grid, an axis or direction that is
  // none, a time-out that is not a time.
  Topology t({2, 2, 1}, {true, true, true}, 0);
  EXPECT_THROW(t.coords_of(99), Error);
  EXPECT_THROW(t.coords_of(-1), Error);
  EXPECT_THROW(t.neighbor(7, 1), Error);
  EXPECT_THROW(t.neighbor(X, 2), Error);
  EXPECT_THROW(t.neighbor(5, X, 1), Error);
  for (double bad : {0.0, -1.0, 1e300, 1e7, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(t.set_timeout_seconds(bad), Error) << bad;
  }
  EXPECT_EQ(t.timeout_seconds(), kPlanTimeoutSeconds);
  t.set_timeout_seconds(2.5);
  EXPECT_EQ(t.timeout_seconds(), 2.5);
}

TEST(GridPlan, SixPulsesWithForwardedEdges) {
  Topology t({2, 2, 2}, {true, true, true}, 0);
  GridPlan plan = make_grid_plan(t, {8, 6, 4}, 2, Datatype::of<float>().commit());
  ASSERT_EQ(plan.pulses.size(), 6u);
  // z faces: interior x * interior y * halo; y faces carry the z halo; x faces carry both.
  EXPECT_EQ(plan.pulses[0].header.send_size, 8 * 6 * 2 * 4);
  EXPECT_EQ(plan.pulses[2].header.send_size, 8 * 2 * (4 + 4) * 4);
  EXPECT_EQ(plan.pulses[4].header.send_size, 2 * (6 + 4) * (4 + 4) * 4);
  EXPECT_EQ(plan.pulses[0].header.axis, Z);
  EXPECT_EQ(plan.pulses[5].header.axis, X);
  EXPECT_THROW(make_grid_plan(t, {8, 1, 4}, 2, Datatype::of<float>().commit()), Error);
}

TEST(GridPlan, PaddedAllocationMovesTheSameCells) {
  Topology t({2, 2, 2}, {true, true, true}, 0);
  const Datatype f = Datatype::of<float>().commit();
  GridPlan dense = make_grid_plan(t, {8, 6, 4}, 2, f);
  GridPlan padded = make_grid_plan(t, {8, 6, 4}, 2, f, {16, 11, 8});
  EXPECT_EQ(padded.extent, (std::array<std::int64_t, 3>{16, 11, 8}));
  for (std::size_t p = 0; p < dense.pulses.size(); ++p) {
    EXPECT_EQ(padded.pulses[p].header.send_size, dense.pulses[p].header.send_size);
  }
  // x face of the padded array: rows 16 elements apart.
  EXPECT_EQ(padded.pulses[4].send_type.extent(), 16 * 11 * 8 * 4);
  EXPECT_THROW(make_grid_plan(t, {8, 6, 4}, 2, f, {11, 0, 0}), Error);  // 11 < 8 + 2 * 2
}

TEST(Domain, SplitsTheBoxEvenlyAndEndsAtTheEdge) {
  Topology t({3, 1, 1}, {true, true, true}, 2);
  Box box{{10.0, 5.0, 5.0}};
  Domain d = domain_of(t, box, 2);
  EXPECT_DOUBLE_EQ(d.lo[0], 20.0 / 3);
  EXPECT_EQ(d.hi[0], 10.0);
}

// The grid chooser against the face cells it is meant to minimise: x faces (strided, one
// element per 32-byte sector) avoided, slower axes split first on ties, small grids respected.
TEST(Topology, GridRankDimsKeepsTheHaloCheap) {
  const std::array<long, 3> cube = {256, 256, 256};
  EXPECT_EQ(grid_rank_dims(1, cube, 8), (std::array<int, 3>{1, 1, 1}));
  EXPECT_EQ(grid_rank_dims(2, cube, 8), (std::array<int, 3>{1, 1, 2}));
  // 2x2x2 moves 2 * (8 * 128^2 + 2 * 128^2) cells per rank; 1x2x4 2 * (256 * 64 + 256 * 128).
  EXPECT_EQ(grid_rank_dims(8, cube, 8), (std::array<int, 3>{1, 2, 4}));
  EXPECT_EQ(grid_rank_dims(64, cube, 8), (std::array<int, 3>{1, 8, 8}));
  // Unweighted, 2x2x2 ties with 1x2x4 (3 * 2 * 128^2 face cells each): z first wins.
  EXPECT_EQ(grid_rank_dims(8, cube, 1), (std::array<int, 3>{1, 2, 4}));
  // A long x: unweighted, all along x (2 * 64^2 cells); weighted, x split less and z too.
  EXPECT_EQ(grid_rank_dims(8, {1024, 64, 64}, 1), (std::array<int, 3>{8, 1, 1}));
  EXPECT_EQ(grid_rank_dims(8, {1024, 64, 64}, 8), (std::array<int, 3>{4, 1, 2}));
  // A thin z leaves the split to x and y: with 1 cell along z, no z split fits.
  EXPECT_EQ(grid_rank_dims(4, {512, 512, 1}, 8), (std::array<int, 3>{1, 4, 1}));
  // A prime count on a long x: all along x is the only way that fits a short y and z.
  EXPECT_EQ(grid_rank_dims(7, {700, 3, 3}, 8), (std::array<int, 3>{7, 1, 1}));
  EXPECT_THROW(grid_rank_dims(7, {3, 3, 3}, 8), Error);
  EXPECT_THROW(grid_rank_dims(0, cube, 8), Error);
  // Whatever it picks multiplies to the count.
  for (int n = 1; n <= 48; ++n) {
    const auto d = grid_rank_dims(n, {96, 80, 64}, 8);
    EXPECT_EQ(d[0] * d[1] * d[2], n) << n;
  }
}

TEST(Topology, GridsWhoseRankCountOverflowsAnIntAreRefused) {
  EXPECT_THROW(halox::Topology({6, 715827883, 1}, {true, true, true}, 0), halox::Error);
  EXPECT_THROW(halox::Topology({65536, 65536, 2}, {true, true, true}, 0), halox::Error);
}

// A global lattice split over rank grids, even and uneven: every cell held by exactly one
// rank (counted cell by cell, independently of the split's formula), parts along an axis
// differing by at most one cell, larger ones first, and the offsets where the cells are.
TEST(Topology, SubdomainsTileTheLattice) {
  for (const std::array<int, 3> dims :
       {std::array<int, 3>{1, 1, 1}, {2, 1, 1}, {3, 2, 1}, {2, 3, 4}, {5, 1, 3}}) {
    const Topology grid(dims, {true, false, true}, 0);
    for (const std::array<std::int64_t, 3> global :
         {std::array<std::int64_t, 3>{10, 7, 9}, {5, 3, 4}, {64, 33, 17}}) {
      std::vector<int> owners(static_cast<std::size_t>(global[0] * global[1] * global[2]), 0);
      for (int r = 0; r < grid.size(); ++r) {
        const Subdomain part = subdomain_of(grid, global, r);
        const auto c = grid.coords_of(r);
        for (int a = 0; a < 3; ++a) {
          const std::int64_t small = global[a] / dims[a];
          EXPECT_TRUE(part.interior[a] == small || part.interior[a] == small + 1);
          if (c[a] > 0) {
            auto left = c;
            --left[a];
            const Subdomain before = subdomain_of(grid, global, grid.rank_of(left));
            EXPECT_EQ(part.offset[a], before.offset[a] + before.interior[a]);
            EXPECT_LE(part.interior[a], before.interior[a]);  // larger parts first
          }
        }
        for (std::int64_t z = 0; z < part.interior[2]; ++z)
          for (std::int64_t y = 0; y < part.interior[1]; ++y)
            for (std::int64_t x = 0; x < part.interior[0]; ++x) {
              const std::int64_t gx = part.offset[0] + x, gy = part.offset[1] + y,
                                 gz = part.offset[2] + z;
              ASSERT_LT(gx, global[0]);
              ASSERT_LT(gy, global[1]);
              ASSERT_LT(gz, global[2]);
              ++owners[static_cast<std::size_t>((gz * global[1] + gy) * global[0] + gx)];
            }
      }
      for (const int n : owners) ASSERT_EQ(n, 1);
    }
  }
  const Topology grid({4, 1, 1}, {true, true, true}, 2);
  EXPECT_EQ(subdomain_of(grid, {10, 6, 6}).offset[0], 6);  // 3, 3, 2, 2 cells: rank 2 at 6
  EXPECT_EQ(subdomain_of(grid, {10, 6, 6}).interior[0], 2);
  EXPECT_THROW(subdomain_of(grid, {3, 6, 6}), Error);  // 4 ranks, 3 cells along x
}
