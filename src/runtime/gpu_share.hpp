// How much of the GPU it reads (its SM count) one process's spinning kernels may use, as a
// pure function of what gpu_share() finds (host-only; unit-tested).
#pragma once

#include <algorithm>

namespace halox::detail {

/// `processes`: the processes of this node on the same GPU; `mps_percent`: the MPS active
/// thread percentage of this process (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), 0 if not set.
/// Without a percentage every process reads the whole GPU: 1 / processes of it. With one,
/// the SM count a process reads is already p% of the GPU, so its fair part of what it reads
/// is 100 / (p * processes), not 1 / processes (which would count the split twice and leave
/// half the blocks unused); 80% of that, because every spinning block of every process must
/// be resident and MPS places them on SMs the others may partly fill.
inline double gpu_share_of(int processes, double mps_percent) {
  processes = std::max(1, processes);
  if (mps_percent > 0 && mps_percent < 100) {
    return std::min(1.0, 0.8 * 100.0 / (mps_percent * processes));
  }
  return 1.0 / processes;
}

}  // namespace halox::detail
