// Errors found on one rank must reach every rank, or the others hang in the next collective.
#pragma once

#include <mpi.h>

#include <string>

#include "../common/mpi_wait.hpp"
#include "halox/topology.hpp"

namespace halox::detail {

/// How the plan calls wait: the topology's time-out, `where` ("migrate_particles") in errors.
WaitContext plan_wait(const Topology& topology, const char* where);

/// Collective over `comm`: every rank throws the same halox::Error (naming `where`) unless
/// all ranks' topologies have the same dimensions and periodicity.
void agree_on_grid(const Topology& topology, MPI_Comm comm, const char* where);

}  // namespace halox::detail
