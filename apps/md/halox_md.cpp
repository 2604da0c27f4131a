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
#include "../common/cli.hpp"
#include "../common/mpi_main.hpp"
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

Cli parse(int argc, char** argv) {
  Cli cli;
  Config& c = cli.config;
  halox::apps::CommandLine line(
      "halox-md",
      "Lennard-Jones fluid (reduced units) on an fcc lattice, velocity Verlet NVE, Verlet lists\n"
      "from cell lists, periodic box split over a rank grid; the particle halo runs through\n"
      "halox (coordinates forward, forces back). Run it as mpiexec -n N halox-md [options].");
  line.count("--cells", c.cells, "fcc unit cells per box edge, 4 atoms each", 1);
  line.number("--density", c.density, "reduced number density", 1e-6, 10);
  line.number("--temperature", c.temperature, "initial reduced temperature", 0, 1e6);
  line.number("--cutoff", c.cutoff, "LJ cutoff", 1e-6, 1e6);
  line.number("--skin", c.skin, "Verlet list skin", 0, 1e6);
  line.number("--dt", c.dt, "time step", 1e-300);  // too large a step diverges: stopped then
  line.count("--steps", cli.steps, "steps to run");
  line.count("--nstlist", c.nstlist,
             "neighbour search every N steps (on a GPU, where a search costs most of a step, "
             "fewer searches with dynamic pruning pay: --nstlist 30 --skin 1.7 --prune 8 "
             "--inner-skin 0.6 keeps the default fluid's lists valid, docs/halo.md)",
             1);
  line.count("--prune", c.prune,
             "dynamic pruning: every N steps the list (cutoff + skin) is cut to the pairs within "
             "cutoff + --inner-skin, which the forces walk (0: off)");
  line.number("--inner-skin", c.inner_skin, "the pruned list's skin (--prune)", 0, 1e6);
  line.count("--thermo", cli.thermo_every, "thermo line every N steps (0: first and last only)");
  std::string ranks, transport, precision = "double", lj_shift = "cutoff", blocks;
  line.text("--ranks", ranks, "rank grid (default: MPI_Dims_create)", "XxYxZ");
  line.text("--blocks", blocks,
            "each MPI process runs a block of AxBxC ranks (halox::Ranks::blocks; on the GPU by "
            "staged, mpi-direct, ipc-* or nvshmem-pulse/fused): --ranks is then the grid of "
            "processes, the rank grid that times the block",
            "AxBxC");
  line.choice("--device", c.device, "auto: gpu when one is visible", {"auto", "cpu", "gpu"});
  line.choice("--precision", precision, "arithmetic and storage", {"double", "float"});
  line.choice("--lj-shift", lj_shift,
              "cutoff: each pair's energy shifted by -u(rc), continuous at the cutoff; none: "
              "plain truncated LJ (LAMMPS's lj/cut, GROMACS's vdw-modifier = None)",
              {"cutoff", "none"});
  line.text(
      "--transport", transport,
      "host | staged | pipelined | mpi-direct | ipc-pulse | ipc-fused | nvshmem-stream | "
      "nvshmem-pulse | nvshmem-fused | nccl-device | auto (default: one process runs its rank "
      "through local-fused; several: host on the CPU, staged on the GPU); local-pulse | "
      "local-fused: every rank of --ranks in this one process (start 1 MPI rank), one "
      "kernel per pulse or one for all");
  double chunk = 0, seed = static_cast<double>(c.seed);
  line.number("--chunk", chunk, "pipelined chunk size in bytes (0: the tuning file's)", 0, 1e12);
  line.number("--seed", seed, "velocity and lattice-jitter seed", 0, 9e15);
  line.number("--jitter", c.jitter, "random lattice displacement in lattice constants", 0, 0.5);
  line.output("--json", cli.json, "write thermo, timings and configuration as JSON");
  line.output("--dump-forces", cli.dump_forces, "write 'id fx fy fz' of every atom at step 0");
  line.flag("--quiet", cli.quiet, "no thermo table");
  line.flag("--graph", c.graph,
            "GPU: the steps between searches captured in CUDA graphs (one per kind of step, "
            "again after each search) and replayed; thermo and search steps run as ever "
            "(transports local-*, ipc-*, nvshmem-fused/pulse)");
  line.output("--trace", cli.trace, "Chrome trace JSON (Perfetto) of the last 4 steps, all ranks");
  line.watchdog(cli.watchdog);
  line.parse(argc, argv);
  if (!ranks.empty()) c.ranks = halox::apps::dims_of("halox-md", "--ranks", ranks, 1);
  if (!blocks.empty()) c.blocks = halox::apps::dims_of("halox-md", "--blocks", blocks, 1);
  if (!transport.empty()) {
    c.transport = parse_transport(transport);
    c.transport_given = true;
    c.local =
        c.transport == TransportKind::local_pulse || c.transport == TransportKind::local_fused;
  }
  c.single_precision = precision == "float";
  c.lj_shift = lj_shift == "none" ? LjShift::none : LjShift::cutoff;
  c.chunk_bytes = static_cast<std::int64_t>(chunk);
  if (seed != std::floor(seed)) throw Error("halox-md: --seed must be a whole number");
  c.seed = static_cast<std::uint64_t>(seed);
  return cli;
}

// What the set-up made: atoms, box, ranks, transport and the halo's pulses (rank 0).
void print_setup(Simulation& sim) {
  const Config& c = sim.config();
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

// --dump-forces: every atom's force after the set-up, by atom id (collective; rank 0 writes).
void dump_forces(Simulation& sim, const std::string& path, int rank) {
  const auto forces = sim.gather_forces();
  if (rank != 0) return;
  std::string text;
  char line[128];
  for (const auto& [id, v] : forces) {
    std::snprintf(line, sizeof line, "%lld %.17g %.17g %.17g\n", static_cast<long long>(id), v[0],
                  v[1], v[2]);
    text += line;
  }
  halox::apps::write_file("halox-md", path, text);
}

// One thermo row (collective: the sums are the same on every rank, so a diverged run stops on
// all of them together, with a non-zero exit); rank 0 prints it unless quiet.
void report_thermo(Simulation& sim, std::vector<Thermo>& thermo, bool quiet, int rank) {
  const Config& c = sim.config();
  thermo.push_back(sim.thermo());
  const Thermo& t = thermo.back();
  // A temperature a hundred times the start's (or of 1) is no LJ fluid any more: atoms fly
  // through the skin and the halo between searches, and pairs are lost (LAMMPS stops such a
  // run with "Lost atoms").
  const double hot = 100 * std::max(1.0, c.temperature);
  if (!std::isfinite(t.total) || !std::isfinite(t.pressure) || !std::isfinite(t.temperature) ||
      t.temperature > hot) {
    char text[320];
    std::snprintf(text, sizeof text,
                  "halox-md: the run diverged at step %lld: temperature %.3g (started at %.3g; "
                  "the limit is %.3g), total energy/N %.3g; lower --dt (now %g)",
                  static_cast<long long>(t.step), t.temperature, c.temperature, hot, t.total, c.dt);
    throw halox::apps::CollectiveError(text, halox::apps::kExitRunFailed);
  }
  if (rank != 0 || quiet) return;
  if (thermo.size() == 1) {
    std::printf("%8s %12s %14s %14s %12s\n", "step", "temperature", "potential/N", "total/N",
                "pressure");
  }
  std::printf("%8lld %12.6f %14.8f %14.8f %12.6f\n", static_cast<long long>(t.step), t.temperature,
              t.potential, t.total, t.pressure);
  std::fflush(stdout);
}

// The run's figures, as LAMMPS prints them: the loop time, the rates, and per phase the
// least, mean and most over the processes, with the mean's share of the loop; "other" (the
// loop's time in no phase: reductions, thermo output, host gaps) makes the shares add up to
// 100%. The search's parts are rank 0's, per search (host clock).
// "graphed steps": --graph's replayed steps, whole (their phases are not timed apart).
constexpr int kPhases = 6, kSearchParts = 6;
constexpr const char* kPhaseNames[kPhases] = {"force",       "halo forward",     "halo reverse",
                                              "integration", "neighbour search", "graphed steps"};
constexpr const char* kPhaseKeys[kPhases] = {"force",     "halo_forward", "halo_reverse",
                                             "integrate", "search",       "graphed"};
constexpr const char* kSearchKeys[kSearchParts] = {"fetch", "migrate",  "plans",
                                                   "lists", "exchange", "list_wait"};
struct Summary {
  double least[kPhases + 1]{}, mean[kPhases]{}, worst[kPhases + 1]{};
  double loop_time = 0, other = 0, steps_per_second = 0, tau_per_day = 0;
  double atom_steps_per_second = 0, host_waits_per_step = 0, drift = 0, prune_seconds = 0;
  double search[kSearchParts]{};  // seconds per search
  long long violations = 0;
};

// Collective (the reductions); the figures are complete on rank 0.
Summary summarize(Simulation& sim, const Cli& cli, const std::vector<Thermo>& thermo, double loop,
                  int size) {
  const Timers t = sim.timers();
  Summary r;
  double mine[kPhases + 1] = {
      t.force, t.halo_forward, t.halo_reverse, t.integrate, t.search, t.graphed, loop};
  double sum[kPhases + 1];
  halox::apps::reduce(mine, r.least, kPhases + 1, MPI_DOUBLE, MPI_MIN, "the summary's timings");
  halox::apps::reduce(mine, sum, kPhases + 1, MPI_DOUBLE, MPI_SUM, "the summary's timings");
  halox::apps::reduce(mine, r.worst, kPhases + 1, MPI_DOUBLE, MPI_MAX, "the summary's timings");
  r.violations = sim.list_violations();  // the same on every rank
  r.host_waits_per_step = cli.steps > 0 ? 1.0 * sim.exchange_stats().host_waits / cli.steps : 0;
  r.drift = thermo.size() > 1
                ? (thermo.back().total - thermo.front().total) / std::abs(thermo.front().total)
                : 0.0;
  r.loop_time = r.worst[kPhases];  // the job's: its slowest process
  double in_phases = 0;
  for (int k = 0; k < kPhases; ++k) {
    r.mean[k] = sum[k] / size;
    in_phases += r.mean[k];
  }
  r.other = r.loop_time - in_phases;
  r.steps_per_second = r.loop_time > 0 ? cli.steps / r.loop_time : 0.0;
  r.tau_per_day = r.steps_per_second * cli.config.dt * 86400.0;  // LJ time units
  r.atom_steps_per_second = r.steps_per_second * static_cast<double>(sim.atoms());
  const SearchParts& sp = t.search_parts;
  const int searches = std::max(1, cli.steps / cli.config.nstlist);
  const double parts[kSearchParts] = {sp.fetch, sp.migrate,  sp.plans,
                                      sp.lists, sp.exchange, sp.list_wait};
  for (int k = 0; k < kSearchParts; ++k) r.search[k] = parts[k] / searches;
  r.prune_seconds = t.prune;
  return r;
}

void print_summary(const Summary& r, Simulation& sim, const Cli& cli, int size) {
  const Config& c = sim.config();
  std::printf("\nLoop time of %.6f s on %d process(es) (%s) for %d steps with %lld atoms\n",
              r.loop_time, size, sim.topology().describe().c_str(), cli.steps,
              static_cast<long long>(sim.atoms()));
  std::printf("Performance: %.1f tau/day, %.2f timesteps/s, %.4g atom-step/s; %.2f us/step\n",
              r.tau_per_day, r.steps_per_second, r.atom_steps_per_second,
              cli.steps ? 1e6 * r.loop_time / cli.steps : 0.0);
  std::printf("host-blocking waits per step (rank 0): %.2f\n\n", r.host_waits_per_step);
  std::printf("%-18s | %12s | %12s | %12s | %10s | %7s\n", "Section", "min time", "avg time",
              "max time", "avg us/step", "%total");
  std::printf("%s\n", std::string(86, '-').c_str());
  auto row = [&](const char* name, double lo, double avg, double hi) {
    std::printf("%-18s | %12.6f | %12.6f | %12.6f | %10.2f | %6.2f%%\n", name, lo, avg, hi,
                cli.steps ? 1e6 * avg / cli.steps : 0.0,
                r.loop_time > 0 ? 100 * avg / r.loop_time : 0.0);
  };
  for (int k = 0; k < kPhases; ++k) {
    if (k == kPhases - 1 && !c.graph) continue;  // no graphed steps without --graph
    row(kPhaseNames[k], r.least[k], r.mean[k], r.worst[k]);
  }
  row("other", r.other, r.other, r.other);
  std::printf("neighbour search, us per search (rank 0):");
  for (int k = 0; k < kSearchParts; ++k) {
    std::printf(" %s %.1f%s", kSearchKeys[k], 1e6 * r.search[k], k < kSearchParts - 1 ? "," : "");
  }
  std::printf("\n\n");
  std::printf("relative total energy drift over %d steps: %.3e\n", cli.steps, r.drift);
  std::printf("largest displacement between searches: %.4f (skin %.4f)\n", sim.max_displacement(),
              c.skin);
  if (c.graph) {
    const Timers& t = sim.timers();
    const auto [updated, instantiated] = sim.backend().graph_counts();
    std::printf(
        "CUDA graph: %lld of %d steps replayed; %lld captures (one per kind of step and "
        "search), %.1f us each on the host, %ld updated in place, %ld instantiated\n",
        static_cast<long long>(t.graphed_steps), cli.steps, static_cast<long long>(t.captures),
        t.captures ? 1e6 * t.capture_seconds / static_cast<double>(t.captures) : 0.0, updated,
        instantiated);
  }
  if (c.prune > 0) {
    std::printf(
        "dynamic pruning every %d steps: largest displacement between prunes %.4f "
        "(inner skin %.4f); %.1f us per step of the search's time\n",
        c.prune, sim.max_pruned_displacement(), c.inner_skin,
        cli.steps ? 1e6 * r.prune_seconds / cli.steps : 0.0);
  }
  if (r.violations > 0) {
    std::printf(
        "warning: at %lld searches two atoms may have moved more than the skin (or, pruned, "
        "the inner skin) together; pairs may have been missed (lower --nstlist or --prune, or "
        "raise --skin or --inner-skin)\n",
        r.violations);
  }
}

void write_summary_json(const Summary& r, Simulation& sim, const Cli& cli,
                        const std::vector<Thermo>& thermo, double wall_seconds) {
  const Config& c = sim.config();
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
                 {"prune", c.prune},
                 {"inner_skin", c.inner_skin},
                 {"graph", c.graph},
                 {"steps", cli.steps}};
  j["thermo"] = Json::array();
  for (const Thermo& h : thermo) {
    j["thermo"].push_back({{"step", h.step},
                           {"temperature", h.temperature},
                           {"potential", h.potential},
                           {"total", h.total},
                           {"pressure", h.pressure}});
  }
  // timing_seconds: the slowest process's (as before); timing: least, mean, most and the
  // mean's share of the loop, "other" included (the shares add up to 1).
  for (int k = 0; k < kPhases; ++k) {
    j["timing_seconds"][kPhaseKeys[k]] = r.worst[k];
    j["timing"][kPhaseKeys[k]] = {{"min", r.least[k]},
                                  {"avg", r.mean[k]},
                                  {"max", r.worst[k]},
                                  {"share", r.loop_time > 0 ? r.mean[k] / r.loop_time : 0.0}};
  }
  j["timing"]["other"] = {{"avg", r.other},
                          {"share", r.loop_time > 0 ? r.other / r.loop_time : 0.0}};
  j["timing_seconds"]["loop"] = r.loop_time;
  j["steps_per_second"] = r.steps_per_second;
  j["tau_per_day"] = r.tau_per_day;
  j["atom_steps_per_second"] = r.atom_steps_per_second;
  j["host_waits_per_step"] = r.host_waits_per_step;
  j["energy_drift"] = r.drift;
  j["list_violations"] = r.violations;
  for (int k = 0; k < kSearchParts; ++k)
    j["search_seconds_per_search"][kSearchKeys[k]] = r.search[k];
  j["max_displacement"] = sim.max_displacement();
  if (c.graph) {
    j["graphed_steps"] = sim.timers().graphed_steps;
    j["captures"] = sim.timers().captures;
    j["capture_seconds"] = sim.timers().capture_seconds;
    j["graphs_updated"] = sim.backend().graph_counts().first;
    j["graphs_instantiated"] = sim.backend().graph_counts().second;
  }
  if (c.prune > 0) {
    j["max_pruned_displacement"] = sim.max_pruned_displacement();
    j["prune_seconds"] = r.prune_seconds;  // part of timing's search
  }
  j["wall_seconds"] = wall_seconds;
  halox::apps::write_json("halox-md", cli.json, j);
}

int run(int argc, char** argv) {
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  halox::apps::Watchdog watchdog("halox-md", rank, "start-up", halox::apps::kSetupSeconds);
  Cli cli;
  check_input_collectively(MPI_COMM_WORLD, "halox-md", argc, argv, [&] {
    cli = parse(argc, argv);
    single_rank_default(cli.config, size);
    validate(cli.config, size);
  });
  watchdog.beat("set-up", cli.watchdog > 0 ? halox::apps::kSetupSeconds : 0);
  if (cli.config.device != "cpu") select_device(MPI_COMM_WORLD);  // one GPU per rank
  const auto wall_start = std::chrono::steady_clock::now();
  Simulation sim(MPI_COMM_WORLD, cli.config);
  if (rank == 0) print_setup(sim);
  if (!cli.dump_forces.empty()) dump_forces(sim, cli.dump_forces, rank);
  std::vector<Thermo> thermo;
  report_thermo(sim, thermo, cli.quiet, rank);
  sim.reset_timers();
  sim.reset_exchange_stats();
  const auto loop_start = std::chrono::steady_clock::now();
  if (!cli.trace.empty()) trace::enable();
  watchdog.beat("a step", cli.watchdog);
  for (int s = 1; s <= cli.steps; ++s) {
    if (!cli.trace.empty() && s == std::max(1, cli.steps - 3)) trace::clear();
    watchdog.beat("a step");
    const bool thermo_step = (cli.thermo_every > 0 && s % cli.thermo_every == 0) || s == cli.steps;
    sim.step(thermo_step);
    if (thermo_step) report_thermo(sim, thermo, cli.quiet, rank);
  }
  sim.backend().synchronize();  // the loop ends when the GPU has done it
  const double loop =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
  watchdog.beat("the summary", cli.watchdog > 0 ? halox::apps::kSetupSeconds : 0);
  if (!cli.trace.empty()) {
    trace::write(MPI_COMM_WORLD, cli.trace);
    if (rank == 0) std::printf("wrote trace %s (the last steps, every rank)\n", cli.trace.c_str());
  }
  const Summary summary = summarize(sim, cli, thermo, loop, size);
  if (rank != 0) return 0;
  print_summary(summary, sim, cli, size);
  if (!cli.json.empty()) {
    write_summary_json(
        summary, sim, cli, thermo,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return halox::apps::mpi_main("halox-md", argc, argv, run);
}
