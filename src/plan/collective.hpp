// Errors found on one rank must reach every rank, or the others hang in the next collective.
#pragma once

#include <mpi.h>

#include <string>

namespace halox::detail {

/// Collective over `comm`: when any rank passes a non-empty `error`, every rank throws
/// halox::Error with the message of the lowest such rank (prefixed by that rank).
void raise_if_any(MPI_Comm comm, const std::string& error);

}  // namespace halox::detail
