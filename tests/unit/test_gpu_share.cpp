// gpu_share_of (src/runtime/gpu_share.hpp): the part of the GPU it reads that one process's
// spinning fused kernels may fill, with and without an MPS thread percentage.
#include <gtest/gtest.h>

#include "../../src/runtime/gpu_share.hpp"

using halox::detail::gpu_share_of;

TEST(GpuShare, WithoutMpsPercentageEachProcessTakesItsPartOfTheWholeGpu) {
  EXPECT_DOUBLE_EQ(gpu_share_of(1, 0), 1.0);
  EXPECT_DOUBLE_EQ(gpu_share_of(2, 0), 0.5);
  EXPECT_DOUBLE_EQ(gpu_share_of(4, 0), 0.25);
  EXPECT_DOUBLE_EQ(gpu_share_of(0, 0), 1.0);    // no count: this process alone
  EXPECT_DOUBLE_EQ(gpu_share_of(2, 100), 0.5);  // 100%: reads the whole GPU
}

TEST(GpuShare, AnMpsPercentageIsCountedOnce) {
  // 2 processes at 50% read half the GPU each: 80% of what each reads, not 40%.
  EXPECT_DOUBLE_EQ(gpu_share_of(2, 50), 0.8);
  EXPECT_DOUBLE_EQ(gpu_share_of(4, 25), 0.8);
  // One process at 50%: all it reads (capped at 1).
  EXPECT_DOUBLE_EQ(gpu_share_of(1, 50), 1.0);
  // Oversubscribed (3 processes at 50%): the blocks of all must still fit the GPU.
  EXPECT_NEAR(gpu_share_of(3, 50), 0.8 * 2.0 / 3.0, 1e-12);
  for (int processes = 1; processes <= 8; ++processes) {
    for (double p : {10.0, 25.0, 33.0, 50.0, 75.0}) {
      // Blocks resident over all processes, as a fraction of the GPU: never above 1.
      const double used = processes * gpu_share_of(processes, p) * p / 100.0;
      EXPECT_LE(used, 1.0 + 1e-12) << processes << " processes at " << p << "%";
    }
  }
}
