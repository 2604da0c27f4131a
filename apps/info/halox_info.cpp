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
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "halox/config.hpp"
#include "halox/exchange.hpp"
#include "halox/mpi.hpp"
#include "halox/tuning.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>
#endif
#if HALOX_HAS_NCCL
#include <nccl.h>
#endif
#if HALOX_HAS_NVSHMEM
#include <non_abi/nvshmem_version.h>
#endif

#include "../common/agree.hpp"
#include "../common/cli.hpp"
#include "../common/mpi_main.hpp"
#include "../common/output.hpp"

namespace {

std::string version_text(int v) {  // CUDA's 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// The rows of the table, each also a member of the JSON.
struct Report {
  std::vector<std::pair<std::string, std::string>> table;
  halox::apps::Json json;
  void put(const std::string& key, const std::string& value) {
    table.emplace_back(key, value);
    json[key] = value;
  }
};

void put_versions(Report& r, int size) {
  r.put("halox", HALOX_VERSION);
  r.put("built with", std::string("CUDA ") + (HALOX_HAS_CUDA ? "yes" : "no") + ", MPI yes, NCCL " +
                          (HALOX_HAS_NCCL ? "yes" : "no") + ", NVSHMEM " +
                          (HALOX_HAS_NVSHMEM ? "yes" : "no") + ", tracing " +
                          (HALOX_HAS_TRACING ? "yes" : "no"));
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi = mpi_version;
  if (mpi.find('\n') != std::string::npos) mpi = mpi.substr(0, mpi.find('\n'));
  r.put("MPI", mpi + " (" + std::to_string(size) + " ranks)");
}

// The GPUs and their peer matrix; returns how many are visible, `note` says why none.
int put_gpus(Report& r, std::string& note) {
  int gpus = 0;
  halox::apps::Json gpu_list = halox::apps::Json::array(), matrix = halox::apps::Json::array();
#if HALOX_HAS_CUDA
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t driver_rc = cudaDriverGetVersion(&driver);
  r.put("CUDA runtime", version_text(runtime));
  r.put("CUDA driver",
        driver_rc == cudaSuccess && driver ? version_text(driver) : "none (no driver)");
  const cudaError_t rc = cudaGetDeviceCount(&gpus);
  if (rc != cudaSuccess) {
    note = std::string("no GPU visible: ") + cudaGetErrorString(rc);
    cudaGetLastError();
    gpus = 0;
  }
  for (int d = 0; d < gpus; ++d) {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, d);
    const std::string line = std::string(p.name) + ", " + std::to_string(p.totalGlobalMem >> 20) +
                             " MiB, " + std::to_string(p.multiProcessorCount) + " SMs, sm_" +
                             std::to_string(p.major) + std::to_string(p.minor);
    r.table.emplace_back("GPU " + std::to_string(d), line);
    gpu_list.push_back(line);
  }
  for (int a = 0; a < gpus; ++a) {
    halox::apps::Json access_row = halox::apps::Json::array();
    std::string row;
    for (int b = 0; b < gpus; ++b) {
      int access = a == b, perf = 0;
      if (a != b) {
        cudaDeviceCanAccessPeer(&access, a, b);
        cudaDeviceGetP2PAttribute(&perf, cudaDevP2PAttrPerformanceRank, a, b);
      }
      access_row.push_back(access);
      row += a == b ? " self" : access ? " peer(rank " + std::to_string(perf) + ")" : " none";
    }
    matrix.push_back(access_row);
    r.table.emplace_back("peer access from GPU " + std::to_string(a), row);
  }
#else
  note = "halox was built without CUDA";
#endif
#if HALOX_HAS_NCCL
  int nccl = 0;
  ncclGetVersion(&nccl);
  r.put("NCCL", std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
                    std::to_string(nccl % 100));
#else
  r.put("NCCL", "not built in");
#endif
#if HALOX_HAS_NVSHMEM
  r.put("NVSHMEM", std::to_string(NVSHMEM_VENDOR_MAJOR_VERSION) + "." +
                       std::to_string(NVSHMEM_VENDOR_MINOR_VERSION) + "." +
                       std::to_string(NVSHMEM_VENDOR_PATCH_VERSION));
#else
  r.put("NVSHMEM", "not built in");
#endif
  if (!note.empty()) r.table.emplace_back("GPUs", note);
  r.json["gpus"] = gpu_list;
  r.json["peer_access"] = matrix;
  if (!note.empty()) r.json["gpu_note"] = note;
  return gpus;
}

// The transports this build, this MPI and these GPUs can run; those that cannot, grouped
// by reason (each reason once).
void put_transports(Report& r, int gpus, const std::string& gpu_note) {
  std::string available;
  std::vector<std::pair<std::string, std::string>> missing;  // reason, transports
  for (auto kind : halox::all_transports()) {
    std::string reason;
    const bool cpu_too =
        kind == halox::TransportKind::host || kind == halox::TransportKind::automatic ||
        kind == halox::TransportKind::local_pulse || kind == halox::TransportKind::local_fused;
    if (gpus == 0 && !cpu_too) {
      reason = gpu_note;
    } else if (halox::transport_available(kind, &reason)) {
      available += (available.empty() ? "" : " ") + halox::to_string(kind);
      continue;
    }
    auto same = std::find_if(missing.begin(), missing.end(),
                             [&](const auto& m) { return m.first == reason; });
    if (same == missing.end()) {
      missing.emplace_back(reason, halox::to_string(kind));
    } else {
      same->second += ", " + halox::to_string(kind);
    }
  }
  std::string unavailable;
  for (const auto& [reason, kinds] : missing) {
    unavailable += (unavailable.empty() ? "" : "; ") + kinds + ": " + reason;
  }
  r.put("transports available", available);
  r.put("transports unavailable", unavailable.empty() ? "none" : unavailable);
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

// The tuning file (read as the transports read it: an unusable file is shown with its
// reason, not a crash) and MPS; returns the direct-store crossover (-1: none).
std::int64_t put_tuning_and_mps(Report& r) {
  const std::string path = halox::tuning_file_path();
  std::int64_t direct_until = -1;
  try {
    const halox::TuningValues tuned = halox::read_tuning_file(path);
    direct_until = tuned.direct_until_bytes;
    const char* untuned = tuned.found ? "" : " (default)";
    r.put("tuning file", path + (tuned.found ? "" : " (absent: run halox-tune)"));
    r.put("pipelined chunk", std::to_string(tuned.chunk_bytes) + " bytes" + untuned);
    r.put("pipelining crossover", std::to_string(tuned.pipelined_from_bytes) + " bytes" + untuned);
    r.put("direct-store crossover",
          tuned.direct_until_bytes > 0
              ? std::to_string(tuned.direct_until_bytes) + " bytes (nvshmem-stream from there)"
              : "not measured (auto keeps direct stores on one node)");
  } catch (const halox::Error& e) {
    r.put("tuning file", std::string("unusable: ") + e.what() +
                             " (every transport that reads it refuses to start)");
  }
  const char* pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string mps_dir = pipe ? pipe : "/tmp/nvidia-mps";
  struct stat st {};
  const bool mps = stat((mps_dir + "/control").c_str(), &st) == 0;
  r.put("MPS", mps ? "daemon running (" + mps_dir + ")"
                   : "no daemon at " + mps_dir + " (more than one process per GPU needs it)");
  return direct_until;
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
  put_versions(r, size);
  std::string why;
  r.put("GPU of rank 0",
        selected < 0 ? "none" : std::to_string(selected) + " (node-local rank mod GPUs)");
  r.put("MPI CUDA-aware",
        halox::transport_available(halox::TransportKind::mpi_direct, &why) ? "yes" : "no: " + why);
  // libhalox_mpi in front of the MPI library: its marker symbol is in the process.
  int interposed = dlsym(RTLD_DEFAULT, "halox_mpi_active") != nullptr, ranks_interposed = 0;
  halox::apps::allreduce(&interposed, &ranks_interposed, 1, MPI_INT, MPI_SUM,
                         "the interposer count");
  r.put("MPI interposer",
        ranks_interposed == 0
            ? std::string("not loaded (LD_PRELOAD=<prefix>/lib/libhalox_mpi.so puts it in front)")
            : "libhalox_mpi active on " + std::to_string(ranks_interposed) + " of " +
                  std::to_string(size) + " ranks");
  std::string gpu_note;
  const int gpus = put_gpus(r, gpu_note);
  put_transports(r, gpus, gpu_note);
  const std::int64_t direct_until = put_tuning_and_mps(r);
  put_rank_pairs(r, rank, size, gpus, direct_until);
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
