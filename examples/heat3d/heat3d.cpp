// The 3D heat equation on a periodic box, explicit in time, split over a grid of ranks:
// each step fills the one-cell halo of every rank's block with halox, then updates its
// interior. The start u = sin(kx) sin(ky) sin(kz) decays by the same factor in every cell
// each step, so the result is checked against the exact discrete solution.
//
//   mpirun -n 4 ./heat3d            one rank per MPI process (GridExchange)
//   ./heat3d --local 2x2x1          four ranks in this one process (Ranks::local)
//   mpirun -n 2 ./heat3d --blocks 2x1x1   two ranks in each of two processes (Ranks::blocks)
#include <halox/halox.hpp>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kCells = 24;  // global cells per axis (any rank grid: uneven splits too)
constexpr std::array<std::int64_t, 3> kGlobal = {kCells, kCells, kCells};
constexpr int kSteps = 50;
constexpr double kLambda = 0.1;  // alpha dt / h^2 (stable below 1/6)
const double kPi = std::acos(-1.0);

// One rank's block: its plan, its field (halo included) and where it sits in the box.
struct Block {
  halox::GridPlan plan;
  std::vector<double> u, next;
  std::array<int, 3> origin;
};

Block make_block(const halox::Topology& grid, int rank, const halox::GridPlan& plan) {
  Block b{plan, {}, {}, {}};
  const halox::Subdomain part = halox::subdomain_of(grid, kGlobal, rank);  // where it sits
  for (int a = 0; a < 3; ++a) b.origin[a] = static_cast<int>(part.offset[a]);
  const auto& e = plan.extent;
  b.u.assign(static_cast<std::size_t>(e[0] * e[1] * e[2]), 0.0);
  b.next = b.u;
  for (int z = 1; z <= plan.interior[2]; ++z)
    for (int y = 1; y <= plan.interior[1]; ++y)
      for (int x = 1; x <= plan.interior[0]; ++x) {
        const double k = 2 * kPi / kCells;
        b.u[(z * e[1] + y) * e[0] + x] = std::sin(k * (b.origin[0] + x - 1)) *
                                         std::sin(k * (b.origin[1] + y - 1)) *
                                         std::sin(k * (b.origin[2] + z - 1));
      }
  return b;
}

// The interior update (7-point stencil), reading the halo that the exchange filled.
void update(Block& b) {
  const auto& e = b.plan.extent;
  const long sx = 1, sy = e[0], sz = e[0] * e[1];
  for (long z = 1; z <= b.plan.interior[2]; ++z)
    for (long y = 1; y <= b.plan.interior[1]; ++y)
      for (long x = 1; x <= b.plan.interior[0]; ++x) {
        const long i = z * sz + y * sy + x * sx;
        const double* u = b.u.data();
        b.next[i] = u[i] + kLambda * (u[i - sx] + u[i + sx] + u[i - sy] + u[i + sy] + u[i - sz] +
                                      u[i + sz] - 6 * u[i]);
      }
  std::swap(b.u, b.next);
}

// The largest difference from the exact discrete solution in this block.
double error_of(const Block& b) {
  const double k = 2 * kPi / kCells;
  const double decay = std::pow(1 + kLambda * 3 * (2 * std::cos(k) - 2), kSteps);
  const auto& e = b.plan.extent;
  double worst = 0;
  for (int z = 1; z <= b.plan.interior[2]; ++z)
    for (int y = 1; y <= b.plan.interior[1]; ++y)
      for (int x = 1; x <= b.plan.interior[0]; ++x) {
        const double exact = decay * std::sin(k * (b.origin[0] + x - 1)) *
                             std::sin(k * (b.origin[1] + y - 1)) *
                             std::sin(k * (b.origin[2] + z - 1));
        worst = std::max(worst, std::abs(b.u[(z * e[1] + y) * e[0] + x] - exact));
      }
  return worst;
}

// The ranks of this process: every rank of a grid such as 2x2x1 (--local 2x2x1), a block of
// ranks in each MPI process (--blocks 2x1x1: mpirun -n 2 gives a grid of 4x1x1 ranks), or
// its one rank of the MPI job. Everything after this is one code path over halox::Ranks.
halox::Ranks ranks_of(int argc, char** argv) {
  std::array<int, 3> dims{};
  const bool local = argc == 3 && std::strcmp(argv[1], "--local") == 0;
  const bool blocks = argc == 3 && std::strcmp(argv[1], "--blocks") == 0;
  if ((local || blocks) && std::sscanf(argv[2], "%dx%dx%d", &dims[0], &dims[1], &dims[2]) != 3)
    throw halox::Error(std::string(argv[1]) + " takes a rank grid such as 2x2x1");
  if (local) return halox::Ranks::local(halox::Topology(dims, {true, true, true}, 0));
  const halox::Topology processes = halox::Topology::from_mpi(MPI_COMM_WORLD);
  return blocks ? halox::Ranks::blocks(processes, dims) : halox::Ranks::mpi(processes);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, code = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    const halox::Ranks ranks = ranks_of(argc, argv);
    // The global lattice described once: halox splits it and returns this process's plans.
    const auto plans = halox::build_grid_plans(ranks, kGlobal, 1, halox::Datatype::of<double>());
    std::vector<Block> blocks;
    for (int i = 0; i < ranks.count(); ++i)
      blocks.push_back(make_block(ranks.topology(), ranks.rank(i), plans[i]));
    halox::GridExchange exchange(ranks, plans);  // host memory: the host transport or CPU copies
    std::vector<void*> fields(blocks.size());
    for (int s = 0; s < kSteps; ++s) {
      for (std::size_t i = 0; i < blocks.size(); ++i) fields[i] = blocks[i].u.data();
      exchange.exchange(fields);
      for (Block& b : blocks) update(b);
    }
    double mine = 0, error = 0;
    for (const Block& b : blocks) mine = std::max(mine, error_of(b));
    MPI_Allreduce(&mine, &error, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("heat3d: %s%s, ", ranks.topology().describe().c_str(),
                  ranks.in_process()  ? " ranks in one process"
                  : ranks.in_blocks() ? " ranks in blocks over MPI processes"
                                      : " MPI ranks");
    }
    if (rank == 0)
      std::printf("%d^3 cells, %d steps: largest error %.2e against the exact solution\n", kCells,
                  kSteps, error);
    code = std::isfinite(error) && error < 1e-12 ? 0 : 1;
  } catch (const halox::Error& e) {
    std::fprintf(stderr, "heat3d: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return code;
}
