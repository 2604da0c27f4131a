// Plans over Ranks: one call for both kinds of ranks, dispatching to the MPI builders (one
// rank per process) or the in-process ones (every rank of the grid here).
#include "halox/plan.hpp"

#include "halox/error.hpp"
#include "halox/exchange_options.hpp"
#include "../common/no_mpi.hpp"
#if HALOX_HAS_MPI
#include "collective.hpp"
#include "halox/mpi.hpp"
#endif

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

#if HALOX_HAS_MPI
// Collective over the processes: their lattice, halo and element are the same, else every
// process throws halox::Error saying what differs.
void agree_on_lattice(const Topology& processes, const std::array<std::int64_t, 3>& global,
                      int halo, const Datatype& element) {
  if (processes.comm() == MPI_COMM_NULL) {
    if (processes.size() == 1) return;  // one process: nothing to agree with
    throw Error(
        "halox::build_grid_plans: the processes of Ranks::blocks are a Topology without a "
        "communicator; make it with Topology::from_mpi");
  }
  const long long mine[5] = {global[0], global[1], global[2], halo, element.extent()};
  long long both[10];
  for (int k = 0; k < 5; ++k) both[k] = mine[k], both[5 + k] = -mine[k];
  allreduce(processes, MPI_IN_PLACE, both, 10, MPI_LONG_LONG, MPI_MIN,
            "build_grid_plans's agreement on the lattice");
  for (int k = 0; k < 5; ++k) {
    if (both[k] != -both[5 + k]) {
      throw Error("halox::build_grid_plans: the processes of Ranks::blocks disagree on the " +
                  std::string(k < 3    ? "global lattice"
                              : k == 3 ? "halo"
                                       : "element's extent") +
                  " (values from " + std::to_string(both[k]) + " to " +
                  std::to_string(-both[5 + k]) + "); every process must pass the same");
    }
  }
}
#endif

}  // namespace

std::vector<GridPlan> build_grid_plans(const Ranks& ranks, std::array<std::int64_t, 3> global,
                                       int halo, const Datatype& element) {
  const Topology& grid = ranks.topology();
  if (ranks.in_process() || ranks.in_blocks()) {
#if HALOX_HAS_MPI
    // Every process makes the plans of the whole grid from the same description: they must
    // agree on it (told collectively, before any plan is used).
    if (ranks.in_blocks()) agree_on_lattice(ranks.processes(), global, halo, element);
#endif
    std::vector<std::array<std::int64_t, 3>> interiors;
    for (int r = 0; r < grid.size(); ++r)
      interiors.push_back(subdomain_of(grid, global, r).interior);
    std::vector<GridPlan> all = make_local_grid_plans(grid, interiors, halo, element);
    if (ranks.in_process()) return all;
    std::vector<GridPlan> mine;
    for (int i = 0; i < ranks.count(); ++i) mine.push_back(std::move(all[ranks.rank(i)]));
    return mine;
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
  if (ranks.in_blocks()) return detail::build_block_particle_plans(ranks, box, cutoff, xyz);
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
  if (ranks.in_blocks()) return detail::migrate_block_particles(ranks, box, data, stride);
  migrate_particles(ranks.topology(), box, only_entry(data, "migrate_particles", "atom sets"),
                    stride);
#else
  detail::no_mpi("migrate_particles");
#endif
}

}  // namespace halox
