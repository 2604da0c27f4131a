// halox-md: a Lennard-Jones molecular dynamics mini-app on halox's particle halo exchange.
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../common/agree.hpp"
#include "../common/mpi_main.hpp"
#include "../common/numbers.hpp"
#include "../common/output.hpp"
#include "../common/watchdog.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "halox/trace.hpp"
#include "simulation.hpp"

namespace {

using namespace halox;
using namespace halox::md;
using halox::apps::check_input_collectively;
using halox::apps::Json;

struct Cli {
  Config config;
  int steps = 100;
  int thermo_every = 10;
  double watchdog = 30;
  std::string json, dump_forces, trace;
  bool quiet = false;
};

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: mpiexec -n N halox-md [options]\n"
      "  Lennard-Jones fluid (reduced units) on an fcc lattice, velocity Verlet NVE, Verlet\n"
      "  lists from cell lists, periodic box split over a rank grid; the particle halo runs\n"
      "  through halox (coordinates forward, forces back).\n"
      "options:\n"
      "  --cells N           fcc unit cells per box edge, 4 atoms each (default 8: 2048 atoms)\n"
      "  --density RHO       reduced density (default 0.8442)\n"
      "  --temperature T     initial reduced temperature (default 1.44)\n"
      "  --cutoff RC         LJ cutoff (default 2.5)\n"
      "  --skin S            Verlet list skin (default 0.6)\n"
      "  --dt DT             time step (default 0.005)\n"
      "  --steps N           steps to run (default 100)\n"
      "  --nstlist N         neighbour search every N steps (default 10)\n"
      "  --thermo N          thermo line every N steps (default 10; 0: first and last only)\n"
      "  --ranks XxYxZ       rank grid (default: MPI_Dims_create)\n"
      "  --device D          auto | cpu | gpu (default auto: gpu when one is visible)\n"
      "  --precision P       double | float (default double)\n"
      "  --lj-shift S        cutoff | none (default cutoff: each pair's energy shifted by\n"
      "                      -u(rc), continuous at the cutoff; none: plain truncated LJ,\n"
      "                      LAMMPS's lj/cut, GROMACS's vdw-modifier = None)\n"
      "  --transport T       host | staged | pipelined | mpi-direct | ipc-pulse | ipc-fused |\n"
      "                      nvshmem-stream | nvshmem-pulse | nvshmem-fused | auto (default:\n"
      "                      host on the CPU, staged on the GPU); local: every rank of --ranks\n"
      "                      in this one process (start 1 MPI rank), halox's local engine\n"
      "                      between them\n"
      "  --chunk BYTES       pipelined chunk size (default: the tuning file)\n"
      "  --seed S            velocity and lattice-jitter seed (default 2026)\n"
      "  --jitter J          random lattice displacement in lattice constants (default 0.02)\n"
      "  --json FILE         write thermo, timings and configuration as JSON\n"
      "  --dump-forces FILE  write 'id fx fy fz' of every atom at step 0\n"
      "  --quiet             no thermo table\n"
      "  --trace FILE        Chrome trace JSON (Perfetto) of the last 4 steps, all ranks\n"
      "  --watchdog S        end the job when a rank's steps make no progress for S seconds\n"
      "                      (a rank stalled or dead; default 30, 0: off)\n"
      "  --help              this text\n");
}

Cli parse(int argc, char** argv) {
  Cli cli;
  Config& c = cli.config;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("halox-md: " + a + " needs a value");
      return argv[++i];
    };
    auto number = [&] { return halox::apps::parse_number("halox-md", a, value()); };
    auto integer = [&] { return halox::apps::parse_count("halox-md", a, value()); };
    if (a == "--help" || a == "-h") {
      halox::apps::print_help_and_exit(usage);
    } else if (a == "--cells")
      c.cells = integer();
    else if (a == "--density")
      c.density = number();
    else if (a == "--temperature")
      c.temperature = number();
    else if (a == "--cutoff")
      c.cutoff = number();
    else if (a == "--skin")
      c.skin = number();
    else if (a == "--dt")
      c.dt = number();
    else if (a == "--steps")
      cli.steps = integer();
    else if (a == "--nstlist")
      c.nstlist = integer();
    else if (a == "--thermo")
      cli.thermo_every = integer();
    else if (a == "--ranks")
      c.ranks = parse_dims(value());
    else if (a == "--device")
      c.device = value();
    else if (a == "--precision") {
      const std::string p = value();
      if (p != "double" && p != "float")
        throw Error("halox-md: --precision must be double or float");
      c.single_precision = p == "float";
    } else if (a == "--lj-shift") {
      const std::string shift = value();
      if (shift != "cutoff" && shift != "none")
        throw Error("halox-md: --lj-shift must be cutoff or none (got " + shift + ")");
      c.lj_shift = shift == "none" ? LjShift::none : LjShift::cutoff;
    } else if (a == "--transport") {
      const std::string t = value();
      if (t == "local") {
        c.local = true;
      } else {
        c.transport = parse_transport(t);
        c.transport_given = true;
      }
    } else if (a == "--chunk")
      c.chunk_bytes = static_cast<std::int64_t>(number());
    else if (a == "--seed")
      c.seed = static_cast<std::uint64_t>(number());
    else if (a == "--jitter")
      c.jitter = number();
    else if (a == "--json")
      cli.json = value();
    else if (a == "--dump-forces")
      cli.dump_forces = value();
    else if (a == "--quiet")
      cli.quiet = true;
    else if (a == "--trace")
      cli.trace = value();
    else if (a == "--watchdog")
      cli.watchdog = number();
    else
      throw Error("halox-md: unknown option " + a + " (see --help)");
  }
  if (cli.steps < 0) throw Error("halox-md: --steps must be >= 0");
  return cli;
}

int run(int argc, char** argv) {
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  halox::apps::Watchdog watchdog("halox-md", rank, "start-up", halox::apps::kSetupSeconds);
  Cli cli;
  check_input_collectively(MPI_COMM_WORLD, "halox-md", argc, argv, [&] {
    cli = parse(argc, argv);
    validate(cli.config, size);
  });
  watchdog.beat("set-up", cli.watchdog > 0 ? halox::apps::kSetupSeconds : 0);
  if (cli.config.device != "cpu") select_device(MPI_COMM_WORLD);  // one GPU per rank
  const auto wall_start = std::chrono::steady_clock::now();
  Simulation sim(MPI_COMM_WORLD, cli.config);
  const Config& c = sim.config();
  if (rank == 0) {
    std::printf("halox-md: %lld atoms, box %.4f, %s ranks, rc %.3g + skin %.3g, LJ %s, dt %g, %s\n",
                static_cast<long long>(sim.atoms()), sim.box_length(),
                sim.topology().describe().c_str(), c.cutoff, c.skin,
                c.lj_shift == LjShift::none ? "truncated" : "shifted at rc", c.dt,
                sim.transport_name().c_str());
    const auto& p = sim.plan().pulses_per_axis;
    std::printf("halo: %d/%d/%d pulses in x/y/z; rank 0 has %lld home and %lld halo atoms\n", p[0],
                p[1], p[2], static_cast<long long>(sim.home_atoms()),
                static_cast<long long>(sim.halo_atoms()));
    std::fflush(stdout);  // the set-up is done: say so now, also into a pipe
  }
  if (!cli.dump_forces.empty()) {
    const auto forces = sim.gather_forces();
    if (rank == 0) {
      std::string text;
      char line[128];
      for (const auto& [id, v] : forces) {
        std::snprintf(line, sizeof line, "%lld %.17g %.17g %.17g\n", static_cast<long long>(id),
                      v[0], v[1], v[2]);
        text += line;
      }
      halox::apps::write_file("halox-md", cli.dump_forces, text);
    }
  }
  std::vector<Thermo> thermo;
  auto report = [&] {
    thermo.push_back(sim.thermo());
    const Thermo& t = thermo.back();
    // The same sums on every rank: all stop together, with a non-zero exit.
    if (!std::isfinite(t.total) || !std::isfinite(t.pressure) || !std::isfinite(t.temperature)) {
      throw Error("halox-md: the energy became non-finite at step " + std::to_string(t.step) +
                  " (temperature " + std::to_string(t.temperature) + ", total energy/N " +
                  std::to_string(t.total) + "): the run diverged; lower --dt");
    }
    if (rank == 0 && !cli.quiet) {
      if (thermo.size() == 1) {
        std::printf("%8s %12s %14s %14s %12s\n", "step", "temperature", "potential/N", "total/N",
                    "pressure");
      }
      std::printf("%8lld %12.6f %14.8f %14.8f %12.6f\n", static_cast<long long>(t.step),
                  t.temperature, t.potential, t.total, t.pressure);
      std::fflush(stdout);
    }
  };
  report();
  sim.timers() = {};
  sim.reset_exchange_stats();
  const auto loop_start = std::chrono::steady_clock::now();
  if (!cli.trace.empty()) trace::enable();
  watchdog.beat("a step", cli.watchdog);
  for (int s = 1; s <= cli.steps; ++s) {
    if (!cli.trace.empty() && s == std::max(1, cli.steps - 3)) trace::clear();
    watchdog.beat("a step");
    sim.step();
    if ((cli.thermo_every > 0 && s % cli.thermo_every == 0) || s == cli.steps) report();
  }
  const double loop =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
  watchdog.beat("the summary", cli.watchdog > 0 ? halox::apps::kSetupSeconds : 0);
  if (!cli.trace.empty()) {
    trace::write(MPI_COMM_WORLD, cli.trace);
    if (rank == 0) std::printf("wrote trace %s (the last steps, every rank)\n", cli.trace.c_str());
  }

  // Timing: the slowest rank's time per phase.
  Timers t = sim.timers();
  double mine[6] = {t.force, t.halo_forward, t.halo_reverse, t.integrate, t.search, loop}, worst[6];
  HALOX_MPI_CHECK(MPI_Reduce(mine, worst, 6, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
  const long long violations = sim.list_violations();  // the same on every rank
  const ExchangeStats stats = sim.exchange_stats();
  const double exchanges_per_step = cli.steps > 0 ? 1.0 * stats.host_waits / cli.steps : 0;
  if (rank != 0) return 0;
  const double drift = thermo.size() > 1 ? (thermo.back().total - thermo.front().total) /
                                               std::abs(thermo.front().total)
                                         : 0.0;
  const char* names[5] = {"force", "halo forward", "halo reverse", "integration",
                          "neighbour search"};
  const char* keys[5] = {"force", "halo_forward", "halo_reverse", "integrate", "search"};
  std::printf("\ntiming (slowest rank, %d steps):\n", cli.steps);
  std::printf("  %-18s %12s %10s %8s\n", "phase", "seconds", "us/step", "share");
  for (int k = 0; k < 5; ++k) {
    std::printf("  %-18s %12.6f %10.2f %7.1f%%\n", names[k], worst[k],
                cli.steps ? 1e6 * worst[k] / cli.steps : 0.0,
                worst[5] > 0 ? 100 * worst[k] / worst[5] : 0.0);
  }
  std::printf("  %-18s %12.6f\n", "loop", worst[5]);
  std::printf("steps per second: %.2f; host-blocking waits per step (rank 0): %.2f\n",
              worst[5] > 0 ? cli.steps / worst[5] : 0.0, exchanges_per_step);
  std::printf("relative total energy drift over %d steps: %.3e\n", cli.steps, drift);
  std::printf("largest displacement between searches: %.4f (skin %.4f)\n", sim.max_displacement(),
              c.skin);
  if (violations > 0) {
    std::printf(
        "warning: at %lld searches two atoms may have moved more than the skin together; "
        "pairs may have been missed (lower --nstlist or raise --skin)\n",
        violations);
  }
  if (!cli.json.empty()) {
    Json j;
    j["app"] = "halox-md";
    j["atoms"] = sim.atoms();
    j["ranks"] = sim.topology().describe();
    j["transport"] = sim.transport_name();
    j["config"] = {{"cells", c.cells},
                   {"density", c.density},
                   {"temperature", c.temperature},
                   {"cutoff", c.cutoff},
                   {"skin", c.skin},
                   {"lj_shift", c.lj_shift == LjShift::none ? "none" : "cutoff"},
                   {"precision", c.single_precision ? "float" : "double"},
                   {"dt", c.dt},
                   {"nstlist", c.nstlist},
                   {"steps", cli.steps}};
    j["thermo"] = Json::array();
    for (const Thermo& h : thermo) {
      j["thermo"].push_back({{"step", h.step},
                             {"temperature", h.temperature},
                             {"potential", h.potential},
                             {"total", h.total},
                             {"pressure", h.pressure}});
    }
    for (int k = 0; k < 5; ++k) j["timing_seconds"][keys[k]] = worst[k];
    j["timing_seconds"]["loop"] = worst[5];
    j["steps_per_second"] = worst[5] > 0 ? cli.steps / worst[5] : 0.0;
    j["host_waits_per_step"] = exchanges_per_step;
    j["energy_drift"] = drift;
    j["list_violations"] = violations;
    j["max_displacement"] = sim.max_displacement();
    j["wall_seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    halox::apps::write_json("halox-md", cli.json, j);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return halox::apps::mpi_main("halox-md", argc, argv, run);
}
