// Short-range pair forces on particles in a periodic box split over MPI ranks: halox's
// particle plan imports the atoms within the cutoff of each rank's upper faces, forward()
// fills their coordinates, every pair is computed once by the rank that owns it, and
// reverse() adds the forces on imported atoms back to their owners. Checked against an
// all-pairs sum over every atom.
//
//   mpirun -n 4 ./particles
#include <halox/halox.hpp>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr int kAtoms = 3000;
constexpr double kLength = 12.0, kCutoff = 1.5;

// A soft repulsion: f(r) = (1 - r / rc)^2 along the pair's separation, zero beyond rc.
void add_pair_force(const double* a, const double* b, double* fa, double* fb) {
  double d[3], r2 = 0;
  for (int k = 0; k < 3; ++k) {
    d[k] = a[k] - b[k];
    r2 += d[k] * d[k];
  }
  if (r2 >= kCutoff * kCutoff || r2 == 0) return;
  const double r = std::sqrt(r2), s = (1 - r / kCutoff) * (1 - r / kCutoff) / r;
  for (int k = 0; k < 3; ++k) {
    fa[k] += s * d[k];
    if (fb) fb[k] -= s * d[k];
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    const halox::Topology grid = halox::Topology::from_mpi(MPI_COMM_WORLD);
    const halox::Box box{{kLength, kLength, kLength}};
    // Every rank draws the same atoms and keeps those in its domain.
    std::mt19937_64 random(2026);
    std::uniform_real_distribution<double> coordinate(0.0, kLength);
    std::vector<double> all(3 * kAtoms);
    for (double& c : all) c = coordinate(random);
    const halox::Domain mine = halox::domain_of(grid, box, grid.rank());
    std::vector<double> xyz;
    std::vector<int> ids;
    for (int i = 0; i < kAtoms; ++i) {
      bool inside = true;
      for (int k = 0; k < 3; ++k)
        inside = inside && all[3 * i + k] >= mine.lo[k] && all[3 * i + k] < mine.hi[k];
      if (!inside) continue;
      ids.push_back(i);
      xyz.insert(xyz.end(), &all[3 * i], &all[3 * i + 3]);
    }
    const halox::ParticlePlan plan = halox::build_particle_plan(grid, box, kCutoff, xyz);
    halox::ParticleExchange exchange(grid, plan, halox::BasicKind::float64);
    // The halo coordinates, as every later step would get them (poisoned first).
    std::fill(xyz.begin() + 3 * plan.home_count, xyz.end(), std::nan(""));
    exchange.forward(xyz.data());

    // Every pair this rank owns, once; then the forces on imported atoms go home.
    std::vector<std::uint8_t> home(plan.total_count);
    for (std::int64_t i = 0; i < plan.total_count; ++i) home[i] = plan.home_axes(&xyz[3 * i]);
    std::vector<double> force(xyz.size(), 0.0);
    for (std::int64_t i = 0; i < plan.total_count; ++i)
      for (std::int64_t j = i + 1; j < plan.total_count; ++j)
        if (halox::ParticlePlan::owns_pair(home[i], home[j]))
          add_pair_force(&xyz[3 * i], &xyz[3 * j], &force[3 * i], &force[3 * j]);
    exchange.reverse(force.data());

    // The reference: every atom against every other, nearest periodic image.
    double worst = 0;
    for (std::size_t h = 0; h < ids.size(); ++h) {
      double expected[3] = {0, 0, 0};
      for (int j = 0; j < kAtoms; ++j) {
        double image[3];
        for (int k = 0; k < 3; ++k) {
          const double d = all[3 * j + k] - all[3 * ids[h] + k];
          image[k] = all[3 * ids[h] + k] + d - kLength * std::round(d / kLength);
        }
        add_pair_force(&all[3 * ids[h]], image, expected, nullptr);
      }
      for (int k = 0; k < 3; ++k) worst = std::max(worst, std::abs(force[3 * h + k] - expected[k]));
    }
    double worst_all = 0;
    MPI_Allreduce(&worst, &worst_all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (grid.rank() == 0)
      std::printf(
          "particles: %d atoms on %s ranks, rank 0 imports %lld: largest force error "
          "%.2e against all pairs\n",
          kAtoms, grid.describe().c_str(),
          static_cast<long long>(plan.total_count - plan.home_count), worst_all);
    code = std::isfinite(worst_all) && worst_all < 1e-12 ? 0 : 1;
  } catch (const halox::Error& e) {
    std::fprintf(stderr, "particles: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return code;
}
