// What this process's halox can do (halox-info's rows, halox.info()): moved here from
// halox-info so that the program and the Python module say the same.
#include "halox/info.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include "halox/config.hpp"
#include "halox/error.hpp"
#include "halox/exchange_options.hpp"
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

namespace halox {

namespace {

#if HALOX_HAS_CUDA
std::string version_text(int v) {  // CUDA's 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
#endif

void put_build(ProcessInfo& info) {
  std::string built;
  for (const auto& [name, has] : {std::pair<const char*, bool>{"CUDA", HALOX_HAS_CUDA},
                                  {"MPI", HALOX_HAS_MPI},
                                  {"NCCL", HALOX_HAS_NCCL},
                                  {"NVSHMEM", HALOX_HAS_NVSHMEM},
                                  {"tracing", HALOX_HAS_TRACING}}) {
    if (!built.empty()) built += ", ";
    built += std::string(name) + (has ? " yes" : " no");
  }
  info.rows.emplace_back("halox", HALOX_VERSION);
  info.rows.emplace_back("built with", built);
}

// The CUDA versions, the GPUs and their peer matrix.
void put_gpus(ProcessInfo& info) {
#if HALOX_HAS_CUDA
  int runtime = 0, driver = 0, gpus = 0;
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t driver_rc = cudaDriverGetVersion(&driver);
  info.rows.emplace_back("CUDA runtime", version_text(runtime));
  info.rows.emplace_back("CUDA driver", driver_rc == cudaSuccess && driver ? version_text(driver)
                                                                           : "none (no driver)");
  const cudaError_t rc = cudaGetDeviceCount(&gpus);
  if (rc != cudaSuccess) {
    info.gpu_note = std::string("no GPU visible: ") + cudaGetErrorString(rc);
    cudaGetLastError();
    gpus = 0;
  }
  for (int d = 0; d < gpus; ++d) {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, d);
    const std::string line = std::string(p.name) + ", " + std::to_string(p.totalGlobalMem >> 20) +
                             " MiB, " + std::to_string(p.multiProcessorCount) + " SMs, sm_" +
                             std::to_string(p.major) + std::to_string(p.minor);
    info.rows.emplace_back("GPU " + std::to_string(d), line);
    info.gpus.push_back(line);
  }
  for (int a = 0; a < gpus; ++a) {
    std::vector<int> access_row;
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
    info.peer_access.push_back(access_row);
    info.rows.emplace_back("peer access from GPU " + std::to_string(a), row);
  }
#else
  info.gpu_note = "halox was built without CUDA";
#endif
#if HALOX_HAS_NCCL
  int nccl = 0;
  ncclGetVersion(&nccl);
  info.rows.emplace_back("NCCL", std::to_string(nccl / 10000) + "." +
                                     std::to_string(nccl / 100 % 100) + "." +
                                     std::to_string(nccl % 100));
#else
  info.rows.emplace_back("NCCL", "not built in");
#endif
#if HALOX_HAS_NVSHMEM
  info.rows.emplace_back("NVSHMEM", std::to_string(NVSHMEM_VENDOR_MAJOR_VERSION) + "." +
                                        std::to_string(NVSHMEM_VENDOR_MINOR_VERSION) + "." +
                                        std::to_string(NVSHMEM_VENDOR_PATCH_VERSION));
#else
  info.rows.emplace_back("NVSHMEM", "not built in");
#endif
  if (!info.gpu_note.empty()) info.rows.emplace_back("GPUs", info.gpu_note);
}

// The transports this build, this MPI and these GPUs can run; those that cannot, grouped
// by reason (each reason once).
void put_transports(ProcessInfo& info) {
  std::string why;
  info.rows.emplace_back("MPI CUDA-aware", transport_available(TransportKind::mpi_direct, &why)
                                               ? "yes"
                                               : "no: " + why);
  std::string available;
  std::vector<std::pair<std::string, std::string>> missing;  // reason, transports
  for (auto kind : all_transports()) {
    std::string reason;
    const bool cpu_too = kind == TransportKind::host || kind == TransportKind::automatic ||
                         kind == TransportKind::local_pulse || kind == TransportKind::local_fused;
    if (info.gpus.empty() && !cpu_too) {
      reason = info.gpu_note;
    } else if (transport_available(kind, &reason)) {
      if (!available.empty()) available += ' ';
      available += to_string(kind);
      continue;
    }
    auto same = std::find_if(missing.begin(), missing.end(),
                             [&](const auto& m) { return m.first == reason; });
    if (same == missing.end()) {
      missing.emplace_back(reason, to_string(kind));
    } else {
      same->second += ", " + to_string(kind);
    }
  }
  std::string unavailable;
  for (const auto& [reason, kinds] : missing) {
    if (!unavailable.empty()) unavailable += "; ";
    unavailable += kinds + ": " + reason;
  }
  info.rows.emplace_back("transports available", available);
  info.rows.emplace_back("transports unavailable", unavailable.empty() ? "none" : unavailable);
}

// The tuning file (read as the transports read it: an unusable file is shown with its
// reason, not thrown) and MPS.
void put_tuning_and_mps(ProcessInfo& info) {
  const std::string path = tuning_file_path();
  try {
    const TuningValues tuned = read_tuning_file(path);
    info.direct_until_bytes = tuned.direct_until_bytes;
    const char* untuned = tuned.found ? "" : " (default)";
    info.rows.emplace_back("tuning file", path + (tuned.found ? "" : " (absent: run halox-tune)"));
    info.rows.emplace_back("pipelined chunk",
                           std::to_string(tuned.chunk_bytes) + " bytes" + untuned);
    info.rows.emplace_back("pipelining crossover",
                           std::to_string(tuned.pipelined_from_bytes) + " bytes" + untuned);
    info.rows.emplace_back(
        "direct-store crossover",
        tuned.direct_until_bytes > 0
            ? std::to_string(tuned.direct_until_bytes) + " bytes (nvshmem-stream from there)"
            : "not measured (auto keeps direct stores on one node)");
  } catch (const Error& e) {
    info.rows.emplace_back("tuning file", std::string("unusable: ") + e.what() +
                                              " (every transport that reads it refuses to start)");
  }
  const char* pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string mps_dir = pipe ? pipe : "/tmp/nvidia-mps";
  struct stat st {};
  const bool mps = stat((mps_dir + "/control").c_str(), &st) == 0;
  info.rows.emplace_back(
      "MPS", mps ? "daemon running (" + mps_dir + ")"
                 : "no daemon at " + mps_dir + " (more than one process per GPU needs it)");
}

}  // namespace

ProcessInfo process_info() {
  ProcessInfo info;
  put_build(info);
  put_gpus(info);
  put_transports(info);
  put_tuning_and_mps(info);
  return info;
}

}  // namespace halox
