// halox-bench halo-local: the MD particle halo of R ranks in one process (the local engine)
// on one GPU or spread over several, coordinates forward + forces reverse per step, against
// one empty kernel launch measured in the same run.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "halox/error.hpp"
#include "halox/device.hpp"
#include "halox/exchange.hpp"
#include "halox/trace.hpp"
#include "cuda_timing.cuh"
#include "../apps/common/cli.hpp"
#include "report.hpp"

namespace halox::bench {

namespace {

__global__ void empty_kernel() {}

// median_event_us over several GPUs, one stream each: every GPU starts after an event on the
// first and the first waits for the others' ends, so the time is that of the slowest GPU.
template <class F>
double median_over_gpus_us(const std::vector<int>& devices,
                           const std::vector<cudaStream_t>& streams, int reps, int inner, F&& f) {
  if (streams.size() == 1) return median_event_us(streams[0], reps, inner, f);
  std::vector<cudaEvent_t> marks(streams.size());  // on each stream's own GPU
  for (std::size_t k = 0; k < streams.size(); ++k) {
    BENCH_CUDA(cudaSetDevice(devices[k]));
    BENCH_CUDA(cudaEventCreateWithFlags(&marks[k], cudaEventDisableTiming));
  }
  BENCH_CUDA(cudaSetDevice(devices[0]));
  const double t = median_event_us(streams[0], reps, 1, [&] {
    BENCH_CUDA(cudaEventRecord(marks[0], streams[0]));
    for (std::size_t k = 1; k < streams.size(); ++k) cudaStreamWaitEvent(streams[k], marks[0]);
    for (int i = 0; i < inner; ++i) f();
    for (std::size_t k = 1; k < streams.size(); ++k) {
      BENCH_CUDA(cudaEventRecord(marks[k], streams[k]));
      BENCH_CUDA(cudaStreamWaitEvent(streams[0], marks[k]));
    }
  });
  for (auto e : marks) cudaEventDestroy(e);
  return t / inner;
}

// The atoms of an fcc lattice of about `atoms` atoms (density `density`, small random
// displacements, a fixed seed), each with the rank whose domain holds it (domain_of's rule);
// the box and the atom count out.
std::vector<std::vector<double>> lattice_by_rank(const Topology& topology, long atoms,
                                                 double density, Box& box_out, long& total) {
  // An fcc lattice with small random displacements, cells chosen for ~`atoms` atoms.
  const int cells = std::max(4, static_cast<int>(std::lround(std::cbrt(atoms / 4.0))));
  const double a = std::cbrt(4.0 / density), length = cells * a;
  const Box box{{length, length, length}};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(-0.02 * a, 0.02 * a);
  std::vector<std::vector<double>> xyz(topology.size());
  const double basis[4][3] = {{0, 0, 0}, {0.5, 0.5, 0}, {0.5, 0, 0.5}, {0, 0.5, 0.5}};
  for (int k = 0; k < cells; ++k)
    for (int j = 0; j < cells; ++j)
      for (int i = 0; i < cells; ++i)
        for (const auto& b : basis) {
          double p[3] = {(i + b[0]) * a, (j + b[1]) * a, (k + b[2]) * a};
          std::array<int, 3> c{};
          for (int d = 0; d < 3; ++d) {
            p[d] = std::fmod(p[d] + jitter(rng) + length, length);
            c[d] = std::min(topology.dims()[d] - 1,
                            static_cast<int>(p[d] / (length / topology.dims()[d])));
          }
          // Owner by the same rule as domain_of.
          int owner = topology.rank_of(c);
          const Domain d = domain_of(topology, box, owner);
          for (int e = 0; e < 3; ++e) {
            if (p[e] < d.lo[e])
              --c[e];
            else if (p[e] >= d.hi[e])
              ++c[e];
          }
          owner = topology.rank_of(c);
          xyz[owner].insert(xyz[owner].end(), p, p + 3);
        }
  box_out = box;
  total = 4L * cells * cells * cells;
  return xyz;
}

// `steps` steps (forward + reverse) captured in one CUDA graph and its replays timed, per
// step (one GPU). One step per graph pays a graph boundary per step; an application's graph
// holds many (halox-md --graph: the steps between searches), which ten stand for.
template <class Time>
double graph_step_us(ParticleExchange& exchange, const std::vector<void*>& x,
                     const std::vector<void*>& f, const std::vector<cudaStream_t>& streams,
                     int steps, Time&& time) {
  cudaStream_t stream = streams[0];
  cudaGraph_t graph = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int s = 0; s < steps; ++s) {
    exchange.forward_async(x, stream);
    exchange.reverse_async(f, stream);
  }
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const double us = time([&] { BENCH_CUDA(cudaGraphLaunch(exec, stream)); }) / steps;
  BENCH_CUDA(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return us;
}

}  // namespace

// The launch of a CUDA graph of one empty kernel: what a replayed step pays beside its work.
double empty_graph_launch_us() {
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  empty_kernel<<<1, 32, 0, stream>>>();
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const double t = median_event_us(stream, 21, 200, [&] { cudaGraphLaunch(exec, stream); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return t;
}

double empty_launch_us() {
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double t = median_event_us(stream, 21, 200, [&] { empty_kernel<<<1, 32, 0, stream>>>(); });
  cudaStreamDestroy(stream);
  return t;
}

namespace {

struct LocalHaloRun {
  std::vector<std::string> grids = {"2x2x2", "3x3x3"};
  long atoms = 32000;
  int gpus = 1;
  std::vector<bool> direct_modes;           // ExchangeOptions::testing.direct_in_launch
  std::vector<TransportKind> kernel_kinds;  // local-pulse (per_pulse), local-fused (all_pulses)
  std::string json, trace_file;
};

LocalHaloRun parse_local_halo(int argc, char** argv) {
  LocalHaloRun run;
  std::vector<std::string> in_launch = {"direct", "staged"}, kernels = {"per_pulse", "all_pulses"};
  int atom_count = static_cast<int>(run.atoms);
  halox::apps::CommandLine line(
      "halox-bench halo-local",
      "LJ atoms (fcc, density 0.8442, halo distance cutoff 2.5 + skin 0.3) split over R ranks\n"
      "in one process on one GPU (or spread over --gpus GPUs, consecutive ranks sharing one);\n"
      "forward + reverse halo per step through ParticleExchange over Ranks::local (per_pulse:\n"
      "local-pulse, all_pulses: local-fused) vs one empty kernel launch.");
  line.list("--ranks", run.grids, "rank grids, one case each");
  line.count("--atoms", atom_count, "atoms in all", 1);
  line.count("--gpus", run.gpus, "GPUs the ranks are spread over", 1);
  line.list("--in-launch", in_launch,
            "between ranks of one launch: direct stores into the peers' arrays and/or staging "
            "with a signal and a wait per pulse (as between processes)")
      ->check(CLI::IsMember({"direct", "staged"}));
  line.list("--kernels", kernels, "kernel designs")
      ->check(CLI::IsMember({"per_pulse", "all_pulses"}));
  line.output("--json", run.json, "also write the rows as JSON");
  line.output("--trace", run.trace_file, "Chrome trace of the first case");
  line.parse(argc, argv);
  run.atoms = atom_count;
  for (const std::string& mode : in_launch) run.direct_modes.push_back(mode == "direct");
  for (const std::string& kind : kernels) {
    run.kernel_kinds.push_back(kind == "all_pulses" ? TransportKind::local_fused
                                                    : TransportKind::local_pulse);
  }
  const int visible = visible_gpus();
  if (run.gpus < 1 || run.gpus > visible) {
    throw Error("halox-bench halo-local: --gpus " + std::to_string(run.gpus) + ", but " +
                std::to_string(visible) + " GPU(s) are visible");
  }
  return run;
}

// One rank grid's atoms on the GPUs: every rank's coordinates and forces (float32).
struct GridCase {
  std::string grid;
  Topology topology;
  long total_atoms = 0, halo = 0;
  std::vector<ParticlePlan> plans;
  std::vector<int> device_of;
  std::vector<void*> x, f;

  GridCase(const std::string& name, long atoms, int gpus, const std::vector<int>& devices)
      : grid(name), topology(parse_dims(name), {true, true, true}, 0) {
    const double density = 0.8442, cutoff = 2.5, skin = 0.3;
    Box box;
    std::vector<std::vector<double>> xyz =
        lattice_by_rank(topology, atoms, density, box, total_atoms);
    plans = build_local_particle_plans(topology, box, cutoff + skin, xyz);
    for (const auto& p : plans) halo += p.total_count - p.home_count;
    device_of = Ranks::spread_over_gpus(topology.size(), gpus);
    x.resize(topology.size());
    f.resize(topology.size());
    for (int r = 0; r < topology.size(); ++r) {
      BENCH_CUDA(cudaSetDevice(device_of[r]));
      std::vector<float> h(xyz[r].begin(), xyz[r].end());
      BENCH_CUDA(cudaMalloc(&x[r], std::max<std::size_t>(1, h.size()) * 4));
      BENCH_CUDA(cudaMalloc(&f[r], std::max<std::size_t>(1, h.size()) * 4));
      BENCH_CUDA(cudaMemcpy(x[r], h.data(), h.size() * 4, cudaMemcpyHostToDevice));
      BENCH_CUDA(cudaMemset(f[r], 0, h.size() * 4));
    }
    // The default stream's copies land before the ranks' non-blocking streams read them.
    for (int d : devices) {
      BENCH_CUDA(cudaSetDevice(d));
      BENCH_CUDA(cudaDeviceSynchronize());
    }
    BENCH_CUDA(cudaSetDevice(0));
  }
  ~GridCase() {
    for (int r = 0; r < topology.size(); ++r) {
      cudaFree(x[r]);
      cudaFree(f[r]);
    }
  }
  GridCase(const GridCase&) = delete;
  GridCase& operator=(const GridCase&) = delete;
};

// Tracing's overhead in the same run, then one traced step into the file.
template <class Time>
void trace_one_step(ParticleExchange& exchange, const GridCase& c,
                    const std::vector<cudaStream_t>& streams, double step, Time&& time,
                    const std::string& trace_file) {
  trace::enable();
  const double traced = time([&] {
    exchange.forward_async(c.x, streams);
    exchange.reverse_async(c.f, streams);
  });
  for (auto s : streams) BENCH_CUDA(cudaStreamSynchronize(s));
  trace::clear();
  exchange.forward_async(c.x, streams);
  exchange.reverse_async(c.f, streams);
  trace::write(trace_file);
  trace::disable();
  std::printf("tracing: step %.2f us with the log on vs %.2f us off (%+.1f%%); wrote %s\n", traced,
              step, 100 * (traced / step - 1), trace_file.c_str());
}

// One case (a grid, a kernel design, direct or staged in a launch): its line and JSON row.
Row time_case(const GridCase& c, TransportKind kernels, bool direct, const LocalHaloRun& run,
              const std::vector<int>& devices, const std::vector<cudaStream_t>& streams,
              double launch, double graph_launch, bool traced_case) {
  auto time = [&](auto&& f) { return median_over_gpus_us(devices, streams, 11, 100, f); };
  ExchangeOptions options;
  options.transport = kernels;
  options.testing.direct_in_launch = direct;
  ParticleExchange exchange(Ranks::local(c.topology, c.device_of), c.plans, BasicKind::float32,
                            options);
  const double fwd = time([&] { exchange.forward_async(c.x, streams); });
  const double rev = time([&] { exchange.reverse_async(c.f, streams); });
  const double step = time([&] {
    exchange.forward_async(c.x, streams);
    exchange.reverse_async(c.f, streams);
  });
  // 0: not measured (several GPUs)
  const double graphed = run.gpus == 1 ? graph_step_us(exchange, c.x, c.f, streams, 1, time) : 0.0;
  const double graphed10 =
      run.gpus == 1 ? graph_step_us(exchange, c.x, c.f, streams, 10, time) : 0.0;
  exchange.check();
  const char* name = kernels == TransportKind::local_fused ? "all_pulses" : "per_pulse";
  if (traced_case) trace_one_step(exchange, c, streams, step, time, run.trace_file);
  // q/launch: one exchange (the mean of forward and reverse, each queued 100 times back to
  // back, as the empty launch is timed) over that launch.
  const double queued = (fwd + rev) / 2;
  const char* in_launch = direct ? "direct" : "staged";
  char graph_cell[32] = "-", graph10_cell[32] = "-";
  if (graphed > 0) std::snprintf(graph_cell, sizeof graph_cell, "%.2f", graphed);
  if (graphed10 > 0) std::snprintf(graph10_cell, sizeof graph10_cell, "%.2f", graphed10);
  const int ranks = c.topology.size();
  std::printf("%-8s %8ld %10ld %10ld %-11s %-9s %9d %10.2f %10.2f %10.2f %10s %10s %8.2f %9.2f\n",
              c.grid.c_str(), c.total_atoms, c.total_atoms / ranks, c.halo / ranks, name, in_launch,
              2 * exchange.launches_per_exchange(), fwd, rev, step, graph_cell, graph10_cell,
              step / launch, queued / launch);
  return Row()
      .set("ranks", c.grid)
      .set("kernels", name)
      .set("in_launch", in_launch)
      .set("gpus", double(run.gpus))
      .set("atoms", double(c.total_atoms))
      .set("halo_atoms_per_rank", double(c.halo) / ranks)
      .set("launches_per_step", 2.0 * exchange.launches_per_exchange())
      .set("forward_us", fwd)
      .set("reverse_us", rev)
      .set("step_us", step)
      .set("empty_launch_us", launch)
      .set("graph_step_us", graphed)
      .set("graph_of_ten_step_us", graphed10)
      .set("empty_graph_launch_us", graph_launch)
      .set("step_over_launch", step / launch)
      .set("queued_over_launch", queued / launch);
}

}  // namespace

int local_halo_main(int argc, char** argv) {
  const LocalHaloRun run = parse_local_halo(argc, argv);
  // One stream per GPU; GPU 0's is the one the empty launch is timed on.
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (int d = 0; d < run.gpus; ++d) {
    BENCH_CUDA(cudaSetDevice(d));
    cudaStream_t s = nullptr;
    BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    devices.push_back(d);
    streams.push_back(s);
  }
  BENCH_CUDA(cudaSetDevice(0));
  const double launch = empty_launch_us(), graph_launch = empty_graph_launch_us();
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "halox-bench halo-local: %d x %s, %s; one empty kernel launch: %.2f us, a CUDA graph of "
      "one: %.2f us\n",
      run.gpus, prop.name, today().c_str(), launch, graph_launch);
  // graph us: the step (forward + reverse) captured in a CUDA graph, its replays queued;
  // graph/10 us: ten steps in one graph, per step (one GPU only).
  std::printf("%-8s %8s %10s %10s %-11s %-9s %9s %10s %10s %10s %10s %10s %8s %9s\n", "ranks",
              "atoms", "atoms/rk", "halo/rk", "kernels", "in launch", "launches", "fwd us",
              "rev us", "step us", "graph us", "graph/10 us", "x launch", "q/launch");
  std::vector<Row> rows;
  for (const auto& grid : run.grids) {
    const GridCase c(grid, run.atoms, run.gpus, devices);
    for (std::size_t m = 0; m < run.direct_modes.size(); ++m)
      for (TransportKind kernels : run.kernel_kinds) {
        const bool traced = !run.trace_file.empty() && kernels == TransportKind::local_fused &&
                            grid == run.grids.front() && m == 0;
        rows.push_back(time_case(c, kernels, run.direct_modes[m], run, devices, streams, launch,
                                 graph_launch, traced));
      }
  }
  if (!run.json.empty()) {
    write_json(run.json, "halo-local", {{"gpu", prop.name}, {"host", host_name()}}, rows);
    std::printf("\nwrote %s\n", run.json.c_str());
  }
  for (auto s : streams) cudaStreamDestroy(s);
  return 0;
}

}  // namespace halox::bench
