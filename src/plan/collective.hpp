// Errors found on one rank must reach every rank, or the others hang in the next collective.
#pragma once

#include <mpi.h>

#include <string>

#include "../common/mpi_wait.hpp"
#include "halox/exchange_options.hpp"
#include "halox/plan.hpp"
#include "halox/topology.hpp"

namespace halox::detail {

/// How the plan calls wait: the topology's time-out, `where` ("migrate_particles") in errors.
WaitContext plan_wait(const Topology& topology, const char* where);

/// Collective over `comm`: every rank throws the same halox::Error (naming `where`) unless
/// all ranks' topologies have the same dimensions and periodicity.
void agree_on_grid(const Topology& topology, MPI_Comm comm, const char* where);

/// build_particle_plans and migrate_particles over Ranks::blocks (several ranks per process):
/// the builder and the migration of every rank of this process in lockstep, their messages
/// copies between this process's ranks and MPI messages between the processes. Collective
/// over ranks.processes(); xyz and data: one entry per rank of this process.
std::vector<ParticlePlan> build_block_particle_plans(const Ranks& ranks, const Box& box,
                                                     double cutoff,
                                                     std::vector<std::vector<double>>& xyz);
void migrate_block_particles(const Ranks& ranks, const Box& box,
                             std::vector<std::vector<double>>& data, int stride);

}  // namespace halox::detail
