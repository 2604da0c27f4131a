// halox-lbm's run and report (report.hpp).
#include "report.hpp"

#include <algorithm>
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
}  // namespace

int drive(Decomposition& lbm, const Cli& cli, int rank, halox::apps::Watchdog& watchdog) {
  const long long cells = (long long)cli.grid[0] * cli.grid[1] * cli.grid[2];
  const auto first = lbm.totals();
  const std::string wrapped = lbm.wrapped_axes();
  if (rank == 0) {
    std::printf("halox-lbm: %s, %dx%dx%d cells on %s ranks, %s, %s\n", cli.model.c_str(),
                cli.grid[0], cli.grid[1], cli.grid[2], lbm.topology().describe().c_str(),
                lbm.backend().name().c_str(), lbm.transport().c_str());
    if (!wrapped.empty()) {
      std::printf("periodic axes with one rank (%s): the update wraps them, no self-halo\n",
                  wrapped.c_str());
    }
    std::printf(
        "memory: %.1f bytes per cell on rank 0 (two copies of f%s, phi, one halo layer)\n",
        double(lbm.backend().bytes()) / (double(lbm.local()[0]) * lbm.local()[1] * lbm.local()[2]),
        cli.model == "multiphase" ? " and g" : "");
  }
  const int every = cli.report_every > 0 ? cli.report_every : std::max(1, cli.steps / 10);
  if (!cli.trace.empty()) trace::enable();
  // The physics runs all the steps; the clock starts after the warm-up steps (the first
  // exchanges of NCCL and NVSHMEM set up connections and would count ~0.4 s otherwise).
  auto start = Clock::now();
  const int timed = cli.steps - cli.warmup;
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
    if (s % every == 0 && s > cli.warmup) {
      // The overlap variant queues steps without waiting for the GPU: without this wait the
      // figure would be the rate of queueing (43,000 printed during a 14,800 MLUPS run).
      lbm.synchronize();
    }
    if (s % every == 0 && s > cli.warmup && rank == 0) {
      const double t = std::chrono::duration<double>(Clock::now() - start).count();
      std::printf("  step %6d  %8.1f MLUPS so far\n", s, cells * double(s - cli.warmup) / t / 1e6);
      std::fflush(stdout);
    }
  }
  lbm.synchronize();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  watchdog.beat("the summary", cli.watchdog > 0 ? halox::apps::kSetupSeconds : 0);
  if (!cli.trace.empty()) trace::write(MPI_COMM_WORLD, cli.trace);
  const auto last = lbm.totals();
  // The same sums on every rank: all stop together, with a non-zero exit.
  for (int k = 0; k < 4; ++k) {
    if (!std::isfinite(last[k])) {
      throw Error("halox-lbm: the fluid's totals became non-finite after " +
                  std::to_string(cli.steps) + " steps (mass " + std::to_string(last[0]) +
                  ", kinetic energy " + std::to_string(last[3]) +
                  "): the run diverged; raise --tau or lower --velocity");
    }
  }
  // overlap: one span, the whole run (its steps do not wait for the GPU one by one).
  double worst[2] = {0, 0},
         mine[2] = {lbm.time_exchange(), cli.comm == "overlap" ? seconds : lbm.time_compute()};
  halox::apps::reduce(mine, worst, 2, MPI_DOUBLE, MPI_MAX, "the summary's timings");
  const double mlups = timed > 0 ? cells * double(timed) / seconds / 1e6 : 0;
  // The update kernels alone (the slowest rank's compute phases; not for overlap, whose one
  // span holds the exchange too): the rate if the exchange were free.
  const double compute_mlups = cli.comm != "overlap" && timed > 0 && worst[1] > 0
                                   ? cells * double(timed) / worst[1] / 1e6
                                   : 0;
  // The bandwidth bound: bytes each cell update moves (counted below) against the copy
  // ceiling measured now. BGK: 19 populations read + written. Multiphase (two passes): the
  // phi pass reads g (7) and writes phi (1); the fused stream-collide pass reads and writes
  // f (19) and g (7) and reads phi (1, its neighbours come from cache): 61 values.
  const double real_bytes = lbm.backend().real() == BasicKind::float32 ? 4 : 8;
  const double cell_bytes = (cli.model == "bgk" ? 38 : 61) * real_bytes;
  // The whole run's bound: every process copies at once and their rates add up. Processes
  // sharing a GPU (two under MPS, each held to half of it) then get their shares of it, and
  // several GPUs add theirs; one process's ceiling alone was half a shared GPU's, which made
  // two processes on one GPU run at "130% of the bound".
  int processes = 1;
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &processes));
  halox::apps::barrier("the barrier before the copy ceiling");
  const double my_ceiling = lbm.backend().copy_ceiling_gbs();
  double ceiling = 0;
  halox::apps::allreduce(&my_ceiling, &ceiling, 1, MPI_DOUBLE, MPI_SUM, "the copy ceilings' sum");
  const double bound = ceiling > 0 ? ceiling * 1e9 / cell_bytes / 1e6 : 0;
  int rc = 0;
  std::string checks;
  // Taylor-Green: the velocity amplitude (square root of the kinetic energy) decays as
  // exp(-nu (kx^2 + ky^2) t).
  double tg_error = 0;
  if (cli.init == "taylor-green") {
    const double nu = (cli.params.tau - 0.5) / 3.0;
    const double k2 = std::pow(2 * M_PI / cli.grid[0], 2) + std::pow(2 * M_PI / cli.grid[1], 2);
    const double want = std::exp(-nu * k2 * cli.steps), got = std::sqrt(last[3] / first[3]);
    tg_error = std::abs(got - want) / want;
    checks += "Taylor-Green velocity amplitude after " + std::to_string(cli.steps) +
              " steps: " + std::to_string(got) + " vs analytic " + std::to_string(want) +
              ", relative error " + std::to_string(tg_error);
    if (cli.check_taylor_green && !(tg_error < 0.01)) rc = 1;  // named below
  }
  double mass_error = 0;
  for (int k = 0; k < 3; ++k) {
    if (k > 0 && cli.model != "multiphase") continue;
    mass_error = std::max(mass_error, std::abs(last[k] - first[k]) / std::abs(first[k]));
  }
  // Float populations lose mass systematically to the collision's rounding, about a tenth of
  // an epsilon per step (measured: 2.0e-7 after 10 steps, 3.6e-6 after 200 on 24^3); double
  // ones only to the sums' rounding (1e-14). One cell's population lost in a halo is 1e-5
  // of a 24^3 lattice's mass in float; the float tolerance stays below it for short runs.
  const bool single = lbm.backend().real() == BasicKind::float32;
  const double mass_tolerance =
      single ? 2 * std::numeric_limits<float>::epsilon() * (8.0 + cli.steps) : 1e-10;
  std::string failed;
  if (cli.check_mass && !(mass_error < mass_tolerance)) {
    rc = 1;
    char text[200];
    std::snprintf(text, sizeof text,
                  "--check-mass: the mass changed by %.3e, more than the tolerance %.3e (%s)",
                  mass_error, mass_tolerance,
                  single ? "float: 2 epsilon x (8 + steps)" : "double: 1e-10");
    failed = text;
  }
  if (cli.check_taylor_green && cli.init == "taylor-green" && !(tg_error < 0.01)) {
    failed += std::string(failed.empty() ? "" : "; ") + "--check-taylor-green: relative error " +
              std::to_string(tg_error) + ", more than 0.01";
  }
  // Collective: every rank takes part, only rank 0 receives the fields.
  const bool gathered = !cli.dump.empty() || !cli.slice.empty() || cli.init == "droplet";
  std::vector<double> fields;
  if (gathered) fields = lbm.gather();
  if (rank == 0) {
    std::printf(
        "\n%d steps (after %d untimed) in %.3f s: %.1f MLUPS; exchange %.1f%% of the step "
        "(slowest rank: exchange %.3f s, compute %.3f s)\n",
        timed, cli.warmup, seconds, mlups, 100 * worst[0] / std::max(1e-12, worst[0] + worst[1]),
        worst[0], worst[1]);
    if (bound > 0) {
      std::printf(
          "bandwidth bound: %.0f bytes per cell update, copy ceiling %.0f GB/s (measured now%s) "
          "-> %.0f MLUPS; this run: %.1f%% of it\n",
          cell_bytes, ceiling, processes > 1 ? ", every process copying at once" : "", bound,
          100 * mlups / bound);
    }
    if (compute_mlups > 0) {
      std::printf("update kernels alone: %.1f MLUPS", compute_mlups);
      if (bound > 0) std::printf(" (%.1f%% of the bound)", 100 * compute_mlups / bound);
      std::printf("\n");
    }
    std::printf("conservation: fluid mass %.3e, phase A %.3e, phase B %.3e (relative change)\n",
                std::abs(last[0] - first[0]) / first[0],
                cli.model == "multiphase" ? std::abs(last[1] - first[1]) / first[1] : 0.0,
                cli.model == "multiphase" ? std::abs(last[2] - first[2]) / first[2] : 0.0);
    if (!checks.empty()) std::printf("%s\n", checks.c_str());
    if (rc) std::printf("CHECK FAILED: %s\n", failed.c_str());
  }
  if (cli.init == "droplet") {
    // Laplace: the pressure jump c_s^2 (rho_in - rho_out) between the centre and a corner.
    const auto& m = fields;
    if (rank == 0) {
      auto at = [&](int x, int y, int z) {
        return m[5 * ((static_cast<std::size_t>(z) * cli.grid[1] + y) * cli.grid[0] + x)];
      };
      const int cx = cli.grid[0] / 2, cy = cli.grid[1] / 2, cz = cli.grid[2] / 2;
      const double inside = at(cx, cy, cz), outside = at(0, 0, 0);
      const double dp = (inside - outside) / 3.0;
      std::printf(
          "droplet radius %.2f: pressure jump %.6e (rho %.8f inside, %.8f outside); dp * R = "
          "%.6e\n",
          cli.radius, dp, inside, outside, dp * cli.radius);
      if (!cli.json.empty()) {
        char text[64];
        std::snprintf(text, sizeof text, "%.17g\n", dp);
        halox::apps::write_file("halox-lbm", cli.json + ".droplet", text);
      }
    }
  }
  if (rank == 0 && !cli.dump.empty()) {
    halox::apps::write_file(
        "halox-lbm", cli.dump,
        std::string(reinterpret_cast<const char*>(fields.data()), fields.size() * sizeof(double)));
  }
  if (rank == 0 && !cli.slice.empty()) {
    std::string image =
        "P5\n" + std::to_string(cli.grid[0]) + " " + std::to_string(cli.grid[1]) + "\n255\n";
    const int z = cli.grid[2] / 2;
    double lo = 1e300, hi = -1e300;
    const int channel = cli.model == "multiphase" ? 4 : 1;
    for (int y = 0; y < cli.grid[1]; ++y)
      for (int x = 0; x < cli.grid[0]; ++x) {
        const double v =
            fields[5 * ((static_cast<std::size_t>(z) * cli.grid[1] + y) * cli.grid[0] + x) +
                   channel];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    for (int y = 0; y < cli.grid[1]; ++y)
      for (int x = 0; x < cli.grid[0]; ++x) {
        const double v =
            fields[5 * ((static_cast<std::size_t>(z) * cli.grid[1] + y) * cli.grid[0] + x) +
                   channel];
        image += static_cast<char>(hi > lo ? 255.0 * (v - lo) / (hi - lo) : 0);
      }
    halox::apps::write_file("halox-lbm", cli.slice, image);
    std::printf("wrote %s (mid-z slice of %s)\n", cli.slice.c_str(), channel == 4 ? "phi" : "u_x");
  }
  if (rank == 0 && !cli.json.empty()) {
    const std::string fg_exchange = lbm.fg_exchange();
    halox::apps::Json j;
    j["app"] = "halox-lbm";
    j["model"] = cli.model;
    j["init"] = cli.init;
    j["grid"] = cli.grid;
    j["ranks"] = lbm.topology().describe();
    j["backend"] = lbm.backend().name();
    j["variant"] = cli.comm;
    j["transport"] = lbm.transport();
    j["self_halo"] = cli.self_halo;
    j["fg_exchange"] = fg_exchange;
    j["wrapped_axes"] = wrapped;
    j["steps"] = cli.steps;
    j["warmup_steps"] = cli.warmup;
    j["timed_steps"] = timed;
    j["seconds"] = seconds;
    j["mlups"] = mlups;
    j["exchange_seconds"] = worst[0];
    j["compute_seconds"] = worst[1];
    const halox::apps::Json unmeasured = nullptr;  // null, not 0, for what this run did not measure
    j["compute_mlups"] = compute_mlups > 0 ? halox::apps::Json(compute_mlups) : unmeasured;
    j["bytes_per_cell"] =
        double(lbm.backend().bytes()) / (double(lbm.local()[0]) * lbm.local()[1] * lbm.local()[2]);
    j["bytes_per_cell_update"] = cell_bytes;
    j["copy_ceiling_gbs"] = ceiling > 0 ? halox::apps::Json(ceiling) : unmeasured;
    j["bound_mlups"] = bound > 0 ? halox::apps::Json(bound) : unmeasured;
    j["fraction_of_bound"] = bound > 0 ? halox::apps::Json(mlups / bound) : unmeasured;
    j["mass_change"] = mass_error;
    j["mass_tolerance"] = mass_tolerance;
    j["taylor_green_error"] = cli.init == "taylor-green" ? halox::apps::Json(tg_error) : unmeasured;
    halox::apps::write_json("halox-lbm", cli.json, j);
  }
  return rc;
}

}  // namespace halox::lbm
