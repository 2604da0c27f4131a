// Errors found on one rank must reach every rank, or the others hang in the next collective.
#pragma once

#include <mpi.h>

#include <string>

#include "halox/topology.hpp"

namespace halox::detail {

/// Collective over `comm`: when any rank passes a non-empty `error`, every rank throws
/// halox::Error with the message of the lowest such rank (prefixed by that rank).
void raise_if_any(MPI_Comm comm, const std::string& error);

/// Collective over `comm`: every rank throws the same halox::Error (naming `where`) unless
/// all ranks' topologies have the same dimensions and periodicity.
void agree_on_grid(const Topology& topology, MPI_Comm comm, const char* where);

}  // namespace halox::detail
