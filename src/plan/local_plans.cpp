// Plans for every rank of a grid in one process (Ranks::local): no MPI.
#include "halox/plan.hpp"
#include "particle_builder.hpp"

namespace halox {

namespace {

// The grid as each of its ranks sees it, after checking that `given` per-rank inputs came.
std::vector<Topology> rank_views(const Topology& topology, std::size_t given, const char* function,
                                 const char* what) {
  const int size = topology.size();
  if (static_cast<int>(given) != size) {
    throw Error(std::string("halox::") + function + ": " + std::to_string(given) + " " + what +
                " for a grid of " + std::to_string(size) + " ranks");
  }
  std::vector<Topology> views;
  for (int r = 0; r < size; ++r) views.emplace_back(topology.dims(), topology.periodic(), r);
  return views;
}

}  // namespace

std::vector<ParticlePlan> build_local_particle_plans(const Topology& topology, const Box& box,
                                                     double cutoff,
                                                     std::vector<std::vector<double>>& xyz) {
  const int size = topology.size();
  const std::vector<Topology> views =
      rank_views(topology, xyz.size(), "build_local_particle_plans", "coordinate sets");
  std::vector<detail::BuilderRank> ranks(size);
  for (int r = 0; r < size; ++r) {
    const std::string error = detail::check_particle_input(views[r], box, cutoff, xyz[r]);
    if (!error.empty()) throw Error(error);
    ranks[r].topology = &views[r];
    ranks[r].xyz = &xyz[r];
  }
  detail::build_particle_plans(
      box, cutoff, ranks,
      [&](int, std::vector<std::vector<double>>& out, std::vector<std::vector<double>>& in) {
        // Each rank receives from its own neighbour: every `out` is taken once, and moves.
        for (int r = 0; r < size; ++r) {
          const int from = ranks[r].plan.pulses.back().header.recv_rank;
          if (from >= 0) std::swap(in[r], out[from]);
        }
      });
  std::vector<ParticlePlan> plans;
  for (auto& r : ranks) plans.push_back(std::move(r.plan));
  return plans;
}

void wrap_unsplit_axes(const Topology& topology, const Box& box, double* position) {
  for (int a = 0; a < 3; ++a) {
    const double length = box.length[a];
    if (topology.dims()[a] == 1 && topology.periodic()[a] &&
        !(position[a] >= 0 && position[a] < length)) {
      position[a] = detail::wrap_periodic(position[a], length);
    }
  }
}

void migrate_local_particles(const Topology& topology, const Box& box,
                             std::vector<std::vector<double>>& data, int stride) {
  const int size = topology.size();
  const std::vector<Topology> views =
      rank_views(topology, data.size(), "migrate_local_particles", "atom sets");
  std::vector<detail::MigrateRank> ranks(size);
  for (int r = 0; r < size; ++r) {
    const std::string bad =
        detail::check_migrate_input("migrate_local_particles", r, data[r], stride);
    if (!bad.empty()) throw Error(bad);
    ranks[r].topology = &views[r];
    ranks[r].data = &data[r];
  }
  const std::string error = detail::migrate_particles_of(box, ranks, stride, [&](int axis) {
    for (int r = 0; r < size; ++r) {
      const int above = views[r].neighbor(axis, +1), below = views[r].neighbor(axis, -1);
      std::vector<double>& in = ranks[r].arrived;
      if (above >= 0) in.insert(in.end(), ranks[above].down.begin(), ranks[above].down.end());
      if (below >= 0) in.insert(in.end(), ranks[below].up.begin(), ranks[below].up.end());
    }
  });
  if (!error.empty()) throw Error(error);
}

std::vector<GridPlan> make_local_grid_plans(
    const Topology& grid, const std::vector<std::array<std::int64_t, 3>>& interior, int halo,
    const Datatype& element, const std::vector<std::array<std::int64_t, 3>>& allocated) {
  const int ranks = grid.size();
  if (static_cast<int>(interior.size()) != ranks ||
      (!allocated.empty() && static_cast<int>(allocated.size()) != ranks)) {
    throw Error("halox::make_local_grid_plans: " + std::to_string(interior.size()) +
                " interiors (and " + std::to_string(allocated.size()) + " allocations) for " +
                std::to_string(ranks) + " ranks");
  }
  std::vector<GridPlan> plans;
  for (int r = 0; r < ranks; ++r) {
    const Topology rank(grid.dims(), grid.periodic(), r);
    plans.push_back(
        make_grid_plan(rank, interior[r], halo, element,
                       allocated.empty() ? std::array<std::int64_t, 3>{} : allocated[r]));
  }
  return plans;
}

}  // namespace halox
