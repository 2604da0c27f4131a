// How much of the GPU it reads (its SM count) one process's spinning kernels may use, as a
// pure function of what gpu_share() finds (host-only; unit-tested).
#pragma once

#include <algorithm>

namespace halox::detail {

/// The part of its share that a process sharing the GPU with others fills (gpu_share_of).
inline constexpr double kSharedGpuMargin = 0.8;

/// `processes`: the processes of this node on the same GPU; `mps_percent`: the MPS active
/// thread percentage of this process (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), 0 if not set.
/// Without a percentage every process reads the whole GPU: its part is 1 / processes of it.
/// With one, the SM count a process reads is already p% of the GPU, so its fair part of what
/// it reads is 100 / (p * processes), not 1 / processes (which would count the split twice
/// and leave half the blocks unused). Several processes take 80% of their part, because every
/// spinning block of every process must be resident and MPS places them on SMs the others
/// may partly fill: on the H200, two processes whose traced grid kernels filled the GPU's
/// occupancy exactly (99 blocks per op, 2 ops each, 396 in all) hung on their second exchange.
inline double gpu_share_of(int processes, double mps_percent) {
  processes = std::max(1, processes);
  if (mps_percent > 0 && mps_percent < 100) {
    return std::min(1.0, kSharedGpuMargin * 100.0 / (mps_percent * processes));
  }
  return processes == 1 ? 1.0 : kSharedGpuMargin / processes;
}

}  // namespace halox::detail
