// halox: grid halos between ranks that live in one process (no MPI needed): every rank's
// field is an array of this process, in host memory or on this process's current GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "halox/plan.hpp"
#include "halox/topology.hpp"

struct CUstream_st;

namespace halox {

/// The grid plans of every rank of `shape`'s grid (dims and periodicity; its own rank is
/// ignored), built in one process: rank r gets interior[r] cells (several ranks may differ,
/// as with an uneven split) and, when given, allocated[r] (padded arrays, as
/// make_grid_plan). Throws halox::Error for bad sizes or neighbouring faces that differ.
std::vector<GridPlan> make_local_grid_plans(
    const Topology& shape, const std::vector<std::array<std::int64_t, 3>>& interior, int halo,
    const Datatype& element, const std::vector<std::array<std::int64_t, 3>>& allocated = {});

struct LocalGridOptions {
  /// GPU arrays: one kernel moves every face of every rank, all stages in one launch; a face
  /// of a later stage waits on the device only for the faces its sender receives earlier
  /// (what it forwards). false: one copy kernel per face, launched in stage order.
  bool fused = true;
  /// The fused kernel's device-side waits give up after this long; the next exchange throws
  /// HaloTimeoutError naming the rank, the peer and the pulse.
  double timeout_seconds = 5.0;
  /// Fused, at the first exchange of GPU arrays: before any field moves, a small message
  /// (and its signal) over the link of every face in both directions, checked on the
  /// device; a failure throws HaloTimeoutError naming the two ranks, the pulse and what did
  /// not arrive.
  bool self_test = true;
  /// Testing only: the fused kernel does not move this rank's faces, as if it had stalled
  /// (nor, in the self-test, send or receive its probes).
  int stall_rank = -1;
};

/// Moves the halos of every rank of one process's grid in one call: stage by stage (Z, then
/// Y carrying the Z halo, then X carrying both, so edges and corners arrive), each face
/// straight from the sender's array into the receiver's, with no staging buffer and no host
/// wait. On the GPU, one fused kernel on `stream` (or one `copy_async` per face, see
/// LocalGridOptions); in host memory the faces are packed and unpacked on the CPU.
/// Mismatched plans are refused when it is built.
class LocalGridExchange {
 public:
  /// plans[r]: rank r's plan (make_local_grid_plans, or make_grid_plan with rank r).
  explicit LocalGridExchange(std::vector<GridPlan> plans, LocalGridOptions options = {});
  ~LocalGridExchange();
  LocalGridExchange(const LocalGridExchange&) = delete;
  LocalGridExchange& operator=(const LocalGridExchange&) = delete;

  /// fields[r]: rank r's array (all on the host, or all on this process's current GPU).
  void exchange_async(const std::vector<void*>& fields, CUstream_st* stream);
  /// The same on the default stream, done on return.
  void exchange(const std::vector<void*>& fields);

  const std::vector<GridPlan>& plans() const;
  /// Faces moved per exchange.
  int faces_per_exchange() const;
  /// Kernel launches per exchange of GPU arrays: 1 fused, else one per face.
  int launches_per_exchange() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox
