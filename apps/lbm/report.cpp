// halox-lbm's run and report (report.hpp).
#include "report.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdio>
#include <string>
#include <vector>

#include "../common/mpi_main.hpp"
#include "../common/output.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "halox/trace.hpp"

namespace halox::lbm {

namespace {

using Clock = std::chrono::steady_clock;
using Totals = std::array<double, 4>;  // fluid mass, phase A, phase B, kinetic energy

double bytes_per_cell(Decomposition& lbm) {
  return double(lbm.backend().bytes()) / (double(lbm.local()[0]) * lbm.local()[1] * lbm.local()[2]);
}

void print_header(Decomposition& lbm, const Cli& cli) {
  std::printf("halox-lbm: %s, %dx%dx%d cells on %s ranks, %s, %s\n", cli.model.c_str(), cli.grid[0],
              cli.grid[1], cli.grid[2], lbm.topology().describe().c_str(),
              lbm.backend().name().c_str(), lbm.transport().c_str());
  if (cli.graph) {
    std::printf("CUDA graph: the step captured once per parity after 2 steps, then replayed\n");
  }
  const std::string wrapped = lbm.wrapped_axes();
  if (!wrapped.empty()) {
    std::printf("periodic axes with one rank (%s): the update wraps them, no self-halo\n",
                wrapped.c_str());
  }
  std::printf("memory: %.1f bytes per cell on rank 0 (two copies of f%s, phi, one halo layer)\n",
              bytes_per_cell(lbm), cli.model == "multiphase" ? " and g" : "");
}

// Every step, with progress; returns the seconds of the timed steps. The physics runs all
// the steps; the clock starts after the warm-up steps (the first exchanges of NCCL and
// NVSHMEM set up connections and would count ~0.4 s otherwise).
double run_steps(Decomposition& lbm, const Cli& cli, int rank, halox::apps::Watchdog& watchdog) {
  const long long cells = (long long)cli.grid[0] * cli.grid[1] * cli.grid[2];
  const int every = cli.report_every > 0 ? cli.report_every : std::max(1, cli.steps / 10);
  if (!cli.trace.empty()) trace::enable();
  auto start = Clock::now();
  watchdog.beat("a step", cli.watchdog);
  for (int s = 1; s <= cli.steps; ++s) {
    if (!cli.trace.empty() && s == std::max(1, cli.steps - 2)) trace::clear();
    watchdog.beat("a step");
    lbm.step();
    if (s == cli.warmup) {
      lbm.synchronize();
      halox::apps::barrier("the barrier after the warm-up");
      lbm.reset_timers();
      start = Clock::now();
    }
    if (s % every != 0 || s <= cli.warmup) continue;
    // The overlap variant queues steps without waiting for the GPU: without this wait the
    // figure would be the rate of queueing (43,000 printed during a 14,800 MLUPS run).
    lbm.synchronize();
    if (rank == 0) {
      const double t = std::chrono::duration<double>(Clock::now() - start).count();
      std::printf("  step %6d  %8.1f MLUPS so far\n", s, cells * double(s - cli.warmup) / t / 1e6);
      std::fflush(stdout);
    }
  }
  lbm.synchronize();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The run's rates: MLUPS, the slowest rank's exchange and compute, and the bandwidth bound.
struct Rates {
  double seconds = 0, mlups = 0, compute_mlups = 0;
  double exchange = 0, compute = 0;  // the slowest rank's seconds
  double cell_bytes = 0, ceiling = 0, bound = 0;
  int timed = 0, processes = 1;
};

// Collective (the reductions and the copy ceiling every process measures at once).
Rates rates_of(Decomposition& lbm, const Cli& cli, double seconds) {
  const long long cells = (long long)cli.grid[0] * cli.grid[1] * cli.grid[2];
  Rates r;
  r.seconds = seconds;
  r.timed = cli.steps - cli.warmup;
  // overlap and --graph: one span, the whole run (its steps do not wait for the GPU one by
  // one, or are replayed whole).
  const bool one_span = cli.comm.ends_with("overlap") || cli.graph;
  double worst[2] = {0, 0},
         mine[2] = {lbm.time_exchange(), one_span ? seconds : lbm.time_compute()};
  halox::apps::reduce(mine, worst, 2, MPI_DOUBLE, MPI_MAX, "the summary's timings");
  r.exchange = worst[0];
  r.compute = worst[1];
  r.mlups = r.timed > 0 ? cells * double(r.timed) / seconds / 1e6 : 0;
  // The update kernels alone (the slowest rank's compute phases; not for overlap, whose one
  // span holds the exchange too): the rate if the exchange were free.
  r.compute_mlups =
      !one_span && r.timed > 0 && r.compute > 0 ? cells * double(r.timed) / r.compute / 1e6 : 0;
  // The bandwidth bound: bytes each cell update moves (counted below) against the copy
  // ceiling measured now. BGK: 19 populations read + written. Multiphase (two passes): the
  // phi pass reads g (7) and writes phi (1); the fused stream-collide pass reads and writes
  // f (19) and g (7) and reads phi (1, its neighbours come from cache): 61 values.
  const double real_bytes = lbm.backend().real() == BasicKind::float32 ? 4 : 8;
  r.cell_bytes = (cli.model == "bgk" ? 38 : 61) * real_bytes;
  // The whole run's bound: every process copies at once and their rates add up. Processes
  // sharing a GPU (two under MPS, each held to half of it) then get their shares of it, and
  // several GPUs add theirs; one process's ceiling alone was half a shared GPU's, which made
  // two processes on one GPU run at "130% of the bound".
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &r.processes));
  halox::apps::barrier("the barrier before the copy ceiling");
  const double my_ceiling = lbm.backend().copy_ceiling_gbs();
  halox::apps::allreduce(&my_ceiling, &r.ceiling, 1, MPI_DOUBLE, MPI_SUM, "the copy ceilings' sum");
  r.bound = r.ceiling > 0 ? r.ceiling * 1e9 / r.cell_bytes / 1e6 : 0;
  return r;
}

// The physics checks: the Taylor-Green decay and the conservation of mass.
struct Checks {
  int rc = 0;
  std::string text;    // what was checked, for the report
  std::string failed;  // which check failed and by how much
  double tg_error = 0, mass_error = 0, mass_tolerance = 0;
};

Checks check_physics(Decomposition& lbm, const Cli& cli, const Totals& first, const Totals& last) {
  Checks c;
  // Taylor-Green: the velocity amplitude (square root of the kinetic energy) decays as
  // exp(-nu (kx^2 + ky^2) t).
  if (cli.init == "taylor-green") {
    const double nu = (cli.params.tau - 0.5) / 3.0;
    const double k2 = std::pow(2 * M_PI / cli.grid[0], 2) + std::pow(2 * M_PI / cli.grid[1], 2);
    const double want = std::exp(-nu * k2 * cli.steps), got = std::sqrt(last[3] / first[3]);
    c.tg_error = std::abs(got - want) / want;
    c.text = "Taylor-Green velocity amplitude after " + std::to_string(cli.steps) +
             " steps: " + std::to_string(got) + " vs analytic " + std::to_string(want) +
             ", relative error " + std::to_string(c.tg_error);
  }
  for (int k = 0; k < 3; ++k) {
    if (k > 0 && cli.model != "multiphase") continue;
    c.mass_error = std::max(c.mass_error, std::abs(last[k] - first[k]) / std::abs(first[k]));
  }
  // Float populations lose mass systematically to the collision's rounding, about a tenth of
  // an epsilon per step (measured: 2.0e-7 after 10 steps, 3.6e-6 after 200 on 24^3); double
  // ones only to the sums' rounding (1e-14). One cell's population lost in a halo is 1e-5
  // of a 24^3 lattice's mass in float; the float tolerance stays below it for short runs.
  const bool single = lbm.backend().real() == BasicKind::float32;
  c.mass_tolerance = single ? 2 * std::numeric_limits<float>::epsilon() * (8.0 + cli.steps) : 1e-10;
  if (cli.check_mass && !(c.mass_error < c.mass_tolerance)) {
    c.rc = 1;
    char text[200];
    std::snprintf(text, sizeof text,
                  "--check-mass: the mass changed by %.3e, more than the tolerance %.3e (%s)",
                  c.mass_error, c.mass_tolerance,
                  single ? "float: 2 epsilon x (8 + steps)" : "double: 1e-10");
    c.failed = text;
  }
  if (cli.check_taylor_green && cli.init == "taylor-green" && !(c.tg_error < 0.01)) {
    c.rc = 1;
    c.failed += std::string(c.failed.empty() ? "" : "; ") +
                "--check-taylor-green: relative error " + std::to_string(c.tg_error) +
                ", more than 0.01";
  }
  return c;
}

void print_report(const Rates& r, const Checks& c, const Cli& cli, const Totals& first,
                  const Totals& last) {
  std::printf(
      "\n%d steps (after %d untimed) in %.3f s: %.1f MLUPS; exchange %.1f%% of the step "
      "(slowest rank: exchange %.3f s, compute %.3f s)\n",
      r.timed, cli.warmup, r.seconds, r.mlups,
      100 * r.exchange / std::max(1e-12, r.exchange + r.compute), r.exchange, r.compute);
  if (r.bound > 0) {
    std::printf(
        "bandwidth bound: %.0f bytes per cell update, copy ceiling %.0f GB/s (measured now%s) "
        "-> %.0f MLUPS; this run: %.1f%% of it\n",
        r.cell_bytes, r.ceiling, r.processes > 1 ? ", every process copying at once" : "", r.bound,
        100 * r.mlups / r.bound);
  }
  if (r.compute_mlups > 0) {
    std::printf("update kernels alone: %.1f MLUPS", r.compute_mlups);
    if (r.bound > 0) std::printf(" (%.1f%% of the bound)", 100 * r.compute_mlups / r.bound);
    std::printf("\n");
  }
  std::printf("conservation: fluid mass %.3e, phase A %.3e, phase B %.3e (relative change)\n",
              std::abs(last[0] - first[0]) / first[0],
              cli.model == "multiphase" ? std::abs(last[1] - first[1]) / first[1] : 0.0,
              cli.model == "multiphase" ? std::abs(last[2] - first[2]) / first[2] : 0.0);
  if (!c.text.empty()) std::printf("%s\n", c.text.c_str());
  if (c.rc) std::printf("CHECK FAILED: %s\n", c.failed.c_str());
}

// One value of the gathered fields (5 per cell, x fastest).
double field_at(const std::vector<double>& fields, const Cli& cli, int x, int y, int z, int k) {
  return fields[5 * ((static_cast<std::size_t>(z) * cli.grid[1] + y) * cli.grid[0] + x) + k];
}

// Laplace: the pressure jump c_s^2 (rho_in - rho_out) between the centre and a corner.
void report_droplet(const std::vector<double>& fields, const Cli& cli) {
  const double inside = field_at(fields, cli, cli.grid[0] / 2, cli.grid[1] / 2, cli.grid[2] / 2, 0);
  const double outside = field_at(fields, cli, 0, 0, 0, 0);
  const double dp = (inside - outside) / 3.0;
  std::printf(
      "droplet radius %.2f: pressure jump %.6e (rho %.8f inside, %.8f outside); dp * R = %.6e\n",
      cli.radius, dp, inside, outside, dp * cli.radius);
  if (!cli.json.empty()) {
    char text[64];
    std::snprintf(text, sizeof text, "%.17g\n", dp);
    halox::apps::write_file("halox-lbm", cli.json + ".droplet", text);
  }
}

// --slice: the mid-z plane of phi (multiphase) or u_x as a PGM image, scaled to its range.
void write_slice(const std::vector<double>& fields, const Cli& cli) {
  std::string image =
      "P5\n" + std::to_string(cli.grid[0]) + " " + std::to_string(cli.grid[1]) + "\n255\n";
  const int z = cli.grid[2] / 2;
  const int channel = cli.model == "multiphase" ? 4 : 1;
  double lo = 1e300, hi = -1e300;
  for (int y = 0; y < cli.grid[1]; ++y)
    for (int x = 0; x < cli.grid[0]; ++x) {
      const double v = field_at(fields, cli, x, y, z, channel);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  for (int y = 0; y < cli.grid[1]; ++y)
    for (int x = 0; x < cli.grid[0]; ++x) {
      const double v = field_at(fields, cli, x, y, z, channel);
      image += static_cast<char>(hi > lo ? 255.0 * (v - lo) / (hi - lo) : 0);
    }
  halox::apps::write_file("halox-lbm", cli.slice, image);
  std::printf("wrote %s (mid-z slice of %s)\n", cli.slice.c_str(), channel == 4 ? "phi" : "u_x");
}

void write_report_json(Decomposition& lbm, const Cli& cli, const Rates& r, const Checks& c) {
  halox::apps::Json j;
  j["app"] = "halox-lbm";
  j["model"] = cli.model;
  j["init"] = cli.init;
  j["grid"] = cli.grid;
  j["ranks"] = lbm.topology().describe();
  j["backend"] = lbm.backend().name();
  j["variant"] = cli.comm;
  j["graph"] = cli.graph;
  j["transport"] = lbm.transport();
  j["self_halo"] = cli.self_halo;
  j["fg_exchange"] = lbm.fg_exchange();
  j["wrapped_axes"] = lbm.wrapped_axes();
  j["steps"] = cli.steps;
  j["warmup_steps"] = cli.warmup;
  j["timed_steps"] = r.timed;
  j["seconds"] = r.seconds;
  j["mlups"] = r.mlups;
  j["exchange_seconds"] = r.exchange;
  j["compute_seconds"] = r.compute;
  const halox::apps::Json unmeasured = nullptr;  // null, not 0, for what this run did not measure
  j["compute_mlups"] = r.compute_mlups > 0 ? halox::apps::Json(r.compute_mlups) : unmeasured;
  j["bytes_per_cell"] = bytes_per_cell(lbm);
  j["bytes_per_cell_update"] = r.cell_bytes;
  j["copy_ceiling_gbs"] = r.ceiling > 0 ? halox::apps::Json(r.ceiling) : unmeasured;
  j["bound_mlups"] = r.bound > 0 ? halox::apps::Json(r.bound) : unmeasured;
  j["fraction_of_bound"] = r.bound > 0 ? halox::apps::Json(r.mlups / r.bound) : unmeasured;
  j["mass_change"] = c.mass_error;
  j["mass_tolerance"] = c.mass_tolerance;
  j["taylor_green_error"] = cli.init == "taylor-green" ? halox::apps::Json(c.tg_error) : unmeasured;
  halox::apps::write_json("halox-lbm", cli.json, j);
}

}  // namespace

int drive(Decomposition& lbm, const Cli& cli, int rank, halox::apps::Watchdog& watchdog) {
  const Totals first = lbm.totals();
  if (rank == 0) print_header(lbm, cli);
  const double seconds = run_steps(lbm, cli, rank, watchdog);
  watchdog.beat("the summary", cli.watchdog > 0 ? halox::apps::kSetupSeconds : 0);
  if (!cli.trace.empty()) trace::write(MPI_COMM_WORLD, cli.trace);
  const Totals last = lbm.totals();
  // The same sums on every rank: all stop together, with a non-zero exit.
  for (int k = 0; k < 4; ++k) {
    if (!std::isfinite(last[k])) {
      throw Error("halox-lbm: the fluid's totals became non-finite after " +
                  std::to_string(cli.steps) + " steps (mass " + std::to_string(last[0]) +
                  ", kinetic energy " + std::to_string(last[3]) +
                  "): the run diverged; raise --tau or lower --velocity");
    }
  }
  const Rates rates = rates_of(lbm, cli, seconds);
  const Checks checks = check_physics(lbm, cli, first, last);
  // Collective: every rank takes part, only rank 0 receives the fields.
  const bool gathered = !cli.dump.empty() || !cli.slice.empty() || cli.init == "droplet";
  const std::vector<double> fields = gathered ? lbm.gather() : std::vector<double>{};
  if (rank != 0) return checks.rc;
  print_report(rates, checks, cli, first, last);
  if (cli.init == "droplet") report_droplet(fields, cli);
  if (!cli.dump.empty()) {
    halox::apps::write_file(
        "halox-lbm", cli.dump,
        std::string(reinterpret_cast<const char*>(fields.data()), fields.size() * sizeof(double)));
  }
  if (!cli.slice.empty()) write_slice(fields, cli);
  if (!cli.json.empty()) write_report_json(lbm, cli, rates, checks);
  return checks.rc;
}

}  // namespace halox::lbm
