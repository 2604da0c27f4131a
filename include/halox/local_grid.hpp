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

/// Moves the halos of every rank of one process's grid in one call: stage by stage (Z, then
/// Y carrying the Z halo, then X carrying both, so edges and corners arrive), each face
/// straight from the sender's array into the receiver's. On the GPU each face is one kernel
/// (`copy_async`) on `stream`, with no staging buffer and no host wait; in host memory the
/// faces are packed and unpacked on the CPU. Mismatched plans are refused when it is built.
class LocalGridExchange {
 public:
  /// plans[r]: rank r's plan (make_local_grid_plans, or make_grid_plan with rank r).
  explicit LocalGridExchange(std::vector<GridPlan> plans);
  ~LocalGridExchange();
  LocalGridExchange(const LocalGridExchange&) = delete;
  LocalGridExchange& operator=(const LocalGridExchange&) = delete;

  /// fields[r]: rank r's array (all on the host, or all on this process's current GPU).
  void exchange(const std::vector<void*>& fields, CUstream_st* stream = nullptr);

  const std::vector<GridPlan>& plans() const;
  /// Faces moved per exchange (kernels on the GPU).
  int faces_per_exchange() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace halox
