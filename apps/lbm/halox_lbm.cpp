// halox-lbm: a lattice Boltzmann mini-app on halox's grid halo exchange: single-phase D3Q19
// BGK (the bandwidth benchmark and the Taylor-Green check) and the free-energy binary fluid
// (D3Q19 momentum + D3Q7 order parameter), any rank grid (uneven splits handled), periodic,
// CPU or GPU, float or double, the communication variant chosen by a flag. The model on one
// rank is block.hpp, the communication variants over a set of ranks decomposition.hpp, the
// run and its report report.hpp, the command line cli.hpp.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <string>

#include "../common/agree.hpp"
#include "../common/memory.hpp"
#include "../common/mpi_main.hpp"
#include "../common/watchdog.hpp"
#include "cli.hpp"
#include "decomposition.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "report.hpp"

namespace {

using namespace halox;
using namespace halox::lbm;

int run(int argc, char** argv) {
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  halox::apps::Watchdog watchdog("halox-lbm", rank, "start-up", halox::apps::kSetupSeconds);
  Cli cli;
  halox::apps::check_input_collectively(MPI_COMM_WORLD, "halox-lbm", argc, argv, [&] {
    cli = parse(argc, argv);
    for (int a = 0; a < 3; ++a) {
      if (cli.grid[a] <= 0) throw Error("halox-lbm: grid sizes must be positive");
    }
    if (cli.rank_count > 0 || (!cli.local && cli.ranks == std::array<int, 3>{0, 0, 0})) {
      // The SoA fields are x fastest: an x face is one element per 32-byte sector.
      cli.ranks =
          grid_rank_dims(cli.rank_count > 0 ? cli.rank_count : size,
                         {cli.grid[0], cli.grid[1], cli.grid[2]}, 32.0 / (cli.single ? 4 : 8));
    }
    if (cli.local && size != 1) {
      throw Error(
          "halox-lbm: --transport local-pulse and local-fused run every rank in one process: start "
          "it without "
          "mpirun (or with one MPI rank), not " +
          std::to_string(size));
    }
    if (!cli.local) {
      const auto& r = cli.ranks;
      const bool all = r[0] && r[1] && r[2];
      if (all && 1LL * r[0] * r[1] * r[2] != size) {
        throw Error("halox-lbm: the rank grid " + std::to_string(r[0]) + "x" +
                    std::to_string(r[1]) + "x" + std::to_string(r[2]) + " does not match the " +
                    std::to_string(size) + " MPI ranks");
      }
    }
    // Memory: each process holds its share of the lattice (two copies of the populations,
    // f's 19 and the multiphase g's 7, and phi), a fifth more for the halo layers; rank 0
    // also the gathered fields of --dump, --slice and the droplet's check (5 doubles a cell).
    const double cells = 1.0 * cli.grid[0] * cli.grid[1] * cli.grid[2];
    const double per_cell =
        (2.0 * (19 + (cli.model == "multiphase" ? 7 : 0)) + 1) * (cli.single ? 4 : 8);
    const bool gathered = !cli.dump.empty() || !cli.slice.empty() ||
                          (cli.model == "multiphase" && cli.init == "droplet");
    halox::apps::require_memory(
        "halox-lbm: --grid " + std::to_string(cli.grid[0]) + "x" + std::to_string(cli.grid[1]) +
            "x" + std::to_string(cli.grid[2]),
        1.2 * cells * per_cell / (cli.local ? 1 : size) + (gathered ? 40.0 * cells : 0.0));
    if (cli.model == "multiphase" &&
        2 * cli.radius >= *std::min_element(cli.grid.begin(), cli.grid.end()) &&
        cli.init == "droplet") {
      throw Error("halox-lbm: the droplet (radius " + std::to_string(cli.radius) +
                  ") does not fit the grid");
    }
  });
  watchdog.beat("set-up", cli.watchdog > 0 ? halox::apps::kSetupSeconds : 0);
  if (cli.device != "cpu") select_device(MPI_COMM_WORLD);  // one GPU per rank
  try {  // collective, and the same on every rank (the ranks agreed on their input)
    const Topology shape = cli.local ? Topology(cli.ranks, {true, true, true}, 0)
                                     : Topology::from_mpi(MPI_COMM_WORLD, cli.ranks);
    for (int a = 0; a < 3; ++a) {
      const int ranks = shape.dims()[a] * std::max(1, cli.blocks[a]);
      if (cli.grid[a] < ranks) {
        throw Error("halox-lbm: the grid has " + std::to_string(cli.grid[a]) + " cells along " +
                    "xyz"[a] + " for " + std::to_string(ranks) + " ranks: at least one each");
      }
    }
  } catch (const Error& e) {
    throw halox::apps::InputError(e.what());
  }
  Decomposition lbm(MPI_COMM_WORLD, cli);
  return drive(lbm, cli, rank, watchdog);
}

}  // namespace

int main(int argc, char** argv) {
  return halox::apps::mpi_main("halox-lbm", argc, argv, run);
}
