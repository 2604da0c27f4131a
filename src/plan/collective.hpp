// Errors found on one rank must reach every rank, or the others hang in the next collective.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

#include "halox/topology.hpp"

namespace halox::detail {

/// How a nonblocking collective's request is waited for: MPI_Wait when empty; an exchange's
/// set-up passes a wait bounded by its time-out (transport/host_wait.hpp, bounded_wait).
using CollectiveWait = std::function<void(MPI_Request&)>;

/// Collective over `comm`: when any rank passes a non-empty `error`, every rank throws
/// halox::Error with the message of the lowest such rank (prefixed by that rank). With a
/// bounded `wait`, a rank that never arrives ends the others' call in that wait's error.
void raise_if_any(MPI_Comm comm, const std::string& error, const CollectiveWait& wait = {});

/// Collective over `comm`: every rank throws the same halox::Error (naming `where`) unless
/// all ranks' topologies have the same dimensions and periodicity.
void agree_on_grid(const Topology& topology, MPI_Comm comm, const char* where);

}  // namespace halox::detail
