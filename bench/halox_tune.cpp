// halox-tune: sweeps the pipelined transport's chunk size (4 KiB .. 1 MiB) on this machine,
// fits seed 002's model T(N) = (N/n + 2) * T_block(n) with T_block(n) = a + n / B, and writes
// the best chunk to the tuning file the pipelined transport reads; then the crossovers the
// automatic choice uses: staged vs pipelined, and (NVSHMEM built in) the fused kernel's
// direct stores vs NVSHMEM's copy-engine puts between the two ranks.
//
//   mpiexec -n 2 halox-tune [--message BYTES] [--reps R] [--dry-run]
#include <cuda_runtime.h>

#include "../apps/common/cuda_check.hpp"
#define BENCH_CUDA(call) HALOX_APP_CUDA("halox-bench: ", call)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "halox/mpi.hpp"
#include "halox/tuning.hpp"
#include "../apps/common/cli.hpp"
#include "../apps/common/mpi_main.hpp"
#include "report.hpp"

namespace {

using namespace halox;

struct Point {
  std::int64_t chunk;
  double seconds;
};

// Two transports' times for one message size.
struct Race {
  std::int64_t bytes;
  double first, second;
};

// Seed 002's model fitted to the sweep: T_block(n) = latency + slope n, by least squares of
// T_block(n) = T / (N/n + 2) against n; the model's optimum d/dn [(N/n + 2)(a + n/B)] = 0
// -> n* = sqrt(N a B / 2).
struct Fit {
  double slope = 0, latency = 0, bandwidth = 0, n_star = 0;
};

Fit fit_block_time(const std::vector<Point>& points, std::int64_t face) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& p : points) {
    const double blocks = std::ceil(double(face) / p.chunk);
    const double y = p.seconds / (blocks + 2), x = double(p.chunk);
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double m = double(points.size());
  Fit f;
  f.slope = (m * sxy - sx * sy) / (m * sxx - sx * sx);
  f.latency = (sy - f.slope * sx) / m;
  f.bandwidth = f.slope > 0 ? 1.0 / f.slope : 0;
  f.n_star =
      f.slope > 0 && f.latency > 0 ? std::sqrt(double(face) * f.latency * f.bandwidth / 2) : 0;
  return f;
}

// Exchanges of one z face each way between the two ranks (a field of nx floats per row),
// timed as the slowest rank sees them.
class Sweep {
 public:
  Sweep(const Topology& topology, std::int64_t nx, int reps, cudaStream_t stream)
      : m_topology(topology), m_nx(nx), m_reps(reps), m_stream(stream) {}

  /// The median over the reps (after 3 warm-up exchanges) of `kind` on `plan`'s field `data`.
  double measure(const GridPlan& plan, void* data, TransportKind kind, std::int64_t chunk) const {
    GridExchange exchange(m_topology, plan, ExchangeOptions{kind, chunk});
    std::vector<double> t;
    for (int r = 0; r < m_reps + 3; ++r) {
      HALOX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
      const auto start = std::chrono::steady_clock::now();
      exchange.exchange_async(data, m_stream);
      BENCH_CUDA(cudaStreamSynchronize(m_stream));
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double worst = 0;
      HALOX_MPI_CHECK(MPI_Allreduce(&s, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
      if (r >= 3) t.push_back(worst);
    }
    return bench::median(t);
  }

  /// Two transports over messages of 16 KiB..16 MiB: their times into `out`, and the
  /// smallest message from which the second beats the first (twice the largest if it never
  /// does within the sweep). The crossovers the automatic transport choice uses.
  std::int64_t race(TransportKind first, std::int64_t first_chunk, TransportKind second,
                    std::int64_t second_chunk, std::vector<Race>& out) const {
    std::int64_t from = 0;
    for (std::int64_t n = 16384; n <= (16 << 20); n *= 4) {
      const std::int64_t rows = std::max<std::int64_t>(1, n / (m_nx * 4));
      GridPlan sized =
          build_grid_plan(m_topology, {m_nx, rows, 2}, 1, Datatype::of<float>().commit());
      void* data = nullptr;
      const std::size_t data_bytes = static_cast<std::size_t>((m_nx + 2) * (rows + 2) * 4 * 4);
      if (cudaMalloc(&data, data_bytes) != cudaSuccess)
        throw Error("halox-tune: cudaMalloc failed");
      BENCH_CUDA(cudaMemset(data, 1, data_bytes));
      const Race r{m_nx * rows * 4, measure(sized, data, first, first_chunk),
                   measure(sized, data, second, second_chunk)};
      cudaFree(data);
      out.push_back(r);
      if (!from && r.second < r.first) from = r.bytes;
    }
    return from ? from : 2 * out.back().bytes;
  }

 private:
  const Topology& m_topology;
  std::int64_t m_nx;
  int m_reps;
  cudaStream_t m_stream;
};

void print_race(const char* first, const char* second, const std::vector<Race>& rows,
                const char* wins, std::int64_t from, const char* why) {
  std::printf("\n%12s %16s %18s\n", "message", first, second);
  for (const auto& r : rows) {
    std::printf("%12lld %16.1f %18.1f\n", static_cast<long long>(r.bytes), r.first * 1e6,
                r.second * 1e6);
  }
  std::printf("%s from %lld bytes (%s)\n", wins, static_cast<long long>(from), why);
}

void print_sweep(std::int64_t face, int reps, double staged, const std::vector<Point>& points,
                 const Fit& fit, const Point& best) {
  std::printf("halox-tune: %s, %s; message %lld bytes (one z face each way), %d reps\n",
              bench::host_name().c_str(), bench::today().c_str(), static_cast<long long>(face),
              reps);
  std::printf("staged (one block): %.1f us\n\n", staged * 1e6);
  std::printf("%10s %8s %12s %14s %14s\n", "chunk", "blocks", "T(N) us", "T_block us",
              "model T us");
  for (const auto& p : points) {
    const double blocks = std::ceil(double(face) / p.chunk);
    const double model = (blocks + 2) * (fit.latency + fit.slope * p.chunk);
    std::printf("%10lld %8.0f %12.1f %14.2f %14.1f%s\n", static_cast<long long>(p.chunk), blocks,
                p.seconds * 1e6, p.seconds / (blocks + 2) * 1e6, model * 1e6,
                p.chunk == best.chunk ? "  <- best" : "");
  }
  if (fit.slope > 0) {
    std::printf("\nfit: T_block(n) = %.2f us + n / (%.2f GB/s); model optimum n* = %.0f bytes\n",
                fit.latency * 1e6, fit.bandwidth / 1e9, fit.n_star);
  } else {
    std::printf(
        "\nfit: T_block(n) = %.2f us, no size term: the per-chunk cost dominates, so "
        "the largest chunk wins\n",
        fit.latency * 1e6);
  }
  std::printf("best measured chunk: %lld bytes (%.1f us, %.2fx staged)\n",
              static_cast<long long>(best.chunk), best.seconds * 1e6, staged / best.seconds);
}

// The tuning file's contents; `more` adds members (the direct-store crossover).
std::string tuning_json(const Point& best, std::int64_t pipelined_from, const std::string& more,
                        std::int64_t face, double staged, const Fit& fit,
                        const std::vector<Point>& points) {
  std::ostringstream json;
  json << "{\n  \"chunk_bytes\": " << best.chunk
       << ",\n  \"pipelined_from_bytes\": " << pipelined_from << more
       << ",\n  \"message_bytes\": " << face << ",\n  \"date\": \"" << bench::today()
       << "\",\n  \"host\": \"" << bench::host_name() << "\",\n  \"staged_us\": " << staged * 1e6
       << ",\n  \"fit\": {\"block_latency_us\": " << fit.latency * 1e6
       << ", \"block_gbps\": " << fit.bandwidth / 1e9 << ", \"model_optimum_bytes\": " << fit.n_star
       << "},\n  \"points\": [";
  for (std::size_t k = 0; k < points.size(); ++k) {
    json << (k ? ", " : "") << "{\"chunk\": " << points[k].chunk
         << ", \"us\": " << points[k].seconds * 1e6 << "}";
  }
  json << "]\n}\n";
  return json.str();
}

int tune(int argc, char** argv) {
  halox::select_device(MPI_COMM_WORLD);  // one GPU per rank on multi-GPU nodes
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  int message = 4 << 20, reps = 30;
  bool dry = false;
  halox::apps::CommandLine line(
      "halox-tune",
      "Measures one GPU-to-GPU message of --message bytes through the pipelined transport for\n"
      "chunk sizes 4 KiB..1 MiB, prints the fit of T(N) = (N/n + 2) T_block(n), and writes the\n"
      "fastest chunk size to the tuning file (" +
          tuning_file_path() +
          "), with the message sizes (16 KiB..16 MiB) from which pipelined beats staged and,\n"
          "with NVSHMEM, from which nvshmem-stream's copy-engine puts beat ipc-fused's direct\n"
          "stores (what auto uses). Run it as mpiexec -n 2 halox-tune [options].");
  line.count("--message", message, "message size in bytes", 4096);
  line.count("--reps", reps, "timed exchanges per chunk size, the median reported", 1);
  line.flag("--dry-run", dry, "print, do not write the tuning file");
  line.parse(argc, argv);
  if (size != 2) throw Error("halox-tune: run it on 2 ranks (mpiexec -n 2 halox-tune)");
  // A field whose z face is the message: two ranks along z, each sends one face.
  const std::int64_t nx = 1024, ny = std::max<std::int64_t>(1, message / (nx * 4));
  Topology topology = Topology::from_mpi(MPI_COMM_WORLD, {1, 1, 2}, {false, false, false});
  GridPlan plan = build_grid_plan(topology, {nx, ny, 2}, 1, Datatype::of<float>().commit());
  const std::int64_t bytes = (nx + 2) * (ny + 2) * 4 * 4;
  void* field = nullptr;
  if (cudaMalloc(&field, static_cast<std::size_t>(bytes)) != cudaSuccess ||
      cudaMemset(field, 1, static_cast<std::size_t>(bytes)) != cudaSuccess) {
    throw Error("halox-tune: cannot allocate the device field (is a GPU visible?)");
  }
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  const std::int64_t face = nx * ny * 4;
  const Sweep sweep(topology, nx, reps, stream);
  const double staged = sweep.measure(plan, field, TransportKind::staged, 0);
  std::vector<Point> points;
  for (std::int64_t n = 4096; n <= (1 << 20); n *= 2)
    points.push_back({n, sweep.measure(plan, field, TransportKind::pipelined, n)});
  const Fit fit = fit_block_time(points, face);
  const auto best =
      *std::min_element(points.begin(), points.end(),
                        [](const Point& a, const Point& b) { return a.seconds < b.seconds; });
  // The pipeline (best chunk) against the staged exchange.
  std::vector<Race> crossings;
  const std::int64_t pipelined_from =
      sweep.race(TransportKind::staged, 0, TransportKind::pipelined, best.chunk, crossings);
  if (rank == 0) {
    print_sweep(face, reps, staged, points, fit, best);
    print_race("staged us", "pipelined us", crossings, "pipelining wins", pipelined_from,
               "the automatic choice's threshold");
  }
  // Written now, and again with the direct-store crossover once it is measured: if that
  // sweep fails or hangs, the chunk and the pipelining crossover are kept.
  auto write = [&](const std::string& more) {
    if (rank != 0) return;
    const std::string json = tuning_json(best, pipelined_from, more, face, staged, fit, points);
    if (!dry) {
      write_tuning_file(json);
      std::printf("wrote %s\n", tuning_file_path().c_str());
    } else {
      std::printf("%s", json.c_str());
    }
  };
  write("");
  // Direct stores (ipc-fused) against copy-engine puts (nvshmem-stream), same sizes, after
  // the rest: once NVSHMEM is up its proxy thread would slow the MPI transports' figures.
  std::vector<Race> directs;
  const bool both = transport_available(TransportKind::ipc_fused) &&
                    transport_available(TransportKind::nvshmem_stream);
  // NVSHMEM starts at the first nvshmem-stream exchange with a heap sized from that (small)
  // one; the sweep's largest (16 MiB faces, send and receive areas) needs more, so the heap
  // is sized for it here (a value the user set wins).
  if (both) setenv("NVSHMEM_SYMMETRIC_SIZE", std::to_string(std::int64_t{256} << 20).c_str(), 0);
  const std::int64_t direct_until =
      both ? sweep.race(TransportKind::ipc_fused, 0, TransportKind::nvshmem_stream, 0, directs) : 0;
  if (rank != 0) return 0;
  if (both) {
    print_race("ipc-fused us", "nvshmem-stream us", directs, "copy-engine puts win", direct_until,
               "auto: direct stores below it");
    write(",\n  \"direct_until_bytes\": " + std::to_string(direct_until));
  } else {
    std::printf("\nno direct-store crossover: needs ipc-fused and nvshmem-stream (NVSHMEM)\n");
  }
  return 0;
}

}  // namespace

// Every error is reported as an input error is, once by rank 0 with exit code 2 (the
// measurements are collective and fail alike on every rank).
int tune_reporting_as_input(int argc, char** argv) {
  try {
    return tune(argc, argv);
  } catch (const halox::Error& e) {
    throw halox::apps::InputError(e.what());
  }
}

int main(int argc, char** argv) {
  return halox::apps::mpi_main("halox-tune", argc, argv, tune_reporting_as_input);
}
