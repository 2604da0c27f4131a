// Plans over Ranks: one call for both kinds of ranks, dispatching to the MPI builders (one
// rank per process) or the in-process ones (every rank of the grid here).
#include "halox/plan.hpp"

#include "halox/error.hpp"
#include "halox/exchange_options.hpp"
#include "../common/no_mpi.hpp"

namespace halox {

namespace {

// The one entry of a process with one rank, after checking that one came.
template <class T>
T& only_entry(std::vector<T>& entries, const char* function, const char* what) {
  if (entries.size() != 1) {
    throw Error(std::string("halox::") + function + ": " + std::to_string(entries.size()) + " " +
                what + " for one rank per process (Ranks::mpi): give one");
  }
  return entries.front();
}

}  // namespace

std::vector<GridPlan> build_grid_plans(const Ranks& ranks, std::array<std::int64_t, 3> global,
                                       int halo, const Datatype& element) {
  const Topology& grid = ranks.topology();
  if (ranks.in_process()) {
    std::vector<std::array<std::int64_t, 3>> interiors;
    for (int r = 0; r < grid.size(); ++r)
      interiors.push_back(subdomain_of(grid, global, r).interior);
    return make_local_grid_plans(grid, interiors, halo, element);
  }
#if HALOX_HAS_MPI
  return {build_grid_plan(grid, subdomain_of(grid, global).interior, halo, element)};
#else
  detail::no_mpi("build_grid_plans");
#endif
}

std::vector<ParticlePlan> build_particle_plans(const Ranks& ranks, const Box& box, double cutoff,
                                               std::vector<std::vector<double>>& xyz) {
  if (ranks.in_process()) return build_local_particle_plans(ranks.topology(), box, cutoff, xyz);
#if HALOX_HAS_MPI
  return {build_particle_plan(ranks.topology(), box, cutoff,
                              only_entry(xyz, "build_particle_plans", "coordinate sets"))};
#else
  detail::no_mpi("build_particle_plans");
#endif
}

void migrate_particles(const Ranks& ranks, const Box& box, std::vector<std::vector<double>>& data,
                       int stride) {
  if (ranks.in_process()) return migrate_local_particles(ranks.topology(), box, data, stride);
#if HALOX_HAS_MPI
  migrate_particles(ranks.topology(), box, only_entry(data, "migrate_particles", "atom sets"),
                    stride);
#else
  detail::no_mpi("migrate_particles");
#endif
}

}  // namespace halox
