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

// The step (forward + reverse) captured in a CUDA graph and its replays timed (one GPU).
template <class Time>
double graph_step_us(ParticleExchange& exchange, const std::vector<void*>& x,
                     const std::vector<void*>& f, const std::vector<cudaStream_t>& streams,
                     Time&& time) {
  cudaStream_t stream = streams[0];
  cudaGraph_t graph = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  exchange.forward_async(x, stream);
  exchange.reverse_async(f, stream);
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const double us = time([&] { BENCH_CUDA(cudaGraphLaunch(exec, stream)); });
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

int local_halo_main(int argc, char** argv) {
  std::vector<std::string> grids = {"2x2x2", "3x3x3"};
  long atoms = 32000;
  double density = 0.8442, cutoff = 2.5, skin = 0.3;
  std::string json, trace_file;
  int gpus = 1;
  std::vector<bool> direct_modes = {true, false};  // ExchangeOptions::testing.direct_in_launch
  std::vector<TransportKind> kernel_kinds = {TransportKind::local_pulse,
                                             TransportKind::local_fused};
  std::vector<std::string> in_launch = {"direct", "staged"}, kernels = {"per_pulse", "all_pulses"};
  int atom_count = static_cast<int>(atoms);
  halox::apps::CommandLine line(
      "halox-bench halo-local",
      "LJ atoms (fcc, density 0.8442, halo distance cutoff 2.5 + skin 0.3) split over R ranks\n"
      "in one process on one GPU (or spread over --gpus GPUs, consecutive ranks sharing one);\n"
      "forward + reverse halo per step through ParticleExchange over Ranks::local (per_pulse:\n"
      "local-pulse, all_pulses: local-fused) vs one empty kernel launch.");
  line.list("--ranks", grids, "rank grids, one case each");
  line.count("--atoms", atom_count, "atoms in all", 1);
  line.count("--gpus", gpus, "GPUs the ranks are spread over", 1);
  line.list("--in-launch", in_launch,
            "between ranks of one launch: direct stores into the peers' arrays and/or staging "
            "with a signal and a wait per pulse (as between processes)")
      ->check(CLI::IsMember({"direct", "staged"}));
  line.list("--kernels", kernels, "kernel designs")
      ->check(CLI::IsMember({"per_pulse", "all_pulses"}));
  line.output("--json", json, "also write the rows as JSON");
  line.output("--trace", trace_file, "Chrome trace of the first case");
  line.parse(argc, argv);
  atoms = atom_count;
  direct_modes.clear();
  for (const std::string& mode : in_launch) direct_modes.push_back(mode == "direct");
  kernel_kinds.clear();
  for (const std::string& kind : kernels) {
    kernel_kinds.push_back(kind == "all_pulses" ? TransportKind::local_fused
                                                : TransportKind::local_pulse);
  }
  const int visible = visible_gpus();
  if (gpus < 1 || gpus > visible) {
    throw Error("halox-bench halo-local: --gpus " + std::to_string(gpus) + ", but " +
                std::to_string(visible) + " GPU(s) are visible");
  }
  // One stream per GPU; GPU 0's is the one the empty launch is timed on.
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (int d = 0; d < gpus; ++d) {
    BENCH_CUDA(cudaSetDevice(d));
    cudaStream_t s = nullptr;
    BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    devices.push_back(d);
    streams.push_back(s);
  }
  BENCH_CUDA(cudaSetDevice(0));
  cudaStream_t stream = streams[0];
  const double launch = empty_launch_us(), graph_launch = empty_graph_launch_us();
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "halox-bench halo-local: %d x %s, %s; one empty kernel launch: %.2f us, a CUDA graph of "
      "one: %.2f us\n",
      gpus, prop.name, today().c_str(), launch, graph_launch);
  // graph us: the step (forward + reverse) captured in a CUDA graph, its replays queued (one
  // GPU only).
  std::printf("%-8s %8s %10s %10s %-11s %-9s %9s %10s %10s %10s %10s %8s %9s\n", "ranks", "atoms",
              "atoms/rk", "halo/rk", "kernels", "in launch", "launches", "fwd us", "rev us",
              "step us", "graph us", "x launch", "q/launch");
  std::vector<Row> rows;
  for (const auto& grid : grids) {
    const Topology topology(parse_dims(grid), {true, true, true}, 0);
    Box box;
    long total_atoms = 0;
    std::vector<std::vector<double>> xyz =
        lattice_by_rank(topology, atoms, density, box, total_atoms);
    std::vector<ParticlePlan> plans = build_local_particle_plans(topology, box, cutoff + skin, xyz);
    long halo = 0;
    for (const auto& p : plans) halo += p.total_count - p.home_count;
    const std::vector<int> device_of = Ranks::spread_over_gpus(topology.size(), gpus);
    std::vector<void*> x(topology.size()), f(topology.size());
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
    auto time = [&](auto&& f) { return median_over_gpus_us(devices, streams, 11, 100, f); };
    for (std::size_t m = 0; m < direct_modes.size(); ++m)
      for (TransportKind kernels : kernel_kinds) {
        const bool direct = direct_modes[m];
        ExchangeOptions options;
        options.transport = kernels;
        options.testing.direct_in_launch = direct;
        ParticleExchange exchange(Ranks::local(topology, device_of), plans, BasicKind::float32,
                                  options);
        const double fwd = time([&] { exchange.forward_async(x, streams); });
        const double rev = time([&] { exchange.reverse_async(f, streams); });
        const double step = time([&] {
          exchange.forward_async(x, streams);
          exchange.reverse_async(f, streams);
        });
        // 0: not measured (several GPUs)
        const double graphed = gpus == 1 ? graph_step_us(exchange, x, f, streams, time) : 0.0;
        exchange.check();
        const char* name = kernels == TransportKind::local_fused ? "all_pulses" : "per_pulse";
        if (!trace_file.empty() && kernels == TransportKind::local_fused && grid == grids.front() &&
            m == 0) {
          // Tracing overhead in the same run, then one traced step into the file.
          trace::enable();
          const double traced = time([&] {
            exchange.forward_async(x, streams);
            exchange.reverse_async(f, streams);
          });
          for (auto s : streams) BENCH_CUDA(cudaStreamSynchronize(s));
          trace::clear();
          exchange.forward_async(x, streams);
          exchange.reverse_async(f, streams);
          trace::write(trace_file);
          trace::disable();
          std::printf("tracing: step %.2f us with the log on vs %.2f us off (%+.1f%%); wrote %s\n",
                      traced, step, 100 * (traced / step - 1), trace_file.c_str());
        }
        // q/launch: one exchange (the mean of forward and reverse, each queued 100 times back
        // to back, as the empty launch is timed) over that launch.
        const double queued = (fwd + rev) / 2;
        const char* in_launch = direct ? "direct" : "staged";
        char graph_cell[32] = "-";
        if (graphed > 0) std::snprintf(graph_cell, sizeof graph_cell, "%.2f", graphed);
        std::printf("%-8s %8ld %10ld %10ld %-11s %-9s %9d %10.2f %10.2f %10.2f %10s %8.2f %9.2f\n",
                    grid.c_str(), total_atoms, total_atoms / topology.size(),
                    halo / topology.size(), name, in_launch, 2 * exchange.launches_per_exchange(),
                    fwd, rev, step, graph_cell, step / launch, queued / launch);
        rows.push_back(Row()
                           .set("ranks", grid)
                           .set("kernels", name)
                           .set("in_launch", in_launch)
                           .set("gpus", double(gpus))
                           .set("atoms", double(total_atoms))
                           .set("halo_atoms_per_rank", double(halo) / topology.size())
                           .set("launches_per_step", 2.0 * exchange.launches_per_exchange())
                           .set("forward_us", fwd)
                           .set("reverse_us", rev)
                           .set("step_us", step)
                           .set("empty_launch_us", launch)
                           .set("graph_step_us", graphed)
                           .set("empty_graph_launch_us", graph_launch)
                           .set("step_over_launch", step / launch)
                           .set("queued_over_launch", queued / launch));
      }
    for (int r = 0; r < topology.size(); ++r) {
      cudaFree(x[r]);
      cudaFree(f[r]);
    }
  }
  if (!json.empty()) {
    write_json(json, "halo-local", {{"gpu", prop.name}, {"host", host_name()}}, rows);
    std::printf("\nwrote %s\n", json.c_str());
  }
  for (auto s : streams) cudaStreamDestroy(s);
  return 0;
}

}  // namespace halox::bench
