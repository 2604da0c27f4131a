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
    o.n = n;
    // The array, its faces and their packed copies: about three n^3 arrays of doubles.
    const double edge = static_cast<double>(o.n);
    halox::apps::require_memory("halox-bench pack: --n " + std::to_string(o.n),
                                3.0 * 8.0 * edge * edge * edge);
  } catch (const halox::Error& e) {
    halox::apps::print_once(e.what());
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

// `halox-bench halo` and `pingpong` run under mpiexec (mpi_main: MPI's start and end, and
// one error policy); the other commands need no MPI.
template <int (*command)(int, char**)>
int on_this_ranks_gpu(int argc, char** argv) {
  halox::select_device(MPI_COMM_WORLD);  // one GPU per rank on multi-GPU nodes
  return command(argc, argv);
}
#endif

#if HALOX_HAS_CUDA
namespace halox::bench {
int local_halo_main(int argc, char** argv);
}
#endif

int main(int argc, char** argv) {
  halox::apps::record_command_line(argc, argv);  // before a subcommand takes argv apart
  // "pack" is the default command: named, or left out before the options.
  const std::string command = argc > 1 && argv[1][0] != '-' ? argv[1] : "pack";
  const bool named = argc > 1 && argv[1][0] != '-';
  const char* needs = nullptr;  // what this build lacks for a known command
  int (*mpi_command)(int, char**) = nullptr;
  if (command == "halo") {
#if HALOX_HAS_MPI
    mpi_command = on_this_ranks_gpu<halox::bench::halo_main>;
#else
    needs = "MPI";
#endif
  } else if (command == "pingpong") {
#if HALOX_HAS_MPI
    mpi_command = on_this_ranks_gpu<halox::bench::pingpong_main>;
#else
    needs = "MPI";
#endif
  } else if (command == "halo-local") {
#if HALOX_HAS_CUDA
    try {
      return halox::bench::local_halo_main(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      halox::apps::print_once(e.what());
      return 2;
    }
#else
    needs = "CUDA";
#endif
  } else if (command != "pack") {
    halox::apps::print_once("halox-bench: unknown command '" + command +
                            "'; the commands are pack (the default), halo, halo-local and "
                            "pingpong: halox-bench COMMAND --help");
    return 2;
  }
  if (needs != nullptr) {
    halox::apps::print_once("halox-bench " + command + ": this build of halox has no " + needs +
                            " (configure with HALOX_ENABLE_MPI/HALOX_ENABLE_CUDA)");
    return 2;
  }
#if HALOX_HAS_MPI
  if (mpi_command != nullptr) {
    static const std::string program = "halox-bench " + command;  // outlives the run
    return halox::apps::mpi_main(program.c_str(), argc - 1, argv + 1, mpi_command);
  }
#endif
  if (named) {
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
    halox::apps::print_once(
        "halox-bench pack: --device gpu: this build has no CUDA (configure with "
        "HALOX_ENABLE_CUDA=ON)");
    return 2;
#endif
  } catch (const halox::Error& e) {
    halox::apps::print_once(std::string("halox-bench: ") + e.what());
    return 3;
  }
}
