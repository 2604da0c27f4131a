// halox-info: what this machine and job can do, as a table and as JSON: versions (CUDA,
// driver, MPI and whether it is CUDA-aware, NCCL, NVSHMEM), GPUs and their peer-access
// matrix, the transports available per rank pair and what `auto` picks, the tuning file,
// MPS. Runs on a CPU-only machine too, saying what is missing and why.
//
//   [mpiexec -n N] halox-info [--json FILE]
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
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

#include "../common/cli.hpp"
#include "../common/output.hpp"

namespace {

std::string version_text(int v) {  // CUDA's 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string read_tuning() {
  std::ifstream in(halox::tuning_file_path());
  if (!in) return "";
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int selected = halox::select_device(MPI_COMM_WORLD);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string json_path;
  try {
    halox::apps::CommandLine line(
        "halox-info",
        "Prints what this machine and job can do: versions, GPUs and peer access, the\n"
        "transports available per rank pair and the automatic choice, the tuning file, MPS.\n"
        "Works without a GPU. Run it as [mpiexec -n N] halox-info [options].");
    line.text("--json", json_path, "the same as JSON", "FILE");
    line.parse(argc, argv);
  } catch (const halox::Error& e) {
    if (rank == 0) std::fprintf(stderr, "%s\n", e.what());
    MPI_Finalize();
    return 2;
  }
  halox::apps::Json j;
  std::vector<std::pair<std::string, std::string>> table;
  auto put = [&](const std::string& k, const std::string& v) {
    table.emplace_back(k, v);
    j[k] = v;
  };
  put("halox", HALOX_VERSION);
  put("built with", std::string("CUDA ") + (HALOX_HAS_CUDA ? "yes" : "no") + ", MPI yes, NCCL " +
                        (HALOX_HAS_NCCL ? "yes" : "no") + ", NVSHMEM " +
                        (HALOX_HAS_NVSHMEM ? "yes" : "no") + ", tracing " +
                        (HALOX_HAS_TRACING ? "yes" : "no"));
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi = mpi_version;
  if (mpi.find('\n') != std::string::npos) mpi = mpi.substr(0, mpi.find('\n'));
  put("MPI", mpi + " (" + std::to_string(size) + " ranks)");
  std::string why;
  put("GPU of rank 0",
      selected < 0 ? "none" : std::to_string(selected) + " (node-local rank mod GPUs)");
  put("MPI CUDA-aware",
      halox::transport_available(halox::TransportKind::mpi_direct, &why) ? "yes" : "no: " + why);
  int gpus = 0;
  std::string gpu_note;
#if HALOX_HAS_CUDA
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t driver_rc = cudaDriverGetVersion(&driver);
  put("CUDA runtime", version_text(runtime));
  put("CUDA driver",
      driver_rc == cudaSuccess && driver ? version_text(driver) : "none (no driver)");
  const cudaError_t rc = cudaGetDeviceCount(&gpus);
  if (rc != cudaSuccess) {
    gpu_note = std::string("no GPU visible: ") + cudaGetErrorString(rc);
    cudaGetLastError();
    gpus = 0;
  }
#else
  gpu_note = "halox was built without CUDA";
#endif
#if HALOX_HAS_NCCL
  int nccl = 0;
  ncclGetVersion(&nccl);
  put("NCCL", std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
                  std::to_string(nccl % 100));
#else
  put("NCCL", "not built in");
#endif
#if HALOX_HAS_NVSHMEM
  put("NVSHMEM", std::to_string(NVSHMEM_VENDOR_MAJOR_VERSION) + "." +
                     std::to_string(NVSHMEM_VENDOR_MINOR_VERSION) + "." +
                     std::to_string(NVSHMEM_VENDOR_PATCH_VERSION));
#else
  put("NVSHMEM", "not built in");
#endif
  // GPUs and the peer matrix.
  halox::apps::Json gpu_list = halox::apps::Json::array(), matrix = halox::apps::Json::array();
#if HALOX_HAS_CUDA
  for (int d = 0; d < gpus; ++d) {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, d);
    const std::string line = std::string(p.name) + ", " + std::to_string(p.totalGlobalMem >> 20) +
                             " MiB, " + std::to_string(p.multiProcessorCount) + " SMs, sm_" +
                             std::to_string(p.major) + std::to_string(p.minor);
    table.emplace_back("GPU " + std::to_string(d), line);
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
    table.emplace_back("peer access from GPU " + std::to_string(a), row);
  }
#endif
  if (!gpu_note.empty()) table.emplace_back("GPUs", gpu_note);
  j["gpus"] = gpu_list;
  j["peer_access"] = matrix;
  if (!gpu_note.empty()) j["gpu_note"] = gpu_note;
  // Transports this build and MPI can run.
  std::string available, missing;
  for (auto kind : halox::all_transports()) {
    std::string reason;
    if (gpus == 0 && kind != halox::TransportKind::host &&
        kind != halox::TransportKind::automatic) {
      missing += (missing.empty() ? "" : "; ") + halox::to_string(kind) + ": " + gpu_note;
    } else if (halox::transport_available(kind, &reason)) {
      available += (available.empty() ? "" : " ") + halox::to_string(kind);
    } else {
      missing += (missing.empty() ? "" : "; ") + halox::to_string(kind) + ": " + reason;
    }
  }
  put("transports available", available);
  put("transports unavailable", missing.empty() ? "none" : missing);
  // Rank pairs: where each rank runs, and what auto picks between them.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(static_cast<std::size_t>(size) * 256);
  MPI_Gather(host, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, 0, MPI_COMM_WORLD);
  int device = -1;
#if HALOX_HAS_CUDA
  if (gpus > 0) cudaGetDevice(&device);
#endif
  std::vector<int> devices(size);
  MPI_Gather(&device, 1, MPI_INT, devices.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  halox::apps::Json pairs = halox::apps::Json::array();
  const std::int64_t direct_until = halox::tuned_direct_until_bytes();
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
      table.emplace_back("ranks " + std::to_string(a) + "-" + std::to_string(b), choice);
      pairs.push_back({{"a", a}, {"b", b}, {"same_node", same_node}, {"auto", choice}});
    }
  }
  j["rank_pairs"] = pairs;
  // Tuning file and MPS.
  const std::string tuning = read_tuning();
  put("tuning file",
      halox::tuning_file_path() + (tuning.empty() ? " (absent: run halox-tune)" : ""));
  put("pipelined chunk",
      std::to_string(halox::tuned_chunk_bytes()) + " bytes" + (tuning.empty() ? " (default)" : ""));
  put("pipelining crossover", std::to_string(halox::tuned_pipelined_from_bytes()) + " bytes" +
                                  (tuning.empty() ? " (default)" : ""));
  put("direct-store crossover",
      direct_until > 0 ? std::to_string(direct_until) + " bytes (nvshmem-stream from there)"
                       : "not measured (auto keeps direct stores on one node)");
  const char* pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string mps_dir = pipe ? pipe : "/tmp/nvidia-mps";
  struct stat st {};
  const bool mps = stat((mps_dir + "/control").c_str(), &st) == 0;
  put("MPS", mps ? "daemon running (" + mps_dir + ")"
                 : "no daemon at " + mps_dir + " (more than one process per GPU needs it)");
  if (rank == 0) {
    std::printf("halox-info\n");
    for (const auto& [k, v] : table) std::printf("  %-28s %s\n", k.c_str(), v.c_str());
    if (!json_path.empty()) {
      halox::apps::write_json("halox-info", json_path, j);
      std::printf("wrote %s\n", json_path.c_str());
    }
  }
  MPI_Finalize();
  return 0;
}
