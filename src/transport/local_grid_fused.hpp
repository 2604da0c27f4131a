// The local-fused grid exchange (built with CUDA only): one kernel moves every face of every
// rank of the process, all stages in one launch.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/device.hpp"
#include "halox/exchange_options.hpp"
#include "local_grid.hpp"

namespace halox::detail {

class LocalGridFused {
 public:
  /// faces in stage order between `arrays` arrays. Several fields run as one grid of
  /// ranks_per_field * fields arrays (field f's rank r at f * ranks_per_field + r). Runs the
  /// self-test when the options ask for it (throws HaloTimeoutError when a probe does not
  /// arrive intact).
  LocalGridFused(std::vector<LocalFace> faces, int arrays, const ExchangeOptions& options,
                 int ranks_per_field);
  /// How many ranks times fields one kernel takes.
  static int max_ranks();
  ~LocalGridFused();
  LocalGridFused(const LocalGridFused&) = delete;
  LocalGridFused& operator=(const LocalGridFused&) = delete;

  /// One launch on `stream`; throws HaloTimeoutError when an earlier launch timed out.
  /// Capturable in a CUDA graph once these fields' table is made (set_up_for).
  void exchange(std::span<void* const> fields, GpuStream stream);
  /// Whether the table for these fields' addresses is made (the first exchange makes it).
  bool set_up_for(std::span<void* const> fields) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox::detail
