// heat3d with the field in GPU memory: the same periodic heat equation as heat3d/, its
// update a CUDA kernel (update.cu), and each step's halo filled by GridExchange::exchange_async on
// the stream the update runs on (no host wait inside the step loop). Checked against the exact
// discrete solution.
//
//   mpirun -n 2 ./heat3d_gpu        one rank per MPI process (rank r on GPU r % GPUs)
//   ./heat3d_gpu --local 2x2x2      eight ranks in this one process, on this GPU
//   mpirun -n 2 ./heat3d_gpu --blocks 2x1x1   two ranks in each of two processes (one grid kernel
//   per process: auto)
#include <cuda_runtime.h>
#include <halox/halox.hpp>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "update.hpp"

namespace {

constexpr int kCells = 24;  // global cells per axis (any rank grid: uneven splits too)
constexpr std::array<std::int64_t, 3> kGlobal = {kCells, kCells, kCells};
constexpr int kSteps = 50;
constexpr double kLambda = 0.1;  // alpha dt / h^2 (stable below 1/6)
const double kPi = std::acos(-1.0);

void check(cudaError_t e) {
  if (e != cudaSuccess) throw halox::Error(std::string("CUDA: ") + cudaGetErrorString(e));
}

// One rank's block: its plan, its field and the next step's (halo included) on the GPU.
struct Block {
  halox::GridPlan plan;
  std::array<int, 3> origin{};
  double* u = nullptr;
  double* next = nullptr;
  std::size_t cells() const { return plan.extent[0] * plan.extent[1] * plan.extent[2]; }
};

double exact(const std::array<int, 3>& g, int step) {
  const double k = 2 * kPi / kCells;
  return std::pow(1 + kLambda * 3 * (2 * std::cos(k) - 2), step) * std::sin(k * g[0]) *
         std::sin(k * g[1]) * std::sin(k * g[2]);
}

// Calls f(index, global cell) for every interior cell of b.
template <class F>
void for_interior(const Block& b, F f) {
  const auto& e = b.plan.extent;
  for (int z = 1; z <= b.plan.interior[2]; ++z)
    for (int y = 1; y <= b.plan.interior[1]; ++y)
      for (int x = 1; x <= b.plan.interior[0]; ++x)
        f((z * e[1] + y) * e[0] + x,
          std::array<int, 3>{b.origin[0] + x - 1, b.origin[1] + y - 1, b.origin[2] + z - 1});
}

Block make_block(const halox::Topology& grid, int rank, const halox::GridPlan& plan) {
  Block b{plan};
  const halox::Subdomain part = halox::subdomain_of(grid, kGlobal, rank);  // where it sits
  for (int a = 0; a < 3; ++a) b.origin[a] = static_cast<int>(part.offset[a]);
  // The halo starts as NaN: a cell the exchange failed to fill poisons the result.
  std::vector<double> u(b.cells(), std::nan(""));
  for_interior(b, [&](long i, const std::array<int, 3>& g) { u[i] = exact(g, 0); });
  check(cudaMalloc(&b.u, u.size() * sizeof(double)));
  check(cudaMalloc(&b.next, u.size() * sizeof(double)));
  check(cudaMemcpy(b.u, u.data(), u.size() * sizeof(double), cudaMemcpyHostToDevice));
  check(cudaMemcpy(b.next, u.data(), u.size() * sizeof(double), cudaMemcpyHostToDevice));
  return b;
}

// The interior update (update.cu), then the fields swap roles.
void update_async(Block& b, cudaStream_t stream) {
  const auto& e = b.plan.extent;
  check(heat3d::update_async(
      b.u, b.next, {int(b.plan.interior[0]), int(b.plan.interior[1]), int(b.plan.interior[2])},
      e[0], e[0] * e[1], kLambda, stream));
  std::swap(b.u, b.next);
}

// The largest difference from the exact solution after kSteps; frees the block.
double error_of(Block& b) {
  std::vector<double> u(b.cells());
  check(cudaMemcpy(u.data(), b.u, u.size() * sizeof(double), cudaMemcpyDeviceToHost));
  double worst = 0;
  for_interior(b, [&](long i, const std::array<int, 3>& g) {
    const double d = std::abs(u[i] - exact(g, kSteps));
    worst = std::isfinite(d) ? std::max(worst, d) : INFINITY;
  });
  cudaFree(b.u);
  cudaFree(b.next);
  return worst;
}

// The ranks of this process: every rank of a grid such as 2x2x1 (--local 2x2x1), a block of
// ranks in each MPI process (--blocks 2x1x1), or its one rank of the MPI job, on GPU
// rank % GPUs. Everything after this is one code path.
halox::Ranks ranks_of(int argc, char** argv, int rank) {
  std::array<int, 3> dims{};
  const bool local = argc == 3 && std::strcmp(argv[1], "--local") == 0;
  const bool blocks = argc == 3 && std::strcmp(argv[1], "--blocks") == 0;
  if ((local || blocks) && std::sscanf(argv[2], "%dx%dx%d", &dims[0], &dims[1], &dims[2]) != 3)
    throw halox::Error(std::string(argv[1]) + " takes a rank grid such as 2x2x1");
  if (local) return halox::Ranks::local(halox::Topology(dims, {true, true, true}, 0));
  int gpus = 0;
  check(cudaGetDeviceCount(&gpus));
  check(cudaSetDevice(rank % gpus));
  const halox::Topology processes = halox::Topology::from_mpi(MPI_COMM_WORLD);
  return blocks ? halox::Ranks::blocks(processes, dims) : halox::Ranks::mpi(processes);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, code = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    const auto type = halox::Datatype::of<double>();
    // halox picks the transport: for ranks in one process its fused kernel, for processes
    // on one node direct stores through CUDA IPC (halox-tune's file may say otherwise).
    halox::ExchangeOptions options;
    options.transport = halox::TransportKind::automatic;
    const halox::Ranks ranks = ranks_of(argc, argv, rank);
    cudaStream_t stream = nullptr;
    check(cudaStreamCreate(&stream));
    // The global lattice described once: halox splits it and returns this process's plans.
    const auto plans = halox::build_grid_plans(ranks, kGlobal, 1, type);
    std::vector<Block> blocks;
    for (int i = 0; i < ranks.count(); ++i)
      blocks.push_back(make_block(ranks.topology(), ranks.rank(i), plans[i]));
    halox::GridExchange exchange(ranks, plans, options);
    std::vector<void*> fields(blocks.size());
    for (int s = 0; s < kSteps; ++s) {
      for (std::size_t i = 0; i < blocks.size(); ++i) fields[i] = blocks[i].u;
      exchange.exchange_async(fields, stream);  // every rank's faces, ordered on the stream
      for (Block& b : blocks) update_async(b, stream);
    }
    const std::string what = ranks.topology().describe() +
                             (ranks.in_process()  ? " ranks in one process, "
                              : ranks.in_blocks() ? " ranks in blocks over MPI processes, "
                                                  : " MPI ranks, ") +
                             exchange.transport_name(blocks[0].u);
    check(cudaStreamSynchronize(stream));
    double mine = 0, error = 0;
    for (Block& b : blocks) mine = std::max(mine, error_of(b));
    MPI_Allreduce(&mine, &error, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("heat3d_gpu: %s, %d^3 cells, %d steps: largest error %.2e\n", what.c_str(),
                  kCells, kSteps, error);
    check(cudaStreamDestroy(stream));
    code = std::isfinite(error) && error < 1e-12 ? 0 : 1;
  } catch (const halox::Error& e) {
    std::fprintf(stderr, "heat3d_gpu: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return code;
}
