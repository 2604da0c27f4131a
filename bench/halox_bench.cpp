// halox-bench: the benchmark driver. Every figure is printed with the ceiling it is
// measured against (measured in the same run) and the ratio to it.
//
//   halox-bench pack [--device cpu|gpu] [--n 256] [--reps 21] [--json FILE] [--quick]
//   mpiexec -n N halox-bench halo --app md [--transports ...] [--json FILE] [--quick]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "halox/config.hpp"
#if HALOX_HAS_MPI
#include <mpi.h>

#include "../apps/common/agree.hpp"
#include "../apps/common/mpi_main.hpp"
#include "halox/mpi.hpp"
#endif
#include "../apps/common/memory.hpp"
#include "halox/pack.hpp"
#include "pack_cases.hpp"
#include "../apps/common/cli.hpp"
#include "report.hpp"

#if HALOX_HAS_CUDA
#include "pack_gpu_bench.hpp"
#endif

namespace {

using namespace halox;
using namespace halox::bench;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string command, device = "cpu", json;
  std::int64_t n = 256;
  int reps = 21;
  bool quick = false;
};

Options parse(int argc, char** argv) {
  Options o;
  o.command = "pack";
  halox::apps::CommandLine line(
      "halox-bench pack",
      "Packs halo-shaped datatypes and reports GB/s against the copy ceiling measured in the\n"
      "same run. The other benchmarks: halox-bench halo --app md (mpiexec -n N), halo-local\n"
      "(ranks in one process), pingpong (mpiexec -n 2); each has its --help.");
  line.choice("--device", o.device, "where the data lives and the pack runs", {"cpu", "gpu"});
  int n = static_cast<int>(o.n);
  line.count("--n", n, "edge of the cubic array for the CPU faces", 8, 100000);
  line.count("--reps", o.reps, "timed repetitions, the median is reported", 1);
  line.flag("--quick", o.quick, "fewer shapes and repetitions (for smoke tests)");
  line.output("--json", o.json, "also write the results as JSON");
  try {
    line.parse(argc, argv);
  } catch (const halox::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(2);
  }
  o.n = n;
  try {  // the array, its faces and their packed copies: about three n^3 arrays of doubles
    const double n = static_cast<double>(o.n);
    halox::apps::require_memory("halox-bench pack: --n " + std::to_string(o.n),
                                3.0 * 8.0 * n * n * n);
  } catch (const halox::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(2);
  }
  if (o.quick) o.reps = std::min(o.reps, 5);
  return o;
}

template <class F>
double median_seconds(int reps, F&& f) {
  f();  // warm-up: page faults and caches
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(t);
}

int pack_cpu(const Options& o) {
  const std::int64_t n = o.quick ? std::min<std::int64_t>(o.n, 64) : o.n;
  std::printf("halox-bench pack --device cpu: %s, %s, %s\n", host_name().c_str(),
              cpu_model().c_str(), today().c_str());
  std::printf("GB/s counts bytes read + written; the ceiling is memcpy of the same bytes.\n\n");
  std::printf("%-34s %10s %10s %10s %10s %8s\n", "shape", "bytes", "time us", "GB/s", "memcpy GB/s",
              "of copy");
  std::vector<Row> rows;
  const auto cases = cpu_cases(n);
  std::vector<char> array(static_cast<std::size_t>(cases.front().array_bytes));
  for (std::size_t i = 0; i < array.size(); ++i) array[i] = static_cast<char>(i * 13 + 1);
  for (const auto& c : cases) {
    const std::int64_t bytes = packed_size(c.type, 1);
    std::vector<char> out(static_cast<std::size_t>(bytes)), copy_src(out.size(), 3),
        copy_dst(out.size());
    const double t_pack =
        median_seconds(o.reps, [&] { pack(array.data(), 1, c.type, out.data()); });
    const double t_copy = median_seconds(
        o.reps, [&] { std::memcpy(copy_dst.data(), copy_src.data(), copy_dst.size()); });
    const double gbs = 2.0 * static_cast<double>(bytes) / t_pack / 1e9;
    const double ceiling = 2.0 * static_cast<double>(bytes) / t_copy / 1e9;
    std::printf("%-34s %10lld %10.1f %10.2f %10.2f %8.3f\n", c.name.c_str(),
                static_cast<long long>(bytes), t_pack * 1e6, gbs, ceiling, gbs / ceiling);
    rows.push_back(Row()
                       .set("shape", c.name)
                       .set("canonical", c.type.canonical().describe())
                       .set("bytes", static_cast<double>(bytes))
                       .set("time_us", t_pack * 1e6)
                       .set("gbps", gbs)
                       .set("memcpy_gbps", ceiling)
                       .set("fraction_of_copy_ceiling", gbs / ceiling));  // as the GPU's
  }
  if (!o.json.empty()) {
    write_json(o.json, "pack --device cpu",
               {{"host", host_name()}, {"cpu", cpu_model()}, {"halox", HALOX_VERSION}}, rows);
    std::printf("\nwrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace

#if HALOX_HAS_MPI
namespace halox::bench {
int halo_main(int argc, char** argv);
int pingpong_main(int argc, char** argv);
}  // namespace halox::bench

// `halox-bench halo` and `pingpong` run under mpiexec; the other modes need no MPI.
int mpi_command(int (*command)(int, char**), int argc, char** argv) {
  halox::apps::init_mpi(argc, argv);
  halox::select_device(MPI_COMM_WORLD);  // one GPU per rank on multi-GPU nodes
  int rc = 0;
  try {
    rc = command(argc - 1, argv + 1);
  } catch (const halox::apps::InputError& e) {  // the same on every rank: said once
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::fprintf(stderr, "%s\n", e.what());
    MPI_Finalize();
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return rc;
}
#endif

#if HALOX_HAS_CUDA
namespace halox::bench {
int local_halo_main(int argc, char** argv);
}
#endif

int main(int argc, char** argv) {
#if HALOX_HAS_CUDA
  if (argc > 1 && std::string(argv[1]) == "halo-local") {
    try {
      return halox::bench::local_halo_main(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
  }
#endif
#if HALOX_HAS_MPI
  if (argc > 1 && std::string(argv[1]) == "halo") {
    return mpi_command(halox::bench::halo_main, argc, argv);
  }
#if HALOX_HAS_CUDA
  if (argc > 1 && std::string(argv[1]) == "pingpong") {
    return mpi_command(halox::bench::pingpong_main, argc, argv);
  }
#endif
#endif
  // "pack" is the default command, named or not.
  if (argc > 1 && std::string(argv[1]) == "pack") {
    argv[1] = argv[0];
    --argc;
    ++argv;
  }
  const Options o = parse(argc, argv);
  try {
    if (o.device == "cpu") return pack_cpu(o);
#if HALOX_HAS_CUDA
    return pack_gpu(o.reps, o.quick, o.json);
#else
    std::fprintf(stderr,
                 "halox-bench: this build has no CUDA (configure with HALOX_ENABLE_CUDA=ON)\n");
    return 2;
#endif
  } catch (const halox::Error& e) {
    std::fprintf(stderr, "halox-bench: %s\n", e.what());
    return 1;
  }
}
