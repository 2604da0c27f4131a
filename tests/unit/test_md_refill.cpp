// halox-md's in-place migration (HomeRefill): after a refill the home rows hold exactly the
// atoms that stayed and those that arrived, whatever the holes, and only atoms that had to
// move were copied. Checked against the set arithmetic on random cases (seed printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "backend.hpp"

namespace {

using halox::md::HomeRefill;
using halox::md::refill_home;
using halox::md::refill_rows;

// Rows of 2 values (id, id + 0.5); arrived atoms get ids from 1,000,000 up.
void check(std::size_t rows, const std::vector<std::int32_t>& leaving, std::size_t arrived) {
  const HomeRefill refill = refill_home(rows, leaving, arrived);
  ASSERT_EQ(refill.rows, rows - leaving.size() + arrived);
  std::vector<double> data(2 * std::max(rows, refill.rows), -7.0);  // poison past the end
  for (std::size_t i = 0; i < rows; ++i) {
    data[2 * i] = static_cast<double>(i);
    data[2 * i + 1] = static_cast<double>(i) + 0.5;
  }
  refill_rows<2>(data.data(), refill,
                 [](std::size_t a, int c) { return 1e6 + static_cast<double>(a) + 0.5 * c; });
  std::multiset<double> want, got;
  const std::set<std::int32_t> left(leaving.begin(), leaving.end());
  for (std::size_t i = 0; i < rows; ++i)
    if (!left.count(static_cast<std::int32_t>(i))) want.insert(static_cast<double>(i));
  for (std::size_t a = 0; a < arrived; ++a) want.insert(1e6 + static_cast<double>(a));
  for (std::size_t i = 0; i < refill.rows; ++i) {
    got.insert(data[2 * i]);
    ASSERT_EQ(data[2 * i + 1], data[2 * i] + 0.5) << "row " << i << " mixes two atoms";
  }
  ASSERT_EQ(got, want);
  // Atoms that stay below the new end are not moved.
  for (std::size_t i = 0; i < std::min(rows, refill.rows); ++i)
    if (!left.count(static_cast<std::int32_t>(i))) ASSERT_EQ(data[2 * i], static_cast<double>(i));
  // Only holes receive, and each at most once.
  std::set<std::int32_t> written;
  for (const auto& [from, to] : refill.moves) {
    EXPECT_TRUE(left.count(to)) << "move into row " << to << ", which did not leave";
    EXPECT_GE(static_cast<std::size_t>(from), refill.rows);
    EXPECT_TRUE(written.insert(to).second);
  }
  for (const std::int32_t row : refill.arrival_rows) EXPECT_TRUE(written.insert(row).second);
}

TEST(MdRefill, AwkwardCases) {
  check(0, {}, 5);               // the first load: every atom arrives
  check(5, {}, 0);               // nothing moves
  check(5, {0, 1, 2, 3, 4}, 0);  // every atom leaves
  check(5, {0, 1, 2, 3, 4}, 2);
  check(6, {4, 5}, 0);        // holes at the end need no move
  check(6, {0, 5}, 0);        // a hole at the end and one at the start
  check(6, {1, 3}, 4);        // more arrive than leave
  check(8, {0, 2, 6, 7}, 1);  // the last atoms are holes themselves
}

TEST(MdRefill, RandomCases) {
  const auto seed = std::random_device{}();
  std::printf("[seed] MdRefill.RandomCases: %u\n", seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t rows = rng() % 40;
    std::vector<std::int32_t> leaving;
    const double p = std::uniform_real_distribution<double>(0, 1)(rng);
    for (std::size_t i = 0; i < rows; ++i)
      if (std::uniform_real_distribution<double>(0, 1)(rng) < p)
        leaving.push_back(static_cast<std::int32_t>(i));
    const std::size_t arrived = rng() % 20;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " rows " << rows << " leaving "
                                      << leaving.size() << " arrived " << arrived);
    check(rows, leaving, arrived);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
