// The faces of LocalGridExchange, and its GPU-initiated path (built with CUDA only): one
// kernel moves every face of every rank of the process, all stages in one launch.
#pragma once

#include <memory>
#include <vector>

#include "halox/local_grid.hpp"
#include "halox/plan.hpp"

struct CUstream_st;

namespace halox::detail {

/// One face: rank `from`'s pulse `pulse` sends to rank `to`'s pulse `pulse`.
struct LocalFace {
  int stage, pulse, from, to;
};

class LocalGridFused {
 public:
  /// faces in stage order; plans[r] is rank r's plan. Runs the self-test when the options
  /// ask for it (throws HaloTimeoutError when a probe does not arrive intact).
  LocalGridFused(const std::vector<GridPlan>& plans, const std::vector<LocalFace>& faces,
                 const LocalGridOptions& options);
  ~LocalGridFused();
  LocalGridFused(const LocalGridFused&) = delete;
  LocalGridFused& operator=(const LocalGridFused&) = delete;

  /// One launch on `stream`; throws HaloTimeoutError when an earlier launch timed out.
  void exchange(const std::vector<void*>& fields, CUstream_st* stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox::detail
