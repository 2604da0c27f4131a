// halox-bench halo --app md: the per-step cost of the MD particle halo (coordinates forward
// + forces back) for each transport, rank count and atoms per rank, measured inside the real
// mini-app (apps/md) so the halo sees the application's sizes and dependencies.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "../apps/common/agree.hpp"
#include "../apps/common/cli.hpp"
#include "../apps/common/watchdog.hpp"
#include "halox/trace.hpp"
#include "report.hpp"
#include "simulation.hpp"

namespace halox::bench {

#if HALOX_HAS_CUDA
double empty_launch_us();  // local_halo_bench.cu
#endif

// Exchanges queued back to back per direction for the "queued" figure.
constexpr int kQueued = 100;
constexpr int kGraphPairs = 10;  // pairs per graph, as a --graph run's steps between searches
// Pairs queued and graphed are timed alternately this many times, the best of each kept: one
// timing of 100 exchanges of ~5 us moved by 2-5% from run to run on the H200.
constexpr int kPairRounds = 3;

namespace {

struct HaloOptions {
  std::string app = "md", device = "auto", json, trace;
  std::vector<std::string> transports;
  std::array<int, 3> local_ranks = {2, 2, 2};  // the grid of the `local` transport
  std::vector<long> atoms_per_rank = {2000, 20000, 200000};
  int steps = 200;
  bool quick = false;
};

HaloOptions parse_halo(int argc, char** argv) {
  HaloOptions o;
  halox::apps::CommandLine line(
      "halox-bench halo",
      "Runs halox-md and reports the particle halo's time per step (forward + reverse), its\n"
      "share of the step and the host-blocking waits, per transport and size.\n"
      "Run it as mpiexec -n N halox-bench halo --app md [options].");
  line.choice("--app", o.app, "the application (lbm comes with halox-lbm)", {"md"});
  line.list("--transports", o.transports,
            "default: host on the CPU; staged,pipelined,ipc-pulse,ipc-fused on the GPU "
            "(nvshmem-stream,nvshmem-pulse,nvshmem-fused: in a run of their own, as NVSHMEM's "
            "proxy thread slows the others; nccl-device: one GPU per rank); local-pulse, "
            "local-fused: every rank of "
            "--local-ranks in this process (run it on 1 MPI rank)");
  std::string local = "2x2x2";
  line.text("--local-ranks", local, "the local transports' rank grid", "XxYxZ");
  CLI::Option* sizes =
      line.counts("--atoms-per-rank", o.atoms_per_rank, "atoms per rank, one case each");
  line.count("--steps", o.steps, "timed steps per case (after 20 warm-up steps)", 1);
  line.choice("--device", o.device, "auto: gpu when one is visible", {"auto", "cpu", "gpu"});
  line.flag("--quick", o.quick,
            "at most 50 steps, and 2000 and 20000 atoms per rank unless --atoms-per-rank says");
  line.output("--json", o.json, "also write the rows as JSON");
  line.output("--trace", o.trace, "Chrome trace JSON of the last case (all ranks)");
  line.parse(argc, argv);
  o.local_ranks = halox::apps::dims_of("halox-bench halo", "--local-ranks", local, 1);
  if (o.quick) {  // the sizes given win over --quick's
    if (sizes->count() == 0) o.atoms_per_rank = {2000, 20000};
    o.steps = std::min(o.steps, 50);
  }
  return o;
}

// The table's header (rank 0).
void print_header(const HaloOptions& o, int size, bool gpu, double launch) {
  std::printf("halox-bench halo --app md: %d ranks, %s, %s, %s\n", size, gpu ? "GPU" : "CPU",
              host_name().c_str(), today().c_str());
  if (gpu)
    std::printf("one empty kernel launch, every rank at once (measured now): %.2f us\n", launch);
  std::printf(
      "halo = coordinates forward + forces reverse per step between neighbour searches\n"
      "(slowest rank, %d steps after 20 warm-up; an untimed barrier before each halo phase\n"
      "keeps load imbalance out of it); re-plan = what the first exchange of a new plan (the\n"
      "reverse at a search step) costs above that, once per search; step = the whole step\n"
      "including the neighbour search; queued = one exchange (the mean of forward and\n"
      "reverse) when %d are queued back to back, as the empty launch is timed; launch = one\n"
      "empty kernel launch timed so right after them, every rank at once (slowest rank),\n"
      "and q/launch the ratio of the two; pairs = one exchange when %d forward + reverse\n"
      "pairs are queued alternately, as a run's steps exchange, and p/launch its ratio;\n"
      "graph = one exchange when %d such pairs are captured in a CUDA graph and replayed\n"
      "(as --graph replays the steps between searches; '-': the transport is not capturable);\n"
      "pairs and graph are timed alternately %d times, the best of each\n\n",
      o.steps, kQueued, kQueued / 2, kGraphPairs, kPairRounds);
  std::printf("%-12s %9s %10s %11s %11s %11s %11s %9s %8s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n",
              "transport", "atoms/rk", "halo atoms", "forward us", "reverse us", "halo us",
              "re-plan us", "step us", "share", "waits/st", "staged/x", "x/launch", "queued us",
              "launch us", "q/launch", "pairs us", "p/launch", "graph us");
}

// One case's halox-md configuration; false (said on rank 0) when the case cannot run here.
bool case_config(const std::string& name, long atoms_per_rank, const HaloOptions& o, int size,
                 int rank, bool gpu, md::Config& c) {
  c.device = gpu ? "gpu" : "cpu";
  c.transport = parse_transport(name);
  c.transport_given = true;
  // local-*: every rank of the grid in this process (Ranks::local).
  c.local = c.transport == TransportKind::local_pulse || c.transport == TransportKind::local_fused;
  int ranks = size;
  if (c.local) {
    if (size != 1) {
      if (rank == 0) std::printf("%-12s skipped: runs on 1 MPI rank\n", name.c_str());
      return false;
    }
    c.ranks = o.local_ranks;
    ranks = o.local_ranks[0] * o.local_ranks[1] * o.local_ranks[2];
  }
  c.cells =
      std::max(4, static_cast<int>(std::lround(std::cbrt(double(atoms_per_rank) * ranks / 4.0))));
  c.nstlist = 20;  // the halo between searches is what is measured
  c.barrier_before_halo = true;
  std::string why;
  if (!c.local &&
      (!transport_available(c.transport, &why) || (!gpu && c.transport != TransportKind::host))) {
    if (rank == 0)
      std::printf("%-12s skipped: %s\n", name.c_str(), gpu ? why.c_str() : "needs a GPU");
    return false;
  }
  return true;
}

// One case's figures: us per step or exchange, slowest rank (valid on rank 0).
struct CaseFigures {
  double fwd = 0, rev = 0, replan = 0, with_replans = 0, step = 0, waits = 0;
  double queued_forward = 0, queued_reverse = 0, queued = 0, pairs = 0, launch = 0, graph = 0;
  long long home_atoms = 0, halo_atoms = 0, atoms = 0;
  std::string backend, ranks;
};

// Runs one case (collective): 20 warm-up steps, the timed steps, then the queued exchanges.
template <class Launch>
CaseFigures run_case(const md::Config& c, const HaloOptions& o, bool gpu, Launch&& launch_now) {
  md::Simulation sim(MPI_COMM_WORLD, c);
  for (int s = 0; s < 20; ++s) sim.step();
  sim.reset_timers();
  sim.reset_exchange_stats();
  for (int s = 0; s < o.steps; ++s) sim.step();
  const md::Timers& t = sim.timers();
  const double host_waits = double(sim.exchange_stats().host_waits);
  // Last (it leaves the forces summed again): exchanges queued back to back, then pairs queued
  // and graphed, alternately.
  double mine[8] = {t.halo_forward,
                    t.halo_reverse - t.halo_reverse_at_search,
                    t.halo_reverse_at_search,
                    t.total(),
                    sim.queued_halo_seconds(true, kQueued),
                    sim.queued_halo_seconds(false, kQueued),
                    std::numeric_limits<double>::max(),
                    gpu ? std::numeric_limits<double>::max() : 0},
         worst[8];
  for (int round = 0; round < kPairRounds; ++round) {
    mine[6] = std::min(mine[6], sim.queued_halo_pair_seconds(kQueued / 2));
    if (gpu)
      mine[7] =
          std::min(mine[7], sim.graphed_halo_pair_seconds(kGraphPairs, kQueued / kGraphPairs));
  }
  CaseFigures f;
  f.launch = gpu ? launch_now() : 0;
  HALOX_MPI_CHECK(MPI_Reduce(mine, worst, 8, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
  f.queued_forward = 1e6 * worst[4];
  f.queued_reverse = 1e6 * worst[5];
  f.queued = (f.queued_forward + f.queued_reverse) / 2;
  f.pairs = 1e6 * worst[6];
  f.graph = 1e6 * worst[7];
  // Searches rebuild the halo with the plan: both figures cover the other steps, and the
  // reverse at a search step (the first exchange of the new plan, with the transport's
  // set-up for it) is reported apart, as its excess over a steady reverse.
  const int searches = o.steps / c.nstlist, between = o.steps - searches;
  f.fwd = 1e6 * worst[0] / between;
  f.rev = 1e6 * worst[1] / between;
  f.replan = searches > 0 ? 1e6 * worst[2] / searches - f.rev : 0;
  f.with_replans = f.fwd + f.rev + f.replan * searches / o.steps;
  f.step = 1e6 * worst[3] / o.steps;
  f.waits = 2 * host_waits / (2 * o.steps - searches);
  f.home_atoms = sim.home_atoms();
  f.halo_atoms = sim.halo_atoms();
  f.atoms = sim.atoms();
  f.backend = sim.backend().name();
  f.ranks = sim.topology().describe();
  return f;
}

}  // namespace

int halo_main(int argc, char** argv) {
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  // A rank that stalls or dies ends the job with a message: the start-up's collectives and
  // each case (its set-up, plans and barriers) are watched; the exchanges time out themselves.
  halox::apps::Watchdog watchdog("halox-bench halo", rank, "start-up", halox::apps::kSetupSeconds);
  HaloOptions o;  // every rank parses; bad input: one message, every rank stops (exit 2)
  halox::apps::check_input_collectively(MPI_COMM_WORLD, "halox-bench halo", argc, argv,
                                        [&] { o = parse_halo(argc, argv); });
  const bool gpu = o.device == "gpu" || (o.device == "auto" && md::gpu_present());
  std::vector<std::string> transports = o.transports;
  if (transports.empty()) {
    // NVSHMEM transports are asked for by name and best run on their own: once NVSHMEM is up,
    // its proxy thread competes with MPI progress and slows the other transports' figures.
    transports = gpu ? std::vector<std::string>{"staged", "pipelined", "ipc-pulse", "ipc-fused"}
                     : std::vector<std::string>{"host"};
  }
  // One empty kernel launch, queued back to back like the exchanges, on every rank at once
  // after a barrier (with several processes on a GPU, as the exchanges run), slowest rank.
  auto launch_now = [&] {
    double us = 0;
#if HALOX_HAS_CUDA
    HALOX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    const double mine = empty_launch_us();
    HALOX_MPI_CHECK(MPI_Allreduce(&mine, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
#endif
    return us;
  };
  const double launch = gpu ? launch_now() : 0;
  if (rank == 0) print_header(o, size, gpu, launch);
  std::vector<Row> rows;
  for (long apr : o.atoms_per_rank) {
    double staged_halo = 0, staged_with_replans = 0;  // this size's baseline, when it ran first
    for (const auto& name : transports) {
      watchdog.beat("a case");
      md::Config c;
      if (!case_config(name, apr, o, size, rank, gpu, c)) continue;
      if (!o.trace.empty()) trace::enable();
      trace::clear();  // the file keeps the last case only
      const CaseFigures f = run_case(c, o, gpu, launch_now);
      const double halo = f.fwd + f.rev;
      if (name == "staged") {
        staged_halo = halo;
        staged_with_replans = f.with_replans;
      }
      const double vs_staged = staged_halo > 0 ? staged_halo / halo : 0;
      const double vs_staged_with_replans =
          staged_with_replans > 0 ? staged_with_replans / f.with_replans : 0;
      const double vs_launch = launch > 0 ? halo / launch : 0;
      const double queued_vs_launch = f.launch > 0 ? f.queued / f.launch : 0;
      const double pairs_vs_launch = f.launch > 0 ? f.pairs / f.launch : 0;
      if (rank != 0) continue;
      char graph_cell[32] = "-";
      if (f.graph > 0) std::snprintf(graph_cell, sizeof graph_cell, "%.2f", f.graph);
      std::printf(
          "%-12s %9lld %10lld %11.2f %11.2f %11.2f %11.2f %9.2f %7.1f%% %9.2f %9.2f %9.2f %9.2f "
          "%9.2f %9.2f %9.2f %9.2f %9s\n",
          name.c_str(), f.home_atoms, f.halo_atoms, f.fwd, f.rev, halo, f.replan, f.step,
          100 * halo / f.step, f.waits, vs_staged, vs_launch, f.queued, f.launch, queued_vs_launch,
          f.pairs, pairs_vs_launch, graph_cell);
      std::fflush(stdout);
      rows.push_back(Row()
                         .set("transport", name)
                         .set("backend", f.backend)
                         .set("ranks", f.ranks)
                         .set("atoms", double(f.atoms))
                         .set("atoms_per_rank", double(apr))
                         .set("halo_atoms_rank0", double(f.halo_atoms))
                         .set("forward_us", f.fwd)
                         .set("reverse_us", f.rev)
                         .set("halo_us", halo)
                         .set("replan_us", f.replan)
                         .set("halo_with_replans_us", f.with_replans)
                         .set("speedup_vs_staged_with_replans", vs_staged_with_replans)
                         .set("step_us", f.step)
                         .set("halo_share", halo / f.step)
                         .set("host_waits_per_step", f.waits)
                         .set("speedup_vs_staged", vs_staged)
                         .set("halo_over_empty_launch", vs_launch)
                         .set("queued_forward_us", f.queued_forward)
                         .set("queued_reverse_us", f.queued_reverse)
                         .set("queued_exchange_over_empty_launch", queued_vs_launch)
                         .set("queued_pair_exchange_us", f.pairs)
                         .set("queued_pair_exchange_over_empty_launch", pairs_vs_launch)
                         .set("graphed_pair_exchange_us", f.graph)
                         .set("empty_launch_us", launch)
                         .set("queued_empty_launch_us", f.launch));
    }
  }
  if (!o.trace.empty()) {
    trace::write(MPI_COMM_WORLD, o.trace);
    if (rank == 0) std::printf("wrote trace %s (the last case)\n", o.trace.c_str());
  }
  if (rank == 0 && !o.json.empty()) {
    write_json(o.json, "halo --app md",
               {{"host", host_name()},
                {"cpu", cpu_model()},
                {"halox", HALOX_VERSION},
                {"ranks", std::to_string(size)}},
               rows);
    std::printf("\nwrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace halox::bench
