// GrowingBuffer and GrowingArray (src/common/growing_buffer.hpp), halox's one buffer that
// only grows, in host memory (the device and pinned kinds allocate differently, the same
// code otherwise): its contents dropped or kept as asked, headroom, and a size of none.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "../../src/common/growing_buffer.hpp"
#include "../common/seed.hpp"

using halox::detail::GrowingArray;
using halox::detail::GrowingBuffer;
using halox::detail::Growth;
using halox::detail::Memory;

TEST(GrowingBuffer, GrowsOnlyAndByAQuarterMoreWithHeadroom) {
  GrowingBuffer<Memory::host> exact;
  EXPECT_EQ(exact.get(), nullptr);
  char* first = exact.at_least(100);
  EXPECT_EQ(exact.size(), 100);
  EXPECT_EQ(exact.at_least(40), first);  // smaller: the same memory
  exact.at_least(101);
  EXPECT_EQ(exact.size(), 101);
  GrowingBuffer<Memory::host, Growth::with_headroom> roomy;
  roomy.at_least(400);
  EXPECT_EQ(roomy.size(), 500);
}

TEST(GrowingBuffer, KeepingCopiesWhatIsUsedWhenItGrows) {
  const std::uint64_t seed = halox::testing::test_seed("GrowingBuffer.Keeping", 0);
  std::mt19937_64 rng(seed);
  GrowingArray<double, Memory::host, Growth::with_headroom> array;
  std::vector<double> want;
  double* p = array.at_least(8);
  for (int round = 0; round < 20; ++round) {
    const std::size_t used = want.size();
    const std::size_t n = used + std::uniform_int_distribution<std::size_t>(0, 50)(rng);
    p = array.keeping(n, used);
    ASSERT_NE(p, nullptr);
    for (std::size_t i = 0; i < used; ++i)
      ASSERT_EQ(p[i], want[i]) << "seed " << seed << ", round " << round << ", element " << i;
    for (std::size_t i = used; i < n; ++i) {
      want.push_back(std::uniform_real_distribution<double>(-1, 1)(rng));
      p[i] = want.back();
    }
  }
}

TEST(GrowingArray, ASizeOfNoneIsStillAnAddress) {
  GrowingArray<int, Memory::host> none;
  EXPECT_NE(none.at_least(0), nullptr);  // cub takes null for "how much do you need?"
  none.resize(3);
  int* p = none.get();
  std::iota(p, p + 3, 7);
  EXPECT_EQ(p[2], 9);
}
