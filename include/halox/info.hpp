// halox: what this process's halox can do, as halox-info prints it and halox.info() returns
// it (without communication; halox-info adds the job's rows: MPI, the ranks' GPUs and pairs).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace halox {

struct ProcessInfo {
  /// The table's rows in order (key, value): halox's version and build, the CUDA runtime and
  /// driver, each GPU and its peer-access row, NCCL, NVSHMEM, whether MPI is CUDA-aware, the
  /// transports available and those not (each reason once), the tuning file's values, MPS.
  std::vector<std::pair<std::string, std::string>> rows;
  std::vector<std::string> gpus;              ///< "name, MiB, SMs, sm_XY" per visible GPU
  std::vector<std::vector<int>> peer_access;  ///< [a][b]: 1 where GPU a can access GPU b
  std::string gpu_note;                       ///< why no GPU is visible; empty when one is
  std::int64_t direct_until_bytes = -1;       ///< the tuning file's crossover (-1: none)
};

/// Never throws for what the machine lacks or a bad tuning file: each is a row saying so.
ProcessInfo process_info();

}  // namespace halox
