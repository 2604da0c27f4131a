// Sizes the programs refuse before allocating: a clear message with the figure, not a
// std::bad_alloc (or hours of swapping) later.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli.hpp"
#include "halox/error.hpp"

namespace halox::apps {

/// This node's physical memory in bytes (0 when unknown).
inline double node_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

/// The processes of this job on this node, as the launcher says (Open MPI, MPICH, Slurm);
/// 1 when none says. Read from the environment: the input check must not communicate.
inline int processes_on_this_node() {
  return std::max(
      1, launcher_count({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"},
                        1));
}

/// Throws halox::Error naming `what` when `bytes` (one process's need) times the processes
/// of this node exceed its memory: four processes of 22 GB do not fit 25 GB.
inline void require_memory(const std::string& what, double bytes) {
  const double memory = node_memory_bytes();
  const int processes = processes_on_this_node();
  const double node = bytes * processes;
  if (memory > 0 && node > memory) {
    char text[200];
    if (processes > 1) {
      std::snprintf(text, sizeof text,
                    " needs about %.3g GB per process, %.3g GB for the %d processes on this node, "
                    "more than its %.3g GB",
                    bytes / 1e9, node / 1e9, processes, memory / 1e9);
    } else {
      std::snprintf(text, sizeof text, " needs about %.3g GB, more than this node's %.3g GB",
                    bytes / 1e9, memory / 1e9);
    }
    throw Error(what + text);
  }
}

}  // namespace halox::apps
