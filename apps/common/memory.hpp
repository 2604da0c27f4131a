// Sizes the programs refuse before allocating: a clear message with the figure, not a
// std::bad_alloc (or hours of swapping) later.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

#include "halox/error.hpp"

namespace halox::apps {

/// This node's physical memory in bytes (0 when unknown).
inline double node_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

/// Throws halox::Error naming `what` when `bytes` exceed this node's memory.
inline void require_memory(const std::string& what, double bytes) {
  const double memory = node_memory_bytes();
  if (memory > 0 && bytes > memory) {
    char text[160];
    std::snprintf(text, sizeof text, " needs about %.3g GB, more than this node's %.3g GB",
                  bytes / 1e9, memory / 1e9);
    throw Error(what + text);
  }
}

}  // namespace halox::apps
