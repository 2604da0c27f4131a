// halox-info: what this machine and job can do, as a table and as JSON: versions (CUDA,
// driver, MPI and whether it is CUDA-aware, NCCL, NVSHMEM), GPUs and their peer-access
// matrix, the transports available per rank pair and what `auto` picks, the tuning file,
// MPS. Runs on a CPU-only machine too, saying what is missing and why.
//
//   [mpiexec -n N] halox-info [--json FILE]
#include <mpi.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include "halox/config.hpp"
#include "halox/exchange.hpp"
#include "halox/info.hpp"
#include "halox/mpi.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>
#endif

#include "../common/agree.hpp"
#include "../common/cli.hpp"
#include "../common/mpi_main.hpp"
#include "../common/output.hpp"

namespace {

// The rows of the table, each also a member of the JSON.
struct Report {
  std::vector<std::pair<std::string, std::string>> table;
  halox::apps::Json json;
  void put(const std::string& key, const std::string& value) {
    table.emplace_back(key, value);
    json[key] = value;
  }
};

void put_mpi(Report& r, int size) {
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi = mpi_version;
  if (mpi.find('\n') != std::string::npos) mpi = mpi.substr(0, mpi.find('\n'));
  r.put("MPI", mpi + " (" + std::to_string(size) + " ranks)");
}

// This process's rows (the library's, as halox.info() gives them) and its GPU lists.
void put_process(Report& r, const halox::ProcessInfo& info) {
  for (const auto& [key, value] : info.rows) r.put(key, value);
  r.json["gpus"] = info.gpus;
  r.json["peer_access"] = info.peer_access;
  if (!info.gpu_note.empty()) r.json["gpu_note"] = info.gpu_note;
}

// Where each rank runs, and what auto picks between every pair (rank 0's rows).
void put_rank_pairs(Report& r, int rank, int size, int gpus, std::int64_t direct_until) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(static_cast<std::size_t>(size) * 256);
  HALOX_MPI_CHECK(MPI_Gather(host, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, 0, MPI_COMM_WORLD));
  int device = -1;
#if HALOX_HAS_CUDA
  if (gpus > 0) cudaGetDevice(&device);
#else
  (void)gpus;
#endif
  std::vector<int> devices(size);
  HALOX_MPI_CHECK(MPI_Gather(&device, 1, MPI_INT, devices.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  halox::apps::Json pairs = halox::apps::Json::array();
  for (int a = 0; a < size && rank == 0; ++a) {
    for (int b = a + 1; b < size; ++b) {
      const bool same_node = std::string(&hosts[a * 256]) == std::string(&hosts[b * 256]);
      std::string choice;
      if (devices[a] < 0 || devices[b] < 0) {
        choice = "host (no GPU)";
      } else if (same_node) {
        // auto's rule on one node (exchange.cpp): direct stores, unless halox-tune measured
        // NVSHMEM's copy-engine puts to win from a message size the exchange reaches.
        choice = "ipc-fused (direct stores through CUDA IPC)";
        if (HALOX_HAS_NVSHMEM && direct_until > 0) {
          choice += " below " + std::to_string(direct_until) +
                    " bytes per message, nvshmem-stream from there (measured crossover)";
        }
        if (devices[a] == devices[b]) choice += "; one GPU: needs MPS, no nccl";
      } else {
        choice = HALOX_HAS_NVSHMEM
                     ? "nvshmem-fused (put-with-signal from the fused kernel)" +
                           (direct_until > 0 ? " below " + std::to_string(direct_until) +
                                                   " bytes per message, nvshmem-stream from there"
                                             : std::string())
                     : "staged/pipelined by size";
      }
      r.table.emplace_back("ranks " + std::to_string(a) + "-" + std::to_string(b), choice);
      pairs.push_back({{"a", a}, {"b", b}, {"same_node", same_node}, {"auto", choice}});
    }
  }
  r.json["rank_pairs"] = pairs;
}

int run(int argc, char** argv) {
  const int selected = halox::select_device(MPI_COMM_WORLD);
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::string json_path;
  halox::apps::check_input_collectively(MPI_COMM_WORLD, "halox-info", argc, argv, [&] {
    halox::apps::CommandLine line(
        "halox-info",
        "Prints what this machine and job can do: versions, GPUs and peer access, the\n"
        "transports available per rank pair and the automatic choice, the tuning file, MPS.\n"
        "Works without a GPU. Run it as [mpiexec -n N] halox-info [options].");
    line.output("--json", json_path, "the same as JSON");
    line.parse(argc, argv);
  });
  Report r;
  const halox::ProcessInfo info = halox::process_info();
  put_process(r, info);
  put_mpi(r, size);
  r.put("GPU of rank 0",
        selected < 0 ? "none" : std::to_string(selected) + " (node-local rank mod GPUs)");
  // libhalox_mpi in front of the MPI library: its marker symbol is in the process.
  int interposed = dlsym(RTLD_DEFAULT, "halox_mpi_active") != nullptr, ranks_interposed = 0;
  halox::apps::allreduce(&interposed, &ranks_interposed, 1, MPI_INT, MPI_SUM,
                         "the interposer count");
  r.put("MPI interposer",
        ranks_interposed == 0
            ? std::string("not loaded (LD_PRELOAD=<prefix>/lib/libhalox_mpi.so puts it in front)")
            : "libhalox_mpi active on " + std::to_string(ranks_interposed) + " of " +
                  std::to_string(size) + " ranks");
  put_rank_pairs(r, rank, size, static_cast<int>(info.gpus.size()), info.direct_until_bytes);
  if (rank == 0) {
    std::printf("halox-info\n");
    for (const auto& [k, v] : r.table) std::printf("  %-28s %s\n", k.c_str(), v.c_str());
    if (!json_path.empty()) {
      halox::apps::write_json("halox-info", json_path, r.json);
      std::printf("wrote %s\n", json_path.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return halox::apps::mpi_main("halox-info", argc, argv, run);
}
